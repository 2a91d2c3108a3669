"""tools/download_data.py on small local files (no network): the layout step, the sha256
verification of pinned files, a whole fetch from a file:// archive, and its errors (exit
status 2 and one `error:` line, as tfsent's commands)."""

import hashlib
import os
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO, load_tool, shared_data_or_skip
from tfsent.errors import ConfigError, InputError


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


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


def test_verify_pinned_accepts_matching_files_and_names_a_mismatch(tmp_path):
    tool = _tool()
    (tmp_path / "MRPC").mkdir()
    good, bad = b"\xef\xbb\xbfQuality\t#1 ID\n1\t2\n", b"Quality\t#1 ID\n1\t2\n"
    (tmp_path / "MRPC" / "a.txt").write_bytes(good)
    (tmp_path / "MRPC" / "b.txt").write_bytes(bad)
    pins = {"MRPC/a.txt": _sha256(good)}
    assert tool.verify_pinned(str(tmp_path), pins) == [str(tmp_path / "MRPC" / "a.txt")]
    with pytest.raises(InputError) as e:
        tool.verify_pinned(str(tmp_path), {"MRPC/b.txt": _sha256(good)})
    message = str(e.value)
    assert str(tmp_path / "MRPC" / "b.txt") in message
    assert _sha256(good) in message and _sha256(bad) in message
    with pytest.raises(InputError, match="missing"):
        tool.verify_pinned(str(tmp_path), {"MRPC/c.txt": _sha256(good)})


def test_fetch_verifies_the_pinned_files_after_unpacking(tmp_path, monkeypatch):
    """The whole fetch on a local archive (a file:// URL): unpacked, placed, verified."""
    tool = _tool()
    gold = b"4.000\n3.500\n"

    def archive(name, gs_bytes):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("test-gold/STS.input.MSRpar.txt", "a\tb\nc\td\n")
            z.writestr("test-gold/STS.gs.MSRpar.txt", gs_bytes)
        return path.as_uri()

    rel = "STS/STS12-en-test/STS.gs.MSRpar.txt"
    monkeypatch.setattr(tool, "PINNED_SHA256", {"sts": {rel: _sha256(gold)}})
    monkeypatch.setattr(tool, "STS_URLS", {"STS12": archive("STS2012-en-test.zip", gold)})
    written = tool.fetch(str(tmp_path / "ok"), {"sts"})
    assert str(tmp_path / "ok" / rel) in written
    changed = gold.replace(b"3.500", b"3.400")
    monkeypatch.setattr(tool, "STS_URLS", {"STS12": archive("changed/STS2012-en-test.zip",
                                                            changed)})
    with pytest.raises(InputError, match=f"expected {_sha256(gold)}, got {_sha256(changed)}"):
        tool.fetch(str(tmp_path / "bad"), {"sts"})


def test_pinned_digests_are_those_of_the_shared_copy():
    """The digests were computed from ../shared/data; they still match it."""
    data = shared_data_or_skip()
    tool = _tool()
    for group, pins in tool.PINNED_SHA256.items():
        assert len(tool.verify_pinned(data, pins)) == len(pins), group


def test_bad_groups_and_failed_downloads_are_errors(tmp_path):
    tool = _tool()
    assert tool.parse_groups("sts, nli,") == {"sts", "nli"}
    with pytest.raises(ConfigError, match=r"unknown group 'stss' \(did you mean sts\?\)"):
        tool.parse_groups("stss,nli")
    with pytest.raises(ConfigError, match="empty"):
        tool.parse_groups(",")
    missing = (tmp_path / "no_such.zip").as_uri()
    with pytest.raises(InputError, match="download failed") as e:
        tool._download(missing, str(tmp_path / "raw" / "no_such.zip"))
    assert missing in str(e.value)
    assert not os.path.exists(tmp_path / "raw" / "no_such.zip")


def test_cli_error_is_one_line_and_exit_status_2(tmp_path):
    r = subprocess.run([sys.executable, os.path.join("tools", "download_data.py"),
                        f"--out_dir={tmp_path}/data", "--tasks=sts,wiki"], cwd=REPO,
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == 2, r.stderr[-2000:]
    assert "error: --tasks: unknown group 'wiki'" in r.stderr and "Traceback" not in r.stderr
    assert not os.path.exists(tmp_path / "data")
