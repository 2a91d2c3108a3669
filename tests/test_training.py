"""Training engine: global-batch equivalence under MirroredStrategy, XLA, resume, CLI."""

import json
import os
import signal
import re
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import (REPO, TINY_RUN_FLAGS, TINY_VOCAB, build_tiny_method, minilm_or_skip,
                      sigint_as_a_terminal_sends_it)
from tfsent.data import pipelines
from tfsent.testing import tiny_encoder
from tfsent.methods import SimCSE

SENTS = ["a man plays a guitar", "a woman sits on the mat", "the dog runs in the park",
         "a child reads a book", "the cat sleeps", "a man rides a red bike",
         "the woman eats food", "a big tree in the street"]
POS = ["a man plays music", "a woman is on the mat", "a dog runs", "the child reads",
       "a cat sleeps on the mat", "a man rides a bike", "a woman eats", "a big tree"]
NEG = ["a woman sleeps", "a man drives a car", "the cat swims", "a dog eats food",
       "the child runs", "a woman reads a book", "the man sits", "a small house"]


def _batch(kind, tokenizer):
    if kind == "supcon":
        rows = [r for s, p, n in zip(SENTS[:4], POS, NEG)
                for r in ((s, p, "entailment"), (s, n, "contradiction"))]
        return next(iter(pipelines.nli_pair_dataset(rows, tokenizer, 8, seed=0)))
    if kind == "pairs":  # (query, document) rows without hard negatives
        return next(iter(pipelines.pair_dataset(list(zip(SENTS, POS)), tokenizer, 8,
                                                shuffle=False)))
    if kind == "sup":
        return next(iter(pipelines.triplet_dataset(list(zip(SENTS, POS, NEG)), tokenizer, 8,
                                                   shuffle=False)))
    ds = pipelines.sentence_dataset(SENTS, tokenizer, 8, shuffle=False,
                                    mlm_mask_rate=0.3 if kind == "cmlm" else None)
    return next(iter(ds))


@pytest.mark.parametrize("kind", ["unsup", "sup", "pairs", "cmlm", "supcon"])
def test_two_replicas_match_one_replica(kind, mirrored_strategy):
    """One step on a global batch of 8: 2 replicas x 4 == 1 replica x 8 (loss and weights)."""
    single = build_tiny_method(kind, tf.distribute.get_strategy())
    init = [v.numpy() for v in single.trainable_variables]
    batch = _batch(kind, single.encoder.tokenizer)
    ds = tf.data.Dataset.from_tensors(batch)
    h1 = single.fit(ds, epochs=1, steps_per_epoch=1, verbose=0).history
    mirrored = build_tiny_method(kind, mirrored_strategy, init)
    assert mirrored.distribute_strategy.num_replicas_in_sync == 2
    h2 = mirrored.fit(ds, epochs=1, steps_per_epoch=1, verbose=0).history
    for key in set(h1) - {"grad_norm"}:  # grad_norm is per replica (see SentenceMethod)
        np.testing.assert_allclose(h1[key][0], h2[key][0], rtol=1e-5, atol=1e-5, err_msg=key)
    changed = 0
    for a, b, w0 in zip(single.trainable_variables, mirrored.trainable_variables, init):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5, err_msg=a.path)
        changed += int(not np.allclose(a.numpy(), w0))
    assert changed > 0  # the step did update weights


def test_single_replica_step_with_xla():
    enc = tiny_encoder(TINY_VOCAB, max_seq_length=12, seed=0)
    model = SimCSE(enc, temperature=0.05)
    model.compile(optimizer=keras.optimizers.AdamW(1e-3), jit_compile=True)
    ds = pipelines.sentence_dataset(SENTS, enc.tokenizer, 4)
    hist = model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0).history
    assert np.isfinite(hist["loss"][0])


def _train_cmd(out, encoder_dir, *extra):
    return [sys.executable, "-m", "tfsent.train", "--method=simcse_unsup", f"--output_dir={out}",
            f"--config.encoder={encoder_dir}", "--config.max_seq_length=16",
            "--config.batch_size=8", "--config.learning_rate=1e-3", *TINY_RUN_FLAGS, *extra]


def _env():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    env.pop("TF_CONFIG", None)
    return env


def _latest_step(out):
    latest = tf.train.latest_checkpoint(os.path.join(out, "checkpoints"))
    return int(latest.rsplit("-", 1)[1]) if latest else 0


