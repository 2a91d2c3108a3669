"""Keras callbacks: a dev-score metric that standard callbacks can monitor, and the pieces
`python -m tfsent.train` composes around it.

In your own Keras code, put `STSDevEvaluation` before the callbacks that read its logs:

    dev = tfsent.training.callbacks.STSDevEvaluation(sents1, sents2, scores)
    model.fit(..., callbacks=[dev, keras.callbacks.ModelCheckpoint(
        "best.keras", monitor="val_spearman", mode="max", save_best_only=True),
        keras.callbacks.EarlyStopping(monitor="val_spearman", mode="max", patience=3)])

Keras hands every callback the same epoch `logs` dict, in list order, so the dev scores
written by `STSDevEvaluation` reach `ModelCheckpoint`, `EarlyStopping`, `TensorBoard` and
`History`. `RetrievalDevEvaluation` does the same with retrieval measures on a BEIR split
(`monitor="val_ndcg@10", mode="max"`). The CLI uses, in this order: `NanGuard`, `Throughput`, `STSDevEvaluation`,
`BestEncoderKeeper` (best weights, the log line), `RunCheckpoint` (resume points),
`DevTensorBoard`, `DivergenceGuard`, `EarlyDevCheck`, and Keras' own `TensorBoard`.
"""

import math
import sys
import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from tfsent.data.beir import RetrievalSplit
from tfsent.errors import InputError
from tfsent.evaluation import RETRIEVAL_MEASURES
from tfsent.evaluation.retrieval import evaluate_retrieval, read_task_split
from tfsent.training.dev_scoring import dev_embeddings, sts_dev_score, write_projector_snapshot
from tfsent.training.selection import BestEncoderKeeper  # noqa: F401  (the CLI's keeper)
from tfsent.training.selection import finite as _finite, step_of as _step

GEOMETRY_KEYS = ("alignment", "uniformity", "random_pair_cosine")


class DevEvaluation(keras.callbacks.Callback):
    """An evaluation at every epoch end whose figures go into the epoch's logs: subclasses
    give `evaluate()` (-> report), `log_keys(report)` and set `skip_when`."""

    def on_epoch_end(self, epoch, logs=None):
        if self.skip_when is not None and self.skip_when():
            self.last_report = None
            return
        report = self.evaluate()
        if logs is not None:
            logs.update(self.log_keys(report))


@keras.saving.register_keras_serializable(package="tfsent")
class STSDevEvaluation(DevEvaluation):
    """Scores scored sentence pairs (STS dev) at the end of every epoch and writes
    `logs["val_spearman"]`, `val_pearson`, `val_alignment`, `val_uniformity` and
    `val_random_pair_cosine` (prefix `prefix`), so `ModelCheckpoint(monitor="val_spearman",
    mode="max")`, `EarlyStopping` and `TensorBoard` work on the dev score.

    Correlations are x100 and NaN when every cosine is equal (a collapsed model); NaN is
    never "better" for Keras' monitors. The model is a tfsent method (its dev pooling and
    export head) or anything with `encode(sentences, normalize=True, ...)`.

    Args:
        sentences1, sentences2, scores: the pairs and their gold scores.
        prefix: log-key prefix ("val").
        batch_size, max_seq_length: encoding settings (max_seq_length None: the model's).
        use_head: apply the method's export head (CLSR) before scoring.
        skip_when: optional callable; when it returns True the epoch is not evaluated (the
            CLI skips evaluating a model whose training diverged).
    """

    def __init__(self, sentences1, sentences2, scores, prefix="val", batch_size=128,
                 max_seq_length=None, use_head=True, skip_when=None):
        super().__init__()
        if not (len(sentences1) == len(sentences2) == len(scores)):
            raise InputError(f"STSDevEvaluation: {len(sentences1)} / {len(sentences2)} "
                             f"sentences for {len(scores)} scores")
        self.sentences1 = list(sentences1)
        self.sentences2 = list(sentences2)
        self.scores = np.asarray(scores, np.float64)
        self.prefix = prefix
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.use_head = use_head
        self.skip_when = skip_when
        self.last_report = None
        self.last_sentences = None
        self.last_embeddings = None

    def evaluate(self, model=None):
        """The dev report of `model` (default: the callback's model): spearman, pearson
        and the geometry keys; keeps the distinct sentences and their embeddings."""
        report = sts_dev_score(model or self.model, self.sentences1, self.sentences2,
                               self.scores, batch_size=self.batch_size,
                               max_seq_length=self.max_seq_length, use_head=self.use_head,
                               geometry=True)
        self.last_sentences = report.pop("sentences")
        self.last_embeddings = report.pop("embeddings")
        self.last_report = report
        return report

    def log_keys(self, report):
        """`report` as `{prefix}_{key}` log entries."""
        return {f"{self.prefix}_{key}": float(value) for key, value in report.items()}

    def get_config(self):
        return {"sentences1": self.sentences1, "sentences2": self.sentences2,
                "scores": self.scores.tolist(), "prefix": self.prefix,
                "batch_size": self.batch_size, "max_seq_length": self.max_seq_length,
                "use_head": self.use_head}


