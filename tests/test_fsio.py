"""tfsent.fsio: staged folders replace only what tfsent owns, recover after a crash, and
never touch unmarked folders or live processes' staging."""

import json
import os
import socket
import subprocess
import sys

import pytest

from tfsent import fsio
from tfsent.errors import ConfigError


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _stage_by(target, pid, complete, with_old, with_new=True):
    """A staging folder as a process `pid` killed mid-swap would leave it."""
    stage = fsio.staging_path(str(target), pid)
    os.makedirs(stage)
    marker = {"tfsent": 1, "target": os.path.basename(str(target)), "purpose": "test",
              "host": socket.gethostname(), "pid": pid, "complete": complete}
    with open(os.path.join(stage, fsio.MARKER_FILE), "w") as f:
        json.dump(marker, f)
    for part, text in (("new", "new"), ("old", "old")):
        if part == "old" and not with_old or part == "new" and not with_new:
            continue
        os.makedirs(os.path.join(stage, part))
        with open(os.path.join(stage, part, "v.txt"), "w") as f:
            f.write(text)
    return stage


def _read(path):
    with open(path) as f:
        return f.read()


def test_staged_dir_creates_and_leaves_nothing_beside(tmp_path):
    target = tmp_path / "out"
    with fsio.staged_dir(target, "test folder") as tmp:
        with open(os.path.join(tmp, "a.txt"), "w") as f:
            f.write("x")
        assert not target.exists()
    assert _read(target / "a.txt") == "x"
    assert sorted(os.listdir(tmp_path)) == ["out"]
    assert not (target / fsio.MARKER_FILE).exists()


def test_staged_dir_refuses_a_non_empty_folder_it_does_not_own(tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "IMPORTANT.txt").write_text("keep")
    with pytest.raises(ConfigError, match="already exists and is not empty"):
        with fsio.staged_dir(target, "test folder"):
            pass
    assert _read(target / "IMPORTANT.txt") == "keep"
    assert sorted(os.listdir(tmp_path)) == ["mine"]


def test_staged_dir_replaces_only_what_the_check_accepts(tmp_path):
    target = tmp_path / "enc"
    target.mkdir()
    (target / "v.txt").write_text("old")

    def refuse(path):
        raise ConfigError(f"{path} is not ours")

    with pytest.raises(ConfigError, match="is not ours"):
        with fsio.staged_dir(target, "test folder", replace=refuse):
            pass
    with fsio.staged_dir(target, "test folder", replace=lambda path: None) as tmp:
        (tmp_path / "enc" / "v.txt").read_text()  # the old version is still in place
        with open(os.path.join(tmp, "v.txt"), "w") as f:
            f.write("new")
    assert _read(target / "v.txt") == "new"
    assert sorted(os.listdir(tmp_path)) == ["enc"]


def test_an_exception_while_writing_leaves_the_target_untouched(tmp_path):
    target = tmp_path / "enc"
    target.mkdir()
    (target / "v.txt").write_text("old")
    with pytest.raises(RuntimeError):
        with fsio.staged_dir(target, "test folder", replace=lambda path: None) as tmp:
            with open(os.path.join(tmp, "v.txt"), "w") as f:
                f.write("half")
            raise RuntimeError("killed")
    assert _read(target / "v.txt") == "old"
    assert sorted(os.listdir(tmp_path)) == ["enc"]


@pytest.mark.parametrize("interrupt", ["after_first_rename", "second_rename"])
def test_ctrl_c_between_the_renames_keeps_the_old_version(tmp_path, monkeypatch, interrupt):
    """A KeyboardInterrupt after the old version moved into the stage (during its fsync,
    or in the rename of the new one) puts the old version back; nothing else is left."""
    target = tmp_path / "enc"
    target.mkdir()
    (target / "v.txt").write_text("old")
    real_fsync, real_rename = fsio.fsync_path, os.rename

    def fsync(path):
        real_fsync(path)
        if interrupt == "after_first_rename" and os.path.isdir(os.path.join(path, "old")):
            raise KeyboardInterrupt

    def rename(src, dst):
        if interrupt == "second_rename" and os.path.basename(src) == "new":
            raise KeyboardInterrupt
        real_rename(src, dst)

    monkeypatch.setattr(fsio, "fsync_path", fsync)
    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        with fsio.staged_dir(target, "test folder", replace=lambda path: None) as tmp:
            with open(os.path.join(tmp, "v.txt"), "w") as f:
                f.write("new")
    monkeypatch.undo()
    assert _read(target / "v.txt") == "old"
    assert sorted(os.listdir(tmp_path)) == ["enc"]


