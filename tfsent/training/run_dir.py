"""The run directory: its files, `RunState` (checkpoints, the start and best weights) and
whether a folder holds a new, a resumable or a finished run (`prepare_run_dir`).

Run directory layout (`output_dir`):
  config.json    the run's full config (with "method"); a rerun must match it to resume
  checkpoints/   tf.train.CheckpointManager (model + optimizer + step), every eval_every
                 steps, the last one kept (a new one is complete before the old one goes)
  start/         the starting encoder's weights (+ export head) + start.json (dev score)
  best/          the same parts at the best trained dev score so far + best.json (score,
                 step); start/ and best/ hold what an export is made of, never the
                 optimizer or frozen parts
  tb/            TensorBoard logs
  export/<v>/    SavedModel of the exported weights (best, or the start when nothing beat it)
  export_<format>/<v>/  other formats (export_formats)
  encoder/       the trained encoder as a tfsent encoder directory (no head on top)
  .workers/      other workers' private checkpoints under multi-worker training
  metrics.json   dev metrics before training, best and final; steps; examples/s; export
  dev_first_stage.json  (cross-encoder runs) the retriever's dev ranking, searched once
Every file is written to a temporary name, flushed and renamed (`tfsent.fsio`), so an
interrupted run leaves the previous state readable and a rerun of the same command
resumes. `prepare_run_dir` decides, before anything is written, whether a folder holds
a new, a resumable or a finished run, and refuses a folder that is not a tfsent run or
holds a run of another config.
"""

import json
import os
import shutil

import numpy as np
import tensorflow as tf
from absl import logging

from tfsent import fsio
from tfsent.encoders.lora import merge_lora
from tfsent.errors import ConfigError


ENCODER_WEIGHTS = "encoder.weights.h5"  # start/ and best/: the encoder's weights
HEAD_WEIGHTS = "head.npz"  # ... and the method's export head's, when it has one
LEGACY_MODEL_WEIGHTS = "model.weights.h5"  # start/ and best/ of runs written before


