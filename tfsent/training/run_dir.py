"""Training machinery shared by all methods: LR schedules, dev scoring, run-directory state
(the Keras callbacks built on them are in `tfsent.callbacks`; selection in
`tfsent.selection`).

Run directory layout (`output_dir`):
  config.json    the run's full config (with "method"); a rerun must match it to resume
  checkpoints/   tf.train.CheckpointManager (model + optimizer + step), every eval_every
                 steps, the last two kept
  start/         the starting encoder's weights + start.json (its dev score)
  best/          weights of the best trained dev score so far + best.json (score, step)
  tb/            TensorBoard logs
  export/<v>/    SavedModel of the exported weights (best, or the start when nothing beat it)
  export_<format>/<v>/  other formats (export_formats)
  encoder/       the trained encoder as a tfsent encoder directory (no head on top)
  .workers/      other workers' private checkpoints under multi-worker training
  metrics.json   dev metrics before training, best and final; steps; examples/s; export
Every file is written to a temporary name, flushed and renamed (`tfsent.fsio`), so an
interrupted run leaves the previous state readable and a rerun of the same command
resumes. `prepare_run_dir` decides, before anything is written, whether a folder holds
a new, a resumable or a finished run, and refuses a folder that is not a tfsent run or
holds a run of another config.
"""

import json
import math
import os
import shutil

import keras
import numpy as np
import tensorflow as tf
from absl import logging
from google.protobuf import text_format
from tensorboard.plugins import projector

from tfsent import fsio
from tfsent.errors import ConfigError
from tfsent.evaluation.geometry import pair_geometry
from tfsent.evaluation.sts import correlations


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
    fsio.write_file_atomic(path, json.dumps(obj, indent=2, sort_keys=True))


