"""Dev selection with the starting encoder as the first candidate, the divergence guard
(drop from the start, NaN scores, the collapse signature), and the NaN / fp16 guards."""

import json
import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import TINY_VOCAB
from tfsent.training.callbacks import DivergenceGuard, NanGuard
from tfsent.training.selection import BestEncoderKeeper
from tfsent.data import pipelines, readers
from tfsent.testing import tiny_encoder

PROBE = ["a man plays a guitar", "the dog runs in the park", "a woman reads a book"]


def _train(out, encoder_dir, *extra):
    """A simcse_unsup run on the tiny encoder, in this process (`training.run` is what
    `python -m tfsent.train` calls; a child process would pay a TensorFlow import per run).
    Returns the metrics; a stopped run raises TrainingError."""
    from tfsent import training

    overrides = [f"encoder={encoder_dir}", "max_seq_length=12", "batch_size=8",
                 "projector_every=0", *extra]
    config = training.resolve_config("simcse_unsup", overrides=overrides)
    return training.run("simcse_unsup", config, out)


def _served(path):
    loaded = tf.saved_model.load(path)
    return loaded.signatures["serving_default"](sentences=tf.constant(PROBE))["embedding"]


def test_collapsing_run_exports_the_starting_encoder(tmp_path, tiny_encoder_dir,
                                                    absl_messages):
    """A learning rate that wrecks the encoder: nothing beats step 0, so the run says so and
    exports the starting encoder unchanged; export_if_worse=true exports the best trained
    checkpoint instead. (Without XLA: selection is what this checks; the XLA train step
    runs in tests/test_training.py and test_fp16_overflow_steps_do_not_stop_the_run.)"""
    from tfsent.encoders import load_encoder

    start = load_encoder(tiny_encoder_dir, max_seq_length=12).encode(PROBE)
    args = ("learning_rate=0.5", "steps=20", "eval_every=10", "first_eval_step=5",
            "jit_compile=false")
    _train(str(tmp_path / "safe"), tiny_encoder_dir, *args)
    assert any("exporting the STARTING encoder" in m for m in absl_messages)
    metrics = json.load(open(tmp_path / "safe" / "metrics.json"))
    assert metrics["exported"]["which"] == "starting encoder"
    assert metrics["exported"]["step"] == 0
    assert "no checkpoint beat it" in metrics["exported"]["why"]
    assert "early dev evaluation at step 5" in absl_messages
    np.testing.assert_allclose(_served(str(tmp_path / "safe" / "export" / "1")), start,
                               atol=1e-5)

    _train(str(tmp_path / "worse"), tiny_encoder_dir, *args, "export_if_worse=true")
    metrics = json.load(open(tmp_path / "worse" / "metrics.json"))
    assert metrics["exported"]["which"] == "best checkpoint"
    assert metrics["exported"]["step"] > 0
    assert metrics["exported"]["score"] <= metrics["dev_before"]["spearman"]
    served = np.asarray(_served(str(tmp_path / "worse" / "export" / "1")))
    assert np.abs(served - start).max() > 1e-3  # trained weights, not the start


def _report(spearman, rpc=0.1, uniformity=-3.5):
    return {"spearman": spearman, "pearson": spearman, "alignment": 0.3,
            "uniformity": uniformity, "random_pair_cosine": rpc}


class _Model:
    """What a callback needs of a model to stop it."""
    stop_training = False


def _guard(**kwargs):
    guard = DivergenceGuard(None, start=_report(80.0), **kwargs)
    guard.set_model(_Model())
    return guard


def test_guard_watches_the_distance_from_the_start():
    guard = _guard(max_drop=10.0)
    assert guard.check(_report(75.0), 10) is None  # 5 below the start
    assert "below the best 80.00" in guard.check(_report(69.0), 20)
    guard = _guard(max_drop=10.0)
    assert guard.check(_report(85.0), 10) is None
    assert "below the best 85.00" in guard.check(_report(74.0), 20)  # best moved up