def _start_until_checkpoint(cmd, out, stderr, after=0):
    """Starts the training command and returns its process once the run has a checkpoint
    of a step above `after` (the process still running)."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=stderr, text=True,
                            preexec_fn=sigint_as_a_terminal_sends_it)
    deadline = time.time() + 300
    while _latest_step(out) <= after and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, f"the run ended before a checkpoint after step {after}"
    return proc


def test_sigkill_then_ctrl_c_then_rerun_resumes(tmp_path, tiny_encoder_dir):
    """One run stopped twice, each time after a checkpoint, then finished by the same
    command (one training run serves both stops: a process launch costs seconds).

    SIGKILL: the same command again resumes. Ctrl-C (SIGINT) of that resumed run: one line
    saying how to resume, status 130, no traceback. The third launch resumes and exports,
    with its stdout and stderr in one stream: no log line is glued onto the progress bar's
    epoch line."""
    out = str(tmp_path / "run")
    cmd = _train_cmd(out, tiny_encoder_dir, "--config.steps=100", "--config.eval_every=20")
    proc = _start_until_checkpoint(cmd, out, subprocess.DEVNULL)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not os.path.exists(os.path.join(out, "export"))
    killed_at = _latest_step(out)
    # metrics.json is written with each checkpoint, the seconds trained so far with it
    seconds_before_kill = json.load(open(os.path.join(out, "metrics.json")))["train_seconds"]
    assert seconds_before_kill > 0

    proc = _start_until_checkpoint(cmd, out, subprocess.PIPE, after=killed_at)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert "resuming from step" in stderr, stderr[-3000:]
    step = int(stderr.split("resuming from step ")[1].split()[0])
    assert step == killed_at and 20 <= step < 100
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert stderr.rstrip().splitlines()[-1] == (
        "interrupted; run the same command again to resume from the last checkpoint")
    assert not os.path.exists(os.path.join(out, "export"))

    result = subprocess.run(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "resuming from step" in result.stdout
    glued = [line for line in result.stdout.splitlines()
             if "loss:" in line and re.search(r"[IWE]\d{4} \d\d:\d\d:\d\d", line)]
    assert not glued, glued
    assert os.path.exists(os.path.join(out, "export", "1", "saved_model.pb"))
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["steps"] == 100
    assert "dev_before" in metrics  # kept from the first, killed run
    assert metrics["train_seconds"] > seconds_before_kill  # the attempts' seconds add up
    # every evaluation, those before each stop included (written with each checkpoint)
    assert [h["step"] for h in metrics["dev_history"]] == [20, 40, 60, 80, 100]


def test_cli_errors_are_clear(tmp_path):
    """Each bad argument: a non-zero status and one message naming it, no traceback (the
    runs fork one process that imported the CLI's modules: conftest.cli_runs_in_one_process)."""
    from conftest import TRAIN_IMPORTS, cli_runs_in_one_process

    bad = [("--method=nope", "unknown method"),
           ("--config.batch_size=-3", "batch_size must be an integer >= 1"),
           ("--config.train_data=/does/not/exist.txt", "/does/not/exist.txt"),
           ("--config.no_such_field=1", "unknown field")]
    cases = [[f"--output_dir={tmp_path}/x"]
             + ([arg] if arg.startswith("--method") else ["--method=simcse_unsup", arg])
             for arg, _ in bad]
    runs = cli_runs_in_one_process("tfsent.train", cases, str(tmp_path),
                                   preload=TRAIN_IMPORTS, env=_env())
    for (arg, message), r in zip(bad, runs):
        assert r.returncode != 0
        assert message in r.stderr, (arg, r.stderr[-2000:])
        assert "Traceback" not in r.stderr, (arg, r.stderr[-2000:])


def test_readme_example_runs(tmp_path):
    """The README's model.fit example, executed as written."""
    minilm_or_skip()
    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    start = readme.index("```python\n", readme.index("### Keras `fit`"))
    code = readme[start + len("```python\n"):readme.index("```", start + 10)]
    namespace = {}
    cwd = os.getcwd()
    os.chdir(tmp_path)  # the example writes simcse_best.keras
    try:
        exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102
    finally:
        os.chdir(cwd)
    assert namespace["embeddings"].shape == (2, 384)
    assert type(namespace["model"]).__name__ == "SimCSE"
    assert int(namespace["model"].optimizer.iterations.numpy()) > 0
    assert (tmp_path / "simcse_best.keras").exists()
