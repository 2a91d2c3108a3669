"""The run folder keeps what resuming and selection need, once (issue 43): start/ and best/
hold the exported parts (encoder + export head), not the optimizer or frozen parts;
checkpoints/ keeps the last checkpoint; a finished run says the folder's size."""

import os

import keras
import numpy as np

from conftest import TINY_VOCAB
from tfsent.methods import CLSR, CMLMCSE
from tfsent.testing import tiny_encoder
from tfsent.training import RunState
from tfsent.training.run_dir import (ENCODER_WEIGHTS, HEAD_WEIGHTS, LEGACY_MODEL_WEIGHTS,
                                     folder_bytes, size_summary)


def _compiled(model):
    optimizer = keras.optimizers.AdamW(1e-3)
    model.compile(optimizer=optimizer)
    optimizer.build(model.trainable_variables)
    return model, optimizer


def _scramble(variables, seed):
    rng = np.random.default_rng(seed)
    for v in variables:
        v.assign(rng.normal(size=v.shape).astype(v.dtype))


def test_start_and_best_hold_the_encoder_not_the_frozen_extractor_or_optimizer(tmp_path):
    model, optimizer = _compiled(CMLMCSE(tiny_encoder(TINY_VOCAB, seed=1), extractor_layers=1,
                                         fusion_layers=1))
    state = RunState(str(tmp_path), model, optimizer)
    state.save_start(50.0)
    start = [v.numpy().copy() for v in model.encoder.weights]
    assert sorted(os.listdir(tmp_path / "start")) == ["encoder.weights.h5", "start.json"]
    # The whole model (encoder, extractor copy, fusioner, optimizer slots) is far larger.
    model.save_weights(str(tmp_path / "whole.weights.h5"))
    whole = os.path.getsize(tmp_path / "whole.weights.h5")
    assert folder_bytes(str(tmp_path / "start")) < 0.6 * whole

    _scramble(model.encoder.trainable_weights, seed=3)
    trained = [v.numpy().copy() for v in model.encoder.weights]
    state.save_best(60.0, 10)
    extractor = [v.numpy().copy() for v in model.extractor.weights]
    assert state.load_start()
    for a, v in zip(start, model.encoder.weights):
        np.testing.assert_array_equal(a, v.numpy())
    assert state.load_best()
    for a, v in zip(trained, model.encoder.weights):
        np.testing.assert_array_equal(a, v.numpy())
    for a, v in zip(extractor, model.extractor.weights):  # untouched by loading
        np.testing.assert_array_equal(a, v.numpy())
    assert state.best() == (60.0, 10)


def test_the_export_head_is_kept_with_the_encoder(tmp_path):
    model, optimizer = _compiled(CLSR(tiny_encoder(TINY_VOCAB, seed=2), head_init="random"))
    head = model.export_head
    state = RunState(str(tmp_path), model, optimizer)
    state.save_best(1.0, 5)
    assert sorted(os.listdir(tmp_path / "best")) == ["best.json", ENCODER_WEIGHTS,
                                                     HEAD_WEIGHTS]
    saved = [v.numpy().copy() for v in head.weights]
    _scramble(head.weights, seed=4)
    assert not np.array_equal(saved[0], head.weights[0].numpy())
    assert state.load_best()
    for a, v in zip(saved, head.weights):
        np.testing.assert_array_equal(a, v.numpy())


def test_best_of_a_run_written_before_loads(tmp_path):
    """best/model.weights.h5 (the whole model, as runs before this layout wrote it)."""
    model, optimizer = _compiled(CLSR(tiny_encoder(TINY_VOCAB, seed=2), head_init="random"))
    os.makedirs(tmp_path / "best")
    model.save_weights(str(tmp_path / "best" / LEGACY_MODEL_WEIGHTS))
    saved = [v.numpy().copy() for v in model.weights]
    _scramble(model.encoder.trainable_weights + model.export_head.weights, seed=5)
    assert RunState(str(tmp_path), model, optimizer).load_best()
    for a, v in zip(saved, model.weights):
        np.testing.assert_array_equal(a, v.numpy())


def test_one_checkpoint_is_kept(tmp_path):
    model, optimizer = _compiled(CLSR(tiny_encoder(TINY_VOCAB, seed=2)))
    state = RunState(str(tmp_path), model, optimizer)
    for step in (1, 2, 3):
        state.save_checkpoint(step)
    names = {n.split(".")[0] for n in os.listdir(tmp_path / "checkpoints")
             if n != "checkpoint"}
    assert names == {"ckpt-3"}


def test_size_summary_names_the_large_parts_and_what_they_are_for(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "ckpt-3.data").write_bytes(b"x" * 3_000_000)
    (tmp_path / "export" / "1").mkdir(parents=True)
    (tmp_path / "export" / "1" / "saved_model.pb").write_bytes(b"x" * 2_000_000)
    (tmp_path / "metrics.json").write_text("{}")
    line = size_summary(str(tmp_path))
    assert line == (f"run folder: 5 MB in {tmp_path}: checkpoints/ 3 MB (to resume or train "
                    f"on), export/ 2 MB (the served model)")


class _SlowEvaluation(keras.callbacks.Callback):
    """Stands in for a dev evaluation's time: sleeps at each epoch end."""

    def on_epoch_end(self, epoch, logs=None):
        import time
        time.sleep(0.3)


def test_the_run_clock_counts_dev_evaluations_in_the_time_left(absl_messages):
    from tfsent.training.callbacks import RunClock, Throughput

    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.zeros((8, 4), np.float32), np.zeros((8, 1), np.float32)
    throughput = Throughput(2)
    model.fit(x, y, batch_size=2, epochs=3, steps_per_epoch=4, verbose=0,
              callbacks=[throughput, _SlowEvaluation(), RunClock(12, throughput)])
    lines = [m for m in absl_messages if " left (train steps " in m]
    assert [line.split(" (")[0] for line in lines] == ["step 4 of 12", "step 8 of 12",
                                                        "step 12 of 12"]
    # After the first epoch: 8 steps (milliseconds) and 2 evaluations of >= 0.3 s are left.
    left = lines[0].split("about ")[1].split(" left")[0]
    assert left.endswith(" s") and 0.6 <= float(left[:-2]) < 3, lines[0]
    each = float(lines[0].split("saving ")[1].split(" s each")[0])
    assert 0.3 <= each < 1.5, lines[0]
    assert lines[-1].split("about ")[1].startswith("0.0 s left"), lines[-1]


def test_durations_read_as_people_write_them():
    from tfsent.training.callbacks import format_duration
    assert [format_duration(s) for s in (0.43, 12.4, 59.6, 200, 3900)] == [
        "0.4 s", "12 s", "1 min 00 s", "3 min 20 s", "1 h 05 min"]