def test_recover_finishes_a_swap_interrupted_between_the_renames(tmp_path):
    target = tmp_path / "enc"
    _stage_by(target, _dead_pid(), complete=True, with_old=True)
    assert fsio.recover(target)
    assert _read(target / "v.txt") == "new"
    assert sorted(os.listdir(tmp_path)) == ["enc"]


def test_recover_rolls_back_an_incomplete_write(tmp_path):
    target = tmp_path / "enc"
    _stage_by(target, _dead_pid(), complete=False, with_old=True)
    assert fsio.recover(target)
    assert _read(target / "v.txt") == "old"
    assert sorted(os.listdir(tmp_path)) == ["enc"]


def test_recover_leaves_unmarked_and_live_folders_alone(tmp_path):
    target = tmp_path / "mymodel"
    target.mkdir()
    # What tfsent before the markers did to `mymodel.old/` (deleted it): now untouched.
    (tmp_path / "mymodel.old").mkdir()
    (tmp_path / "mymodel.old" / "IMPORTANT.txt").write_text("keep")
    unmarked = tmp_path / f".mymodel.tfsent-staging-{_dead_pid()}"
    unmarked.mkdir()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live_stage = _stage_by(target, live.pid, complete=False, with_old=False)
        assert not fsio.recover(target)
        assert os.path.isdir(live_stage)
    finally:
        live.kill()
        live.wait()
    assert _read(tmp_path / "mymodel.old" / "IMPORTANT.txt") == "keep"
    assert unmarked.is_dir()


def test_a_symlinked_target_is_written_through(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "v.txt").write_text("old")
    link = tmp_path / "link"
    link.symlink_to(real)
    with fsio.staged_dir(link, "test folder", replace=lambda path: None) as tmp:
        with open(os.path.join(tmp, "v.txt"), "w") as f:
            f.write("new")
    assert link.is_symlink() and _read(link / "v.txt") == "new"
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]


def test_check_new_file_refuses_existing_files_and_inputs(tmp_path):
    existing = tmp_path / "out.tsv"
    existing.write_text("x")
    with pytest.raises(ConfigError, match="--out=.*already exists.*--overwrite"):
        fsio.check_new_file(str(existing), "--out")
    fsio.check_new_file(str(existing), "--out", overwrite=True)
    with pytest.raises(ConfigError, match="also an input"):
        fsio.check_new_file(str(existing), "--out", overwrite=True, inputs=[str(existing)])
    fsio.check_new_file(str(tmp_path / "new.tsv"), "--out")
    # A folder is never a file to write, existing or not (a trailing separator).
    for folder in (str(tmp_path), str(tmp_path / "newdir") + os.sep):
        with pytest.raises(ConfigError, match="names a folder"):
            fsio.check_new_file(folder, "--out", overwrite=True)
    # A file inside an input folder (a BEIR folder, SentEval's data_dir) is the command's
    # data: refused even with overwrite; a new file there is fine.
    data = tmp_path / "data"
    (data / "qrels").mkdir(parents=True)
    (data / "qrels" / "test.tsv").write_text("q\td\t1\n")
    with pytest.raises(ConfigError, match="also an input \\(a file of the folder"):
        fsio.check_new_file(str(data / "qrels" / "test.tsv"), "--out", overwrite=True,
                            input_dirs=[str(data)])
    fsio.check_new_file(str(data / "results.json"), "--out", input_dirs=[str(data)])
    fsio.check_new_file(str(tmp_path / "data2.json"), "--out", input_dirs=[str(data)])


def test_write_file_atomic_replaces_whole_files(tmp_path):
    path = tmp_path / "m.json"
    fsio.write_json_atomic(str(path), {"a": 1})
    fsio.write_json_atomic(str(path), {"a": 2})
    assert json.loads(_read(path)) == {"a": 2}
    assert sorted(os.listdir(tmp_path)) == ["m.json"]


def test_a_first_write_killed_midway_does_not_block_the_rerun(tmp_path, monkeypatch):
    """A run killed while writing its first config.json leaves only the temporary
    sibling: the folder still counts as empty for the same command; a write that fails
    (Ctrl-C included) removes its temporary file itself."""
    from tfsent.training.run_dir import prepare_run_dir

    (tmp_path / ".config.json.tfsent-tmp-4242").write_text("{")
    assert fsio.is_temporary_file(".config.json.tfsent-tmp-4242")
    assert not fsio.is_temporary_file("config.json.tfsent-tmp-4242")
    assert not fsio.is_temporary_file(".notes.tfsent-tmp-x")
    assert prepare_run_dir(str(tmp_path), {"method": "simcse_unsup"}) == "new"

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fsio.write_file_atomic(tmp_path / "config.json", "{}")
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == [".config.json.tfsent-tmp-4242"]
