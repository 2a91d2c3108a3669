"""tools/download_data.py: the layout step on a small local tree (no network)."""

import os

from conftest import load_tool


def _tool():
    return load_tool("download_data")


def test_organize_builds_senteval_layout(tmp_path):
    raw = tmp_path / "raw"
    files = {
        "STS2012/test-gold/STS.input.MSRpar.txt": "a\tb\n",
        "STS2012/test-gold/STS.gs.MSRpar.txt": "4.0\n",
        "STS2012/test-gold/STS.gs.ALL.txt": "x\n",
        "STS2016/sts2016-english-with-gs-v1.0/STS.input.headlines.txt": "a\tb\n",
        "STSBenchmark/stsbenchmark/sts-dev.csv": "x\n",
        "SICK/SICK_trial.txt": "h\n",
        "binary/data/rt10662/rt-polarity.pos": "good\n",
        "binary/data/customerr/custrev.neg": "bad\n",
        "SNLI/snli_1.0/snli_1.0_dev.jsonl": "{}\n",
        "binary/README.txt": "ignored\n",
    }
    for rel, text in files.items():
        path = raw / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    out = tmp_path / "out"
    written = _tool().organize(str(raw), str(out))
    rel = sorted(os.path.relpath(p, out) for p in written)
    assert rel == sorted([
        "STS/STS12-en-test/STS.input.MSRpar.txt", "STS/STS12-en-test/STS.gs.MSRpar.txt",
        "STS/STS16-en-test/STS.input.headlines.txt", "STS/STSBenchmark/sts-dev.csv",
        "SICK/SICK_trial.txt", "MR/rt-polarity.pos", "CR/custrev.neg",
        "SNLI/snli_1.0_dev.jsonl"])
    assert (out / "STS/STS12-en-test/STS.gs.MSRpar.txt").read_text() == "4.0\n"
