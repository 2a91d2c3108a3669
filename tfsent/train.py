"""Trains a sentence encoder with one of tfsent's objectives.

    python -m tfsent.train --method=NAME [--config=configs/RECIPE.py]
        [--config.FIELD=VALUE ...] [--output_dir=DIR]

With no other flag it trains `minilm-l6` on the demo corpus shipped in the package for a
few minutes on a CPU, selects the best checkpoint on the demo dev pairs, exports it to
DIR/export/<version>/ and writes DIR/metrics.json. Running the same command again after an
interruption resumes from the last checkpoint. See `tfsent.config` for every field.
"""

import math
import os
import sys
import time

from absl import app, flags, logging

from tfsent.methods import help_text as methods_help_text

FLAGS = flags.FLAGS
flags.DEFINE_string("method", None, methods_help_text())
flags.DEFINE_string("config", None, "Recipe file (configs/*.py) defining get_config().")
flags.DEFINE_string("output_dir", None, "Run directory (default: runs/<method>).")
flags.DEFINE_multi_string("config_override", [], "FIELD=VALUE (same as --config.FIELD=VALUE).")


def split_config_overrides(argv):
    """Pulls `--config.FIELD=VALUE` arguments out of argv (absl does not know them)."""
    rest, overrides = [], []
    for arg in argv:
        if arg.startswith("--config."):
            overrides.append(arg[len("--config."):])
        else:
            rest.append(arg)
    return rest, overrides


def resolve_config(method, recipe_path=None, overrides=()):
    """The run config of `method`: defaults < recipe < overrides."""
    from tfsent.config import build_config, load_recipe
    from tfsent.methods import get_method

    spec = get_method(method)
    recipe = load_recipe(recipe_path) if recipe_path else {}
    if recipe.get("method", method) != method:
        logging.warning("recipe %s was written for method %s, running %s", recipe_path,
                        recipe["method"], method)
    return build_config(spec.defaults, recipe, overrides, method=method)


def total_steps(config, n_examples):
    """Optimizer steps of the run, rounded up to a multiple of eval_every."""
    steps = config.steps or math.ceil(config.epochs * n_examples / config.batch_size)
    rounded = math.ceil(steps / config.eval_every) * config.eval_every
    if rounded != steps:
        logging.info("steps %d rounded up to %d (a multiple of eval_every=%d)", steps, rounded,
                     config.eval_every)
    return rounded


def load_training_data(spec, config):
    """Reads the method's training data; returns (examples, kind)."""
    from tfsent.data import readers

    source = config.train_data
    if spec.data_kind == "embedding_pairs":
        return readers.read_positive_pairs(source, config.eval_data_dir,
                                           config.positive_threshold, config.train_split)
    if spec.data_kind == "triplets":
        source = "demo" if source in ("demo", "demo_nli") else source
        return readers.read_nli_triplets(source, config.train_split)
    if spec.data_kind == "nli_pairs":
        return readers.read_nli_pairs(source, config.train_split)
    return readers.read_training_sentences(source)


def build_model(spec, config, steps, jit):
    """(encoder, compiled method model, built optimizer) from a run config; call it inside
    the strategy's scope."""
    from tfsent.encoders import load_encoder

    if config.grad_cache_chunk and jit:
        # XLA compiles GradCache's tf.while_loop, but on CPU it ran it 4.4x slower than TF's
        # executor and with more memory (minilm-l6, batch 256 in chunks of 64: 44.4 vs 10.0
        # s/step, peak 5.4 vs 3.0 GB), so the train step runs without XLA. `model.compile(
        # jit_compile=True)` in a user's own code still works (tests/test_grad_cache.py).
        logging.warning("grad_cache_chunk is set: jit_compile turned off for the train step")
        jit = False
    encoder = load_encoder(config.encoder, pooling=config.pooling,
                           max_seq_length=config.max_seq_length,
                           dtype=config.mixed_precision or None, seed=config.seed)
    model = spec.build(encoder, config)
    model.set_grad_cache(config.grad_cache_chunk)
    optimizer = make_optimizer(config, steps)
    model.compile(optimizer=optimizer, jit_compile=jit,
                  steps_per_execution=config.steps_per_execution)
    optimizer.build(model.trainable_variables)
    return encoder, model, optimizer