class DevEncoder:
    """`encode(sentences, batch_size, normalize, max_seq_length)` of a model as the dev
    evaluations see it (`dev_scoring.dev_embeddings`: its dev pooling and head)."""

    def __init__(self, model, use_head):
        self.model = model
        self.use_head = use_head

    def encode(self, sentences, batch_size=128, normalize=True, max_seq_length=None):
        """L2-normalised embeddings (normalize is always on: cosine search needs no more)."""
        del normalize
        return dev_embeddings(self.model, sentences, batch_size, max_seq_length,
                              self.use_head)


@keras.saving.register_keras_serializable(package="tfsent")
class RetrievalDevEvaluation(DevEvaluation):
    """Scores retrieval on a BEIR split at the end of every epoch and writes
    `logs["val_ndcg@10"]`, `val_mrr@10`, `val_recall@10`, `val_recall@100` and
    `val_map@100` (x100, prefix `prefix`), so `ModelCheckpoint(monitor="val_ndcg@10",
    mode="max")` and `EarlyStopping` work on it (give mode="max": Keras guesses "min" for
    these names).

    The whole corpus is re-encoded at each evaluation (the encoder has changed); the log
    says how long encoding and search took. Put it before the callbacks that read its logs.

    Args:
        split_or_dir: a `tfsent.data.beir.RetrievalSplit`, a BEIR folder, or
            `beir:DIR[:SPLIT]`.
        split: the split read from a folder (default "dev"; a `beir:DIR:SPLIT` name's
            own split wins).
        prefix: log-key prefix ("val").
        batch_size, max_seq_length: encoding settings (max_seq_length None: the model's).
        use_head: apply the method's export head (CLSR) before scoring.
        query_prompt, document_prompt: text put before each query / document.
        skip_when: optional callable; when it returns True the epoch is not evaluated.
        verbose: 1 shows a progress bar over the corpus while it is encoded (the training
            command's choice: an evaluation of a large corpus takes minutes), 0 none.
    """

    def __init__(self, split_or_dir, split="dev", prefix="val", batch_size=128,
                 max_seq_length=None, use_head=True, query_prompt="", document_prompt="",
                 skip_when=None, verbose=0):
        super().__init__()
        if not isinstance(split_or_dir, RetrievalSplit):
            split_or_dir = read_task_split(str(split_or_dir), default_split=split)
        self.split = split_or_dir
        self.prefix = prefix
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.use_head = use_head
        self.query_prompt = query_prompt
        self.document_prompt = document_prompt
        self.skip_when = skip_when
        self.verbose = verbose
        self.last_report = None

    def evaluate(self, model=None):
        """The retrieval report of `model` (default: the callback's model): the mean
        measures (x100) and "per_query"."""
        start = time.perf_counter()
        report = evaluate_retrieval(DevEncoder(model or self.model, self.use_head),
                                    self.split, batch_size=self.batch_size,
                                    max_seq_length=self.max_seq_length,
                                    query_prompt=self.query_prompt,
                                    document_prompt=self.document_prompt,
                                    verbose=self.verbose)
        logging.info("retrieval dev (%s, %s: %d queries, %d documents): nDCG@10 %.2f, "
                     "MRR@10 %.2f in %.1f s (the corpus re-encoded)", self.split.directory,
                     self.split.split, report["queries"], report["documents"],
                     report["ndcg@10"], report["mrr@10"], time.perf_counter() - start)
        self.last_report = report
        return report

    def log_keys(self, report):
        """The report's mean measures as `{prefix}_{measure}` log entries."""
        return {f"{self.prefix}_{m}": float(report[m]) for m in RETRIEVAL_MEASURES}

    def get_config(self):
        return {"split_or_dir": self.split.directory, "split": self.split.split,
                "prefix": self.prefix, "batch_size": self.batch_size,
                "max_seq_length": self.max_seq_length, "use_head": self.use_head,
                "query_prompt": self.query_prompt, "document_prompt": self.document_prompt,
                "verbose": self.verbose}


