"""A process killed (SIGKILL) in the middle of an export leaves the previous version
loadable and no partial version directory that a server would pick up."""

import os
import signal
import subprocess
import sys
import time

from conftest import REPO, serve_in_fresh_process
from tfsent.formats.tf_serving import BATCHING_FILE


def _export_cmd(model, export_dir):
    return [sys.executable, "-m", "tfsent.export", f"--model={model}", f"--export_dir={export_dir}",
            "--max_seq_length=16"]


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def _kill_during_export(model, export_dir, timeout=300):
    """Starts an export and SIGKILLs it as soon as its temporary directory appears.
    Returns True if it was killed mid-export, False if it finished first."""
    proc = subprocess.Popen(_export_cmd(model, export_dir), cwd=REPO, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    try:
        while time.time() < deadline and proc.poll() is None:
            # Killed once the staging folder carries tfsent's marker (a folder killed
            # between its mkdir and the marker is not provably tfsent's: left alone).
            if any(".tfsent-staging-" in n and os.path.exists(
                    os.path.join(export_dir, n, "tfsent-staging.json"))
                   for n in os.listdir(export_dir)):
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return True
            time.sleep(0.005)
        return False
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _versions(export_dir):
    return sorted(n for n in os.listdir(export_dir) if n.isdigit())


def test_sigkill_during_export_keeps_previous_version(tmp_path, tiny_encoder_dir):
    from tfsent import formats
    from tfsent.encoders import load_encoder

    # The previous version, written in this process (what `python -m tfsent.export` calls;
    # the command itself runs below, killed, and at the end, to completion).
    export_dir = str(tmp_path / "exports")
    formats.export(load_encoder(tiny_encoder_dir, max_seq_length=16), export_dir,
                   format="tf_saved_model", metadata={"model": tiny_encoder_dir})
    assert _versions(export_dir) == ["1"]

    finished = 0   # attempts that completed before the kill (each adds a version)
    for _ in range(5):
        if _kill_during_export(tiny_encoder_dir, export_dir):
            break
        finished += 1
    else:
        raise AssertionError("the export finished before it could be killed, 5 times")
    # What a server sees: the complete versions only; the killed attempt's leftover is a
    # hidden, non-numeric directory that TF Serving ignores.
    assert _versions(export_dir) == [str(v) for v in range(1, finished + 2)]
    # (batching_parameters.txt, TF Serving's batching settings, sits beside the versions.)
    leftovers = [n for n in os.listdir(export_dir) if not n.isdigit() and n != BATCHING_FILE]
    assert leftovers and all(n.startswith(f".{finished + 2}.tfsent-staging-")
                             for n in leftovers)
    newest = _versions(export_dir)[-1]
    served = serve_in_fresh_process(os.path.join(export_dir, newest), ["a man plays", ""])
    assert len(served["embedding"]) == 2

    # The next export cleans the leftover and takes the next version.
    again = subprocess.run(_export_cmd(tiny_encoder_dir, export_dir), cwd=REPO, env=_env(),
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert sorted(os.listdir(export_dir)) == sorted(_versions(export_dir) + [BATCHING_FILE])
    assert len(_versions(export_dir)) == int(newest) + 1