def test_a_resumed_guard_remembers_the_best_before_the_interruption():
    """A resumed run's guard starts from its dev history's best (NaN never counts), so it
    stops where the uninterrupted run would (85 at step 20, then 74 at step 40)."""
    guard = _guard(max_drop=10.0)
    guard.remember([{"step": 10, **_report(82.0)}, {"step": 20, **_report(85.0)},
                    {"step": 30, **_report(float("nan"))}])
    assert guard.best == 85.0
    assert "below the best 85.00" in guard.check(_report(74.0), 40)
    fresh = _guard(max_drop=10.0)
    fresh.remember([])
    assert fresh.best == 80.0 and fresh.check(_report(74.0), 40) is None


def test_checkpoints_only_on_the_epoch_grid():
    """An epoch cut short (the early dev check's divergence stop at step 10 of a 50-step
    epoch) writes no checkpoint: a rerun resumed there would start its epochs off the grid
    and train past `steps`. Epoch ends on the grid save, after `before_save`."""
    from types import SimpleNamespace

    from tfsent.training.callbacks import RunCheckpoint

    saved, calls = [], []
    state = SimpleNamespace(save_checkpoint=saved.append)
    checkpoint = RunCheckpoint(state, before_save=lambda: calls.append(len(saved)), every=50)
    model = SimpleNamespace(optimizer=SimpleNamespace(iterations=tf.Variable(10, tf.int64)))
    checkpoint.set_model(model)
    checkpoint.on_epoch_end(0)
    model.optimizer.iterations.assign(100)
    checkpoint.on_epoch_end(1)
    assert saved == [100] and calls == [0]


def test_guard_nan_score_and_collapse_signature():
    assert "NaN" in _guard(max_drop=10.0).check(_report(float("nan")), 10)
    rise = _guard(collapse_cosine_rise=0.3)
    assert rise.check(_report(79.0, rpc=0.35), 10) is None
    assert "random-pair cosine 0.450" in rise.check(_report(79.0, rpc=0.45), 20)
    uni = _guard(collapse_uniformity_ratio=0.75)
    assert uni.check(_report(79.0, uniformity=-1.5), 10) is None
    assert "uniformity -0.800" in uni.check(_report(79.0, uniformity=-0.8), 20)
    off = _guard(max_drop=0, collapse_cosine_rise=0, collapse_uniformity_ratio=0)
    assert off.check(_report(10.0, rpc=0.99, uniformity=-0.01), 10) is None
    stopped = _guard(max_drop=1.0)
    stopped.stop_if_diverged(_report(70.0), 30)
    assert stopped.model.stop_training and stopped.stopped_step == 30


class _State:
    """RunState's best-score interface, in memory."""

    def __init__(self):
        self.saved = []

    def best(self):
        return (self.saved[-1][0], self.saved[-1][1]) if self.saved else (None, None)

    def save_best(self, score, step, extra=None):
        self.saved.append((score, step))


def test_nan_is_never_best_and_the_start_is_the_first_best():
    state = _State()
    keeper = BestEncoderKeeper(state, None, baseline=60.0)
    assert keeper.best() == (60.0, 0)
    assert not keeper.consider(_report(float("nan")), 10)
    assert state.saved == []
    assert not keeper.consider(_report(50.0), 20)  # trained best, but below the start
    assert state.saved == [(50.0, 20)] and keeper.best() == (60.0, 0)
    assert keeper.consider(_report(65.0), 30)
    assert keeper.best() == (65.0, 30)
    assert not keeper.consider(_report(float("nan")), 40)
    assert keeper.best() == (65.0, 30)