class RunCheckpoint(keras.callbacks.Callback):
    """Writes a resume checkpoint (model + optimizer + step) at the end of every epoch,
    unless `skip_when()` (training diverged: no checkpoint of exploded weights), after
    `before_save()` (what a resumed run reads back with it). Only at steps that are a
    multiple of `every` (the epoch length): a resumed run restarts at an epoch boundary
    (an epoch cut short by an early stop, `EarlyDevCheck`, is not one)."""

    def __init__(self, state, skip_when=None, before_save=None, every=1):
        super().__init__()
        self.state = state
        self.skip_when = skip_when
        self.before_save = before_save  # e.g. writes metrics.json (its dev history)
        self.every = every

    def on_epoch_end(self, epoch, logs=None):
        if self.skip_when is not None and self.skip_when():
            return
        step = _step(self.model)
        if step % self.every:
            logging.info("no checkpoint at step %d: not a multiple of %d (an epoch cut "
                         "short); a rerun resumes from the last one", step, self.every)
            return
        if self.before_save is not None:
            self.before_save()
        self.state.save_checkpoint(step)


class DevTensorBoard(keras.callbacks.Callback):
    """Writes NAME/spearman, NAME/pearson and the geometry scalars of every evaluation, the
    epoch's training logs as train/*, and a projector snapshot of the dev sentences at the
    first evaluation and every `projector_every` after it (0: none)."""

    def __init__(self, writer, evaluation, name="dev", log_dir=None, projector_every=5,
                 projector_points=1000):
        super().__init__()
        self.writer = writer
        self.evaluation = evaluation
        self.name = name
        self.log_dir = log_dir
        self.projector_every = projector_every
        self.projector_points = projector_points
        self.evaluations = 0

    def write(self, report, step, logs=None):
        """Writes one evaluation's scalars (and the training logs) at `step`."""
        # record_if(True): Keras' TensorBoard callback leaves a record_if(step %
        # update_freq == 0) context open around callbacks; dev scalars always go in.
        with self.writer.as_default(step=step), tf.summary.record_if(True):
            for key, value in report.items():
                if isinstance(value, (int, float)):  # not a retrieval report's per_query
                    tf.summary.scalar(f"{self.name}/{key}", value)
            for key, value in (logs or {}).items():
                if not key.startswith(self.evaluation.prefix + "_"):
                    tf.summary.scalar(f"train/{key}", value)
        self.writer.flush()
        if (self.log_dir and self.projector_every
                and getattr(self.evaluation, "last_sentences", None) is not None
                and self.evaluations % self.projector_every == 0):
            write_projector_snapshot(self.log_dir, f"{self.name}_step_{step}",
                                     self.evaluation.last_sentences,
                                     self.evaluation.last_embeddings, self.projector_points)
        self.evaluations += 1

    def on_epoch_end(self, epoch, logs=None):
        if self.evaluation.last_report is not None:
            self.write(self.evaluation.last_report, _step(self.model), logs)


