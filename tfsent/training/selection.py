"""Model selection: which weights of a run are the best, and which are exported.

`BestEncoderKeeper` (a Keras callback) keeps the weights of the best dev score in the run
directory, the starting encoder counting as the first candidate; `choose_export` picks the
exported weights when the run ends; `dev_name` names the dev set in logs and metrics. The
dev score itself comes from `tfsent.training.callbacks.STSDevEvaluation`; the run
directory's files from `tfsent.training.run_dir.RunState`.
"""

import math
import os

import keras
from absl import logging

from tfsent.data.sources import is_beir, parse_beir


def finite(x):
    """True if `x` is a number other than NaN or infinity (None: False)."""
    return x is not None and math.isfinite(float(x))


def dev_name(eval_data):
    """The dev set's name in logs and metrics: `demo_dev`, `stsb_dev`, `<file stem>_dev`,
    `<BEIR folder>_<split>` for `beir:DIR[:SPLIT]`."""
    if eval_data in ("demo", "stsb", "sickr"):
        return f"{eval_data}_dev"
    if is_beir(eval_data):
        directory, split = parse_beir(eval_data, "dev")
        return f"{os.path.basename(os.path.normpath(directory))}_{split}"
    return os.path.splitext(os.path.basename(eval_data))[0] + "_dev"


def monitor_of(eval_data):
    """The dev figure selection maximises: "ndcg@10" for a retrieval dev set
    (`beir:DIR[:SPLIT]`), else "spearman"."""
    return "ndcg@10" if is_beir(eval_data) else "spearman"


def step_of(model):
    """The optimizer step of a compiled model (its `iterations`)."""
    return int(model.optimizer.iterations.numpy())


class BestEncoderKeeper(keras.callbacks.Callback):
    """The CLI's model selection: keeps the weights of the best `monitor` score in the run
    directory (`tfsent.training.run_dir.RunState`: best/ holds the exported parts + best.json) and
    logs one line per evaluation.

    The starting encoder is a candidate: `baseline` (its step-0 score) is the first best,
    so "best" in the log means the best of the start and every trained evaluation. Only
    trained weights are written to best/ (the starting weights are kept apart by the CLI);
    `monitor` is the report's figure to maximise ("spearman"; "ndcg@10" for retrieval);
    `trained_best()` tells whether any evaluation beat the start. A NaN score is logged
    and never best.
    """

    def __init__(self, state, evaluation, name="dev", baseline=None, history=None,
                 monitor="spearman"):
        super().__init__()
        self.state = state
        self.evaluation = evaluation
        self.name = name
        self.baseline = baseline
        self.history = history if history is not None else []
        self.monitor = monitor

    def best(self):
        """(score, step) of the best candidate so far, the starting encoder included."""
        score, step = self.state.best()
        if self.baseline is not None and (score is None or not score > self.baseline):
            return self.baseline, 0
        return score, step

    def consider(self, report, step):
        """Records an evaluation at `step`; saves the weights if it is the best trained
        one. Returns True when it is the best candidate so far (start included)."""
        score = report[self.monitor]
        trained, _ = self.state.best()
        if finite(score) and (trained is None or score > trained):
            extra = {"pearson": report["pearson"]} if "pearson" in report else {}
            self.state.save_best(score, step, extra)
        best, best_step = self.best()
        improved = finite(score) and best_step == step
        self.history.append({"step": step, **{k: v for k, v in report.items()
                                             if k != "per_query"}})
        if not finite(score):
            logging.warning("step %d: %s %s is %s (all cosines equal?): never the best; "
                            "counted by the divergence guard", step, self.name, self.monitor,
                            score)
        if self.monitor == "spearman":
            logging.info("step %d: %s spearman %.2f pearson %.2f (best %.2f at step %d)%s; "
                         "alignment %.3f uniformity %.3f random-pair cosine %.3f", step,
                         self.name, score, report["pearson"], best, best_step,
                         " new best" if improved else "", report["alignment"],
                         report["uniformity"], report["random_pair_cosine"])
        else:
            others = ", ".join(f"{k} {v:.2f}" for k, v in report.items()
                               if k != self.monitor and isinstance(v, float))
            logging.info("step %d: %s %s %.2f (best %.2f at step %d)%s; %s", step, self.name,
                         self.monitor, score, best, best_step, " new best" if improved else "",
                         others)
        return improved

    def on_epoch_end(self, epoch, logs=None):
        if self.evaluation.last_report is not None:
            self.consider(self.evaluation.last_report, step_of(self.model))


def choose_export(state, model, start_score, export_if_worse, metrics, monitor="spearman"):
    """Picks the weights a finished run exports and loads them into `model`.

    Candidates: the best trained checkpoint (`state.best()`) and the starting encoder
    (`start_score`, its dev score before training). The trained one wins only if it beat
    the start, or if `export_if_worse`; otherwise the starting encoder is exported
    unchanged, so a run that made the encoder worse loses nothing. Sets
    `metrics["dev_best"]`. Returns (export head or None, record) where the record says
    which weights were exported and why (metrics.json "exported")."""
    best, best_step = state.best()
    start = start_score
    start_ok = start is not None and math.isfinite(start) and os.path.exists(
        state.start_weights)
    if best is None and not start_ok:
        logging.warning("no dev evaluation completed; exporting the current weights")
        return model.export_head, {"which": "final weights", "score": None, "step": None,
                                     "why": "no dev evaluation completed"}
    metrics["dev_best"] = {monitor: best, "step": best_step}
    if best is not None and (not start_ok or best > start):
        state.load_best()
        why = (f"dev {monitor} {best:.2f} at step {best_step} beat the starting encoder's "
               f"{start:.2f}" if start_ok else "the best dev evaluation")
        return model.export_head, {"which": "best checkpoint", "score": best,
                                     "step": best_step, "why": why}
    if best is not None and export_if_worse:
        state.load_best()
        logging.warning("no checkpoint beat the starting encoder on dev (best %.2f at step "
                        "%d <= %.2f before training); exporting the best checkpoint anyway "
                        "(export_if_worse=true)", best, best_step, start)
        return model.export_head, {
            "which": "best checkpoint", "score": best, "step": best_step,
            "why": f"export_if_worse=true, although it is worse than the starting encoder "
                   f"({best:.2f} <= {start:.2f})"}
    state.load_start()
    trained = (f"the best checkpoint scored {best:.2f} at step {best_step}"
               if best is not None else "no trained checkpoint was evaluated")
    logging.warning("no checkpoint beat the starting encoder on dev (%.2f before training; "
                    "%s): exporting the STARTING encoder, unchanged, so nothing is lost. "
                    "Set --config.export_if_worse=true to export the best checkpoint "
                    "instead, or try a lower learning_rate.", start, trained)
    return None, {"which": "starting encoder", "score": start, "step": 0,
                  "why": f"no checkpoint beat it ({trained})"}