def make_optimizer(config, steps):
    """AdamW (default) or LARS with the configured warmup + linear/cosine/constant schedule."""
    import keras

    from tfsent.optimizers import LARS
    from tfsent.training import WarmupCosineDecay, WarmupLinearDecay

    warmup = int(round(config.warmup_ratio * steps))
    if config.lr_schedule == "cosine":
        schedule = WarmupCosineDecay(config.learning_rate, steps, warmup)
    else:
        schedule = WarmupLinearDecay(config.learning_rate, steps, warmup,
                                     decay=config.lr_schedule == "linear")
    clip = config.clip_norm or None
    if config.optimizer == "lars":
        optimizer = LARS(learning_rate=schedule, weight_decay=config.weight_decay,
                         global_clipnorm=clip)
    else:
        optimizer = keras.optimizers.AdamW(learning_rate=schedule,
                                           weight_decay=config.weight_decay,
                                           global_clipnorm=clip)
    if config.mixed_precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer,
                                                        initial_scale=config.loss_scale)
    return optimizer


def make_dataset(spec, config, encoder, examples, skip_batches, output_dir):
    """The training tf.data.Dataset of the method (`pipelines.dataset_for_kind`, the
    pipeline `fit` uses too)."""
    from tfsent.data import pipelines

    embed = None
    if spec.data_kind == "embedding_pairs":
        embed = _cached_embedder(config, encoder, output_dir)
    return pipelines.dataset_for_kind(
        spec.data_kind, examples, encoder.tokenizer, config.batch_size, config.seed,
        skip_batches=skip_batches, mask_rate=config.get("mask_rate"),
        duplicate_free=config.get("duplicate_free_batches", False),
        premise_grouped=spec.premise_grouped, embed=embed)


class Run:
    """The state one training run passes between its steps (see `run`)."""

    def __init__(self, method, config, output_dir):
        self.method = method
        self.config = config
        self.output_dir = output_dir
        self.spec = None
        self.strategy = None
        self.chief = True
        self.task_id = 0
        self.write_dir = output_dir
        self.jit = bool(config.jit_compile)
        self.examples = None
        self.steps = 0
        self.dev_pairs = None
        self.encoder = self.model = self.optimizer = None
        self.state = None
        self.start_step = 0
        self.metrics = {}
        self.metrics_path = os.path.join(output_dir, "metrics.json")


def run(method, config, output_dir):
    """Trains, selects, exports. Returns the metrics dict written to metrics.json.

    Five named steps: `resolve_run` (strategy, roles, data), `build_run` (encoder, method,
    optimizer), `restore_run` (resume or score the starting encoder), `fit_run` (Keras fit
    with the callbacks of `tfsent.callbacks`), `finalize_run` (selection, export)."""
    r = Run(method, config, output_dir)
    resolve_run(r)
    build_run(r)
    restore_run(r)
    guards = fit_run(r)
    metrics = finalize_run(r, *guards)
    if "export" in metrics:  # the chief (other workers of a multi-worker run export nothing)
        print(f"export: {metrics['export']}")
    return metrics


def resolve_run(r):
    """Strategy, mixed precision, the worker's role and directory, the data and the steps."""
    import keras
    import tensorflow as tf

    from tfsent import distribute
    from tfsent.data.readers import read_dev_pairs
    from tfsent.errors import ConfigError
    from tfsent.methods import get_method
    from tfsent.training import _write_json_atomic

    config = r.config
    r.spec = get_method(r.method)
    if config.cpu_replicas:
        _split_cpu(config.cpu_replicas)
    # First, before anything initialises TensorFlow's context (multi-worker collectives
    # must be configured at startup).
    r.strategy = distribute.get_strategy(config.strategy, config.tpu)
    keras.utils.set_random_seed(config.seed)
    if config.mixed_precision:
        keras.mixed_precision.set_global_policy(config.mixed_precision)
    replicas = r.strategy.num_replicas_in_sync
    # Multi-worker: only the chief writes the run directory; the other workers write
    # checkpoints (saving may need every worker) to a private directory removed at the end.
    r.chief, r.task_id = distribute.worker_role(r.strategy)
    if not r.chief:
        r.write_dir = os.path.join(r.output_dir, ".workers", f"worker-{r.task_id}")
    os.makedirs(r.write_dir, exist_ok=True)
    if r.chief:
        _write_json_atomic(os.path.join(r.output_dir, "config.json"),
                           dict(config, method=r.method))
    if config.batch_size % replicas:
        raise ConfigError(f"batch_size {config.batch_size} is not divisible by the "
                          f"{replicas} replicas")
    if r.jit and replicas > 1 and not tf.config.list_logical_devices("GPU"):
        logging.info("jit_compile off: XLA on CPU cannot place variables across %d replicas",
                     replicas)
        r.jit = False
    r.examples = load_training_data(r.spec, config)
    r.steps = total_steps(config, len(r.examples))
    r.dev_pairs = read_dev_pairs(config.eval_data, config.eval_data_dir)