class DivergenceGuard(keras.callbacks.Callback):
    """Stops training (the best weights stay) when a dev evaluation shows divergence:
      - the score is NaN (every cosine equal);
      - it is more than `max_drop` points below the best so far, the starting score
        included (so a run that only gets worse from step 0 is caught too);
      - the collapse signature: the mean random-pair cosine has risen more than
        `collapse_cosine_rise` above its starting value, or the uniformity has lost more
        than `collapse_uniformity_ratio` of its starting magnitude (only checked when the
        start is spread out, uniformity < -1).
    0 / None turns a criterion off; `monitor` is the report's score ("spearman", or
    "ndcg@10" for retrieval, whose reports have no geometry: only the first two apply).
    `reason` says why it stopped."""

    def __init__(self, evaluation, start=None, max_drop=None, collapse_cosine_rise=None,
                 collapse_uniformity_ratio=None, monitor="spearman"):
        super().__init__()
        self.evaluation = evaluation
        self.start = start or {}
        self.max_drop = max_drop
        self.collapse_cosine_rise = collapse_cosine_rise
        self.collapse_uniformity_ratio = collapse_uniformity_ratio
        self.monitor = monitor
        self.best = self.start.get(monitor)
        self.best = self.best if _finite(self.best) else None
        self.reason = None
        self.stopped_step = None

    def remember(self, history):
        """Takes the best of earlier evaluations (a resumed run's dev history, entries of
        `{monitor: score}`) as the best so far."""
        for entry in history:
            score = entry.get(self.monitor)
            if _finite(score) and (self.best is None or score > self.best):
                self.best = score

    def check(self, report, step):
        """Returns the reason to stop at this evaluation, or None (and updates the best)."""
        score = report.get(self.monitor)
        reason = None
        if not _finite(score):
            reason = "the dev score is NaN (every cosine equal: collapsed)"
        elif self.max_drop and self.best is not None and self.best - score > self.max_drop:
            reason = (f"dev {self.monitor} {score:.2f} is {self.best - score:.2f} below the best "
                      f"{self.best:.2f} (limit divergence_drop={self.max_drop:g})")
        else:
            rpc0, rpc = self.start.get("random_pair_cosine"), report.get("random_pair_cosine")
            uni0, uni = self.start.get("uniformity"), report.get("uniformity")
            if (self.collapse_cosine_rise and _finite(rpc0) and _finite(rpc)
                    and rpc - rpc0 > self.collapse_cosine_rise):
                reason = (f"collapse: random-pair cosine {rpc:.3f} rose {rpc - rpc0:.3f} above "
                          f"its start {rpc0:.3f} (limit collapse_cosine_rise="
                          f"{self.collapse_cosine_rise:g})")
            elif (self.collapse_uniformity_ratio and _finite(uni0) and _finite(uni)
                  and uni0 < -1.0 and uni > uni0 * (1.0 - self.collapse_uniformity_ratio)):
                reason = (f"collapse: uniformity {uni:.3f} lost more than "
                          f"{100 * self.collapse_uniformity_ratio:.0f}% of its start "
                          f"{uni0:.3f} (limit collapse_uniformity_ratio="
                          f"{self.collapse_uniformity_ratio:g})")
        if reason is None:
            if _finite(score) and (self.best is None or score > self.best):
                self.best = score
            return None
        return reason

    def stop_if_diverged(self, report, step):
        """`check`, and if it fails: log, stop training, remember the reason."""
        reason = self.check(report, step)
        if reason is not None:
            self.reason, self.stopped_step = reason, step
            logging.warning("divergence guard at step %d: %s; stopping (the best weights "
                            "are kept)", step, reason)
            self.model.stop_training = True
        return reason

    def on_epoch_end(self, epoch, logs=None):
        if self.evaluation.last_report is not None and self.reason is None:
            self.stop_if_diverged(self.evaluation.last_report, _step(self.model))