def _first_line(error):
    """The first line of an exception's message (TensorFlow's run to many lines)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def read_json(path, default=None):
    """Reads a JSON file, or returns `default` if it does not exist."""
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


def dev_embeddings(model, sentences, batch_size=128, max_seq_length=None, use_head=True):
    """L2-normalised embeddings of `sentences` with `model.encode` (a SentenceMethod: its
    dev pooling and head)."""
    kwargs = {"pooling": model.dev_pooling} if hasattr(model, "dev_pooling") else {}
    return model.encode(list(sentences), batch_size=batch_size, normalize=True,
                        max_seq_length=max_seq_length, use_head=use_head, **kwargs)


def sts_dev_score(model, sents1, sents2, gold, batch_size=128, max_seq_length=None,
                  use_head=True, geometry=False):
    """Spearman and Pearson (x100) of cosine vs gold on dev pairs.

    With `geometry=True` the result also has "alignment" (over pairs scored in the top
    fifth of the gold range), "uniformity" and "random_pair_cosine" (over the distinct
    dev sentences), and "sentences"/"embeddings" (the distinct sentences and their rows).
    """
    unique = list(dict.fromkeys(list(sents1) + list(sents2)))
    emb = dev_embeddings(model, unique, batch_size, max_seq_length, use_head)
    index = {s: i for i, s in enumerate(unique)}
    a = emb[[index[s] for s in sents1]]
    b = emb[[index[s] for s in sents2]]
    cos = np.sum(a * b, axis=1)
    # The evaluator's guarded correlation: NaN (not a scipy warning and garbage) when every
    # cosine is equal, and a NaN score is never "best" (tfsent.callbacks).
    out = correlations(cos, gold)
    if geometry:
        out.update(pair_geometry(a, b, gold, emb), sentences=unique, embeddings=emb)
    return out


def write_projector_snapshot(log_dir, name, sentences, embeddings, max_points=1000):
    """Adds an embedding snapshot for TensorBoard's projector under `log_dir`.

    Writes projector/metadata.tsv (the first `max_points` sentences, one a line),
    projector/NAME.tsv (their vectors) and (re)writes projector_config.pbtxt listing every
    snapshot of the directory. Each file is written to a temporary name and renamed.
    """
    folder = os.path.join(log_dir, "projector")
    os.makedirs(folder, exist_ok=True)
    sentences = list(sentences)[:max_points]
    vectors = np.asarray(embeddings)[:len(sentences)]
    clean = [" ".join(s.split()) or "(empty)" for s in sentences]  # no tabs or newlines
    _write_text_atomic(os.path.join(folder, "metadata.tsv"), "".join(c + "\n" for c in clean))
    _write_text_atomic(os.path.join(folder, f"{name}.tsv"),
                       "".join("\t".join(f"{v:.5g}" for v in row) + "\n" for row in vectors))
    config = projector.ProjectorConfig()
    for file in sorted(f for f in os.listdir(folder) if f.endswith(".tsv")):
        if file == "metadata.tsv":
            continue
        entry = config.embeddings.add()
        entry.tensor_name = file[:-4]
        entry.tensor_path = os.path.join("projector", file)
        entry.metadata_path = os.path.join("projector", "metadata.tsv")
    # What projector.visualize_embeddings writes, but atomically.
    _write_text_atomic(os.path.join(log_dir, "projector_config.pbtxt"),
                       text_format.MessageToString(config))


def _write_text_atomic(path, text):
    fsio.write_file_atomic(path, text.encode("utf-8"))


class RunState:
    """Checkpoint + best-model bookkeeping of one run directory.

    Under multi-worker training every worker saves (saving may run collectives), but only
    the chief into `output_dir`; the others pass `write_dir` (a private directory) and
    restore from the chief's checkpoints, so a restarted job resumes from one state.
    """

    def __init__(self, output_dir, model, optimizer, write_dir=None):
        self.output_dir = output_dir
        self.write_dir = write_dir or output_dir
        self.model = model
        self.best_dir = os.path.join(self.write_dir, "best")
        self.best_json = os.path.join(self.best_dir, "best.json")
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, os.path.join(self.write_dir, "checkpoints"), max_to_keep=2)

    def restore(self):
        """Restores the latest checkpoint (the chief's) if there is one; returns the step."""
        latest = tf.train.latest_checkpoint(os.path.join(self.output_dir, "checkpoints"))
        if latest is None:
            return 0
        try:
            self.checkpoint.restore(latest).expect_partial()
        except (tf.errors.OpError, ValueError, AssertionError) as e:
            raise ConfigError(
                f"cannot resume from checkpoint {latest}: it does not fit this model "
                f"({_first_line(e)}). The run directory was written by another model or "
                f"config: choose a new --output_dir, or pass --overwrite.") from None
        if self.write_dir != self.output_dir:  # start from the chief's best score too
            chief_best = read_json(os.path.join(self.output_dir, "best", "best.json"))
            if chief_best is not None:
                os.makedirs(self.best_dir, exist_ok=True)
                _write_json_atomic(self.best_json, chief_best)
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
        fsio.commit_file(tmp, final)
        _write_json_atomic(self.best_json, dict(extra or {}, score=score, step=step))

    @property
    def start_weights(self):
        """Path of the starting encoder's weights (written once, before training)."""
        return os.path.join(self.write_dir, "start", "model.weights.h5")

    def save_start(self, score):
        """Keeps the weights the run starts from (the first candidate of dev selection)."""
        folder = os.path.dirname(self.start_weights)
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, "model.tmp.weights.h5")
        self.model.save_weights(tmp)
        fsio.commit_file(tmp, self.start_weights)
        _write_json_atomic(os.path.join(folder, "start.json"), {"score": score, "step": 0})

    def load_start(self):
        """Loads the starting weights into the model; False if there are none."""
        if not os.path.exists(self.start_weights):
            return False
        self.model.load_weights(self.start_weights)
        return True

    def load_best(self):
        """Loads the best weights into the model; False if there are none."""
        path = os.path.join(self.best_dir, "model.weights.h5")
        if not os.path.exists(path):
            return False
        self.model.load_weights(path)
        return True


# --------------------------------------------------------------------------------------
# The run directory: whose it is, and whether a run in it is new, resumed or finished
# --------------------------------------------------------------------------------------

RUN_CONFIG_FILE = "config.json"
# What a run writes inside its output_dir (`--overwrite` removes exactly these).
# (`export_<format>/` folders of other export formats are a run's too.)
RUN_ENTRIES = ("checkpoints", "best", "start", "tb", "export", "encoder", ".workers",
               "metrics.json", RUN_CONFIG_FILE)
# Fields that change what a run logs or writes after training, not what it trains: a
# resumed run may change them.
RESUME_FREE_FIELDS = frozenset({"projector_every", "projector_points", "test_tasks",
                                "report_geometry", "export_formats", "tpu"})