def test_collapsed_model_scores_nan_not_garbage():
    """A model whose embeddings are all equal (every weight zero) scores NaN through the
    evaluator's guarded correlation (scipy alone warns and returns nan or noise)."""
    from tfsent.methods import SimCSE
    from tfsent.training import sts_dev_score

    s1, s2, gold = readers.read_scored_pairs(readers.DEMO_PAIRS)
    model = SimCSE(tiny_encoder(TINY_VOCAB, max_seq_length=12))
    model.set_weights([np.zeros_like(w) for w in model.get_weights()])
    report = sts_dev_score(model, s1[:30], s2[:30], gold[:30])
    assert math.isnan(report["spearman"]) and math.isnan(report["pearson"])


def test_train_step_logs_the_steps_own_gradient_norm():
    """grad_norm is the step's own value, not the epoch's running mean (which would dilute
    one exploding step)."""
    from tfsent.methods import SimCSE

    sentences = readers.read_sentences(readers.DEMO_SENTENCES)[:16]
    model = SimCSE(tiny_encoder(TINY_VOCAB, max_seq_length=12, seed=2), dropout=0.0)
    model.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=False)
    batches = list(pipelines.sentence_dataset(sentences, model.encoder.tokenizer, 8,
                                              shuffle=False, repeat=False))
    first = model.train_on_batch(batches[0], return_dict=True)["grad_norm"]
    grads, _ = model.gradients(batches[1], model.trainable_variables)
    expected = float(tf.linalg.global_norm([g for g in grads if g is not None]))
    second = model.train_on_batch(batches[1], return_dict=True)["grad_norm"]
    assert abs(first - expected) > 1e-3 * expected  # the two steps differ ...
    np.testing.assert_allclose(second, expected, rtol=1e-4)  # ... and the log is step 2's


def test_nan_guard_stops_on_one_exploding_step():
    guard = NanGuard(max_grad_norm=100.0)

    class Opt:
        iterations = tf.Variable(0)

    model = _Model()
    model.optimizer = Opt()
    guard.set_model(model)
    for step, norm in enumerate([10.0, 12.0, 11.0, 1000.0, 10.0], start=1):
        Opt.iterations.assign(step)
        guard.on_train_batch_end(step, {"loss": 1.0, "grad_norm": norm})
        if guard.failed():
            break
    assert guard.failed_step == 4 and "limit max_grad_norm=100" in guard.reason


def test_fp16_overflow_steps_do_not_stop_the_run(tmp_path, tiny_encoder_dir, absl_messages):
    """mixed_float16 with a loss scale so high that the first steps overflow: the
    LossScaleOptimizer skips them and halves the scale; the guard counts them and the run
    finishes. A real divergence (huge learning rate) still stops it. (In this process; the
    CLI's exit status 2 for a stopped run: tests/reliability/test_divergence.py.)"""
    from tfsent.errors import TrainingError

    out = str(tmp_path / "fp16")
    _train(out, tiny_encoder_dir, "mixed_precision=mixed_float16", "loss_scale=1e12",
           "steps=12", "eval_every=6", "learning_rate=1e-3", "divergence_drop=0",
           "first_eval_step=0")
    assert any("loss-scale overflow step(s) skipped" in m for m in absl_messages)
    assert os.path.exists(os.path.join(out, "export", "1", "saved_model.pb"))
    # the run's mixed_float16 does not outlive it (it leaked into later tests once)
    assert keras.mixed_precision.global_policy().name == "float32"
    # The stop without XLA (one compile less): the run above trains fp16 under XLA, and
    # tests/reliability/test_divergence.py stops XLA runs on a non-finite loss.
    with pytest.raises(TrainingError) as stopped:
        _train(str(tmp_path / "bad"), tiny_encoder_dir, "mixed_precision=mixed_float16",
               "steps=12", "eval_every=6", "learning_rate=1e30", "first_eval_step=0",
               "jit_compile=false")
    said = str(stopped.value) + "\n".join(absl_messages)
    assert "non-finite" in said or "exploded" in said
    assert not os.path.exists(os.path.join(str(tmp_path / "bad"), "export"))
    assert keras.mixed_precision.global_policy().name == "float32"  # a stopped run too