def end_progress_line():
    """Ends the progress bar's line (Keras' progbar writes to stdout without a newline
    until its epoch ends), so that a log line written mid-epoch starts on a line of its
    own instead of being glued onto the bar."""
    sys.stdout.write("\n")
    sys.stdout.flush()


class EarlyDevCheck(keras.callbacks.Callback):
    """A dev evaluation before the first epoch ends (at optimizer step `at_step`), so a
    collapse in a short run's first steps is seen and stopped early: the evaluation goes
    to the keeper (it may become the best), TensorBoard and the divergence guard."""

    def __init__(self, at_step, evaluation, keeper=None, board=None, guard=None,
                 skip_when=None):
        super().__init__()
        self.at_step = at_step
        self.evaluation = evaluation
        self.keeper = keeper
        self.board = board
        self.guard = guard
        self.skip_when = skip_when
        self.done = False

    def on_train_batch_end(self, batch, logs=None):
        if self.done or not self.at_step:
            return
        step = _step(self.model)
        if step < self.at_step:
            return
        self.done = True
        if self.skip_when is not None and self.skip_when():
            return
        end_progress_line()
        logging.info("early dev evaluation at step %d", step)
        report = self.evaluation.evaluate()
        if self.keeper is not None:
            self.keeper.consider(report, step)
        if self.board is not None:
            self.board.write(report, step)
        if self.guard is not None:
            self.guard.stop_if_diverged(report, step)
        self.evaluation.last_report = None  # the epoch end evaluates afresh


class NanGuard(keras.callbacks.Callback):
    """Stops training at the first non-finite loss, or when the step's gradient norm (the
    `grad_norm` log of `SentenceMethod.train_step`: that step's own value) is non-finite or
    above `max_grad_norm` (exploding gradients; 0 turns the threshold off), and says at
    which step. `failed_step` and `reason` tell the caller what happened.

    With a `LossScaleOptimizer` (mixed_float16) a non-finite gradient norm with a finite
    loss is the optimizer's routine overflow step (update skipped, loss scale halved): it is
    counted, not a failure, unless it happens with the loss scale already below 1 (the
    gradients are then non-finite without any scaling)."""

    def __init__(self, max_grad_norm=0.0):
        super().__init__()
        self.max_grad_norm = max_grad_norm
        self.failed_step = None
        self.reason = None
        self.overflow_steps = 0

    def failed(self):
        """True once the guard has fired."""
        return self.failed_step is not None

    def _loss_scale(self):
        scale = getattr(self.model.optimizer, "dynamic_scale", None)
        return None if scale is None else float(keras.ops.convert_to_numpy(scale))

    def on_train_batch_end(self, batch, logs=None):
        if self.failed_step is not None:
            return
        logs = logs or {}
        loss, norm = logs.get("loss"), logs.get("grad_norm")
        reason = None
        if loss is not None and not math.isfinite(float(loss)):
            reason = f"the loss became non-finite ({float(loss)})"
        elif norm is not None and not math.isfinite(float(norm)):
            scale = self._loss_scale()
            if scale is not None and scale >= 1.0:
                self.overflow_steps += 1
                logging.log_every_n(logging.INFO, "loss-scale overflow (fp16): update "
                                    "skipped, loss scale now %g (%d such steps so far)", 20,
                                    scale, self.overflow_steps)
                return
            reason = (f"the gradients exploded (gradient norm {float(norm):.3g}"
                      + (f" at loss scale {scale:g}" if scale is not None else "") + ")")
        elif norm is not None and self.max_grad_norm and float(norm) > self.max_grad_norm:
            reason = (f"the gradients exploded (gradient norm {float(norm):.3g} at this "
                      f"step, limit max_grad_norm={self.max_grad_norm:g})")
        if reason is None:
            return
        self.failed_step = _step(self.model)
        self.reason = reason
        logging.error("%s at step %d: stopping. The best checkpoint and export are untouched; "
                      "rerun with a lower learning_rate to resume from the last checkpoint.",
                      reason, self.failed_step)
        self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self.overflow_steps:
            logging.info("%d loss-scale overflow step(s) skipped by the LossScaleOptimizer",
                         self.overflow_steps)


