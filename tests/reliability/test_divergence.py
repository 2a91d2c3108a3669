"""A non-finite loss or exploding gradients stop the run with a message; the best weights
and the last good checkpoint stay intact and nothing is exported from the exploded
weights; a rerun with a lower learning rate (or gradient limit) resumes. The run to
diverge is an unfinished one (killed after a checkpoint): a finished run is not trained
further (tests/test_trust.py)."""

import json
import os
import signal
import subprocess
import sys
import time

import tensorflow as tf

from conftest import REPO, TINY_RUN_FLAGS
from tfsent.formats.tf_serving import BATCHING_FILE


def _cmd(out, encoder_dir, steps, lr, *extra):
    return [sys.executable, "-m", "tfsent.train", "--method=simcse_unsup", f"--output_dir={out}",
           f"--config.encoder={encoder_dir}", "--config.max_seq_length=12",
           "--config.batch_size=8", f"--config.learning_rate={lr}", f"--config.steps={steps}",
           "--config.eval_every=5", "--config.projector_every=0", *TINY_RUN_FLAGS, *extra]


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def _run(out, encoder_dir, steps, lr, *extra):
    return subprocess.run(_cmd(out, encoder_dir, steps, lr, *extra), cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=600)


def _killed_after_a_checkpoint(out, encoder_dir, steps, lr, at_least=5):
    """Starts a run and SIGKILLs it once a checkpoint of step >= `at_least` exists; returns
    the step of its last checkpoint (an unfinished run to resume)."""
    proc = subprocess.Popen(_cmd(out, encoder_dir, steps, lr), cwd=REPO, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    folder = os.path.join(out, "checkpoints")
    deadline = time.time() + 600
    try:
        while proc.poll() is None and time.time() < deadline:
            latest = tf.train.latest_checkpoint(folder) if os.path.isdir(folder) else None
            if latest and int(latest.rsplit("-", 1)[1]) >= at_least:
                break
            time.sleep(0.01)
        assert proc.poll() is None, "the run ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return int(tf.train.latest_checkpoint(folder).rsplit("-", 1)[1])


def test_nan_then_exploding_gradients_stop_the_run_then_a_lower_lr_resumes(
        tmp_path, tiny_encoder_dir):
    """One killed run serves three reruns (each launch costs seconds of imports).

    A resume with an absurd learning rate (a recovery knob may change on resume) blows the
    weights up: the run stops on the non-finite loss, the best weights stay as they were
    and nothing is exported. A gradient norm above max_grad_norm stops the run at that
    step: no checkpoint, best or export is written from the exploded weights. A resume
    with a lower learning rate finishes and exports."""
    out = str(tmp_path / "run")
    step = _killed_after_a_checkpoint(out, tiny_encoder_dir, 30, 1e-3)
    best_json = open(os.path.join(out, "best", "best.json")).read()
    best_weights = open(os.path.join(out, "best", "encoder.weights.h5"), "rb").read()

    diverged = _run(out, tiny_encoder_dir, 30, 1e30)
    assert diverged.returncode == 2, diverged.stderr[-3000:]
    assert f"resuming from step {step}" in diverged.stderr
    assert "with changed learning_rate (0.001 -> 1e+30)" in diverged.stderr
    assert "the loss became non-finite (nan) at step" in diverged.stderr
    assert "lower --config.learning_rate" in diverged.stderr
    assert f"last good checkpoint (step {step})" in diverged.stderr
    assert not os.path.exists(os.path.join(out, "export"))      # nothing exported
    assert open(os.path.join(out, "best", "best.json")).read() == best_json
    assert open(os.path.join(out, "best", "encoder.weights.h5"), "rb").read() == best_weights
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["stopped"].startswith("the loss became non-finite (nan) at step")

    ckpts = sorted(os.listdir(os.path.join(out, "checkpoints")))
    exploded = _run(out, tiny_encoder_dir, 30, 1e-3, "--config.max_grad_norm=1e-9")
    assert exploded.returncode == 2, exploded.stderr[-3000:]
    assert "the gradients exploded" in exploded.stderr
    assert (f"at step {step + 1}" in exploded.stderr
            and f"last good checkpoint (step {step})" in exploded.stderr)
    assert sorted(os.listdir(os.path.join(out, "checkpoints"))) == ckpts
    assert open(os.path.join(out, "best", "best.json")).read() == best_json
    assert not os.path.exists(os.path.join(out, "export"))
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["stopped"].startswith("the gradients exploded")

    resumed = _run(out, tiny_encoder_dir, 30, 1e-4)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from step {step}" in resumed.stderr
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["steps"] == 30 and "stopped" not in metrics
    assert sorted(os.listdir(os.path.join(out, "export"))) == ["1", BATCHING_FILE]
