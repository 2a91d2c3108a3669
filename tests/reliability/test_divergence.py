"""A non-finite loss or exploding gradients stop the run with a message; the best weights,
the last good checkpoint and the earlier export stay intact; a rerun with a lower learning
rate resumes."""

import json
import os
import subprocess
import sys

from conftest import REPO, TINY_RUN_FLAGS


def _run(out, encoder_dir, steps, lr, *extra):
    cmd = [sys.executable, "-m", "tfsent.train", "--method=simcse_unsup", f"--output_dir={out}",
           f"--config.encoder={encoder_dir}", "--config.max_seq_length=12",
           "--config.batch_size=8", f"--config.learning_rate={lr}", f"--config.steps={steps}",
           "--config.eval_every=5", "--config.projector_every=0", *TINY_RUN_FLAGS, *extra]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_nan_stops_keeps_best_and_resumes_with_lower_lr(tmp_path, tiny_encoder_dir):
    out = str(tmp_path / "run")
    first = _run(out, tiny_encoder_dir, 10, 1e-3)
    assert first.returncode == 0, first.stderr[-3000:]
    best_json = open(os.path.join(out, "best", "best.json")).read()
    best_weights = open(os.path.join(out, "best", "model.weights.h5"), "rb").read()

    # Continue to 20 steps with an absurd learning rate: the weights blow up.
    diverged = _run(out, tiny_encoder_dir, 20, 1e30)
    assert diverged.returncode == 2, diverged.stderr[-3000:]
    assert "resuming from step 10" in diverged.stderr
    assert "the loss became non-finite (nan) at step" in diverged.stderr
    assert "lower --config.learning_rate" in diverged.stderr
    assert "last good checkpoint (step 10)" in diverged.stderr
    assert sorted(os.listdir(os.path.join(out, "export"))) == ["1"]      # no new export
    assert open(os.path.join(out, "best", "best.json")).read() == best_json
    assert open(os.path.join(out, "best", "model.weights.h5"), "rb").read() == best_weights
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["stopped"].startswith("the loss became non-finite (nan) at step")

    resumed = _run(out, tiny_encoder_dir, 20, 1e-4)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from step 10" in resumed.stderr
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["steps"] == 20 and "stopped" not in metrics
    assert sorted(os.listdir(os.path.join(out, "export"))) == ["1", "2"]


def test_exploding_gradients_stop_the_run(tmp_path, tiny_encoder_dir):
    """A gradient norm above max_grad_norm stops the run at that step: no checkpoint, best
    or export is written from the exploded weights."""
    out = str(tmp_path / "run")
    first = _run(out, tiny_encoder_dir, 5, 1e-3)
    assert first.returncode == 0, first.stderr[-3000:]
    ckpts = sorted(os.listdir(os.path.join(out, "checkpoints")))
    best_json = open(os.path.join(out, "best", "best.json")).read()

    exploded = _run(out, tiny_encoder_dir, 10, 1e-3, "--config.max_grad_norm=1e-9")
    assert exploded.returncode == 2, exploded.stderr[-3000:]
    assert "the gradients exploded" in exploded.stderr
    assert "at step 6" in exploded.stderr and "last good checkpoint (step 5)" in exploded.stderr
    assert sorted(os.listdir(os.path.join(out, "checkpoints"))) == ckpts
    assert open(os.path.join(out, "best", "best.json")).read() == best_json
    assert sorted(os.listdir(os.path.join(out, "export"))) == ["1"]
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["stopped"].startswith("the gradients exploded")