def test_a_resume_with_another_loss_scale_starts_from_it(tmp_path, tiny_encoder_dir,
                                                         monkeypatch, absl_messages):
    """loss_scale is a recovery knob: the checkpoint holds the dynamic scale as the earlier
    attempt adapted it, and a resume with another loss_scale starts from the new value
    (the restored one used to win silently). Few steps, no overflow at scale 2: the final
    scale is the new setting."""
    from tfsent.training.callbacks import RunCheckpoint

    out = str(tmp_path / "fp16")
    args = ("mixed_precision=mixed_float16", "steps=20", "eval_every=5", "first_eval_step=0",
            "learning_rate=1e-4", "jit_compile=false")
    on_epoch_end = RunCheckpoint.on_epoch_end

    def killed_after_step_10(self, epoch, logs=None):
        on_epoch_end(self, epoch, logs)
        if epoch + 1 >= 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(RunCheckpoint, "on_epoch_end", killed_after_step_10)
    with pytest.raises(KeyboardInterrupt):
        _train(out, tiny_encoder_dir, *args)
    monkeypatch.undo()
    assert json.load(open(os.path.join(out, "metrics.json")))["loss_scale"] == {
        "setting": 32768.0}
    metrics = _train(out, tiny_encoder_dir, *args, "loss_scale=2")
    said = "\n".join(absl_messages)
    assert "resuming from step 10" in said
    assert "loss scale 2 (loss_scale changed from 32768" in said
    assert metrics["loss_scale"] == {"setting": 2.0, "final": 2.0}
    assert keras.mixed_precision.global_policy().name == "float32"


@pytest.mark.parametrize("flag", ["--config.first_eval_step=-1",
                                  "--config.collapse_uniformity_ratio=1.5",
                                  "--config.divergence_drop=-2", "--config.loss_scale=0"])
def test_selection_flags_are_validated(flag):
    from tfsent.training.config import build_config
    from tfsent.errors import ConfigError

    with pytest.raises(ConfigError, match=flag.split(".")[1].split("=")[0]):
        build_config({}, {}, [flag[len("--config."):]])



def test_a_rerun_from_step_0_drops_the_earlier_attempts_best(tmp_path, tiny_encoder_dir,
                                                              absl_messages, monkeypatch):
    """An attempt interrupted after its early dev check (step 5) and before its first
    checkpoint (step 10: checkpoints only on the eval_every grid) left a best/ and no
    checkpoint; a rerun starts at step 0. The earlier best must neither compete with the
    rerun's evaluations nor be exported. (The earlier best's score is raised to 99 in its
    best.json, a lucky early check, so that keeping it would show.)"""
    out = str(tmp_path / "run")
    args = ("steps=20", "eval_every=10", "first_eval_step=5", "jit_compile=false",
            "learning_rate=1e-4")
    consider = BestEncoderKeeper.consider

    def interrupted_after(self, report, step):  # Ctrl-C right after the early check
        consider(self, report, step)
        raise KeyboardInterrupt

    monkeypatch.setattr(BestEncoderKeeper, "consider", interrupted_after)
    with pytest.raises(KeyboardInterrupt):
        _train(out, tiny_encoder_dir, *args)
    monkeypatch.undo()
    assert not os.path.exists(os.path.join(out, "checkpoints", "checkpoint"))
    best_json = os.path.join(out, "best", "best.json")
    earlier = json.load(open(best_json))
    assert earlier["step"] == 5
    json.dump(dict(earlier, score=99.0), open(best_json, "w"))

    metrics = _train(out, tiny_encoder_dir, *args)
    trained = [h["spearman"] for h in metrics["dev_history"] if h["step"] > 0]
    assert [h["step"] for h in metrics["dev_history"]] == [5, 10, 20]
    assert metrics["exported"]["score"] != 99.0
    assert json.load(open(best_json))["score"] == pytest.approx(max(trained))
    assert "removed best/ of an earlier attempt" in "\n".join(absl_messages)