def build_run(r):
    """The encoder, the method model and its optimizer, in the strategy's scope."""
    with r.strategy.scope():
        r.encoder, r.model, r.optimizer = build_model(r.spec, r.config, r.steps, r.jit)


def restore_run(r):
    """Resumes from the last checkpoint, or (a new run) scores the starting encoder on the
    dev set and keeps its weights: it is the first candidate of dev selection."""
    from tfsent.training import RunState, _write_json_atomic, read_json, sts_dev_score

    config = r.config
    r.state = RunState(r.output_dir, r.model, r.optimizer, write_dir=r.write_dir)
    r.start_step = r.state.restore()
    r.metrics = read_json(r.metrics_path, {}) if r.start_step and r.chief else {}
    r.metrics.pop("stopped", None)  # an earlier attempt's divergence, being resumed
    if r.start_step:
        logging.info("resuming from step %d (checkpoint in %s)", r.start_step,
                     os.path.join(r.output_dir, "checkpoints"))
        return
    # "Before training" is the pretrained encoder itself (without an untrained head).
    before = sts_dev_score(r.model, *r.dev_pairs, max_seq_length=config.eval_max_seq_length,
                           use_head=False, geometry=True)
    for key in ("sentences", "embeddings"):
        before.pop(key)
    r.metrics["dev_before"] = before
    logging.info("dev before training: spearman %.2f (the starting encoder is the first "
                 "candidate for the best)", before["spearman"])
    if not r.chief:
        return
    r.state.save_start(before["spearman"])
    if config.get("report_geometry") and config.eval_data_dir:
        r.metrics["geometry_before"] = _geometry(r.model, config, use_head=False)
    _write_json_atomic(r.metrics_path, r.metrics)


