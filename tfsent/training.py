"""Training machinery shared by all methods: LR schedule, checkpoints, Keras callbacks.

Run directory layout (`output_dir`):
  checkpoints/   tf.train.CheckpointManager (model + optimizer + step), every eval_every steps
  best/          encoder weights of the best dev score so far + best.json (score, step)
  tb/            TensorBoard logs
  export/<v>/    SavedModel of the best (or final) encoder
  metrics.json   dev metrics before training, best and final; steps; examples/s
Every file is written to a temporary name and renamed, so an interrupted run leaves the
previous state readable and a rerun of the same command resumes.
"""

import json
import math
import os
import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging
from scipy.stats import pearsonr, spearmanr


@keras.saving.register_keras_serializable(package="tfsent")
class WarmupCosineDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak` over `warmup_steps`, then cosine decay to 0 at
    `total_steps` (SimCLR's schedule, used by CLSR)."""

    def __init__(self, peak, total_steps, warmup_steps=0):
        self.peak = float(peak)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warm = self.peak * (step + 1.0) / float(max(self.warmup_steps, 1))
        span = float(max(self.total_steps - self.warmup_steps, 1))
        frac = tf.clip_by_value((step - self.warmup_steps) / span, 0.0, 1.0)
        cosine = 0.5 * self.peak * (1.0 + tf.cos(math.pi * frac))
        return tf.where(step < self.warmup_steps, warm, cosine)

    def get_config(self):
        return {"peak": self.peak, "total_steps": self.total_steps,
                "warmup_steps": self.warmup_steps}


@keras.saving.register_keras_serializable(package="tfsent")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak` over `warmup_steps`, then linear decay to 0 at
    `total_steps` (`decay=False`: constant after warmup)."""

    def __init__(self, peak, total_steps, warmup_steps=0, decay=True):
        self.peak = float(peak)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.decay = bool(decay)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warm = tf.cast(max(self.warmup_steps, 1), tf.float32)
        lr = self.peak * tf.minimum(1.0, (step + 1.0) / warm) if self.warmup_steps else \
            tf.constant(self.peak)
        if self.decay:
            span = tf.cast(max(self.total_steps - self.warmup_steps, 1), tf.float32)
            frac = tf.clip_by_value((step - self.warmup_steps) / span, 0.0, 1.0)
            lr = tf.where(step < self.warmup_steps, lr, self.peak * (1.0 - frac))
        return lr

    def get_config(self):
        return {"peak": self.peak, "total_steps": self.total_steps,
                "warmup_steps": self.warmup_steps, "decay": self.decay}


def _write_json_atomic(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
    os.replace(tmp, path)


def read_json(path, default=None):
    """Reads a JSON file, or returns `default` if it does not exist."""
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


def sts_dev_score(model, sents1, sents2, gold, batch_size=128, max_seq_length=None,
                  use_head=True):
    """Spearman and Pearson (x100) of cosine vs gold on dev pairs, embedding with
    `model.encode` (a SentenceMethod: export pooling and head)."""
    unique = list(dict.fromkeys(list(sents1) + list(sents2)))
    kwargs = {"pooling": model.dev_pooling} if hasattr(model, "dev_pooling") else {}
    emb = model.encode(unique, batch_size=batch_size, normalize=True,
                       max_seq_length=max_seq_length, use_head=use_head, **kwargs)
    index = {s: i for i, s in enumerate(unique)}
    a = emb[[index[s] for s in sents1]]
    b = emb[[index[s] for s in sents2]]
    cos = np.sum(a * b, axis=1)
    return {"spearman": 100.0 * float(spearmanr(cos, gold).correlation),
            "pearson": 100.0 * float(pearsonr(cos, gold)[0])}


class RunState:
    """Checkpoint + best-model bookkeeping of one run directory."""

    def __init__(self, output_dir, model, optimizer):
        self.output_dir = output_dir
        self.model = model
        self.best_dir = os.path.join(output_dir, "best")
        self.best_json = os.path.join(self.best_dir, "best.json")
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, os.path.join(output_dir, "checkpoints"), max_to_keep=2)

    def restore(self):
        """Restores the latest checkpoint if there is one; returns the step reached."""
        latest = self.manager.latest_checkpoint
        if latest is None:
            return 0
        self.checkpoint.restore(latest).expect_partial()
        return int(self.model.optimizer.iterations.numpy())

    def save_checkpoint(self, step):
        """Writes a checkpoint (TF writes data files first, then the index atomically)."""
        return self.manager.save(checkpoint_number=step)

    def best(self):
        """(score, step) of the best dev evaluation so far, or (None, None)."""
        info = read_json(self.best_json, {})
        return info.get("score"), info.get("step")

    def save_best(self, score, step, extra=None):
        """Saves the model's weights as the new best (atomic replace)."""
        os.makedirs(self.best_dir, exist_ok=True)
        final = os.path.join(self.best_dir, "model.weights.h5")
        tmp = os.path.join(self.best_dir, "model.tmp.weights.h5")
        self.model.save_weights(tmp)
        os.replace(tmp, final)
        _write_json_atomic(self.best_json, dict(extra or {}, score=score, step=step))

    def load_best(self):
        """Loads the best weights into the model; False if there are none."""
        path = os.path.join(self.best_dir, "model.weights.h5")
        if not os.path.exists(path):
            return False
        self.model.load_weights(path)
        return True