def write_json_atomic(path, obj):
    """Writes `obj` as indented JSON to `path` atomically (`tfsent.fsio`)."""
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
        # What this reaches: every variable the model tracks (frozen ones too: LoRA's
        # base, CMLM-CSE's extractor), the optimizer's (the trainable variables, their
        # slots, the step), and the dropout streams' positions (`dropout_streams`, so
        # that a resumed run draws the masks an uninterrupted one draws).
        # (optimizer None: a model rebuilt to read its weights, `published.py`)
        parts = {} if optimizer is None else {"optimizer": optimizer}
        self.checkpoint = tf.train.Checkpoint(model=model, **parts,
                                              dropout_streams=dropout_streams(model))
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, os.path.join(self.write_dir, "checkpoints"), max_to_keep=1)

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
                write_json_atomic(self.best_json, chief_best)
        return int(self.model.optimizer.iterations.numpy())

    def discard_best(self):
        """Removes best/ (a new run in a folder whose earlier attempt stopped before its
        first checkpoint: its best must not compete with this run's). best.json goes
        first, so an interruption leaves no best rather than a half-removed one."""
        if os.path.lexists(self.best_json):
            os.remove(self.best_json)
        if os.path.isdir(self.best_dir) and not os.path.islink(self.best_dir):
            shutil.rmtree(self.best_dir)
            logging.info("removed best/ of an earlier attempt in %s (this run starts at "
                         "step 0)", self.write_dir)

    def save_checkpoint(self, step):
        """Writes a checkpoint (TF writes data files first, then the index atomically)."""
        return self.manager.save(checkpoint_number=step)

    def best(self):
        """(score, step) of the best dev evaluation so far, or (None, None)."""
        info = read_json(self.best_json, {})
        return info.get("score"), info.get("step")

    def save_best(self, score, step, extra=None):
        """Saves the exported part's weights as the new best (atomic replace)."""
        self._save_exported(self.best_dir)
        write_json_atomic(self.best_json, dict(extra or {}, score=score, step=step))

    @property
    def start_weights(self):
        """Path of the starting encoder's weights (written once, before training)."""
        return os.path.join(self.write_dir, "start", ENCODER_WEIGHTS)

    def save_start(self, score):
        """Keeps the weights the run starts from (the first candidate of dev selection)."""
        folder = os.path.dirname(self.start_weights)
        self._save_exported(folder)
        write_json_atomic(os.path.join(folder, "start.json"), {"score": score, "step": 0})

    def load_start(self):
        """Loads the starting weights into the model; False if there are none."""
        return self._load_exported(os.path.dirname(self.start_weights))

    def load_best(self):
        """Loads the best weights into the model; False if there are none."""
        return self._load_exported(self.best_dir)

    # start/ and best/ hold what an export is made of, not the whole training model: the
    # encoder (ENCODER_WEIGHTS) and the method's export head (HEAD_WEIGHTS), never the
    # optimizer's slots or frozen parts (CMLM-CSE's extractor, a distillation teacher).
    # Resuming reads checkpoints/ alone.

    def _exported_parts(self):
        return self.model.encoder, getattr(self.model, "export_head", None)

    def _save_exported(self, folder):
        os.makedirs(folder, exist_ok=True)
        encoder, head = self._exported_parts()
        tmp = os.path.join(folder, "encoder.tmp.weights.h5")
        # LoRA: the merged kernels in float32 (keras' own LoRA save rounds them to the
        # compute dtype); loading them back into the adapted encoder zeroes its adapters.
        merge_lora(encoder).save_weights(tmp)
        fsio.commit_file(tmp, os.path.join(folder, ENCODER_WEIGHTS))
        if head is not None:
            tmp = os.path.join(folder, "head.tmp.npz")
            with open(tmp, "wb") as f:
                np.savez(f, *[v.numpy() for v in head.weights])
            fsio.commit_file(tmp, os.path.join(folder, HEAD_WEIGHTS))

    def _load_exported(self, folder):
        legacy = os.path.join(folder, LEGACY_MODEL_WEIGHTS)  # the whole model (before 0.x)
        if not os.path.exists(os.path.join(folder, ENCODER_WEIGHTS)):
            if os.path.exists(legacy):
                self.model.load_weights(legacy)
                return True
            return False
        encoder, head = self._exported_parts()
        encoder.load_weights(os.path.join(folder, ENCODER_WEIGHTS))
        if head is not None:
            path = os.path.join(folder, HEAD_WEIGHTS)
            with np.load(path) as stored:
                arrays = [stored[f"arr_{i}"] for i in range(len(stored.files))]
            if len(arrays) != len(head.weights):
                raise ConfigError(f"{path} holds {len(arrays)} head arrays, the model's "
                                  f"export head has {len(head.weights)}")
            for variable, value in zip(head.weights, arrays):
                variable.assign(value)
        return True


def dropout_streams(model):
    """The state variables (tf.Variables) of every keras SeedGenerator inside `model`."""
    states, seen = [], set()
    for layer in model._flatten_layers(include_self=True):
        for generator in getattr(layer, "_seed_generators", ()):
            state = getattr(generator.state, "value", generator.state)
            if id(state) not in seen:
                seen.add(id(state))
                states.append(state)
    return states


def folder_bytes(path):
    """Bytes of the files under `path` (a file's own size for a file; 0 when missing)."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files
                     if not os.path.islink(os.path.join(root, f)))
    return total


def _megabytes(n):
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


# What each part of a run folder is for, in the size line a finished run prints.
_PURPOSE = {"checkpoints": "to resume or train on", "start": "dev selection",
            "best": "dev selection", "export": "the served model",
            "encoder": "to publish or fine-tune",
            "dev_first_stage.json": "the dev candidates"}


def size_summary(output_dir):
    """One line: the run folder's size and what its large parts are for."""
    parts = []
    for name in sorted(os.listdir(output_dir)):
        size = folder_bytes(os.path.join(output_dir, name))
        if size >= 1e6:
            purpose = _PURPOSE.get(name, "export" if name.startswith("export_") else "")
            slash = "/" if os.path.isdir(os.path.join(output_dir, name)) else ""
            parts.append((size, f"{name}{slash} {_megabytes(size)}" +
                          (f" ({purpose})" if purpose else "")))
    total = folder_bytes(output_dir)
    detail = ", ".join(text for _, text in sorted(parts, reverse=True))
    return f"run folder: {_megabytes(total)} in {output_dir}" + (f": {detail}" if detail else "")


