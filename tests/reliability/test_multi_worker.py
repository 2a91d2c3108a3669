"""Multi-worker training on localhost: 2 worker processes with TF_CONFIG and
MultiWorkerMirroredStrategy (CPU, tiny model) through `python -m tfsent.train`.

- The result equals one process with 2 replicas and one process with 1 replica on the same
  data (within 1e-4): contrastive negatives come from the global batch.
- A worker killed with SIGKILL mid-run: restarting the job resumes from the chief's last
  checkpoint and finishes with an export.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf

from conftest import REPO, TINY_RUN_FLAGS

SENTENCES = ["a man plays a guitar", "the dog runs in the park", "a woman reads a book", ""]


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _env(tf_config=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return env


def _cmd(out, encoder_dir, steps, eval_every, *extra):
    return [sys.executable, "-m", "tfsent.train", "--method=simcse_sup", f"--output_dir={out}",
            f"--config.encoder={encoder_dir}", "--config.max_seq_length=12",
            "--config.batch_size=8", "--config.learning_rate=1e-3",
            "--config.encoder_dropout=0.0", "--config.jit_compile=False",
            f"--config.steps={steps}", f"--config.eval_every={eval_every}",
            "--config.projector_every=0", *TINY_RUN_FLAGS, *extra]


def _start_workers(out, encoder_dir, steps, eval_every, log_dir, ports=None):
    ports = ports or _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for index in range(2):
        log = open(os.path.join(log_dir, f"worker{index}.log"), "a")
        procs.append(subprocess.Popen(
            _cmd(out, encoder_dir, steps, eval_every, "--config.strategy=multi_worker"),
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            env=_env({"cluster": cluster, "task": {"type": "worker", "index": index}})))
    return procs


def _wait(procs, timeout=600):
    deadline = time.time() + timeout
    for p in procs:
        p.wait(timeout=max(1, deadline - time.time()))
    return [p.returncode for p in procs]


def _embed(export_version_dir):
    model = tf.saved_model.load(export_version_dir)
    return model.signatures["serving_default"](
        sentences=tf.constant(SENTENCES))["embedding"].numpy()


def test_two_workers_match_one_process(tmp_path, tiny_encoder_dir):
    runs = {}
    for name, extra in (("one_replica", ["--config.strategy=one_device"]),
                        ("two_replicas", ["--config.strategy=mirrored",
                                          "--config.cpu_replicas=2"])):
        out = str(tmp_path / name)
        r = subprocess.run(_cmd(out, tiny_encoder_dir, 6, 6, *extra), cwd=REPO, env=_env(),
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        runs[name] = out
    assert "on 2 replica(s)" in r.stderr
    out = str(tmp_path / "two_workers")
    codes = _wait(_start_workers(out, tiny_encoder_dir, 6, 6, str(tmp_path)))
    logs = {i: open(tmp_path / f"worker{i}.log").read() for i in range(2)}
    assert codes == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    assert "on 2 replica(s)" in logs[0] and "the chief exports" in logs[1]
    # Only the chief wrote the run directory; the other worker cleaned up after itself.
    assert set(os.listdir(out)) == set(os.listdir(runs["two_replicas"])) | {".workers"}
    assert os.listdir(os.path.join(out, ".workers")) == []
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["steps"] == 6
    emb = _embed(os.path.join(out, "export", "1"))
    base = _embed(os.path.join(runs["one_replica"], "export", "1"))
    assert not np.allclose(base, _embed_untrained(tiny_encoder_dir, tmp_path), atol=1e-3)
    for name, run in runs.items():
        np.testing.assert_allclose(emb, _embed(os.path.join(run, "export", "1")), atol=1e-4,
                                   err_msg=name)


def _embed_untrained(encoder_dir, tmp_path):
    from tfsent.encoders import load_encoder
    from tfsent.formats.saved_model import export_encoder

    path = export_encoder(load_encoder(encoder_dir), str(tmp_path / "untrained"))
    return _embed(path)


def _listdir(folder):
    return os.listdir(folder) if os.path.isdir(folder) else []


def test_killed_worker_then_restart_resumes(tmp_path, tiny_encoder_dir):
    out = str(tmp_path / "run")
    procs = _start_workers(out, tiny_encoder_dir, 20, 5, str(tmp_path))
    checkpoints = os.path.join(out, "checkpoints")
    deadline = time.time() + 600
    try:
        while time.time() < deadline:   # wait for the chief's checkpoint at step 10
            # (one checkpoint is kept: ckpt-10 may already be replaced by a later one)
            if any(n.startswith("ckpt-") and n.endswith(".index")
                   and int(n[5:-6]) >= 10 for n in _listdir(checkpoints)):
                break
            assert all(p.poll() is None for p in procs), open(tmp_path / "worker0.log").read()
            time.sleep(0.2)
        else:
            raise AssertionError("no checkpoint at step 10 within 10 minutes")
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait()
        # The chief cannot go on without its peer: the job is restarted as a whole.
        try:
            procs[0].wait(timeout=20)
        except subprocess.TimeoutExpired:
            procs[0].kill()
            procs[0].wait()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert not os.path.exists(os.path.join(out, "export"))
    reached = int(tf.train.latest_checkpoint(checkpoints).rsplit("-", 1)[1])
    assert 10 <= reached < 20
    for i in range(2):
        os.rename(tmp_path / f"worker{i}.log", tmp_path / f"first{i}.log")
    codes = _wait(_start_workers(out, tiny_encoder_dir, 20, 5, str(tmp_path)))
    logs = [open(tmp_path / f"worker{i}.log").read() for i in range(2)]
    assert codes == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    for log in logs:
        assert f"resuming from step {reached}" in log
    resumed = [int(line.split("resuming from step ")[1].split()[0])
               for line in logs[0].splitlines() if "resuming from step " in line]
    assert resumed and resumed[0] >= reached
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["steps"] == 20
    assert len(_embed(os.path.join(out, "export", "1"))) == len(SENTENCES)