def fit_run(r):
    """Keras fit with the CLI's callbacks; returns (nan_guard, divergence_guard)."""
    import keras
    import tensorflow as tf

    from tfsent.callbacks import (BestEncoderKeeper, DevTensorBoard, DivergenceGuard,
                                  EarlyDevCheck, NanGuard, RunCheckpoint, STSDevEvaluation,
                                  Throughput)

    config = r.config
    tb_dir = os.path.join(r.write_dir, "tb")
    r.writer = tf.summary.create_file_writer(tb_dir)
    history = r.metrics.setdefault("dev_history", [])
    name = _dev_name(config.eval_data)
    start = r.metrics.get("dev_before", {})
    nan_guard = NanGuard(config.max_grad_norm)
    throughput = Throughput(config.batch_size)
    evaluation = STSDevEvaluation(*r.dev_pairs, prefix="val",
                                  max_seq_length=config.eval_max_seq_length,
                                  skip_when=nan_guard.failed)
    keeper = BestEncoderKeeper(r.state, evaluation, name=name, baseline=start.get("spearman"),
                               history=history)
    board = DevTensorBoard(r.writer, evaluation, name=name, log_dir=tb_dir,
                           projector_every=config.projector_every,
                           projector_points=config.projector_points)
    guard = DivergenceGuard(evaluation, start=start, max_drop=config.divergence_drop,
                            collapse_cosine_rise=config.collapse_cosine_rise,
                            collapse_uniformity_ratio=config.collapse_uniformity_ratio)
    callbacks = [
        nan_guard, throughput, evaluation, keeper,
        RunCheckpoint(r.state, skip_when=nan_guard.failed), board, guard,
        keras.callbacks.TensorBoard(log_dir=tb_dir,
                                    update_freq=max(1, 10 // config.steps_per_execution),
                                    write_graph=False),
    ]
    if r.start_step == 0 and 0 < config.first_eval_step < config.eval_every:
        callbacks.insert(3, EarlyDevCheck(config.first_eval_step, evaluation, keeper, board,
                                          guard, skip_when=nan_guard.failed))
    if r.start_step < r.steps:
        dataset = make_dataset(r.spec, config, r.encoder, r.examples, r.start_step,
                               r.output_dir)
        logging.info("training %s: %d steps, global batch %d on %d replica(s), jit %s",
                     r.method, r.steps, config.batch_size, r.strategy.num_replicas_in_sync,
                     r.model.jit_compile)
        t0 = time.time()
        r.model.fit(dataset, epochs=r.steps // config.eval_every,
                    steps_per_epoch=config.eval_every,
                    initial_epoch=r.start_step // config.eval_every, callbacks=callbacks,
                    verbose=1)
        r.metrics["train_seconds"] = r.metrics.get("train_seconds", 0.0) + time.time() - t0
        r.metrics["examples_per_second"] = throughput.examples_per_second()
    return nan_guard, guard


def finalize_run(r, nan_guard, guard):
    """Stops on a divergence; otherwise picks the export (best checkpoint, or the starting
    encoder when nothing beat it), exports, saves the encoder directory, reports."""
    from tfsent.export import export_encoder
    from tfsent.training import _write_json_atomic

    config, metrics, state = r.config, r.metrics, r.state
    final_step = int(r.optimizer.iterations.numpy())
    metrics["steps"] = final_step
    if nan_guard.failed_step is not None:
        _stop_diverged(state, metrics, r.metrics_path if r.chief else None,
                       nan_guard.failed_step, nan_guard.reason)
    if guard.reason is not None:
        metrics["divergence_guard"] = f"{guard.reason} at step {guard.stopped_step}"
    if not r.chief:
        import shutil

        r.writer.close()
        shutil.rmtree(r.write_dir, ignore_errors=True)
        logging.info("worker %d done at step %d (the chief exports)", r.task_id, final_step)
        return metrics
    history = metrics.get("dev_history", [])
    if history:
        metrics["dev_final"] = {k: v for k, v in history[-1].items() if k != "step"}
    head, exported = _choose_export(r)
    export_step = exported["step"] if exported["step"] is not None else final_step
    export_path = export_encoder(r.encoder, os.path.join(r.output_dir, "export"),
                                 pooling=r.model.export_pooling, head=head,
                                 metadata={"method": r.method, "step": export_step,
                                           "exported": exported["which"]},
                                 max_seq_length=config.eval_max_seq_length)
    metrics["export"] = export_path
    metrics["exported"] = exported
    if config.export_formats != "saved_model":  # issue #17: other ecosystems' formats
        from tfsent.publish import export_run_formats

        metrics["exports"] = export_run_formats(
            r.encoder, r.output_dir, config.export_formats, pooling=r.model.export_pooling,
            head=head, max_seq_length=config.eval_max_seq_length,
            metadata={"method": r.method, "step": export_step})
    if head is None:  # a head on top has no place in an encoder directory
        r.encoder.pooling = r.model.export_pooling
        r.encoder.save_encoder_dir(os.path.join(r.output_dir, "encoder"))
    if config.test_tasks:
        metrics["test"] = _evaluate_tasks(r.model, config)
    if config.get("report_geometry") and config.eval_data_dir:
        metrics["geometry_after"] = _geometry(r.model, config, use_head=head is not None)
    if config.get("nli_eval_split") and config.train_data not in ("demo", "demo_nli"):
        from tfsent.data.readers import read_nli_pairs

        rows = read_nli_pairs(config.train_data, config.nli_eval_split)
        acc = r.model.nli_accuracy(rows, max_seq_length=config.eval_max_seq_length)
        metrics[f"nli_accuracy_{config.nli_eval_split}"] = acc
        logging.info("NLI accuracy on %s (%s): %.2f", config.train_data,
                     config.nli_eval_split, acc)
    _write_json_atomic(r.metrics_path, metrics)
    score = exported["score"]
    logging.info("exported the %s (dev spearman %s, step %s): %s", exported["which"],
                 "n/a" if score is None else f"{score:.2f}", exported["step"], export_path)
    return metrics


def _choose_export(r):
    """Loads the weights to export into the model; returns (export head, record) where the
    record says which weights were exported and why (metrics.json "exported")."""
    best, best_step = r.state.best()
    start = r.metrics.get("dev_before", {}).get("spearman")
    start_ok = start is not None and math.isfinite(start) and os.path.exists(
        r.state.start_weights)
    if best is None and not start_ok:
        logging.warning("no dev evaluation completed; exporting the current weights")
        return r.model.export_head, {"which": "final weights", "score": None, "step": None,
                                     "why": "no dev evaluation completed"}
    r.metrics["dev_best"] = {"spearman": best, "step": best_step}
    if best is not None and (not start_ok or best > start):
        r.state.load_best()
        why = (f"dev spearman {best:.2f} at step {best_step} beat the starting encoder's "
               f"{start:.2f}" if start_ok else "the best dev evaluation")
        return r.model.export_head, {"which": "best checkpoint", "score": best,
                                     "step": best_step, "why": why}
    if best is not None and r.config.export_if_worse:
        r.state.load_best()
        logging.warning("no checkpoint beat the starting encoder on dev (best %.2f at step "
                        "%d <= %.2f before training); exporting the best checkpoint anyway "
                        "(export_if_worse=true)", best, best_step, start)
        return r.model.export_head, {
            "which": "best checkpoint", "score": best, "step": best_step,
            "why": f"export_if_worse=true, although it is worse than the starting encoder "
                   f"({best:.2f} <= {start:.2f})"}
    r.state.load_start()
    trained = (f"the best checkpoint scored {best:.2f} at step {best_step}"
               if best is not None else "no trained checkpoint was evaluated")
    logging.warning("no checkpoint beat the starting encoder on dev (%.2f before training; "
                    "%s): exporting the STARTING encoder, unchanged, so nothing is lost. "
                    "Set --config.export_if_worse=true to export the best checkpoint "
                    "instead, or try a lower learning_rate.", start, trained)
    return None, {"which": "starting encoder", "score": start, "step": 0,
                  "why": f"no checkpoint beat it ({trained})"}


def _cached_embedder(config, encoder, output_dir):
    """`embed(sentences)` of the frozen encoder through the on-disk embedding cache
    (config.cache_dir, default beside the run directory)."""
    from tfsent.data.cache import cached_embeddings

    cache_dir = config.cache_dir or os.path.join(
        os.path.dirname(os.path.abspath(output_dir)), "embedding_cache")

    def embed(sentences):
        emb, _ = cached_embeddings(
            cache_dir, config.encoder, config.pooling, config.max_seq_length, sentences,
            lambda s: encoder.encode(s, batch_size=128, pooling=config.pooling,
                                     normalize=False))
        return emb

    return embed


def _stop_diverged(state, metrics, metrics_path, failed_step, reason):
    """Records a divergence (non-finite loss, exploding gradients) and raises TrainingError:
    no export, the best weights and the last good checkpoint stay as they were."""
    import tensorflow as tf

    from tfsent.errors import TrainingError
    from tfsent.training import _write_json_atomic

    metrics["stopped"] = f"{reason} at step {failed_step}"
    if metrics_path:
        _write_json_atomic(metrics_path, metrics)
    latest = tf.train.latest_checkpoint(os.path.join(state.output_dir, "checkpoints"))
    last = f"step {latest.rsplit('-', 1)[1]}" if latest else "the start"
    best, best_step = state.best()
    kept = (f"the best weights (dev {best:.2f} at step {best_step}) are in {state.best_dir}"
            if best is not None else "no dev evaluation had completed")
    raise TrainingError(
        f"{reason} at step {failed_step}; stopped without exporting. "
        f"{kept[0].upper() + kept[1:]}. Rerun the same command with a lower "
        f"--config.learning_rate to resume from the last good checkpoint ({last}).")


def _split_cpu(n):
    """Splits the CPU into n logical devices (so `mirrored` has n replicas on one CPU)."""
    import tensorflow as tf

    from tfsent.errors import ConfigError

    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * n)
    except RuntimeError as e:
        raise ConfigError(f"cpu_replicas={n}: TensorFlow's devices are already initialised "
                          f"in this process ({e})") from None


