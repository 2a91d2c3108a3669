"""tools/sts_text.py: unlabeled STS sentences for ConSERT's unsupervised setting."""

import os
import subprocess
import sys

from conftest import REPO, load_tool, shared_data_or_skip


def _tool():
    return load_tool("sts_text")


def _write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _tree(root):
    rows = {"train": [("a cat sits .", "a dog runs .")],
            "dev": [("a dog runs .", "birds fly .")],
            "test": [("fish swim .", "a cat sits .")]}
    for split, pairs in rows.items():
        _write(root, f"STS/STSBenchmark/sts-{split}.csv",
               "".join(f"g\tf\t2012\t{i}\t3.0\t{a}\t{b}\n" for i, (a, b) in enumerate(pairs)))
    sick = {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
    for split, name in sick.items():
        _write(root, f"SICK/{name}", "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tx\n"
               f"1\tfish swim .\ttrees grow {split} .\t4.0\tNEUTRAL\n")


def test_collects_unique_sentences_in_order_and_skips_missing(tmp_path):
    _tree(str(tmp_path))
    sentences, counts = _tool().collect_sentences(str(tmp_path))
    assert sentences == ["a cat sits .", "a dog runs .", "birds fly .", "fish swim .",
                         "trees grow train .", "trees grow dev .", "trees grow test ."]
    assert counts == {"STSBenchmark": 4, "SICKRelatedness": 3}   # STS12-16 skipped


def test_cli_writes_file_and_rejects_non_sts_task(tmp_path):
    _tree(str(tmp_path))
    out = tmp_path / "text.txt"
    tool = os.path.join(REPO, "tools", "sts_text.py")
    done = subprocess.run([sys.executable, tool, f"--data_dir={tmp_path}", f"--out={out}"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert out.read_text(encoding="utf-8").splitlines()[0] == "a cat sits ."
    bad = subprocess.run([sys.executable, tool, f"--data_dir={tmp_path}", f"--out={out}",
                          "--tasks=MR"], capture_output=True, text=True)
    assert bad.returncode != 0 and "not STS tasks: MR" in bad.stderr


def test_real_sts_text():
    data = shared_data_or_skip("STS", "STS12-en-test")
    sentences, counts = _tool().collect_sentences(os.path.dirname(os.path.dirname(data)))
    assert set(counts) == {"STS12", "STSBenchmark", "SICKRelatedness"}
    assert len(sentences) == len(set(sentences)) > 10000