# --------------------------------------------------------------------------------------
# The run directory: whose it is, and whether a run in it is new, resumed or finished
# --------------------------------------------------------------------------------------

RUN_CONFIG_FILE = "config.json"
# A cross-encoder run's dev candidates (tfsent.training.rerank_dev: searched once per run).
FIRST_STAGE_FILE = "dev_first_stage.json"
DEV_POOL_FILE = "dev_pool.json"  # a retrieval run's fixed dev candidate pool
# What a run writes inside its output_dir (`--overwrite` removes exactly these).
# (`export_<format>/` folders of other export formats are a run's too.)
RUN_ENTRIES = ("checkpoints", "best", "start", "tb", "export", "encoder", ".workers",
               "metrics.json", RUN_CONFIG_FILE, FIRST_STAGE_FILE, DEV_POOL_FILE)
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

    Returns "new" (empty or missing folder, or one holding only the config.json of an
    attempt that stopped before training), "resume" (a run with the same config that
    has not finished; its recovery knobs, RECOVERY_FIELDS such as learning_rate, may
    differ), "finished" (the same config, already exported: nothing to do) or, with
    `overwrite` and an earlier run there, "overwrite": the caller removes that run's
    files (`discard_run`) once the new run can start. Removes nothing itself.
    Raises ConfigError when the folder is not empty and holds no tfsent run, or holds a
    run whose config differs (the message lists the fields and the ways on); a folder
    that is not a tfsent run is refused even with `overwrite`."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ConfigError(f"--output_dir={output_dir} exists and is not a folder")
    # `.workers` may appear first: other workers of a multi-worker run create it; a run
    # killed while writing its first config.json leaves that file's temporary sibling.
    entries = [n for n in os.listdir(output_dir) if n != ".workers"
               and not fsio.is_temporary_file(n)] if os.path.isdir(output_dir) else []
    if not entries:
        return "new"
    stored = read_run_config(output_dir)
    if stored is None:
        raise ConfigError(f"--output_dir={output_dir} is not empty and holds no tfsent run "
                          f"(no config.json); a run writes checkpoints, exports and "
                          f"metrics there: choose a new or empty folder")
    method = config.get("method")
    differences = config_differences(stored, dict(config, method=method))
    if differences and entries == [RUN_CONFIG_FILE]:
        logging.info("%s holds only the config.json of an attempt (another config) that "
                     "stopped before training; the run starts there anew", output_dir)
        return "new"
    if overwrite:
        return "overwrite"
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


def discard_run(output_dir):
    """Removes an earlier run's own files from `output_dir` (--overwrite): its RUN_ENTRIES
    and export_FORMAT folders, nothing else."""
    from tfsent.formats import FORMATS
    formats = [n for n in os.listdir(output_dir)
               if n.startswith("export_") and n[len("export_"):] in FORMATS]
    for name in (*RUN_ENTRIES, *formats):
        path = os.path.join(output_dir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.remove(path)
    logging.warning("--overwrite: removed the earlier run in %s", output_dir)


def run_finished(output_dir):
    """True if the run in `output_dir` has exported (its metrics.json names an export
    that exists)."""
    metrics = read_json(os.path.join(output_dir, "metrics.json"), {}) or {}
    return bool(metrics.get("export")) and os.path.isdir(os.path.join(output_dir, "export"))