def format_duration(seconds):
    """'0.4 s', '45 s', '3 min 20 s', '1 h 05 min'."""
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def remaining_seconds(steps_left, step_seconds, evals_left, eval_seconds):
    """The time a run has left: its train steps and its dev evaluations (with checkpoint
    and best-weight saving, which happen beside them)."""
    return steps_left * step_seconds + evals_left * eval_seconds


class RunClock(keras.callbacks.Callback):
    """After each epoch's dev evaluation, one log line with the whole run's time left,
    dev evaluations included (Keras' progress bar counts one epoch's train steps only):
    "step 50 of 150 (1 min 20 s so far): about 2 min 40 s left (train steps 0.9 s each,
    dev evaluation and saving 12 s each)". Put it after the evaluation callbacks."""

    def __init__(self, total_steps, throughput):
        super().__init__()
        self.total_steps = total_steps
        self.throughput = throughput
        self._t0 = None
        self._epochs = 0

    def on_train_begin(self, logs=None):
        self._t0 = time.perf_counter()
        self._epochs = 0

    def on_epoch_end(self, epoch, logs=None):
        self._epochs += 1
        elapsed = time.perf_counter() - self._t0
        timed = self.throughput.durations
        steps_done = sum(n for _, n in timed)
        if not steps_done:
            return
        step_seconds = (sum(t for t, _ in timed[1:]) / max(1, sum(n for _, n in timed[1:]))
                        if len(timed) > 1 else timed[0][0] / timed[0][1])
        # Everything that was not a train step: evaluations, saving, the first step's
        # tracing (counted once, so the estimate errs on the long side early on).
        other = max(0.0, elapsed - sum(t for t, _ in timed)) / self._epochs
        step = _step(self.model)
        steps_left = max(0, self.total_steps - step)
        epoch_steps = max(1, steps_done // self._epochs)
        evals_left = -(-steps_left // epoch_steps)
        left = remaining_seconds(steps_left, step_seconds, evals_left, other)
        logging.info("step %d of %d (%s so far): about %s left (train steps %.2f s each, "
                     "dev evaluation and saving %s each)", step, self.total_steps,
                     format_duration(elapsed), format_duration(left), step_seconds,
                     format_duration(other))


class Throughput(keras.callbacks.Callback):
    """Measures training examples/s over train batches (evaluation time excluded)."""

    def __init__(self, batch_size):
        super().__init__()
        self.batch_size = batch_size
        self.durations = []  # (seconds, optimizer steps) per train-batch callback
        self._start = None

    def on_train_batch_begin(self, batch, logs=None):
        self._start = (time.perf_counter(), _step(self.model))

    def on_train_batch_end(self, batch, logs=None):
        if self._start is not None:
            t0, step0 = self._start
            self.durations.append((time.perf_counter() - t0, _step(self.model) - step0))

    def examples_per_second(self):
        """Examples/s over the measured calls, the first (tracing/compiling) one excluded.
        With steps_per_execution > 1 one callback covers several optimizer steps."""
        timed = self.durations[1:] if len(self.durations) > 1 else self.durations
        seconds = sum(t for t, _ in timed)
        steps = sum(n for _, n in timed)
        return steps * self.batch_size / seconds if seconds > 0 else 0.0