# The knobs a run stopped by the divergence guard or a non-finite loss is resumed with
# (its error message says so): an unfinished run may change them, logged.
RECOVERY_FIELDS = frozenset({"learning_rate", "max_grad_norm", "clip_norm", "loss_scale",
                             "divergence_drop", "collapse_cosine_rise",
                             "collapse_uniformity_ratio"})


def _json_normal(value):
    return json.loads(json.dumps(value))


def read_run_config(output_dir):
    """The config.json of a tfsent run in `output_dir`, or None when there is none. A
    config.json that tfsent did not write (no "method" and "train_data", e.g. a Hugging
    Face checkpoint's) raises ConfigError: that folder is not a run directory."""
    path = os.path.join(output_dir, RUN_CONFIG_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"--output_dir={output_dir}: {path} is not a tfsent run config "
                          f"({e}); choose a new folder") from None
    if not isinstance(stored, dict) or "method" not in stored or "train_data" not in stored:
        raise ConfigError(f"--output_dir={output_dir} holds a config.json that tfsent did not "
                          f"write (a model checkpoint's?); a run would overwrite it: choose "
                          f"a new folder")
    return stored


def config_differences(stored, config):
    """[(field, stored value, new value)] of the fields that change a run's result
    (all but RESUME_FREE_FIELDS; fields the stored config lacks are not compared)."""
    new = _json_normal(config)
    return [(k, stored[k], new[k]) for k in sorted(new)
            if k in stored and k not in RESUME_FREE_FIELDS and stored[k] != new[k]]


def prepare_run_dir(output_dir, config, overwrite=False):
    """Decides what a run in `output_dir` does before anything is written there.

    Returns "new" (empty or missing folder), "resume" (a run with the same config that
    has not finished; its recovery knobs, RECOVERY_FIELDS such as learning_rate, may
    differ) or "finished" (the same config, already exported: nothing to do).
    Raises ConfigError when the folder is not empty and holds no tfsent run, or holds a
    run whose config differs (the message lists the fields and the ways on). With
    `overwrite`, an earlier tfsent run's own files (RUN_ENTRIES) are removed first and
    the run is new; a folder that is not a tfsent run is refused even then."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ConfigError(f"--output_dir={output_dir} exists and is not a folder")
    # `.workers` may appear first: other workers of a multi-worker run create it.
    if not os.path.isdir(output_dir) or not set(os.listdir(output_dir)) - {".workers"}:
        return "new"
    stored = read_run_config(output_dir)
    if stored is None:
        raise ConfigError(f"--output_dir={output_dir} is not empty and holds no tfsent run "
                          f"(no config.json); a run writes checkpoints, exports and "
                          f"metrics there: choose a new or empty folder")
    if overwrite:
        formats = [n for n in os.listdir(output_dir) if n.startswith("export_")]
        for name in (*RUN_ENTRIES, *formats):
            path = os.path.join(output_dir, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            elif os.path.lexists(path):
                os.remove(path)
        logging.warning("--overwrite: removed the earlier run in %s", output_dir)
        return "new"
    method = config.get("method")
    differences = config_differences(stored, dict(config, method=method))
    finished = run_finished(output_dir)
    recovery = [d for d in differences if d[0] in RECOVERY_FIELDS]
    if recovery and len(recovery) == len(differences) and not finished:
        logging.warning("resuming the run in %s with changed %s", output_dir,
                        ", ".join(f"{k} ({old!r} -> {new!r})" for k, old, new in recovery))
        return "resume"
    if differences:
        listed = "\n".join(f"  {k}: {old!r} in the folder's run, {new!r} now"
                           for k, old, new in differences)
        raise ConfigError(
            f"--output_dir={output_dir} holds a run with another config:\n{listed}\n"
            f"Rerun with the folder's config to resume it, choose a new --output_dir, or "
            f"pass --overwrite to discard that run.")
    return "finished" if finished else "resume"


def run_finished(output_dir):
    """True if the run in `output_dir` has exported (its metrics.json names an export
    that exists)."""
    metrics = read_json(os.path.join(output_dir, "metrics.json"), {}) or {}
    return bool(metrics.get("export")) and os.path.isdir(os.path.join(output_dir, "export"))