def _dev_name(eval_data):
    if eval_data in ("demo", "stsb", "sickr"):
        return f"{eval_data}_dev"
    return os.path.splitext(os.path.basename(eval_data))[0] + "_dev"


def _geometry(model, config, use_head=True):
    """Alignment / uniformity (Wang and Isola) on STS-B test, logged and returned."""
    from tfsent.evaluation import align_uniform

    result = align_uniform(
        lambda s: model.encode(s, batch_size=128, max_seq_length=config.eval_max_seq_length,
                               use_head=use_head), config.eval_data_dir)
    logging.info("alignment %.4f uniformity %.4f (STS-B test)", result["align"],
                 result["uniform"])
    return result


def _evaluate_tasks(model, config):
    from tfsent.evaluate import run_tasks

    if not config.eval_data_dir:
        logging.warning("test_tasks needs eval_data_dir; skipped")
        return {}
    return run_tasks(model, config.eval_data_dir, config.test_tasks,
                     max_seq_length=config.eval_max_seq_length)


def main(argv):
    """absl entry point."""
    from tfsent.errors import TfsentError

    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS.method:
        raise app.UsageError("--method is required, e.g. --method=cmlm_cse")
    overrides = list(FLAGS.config_override) + _OVERRIDES
    try:
        config = resolve_config(FLAGS.method, FLAGS.config, overrides)
        output_dir = FLAGS.output_dir or os.path.join("runs", FLAGS.method)
        run(FLAGS.method, config, output_dir)
    except TfsentError as e:
        logging.error("%s", e)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


_OVERRIDES = []


def entry():
    """Console entry: separates --config.FIELD=VALUE overrides, then runs absl."""
    global _OVERRIDES
    argv, _OVERRIDES = split_config_overrides(sys.argv)
    app.run(main, argv=argv)


if __name__ == "__main__":
    entry()