class DevEvaluator(keras.callbacks.Callback):
    """Evaluates STS dev Spearman at the end of every Keras epoch (= eval_every steps),
    keeps the best encoder weights, writes a checkpoint, and logs to TensorBoard.

    A divergence guard (`patience_drop`) stops the run when the dev score falls more than
    that many points below the best (SCD's late collapse); the best weights stay intact.
    """

    def __init__(self, state, dev_pairs, writer=None, name="dev", patience_drop=None,
                 history=None, max_seq_length=None):
        super().__init__()
        self.max_seq_length = max_seq_length
        self.state = state
        self.dev_pairs = dev_pairs
        self.writer = writer
        self.name = name
        self.patience_drop = patience_drop
        self.history = history if history is not None else []

    def on_epoch_end(self, epoch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(loss):
            return  # NanGuard reports it; do not let a diverged model become "best"
        scores = sts_dev_score(self.model, *self.dev_pairs, max_seq_length=self.max_seq_length)
        best, best_step = self.state.best()
        improved = best is None or scores["spearman"] > best
        if improved:
            self.state.save_best(scores["spearman"], step, {"pearson": scores["pearson"]})
            best, best_step = scores["spearman"], step
        self.state.save_checkpoint(step)
        self.history.append({"step": step, **scores})
        logging.info("step %d: %s spearman %.2f pearson %.2f (best %.2f at step %d)%s", step,
                     self.name, scores["spearman"], scores["pearson"], best, best_step,
                     " new best" if improved else "")
        if self.writer is not None:
            with self.writer.as_default(step=step):
                tf.summary.scalar(f"{self.name}/spearman", scores["spearman"])
                tf.summary.scalar(f"{self.name}/pearson", scores["pearson"])
                for key, value in (logs or {}).items():
                    tf.summary.scalar(f"train/{key}", value)
            self.writer.flush()
        if self.patience_drop is not None and best - scores["spearman"] > self.patience_drop:
            logging.warning("divergence guard: dev spearman %.2f is %.2f below the best %.2f; "
                            "stopping (the best weights are kept)", scores["spearman"],
                            best - scores["spearman"], best)
            self.model.stop_training = True


class NanGuard(keras.callbacks.Callback):
    """Stops training at the first non-finite loss and says at which step."""

    def __init__(self):
        super().__init__()
        self.failed_step = None

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            self.failed_step = int(self.model.optimizer.iterations.numpy())
            logging.error("loss is %s at step %d: stopping. The best checkpoint and export are "
                          "untouched; rerun with a lower learning_rate to resume from the "
                          "last checkpoint.", loss, self.failed_step)
            self.model.stop_training = True


class Throughput(keras.callbacks.Callback):
    """Measures training examples/s over train batches (evaluation time excluded)."""

    def __init__(self, batch_size):
        super().__init__()
        self.batch_size = batch_size
        self.durations = []  # (seconds, optimizer steps) per train-batch callback
        self._start = None

    def on_train_batch_begin(self, batch, logs=None):
        self._start = (time.perf_counter(), int(self.model.optimizer.iterations.numpy()))

    def on_train_batch_end(self, batch, logs=None):
        if self._start is not None:
            t0, step0 = self._start
            steps = int(self.model.optimizer.iterations.numpy()) - step0
            self.durations.append((time.perf_counter() - t0, steps))

    def examples_per_second(self):
        """Examples/s over the measured calls, the first (tracing/compiling) one excluded.
        With steps_per_execution > 1 one callback covers several optimizer steps."""
        timed = self.durations[1:] if len(self.durations) > 1 else self.durations
        seconds = sum(t for t, _ in timed)
        steps = sum(n for _, n in timed)
        return steps * self.batch_size / seconds if seconds > 0 else 0.0
