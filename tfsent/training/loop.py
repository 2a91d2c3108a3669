"""One training run as a library call: `run(method, config, output_dir)` trains, selects
and exports (what `python -m tfsent.train` does), in five named steps on a `Run`:
`resolve_run`, `build_run`, `restore_run`, `fit_run`, `finalize_run`. The pieces they use
(`build_model`, `make_optimizer`, `make_dataset`, `load_training_sources`, `total_steps`)
serve benchmarks and tests too.
"""

import math
import os
import shutil
import time

import keras
import tensorflow as tf
from absl import logging

from tfsent.data import kinds, mixture, readers
from tfsent.data.sources import DEMO_NAMES, parse_beir, parse_sources
from tfsent.data.cache import cached_embeddings
from tfsent.encoders import families, load_encoder, lora
from tfsent.encoders.loading import check_encoder_name
from tfsent import cpu_settings
from tfsent.errors import ConfigError, InputError, TrainingError
from tfsent.evaluation import align_uniform
from tfsent.evaluation.retrieval import pooled_split, read_task_split
from tfsent.evaluation.runner import run_tasks
from tfsent.matryoshka import FULL_DIM, dims_text
from tfsent.methods import get_method
from tfsent.methods.distill import teacher_name
from tfsent import formats
from tfsent.training import distribute
from tfsent.training.callbacks import (DevEncoder, DevTensorBoard, DivergenceGuard,
                                       EarlyDevCheck, NanGuard, RetrievalDevEvaluation,
                                       RunCheckpoint, RunClock, STSDevEvaluation, Throughput)
from tfsent.training import rerank_dev
from tfsent.training.config import (check_family_settings, check_test_tasks,
                                    resolve_encoder_fields)
from tfsent.training.optimizers import LARS
from tfsent.training.run_dir import (DEV_POOL_FILE, RunState, discard_run, prepare_run_dir,
                                     read_json, run_finished, size_summary,
                                     write_json_atomic)
from tfsent.training.schedules import WarmupCosineDecay, WarmupLinearDecay
from tfsent.training.selection import BestEncoderKeeper, choose_export, dev_name, monitor_of


def total_steps(config, n_examples):
    """Optimizer steps of the run, rounded up to a multiple of eval_every."""
    steps = config.steps or math.ceil(config.epochs * n_examples / config.batch_size)
    rounded = math.ceil(steps / config.eval_every) * config.eval_every
    if rounded != steps:
        logging.info("steps %d rounded up to %d (a multiple of eval_every=%d)", steps, rounded,
                     config.eval_every)
    return rounded


def load_training_data(spec, config, source=None):
    """Reads one training source (default: `train_data`, a single source) as the method's
    data kind (`tfsent.data.kinds`: the kind's reader); returns its examples."""
    source = config.train_data if source is None else source
    return kinds.read_training_examples(spec.data_kind, source, config)


def load_training_sources(spec, config):
    """The run's training examples: one source's examples as `load_training_data` reads
    them, or (several `train_data` sources) a `tfsent.data.mixture.SourceMixture` of
    each source read the same way. A source that holds no examples, or that the method's
    reader refuses, is an error naming it."""
    sources = parse_sources(config.train_data)
    if len(sources) == 1:
        return load_training_data(spec, config, sources[0])
    examples = []
    for i, source in enumerate(sources):
        try:
            rows = load_training_data(spec, config, source)
        except (ConfigError, InputError) as e:
            raise type(e)(f"train_data source {i + 1} of {len(sources)} ({source}) cannot be "
                          f"read as {spec.data_kind} for {spec.name}: {e}") from None
        if not len(rows):
            raise InputError(f"train_data source {source!r} holds no training examples for "
                             f"{spec.name} (data kind {spec.data_kind})")
        examples.append(rows)
    mixed = mixture.SourceMixture(
        sources, examples, mixture.parse_weights(config.source_weights, len(sources)),
        config.mixture_sampling, config.batch_per_source, config.seed)
    mixed.check_widths(spec.data_kind)
    mixed.log_sources(spec.data_kind)
    return mixed


def build_model(spec, config, steps, jit):
    """(encoder, compiled method model, built optimizer) from a run config; call it inside
    the strategy's scope."""
    if config.grad_cache_chunk and jit:
        # XLA compiles GradCache's tf.while_loop, but on CPU it ran it 4.4x slower than TF's
        # executor and with more memory (minilm-l6, batch 256 in chunks of 64: 44.4 vs 10.0
        # s/step, peak 5.4 vs 3.0 GB), so the train step runs without XLA. `model.compile(
        # jit_compile=True)` in a user's own code still works (tests/test_grad_cache.py).
        logging.warning("grad_cache_chunk is set: jit_compile turned off for the train step")
        jit = False
    def load(name, pooling=config.pooling):
        return load_encoder(name, pooling=pooling, max_seq_length=config.max_seq_length,
                            dtype=config.mixed_precision or None, seed=config.seed)

    model = spec.build_run_model(config, load)
    encoder = model.encoder  # (distill: the student)
    check_position_limit(encoder, config)
    log_own_truncate_dim(encoder, model)
    # A preset name's family is known only now (a folder's was checked with the config).
    check_family_settings(encoder.family, config.get("lora_rank", 0),
                          config.get("mixed_precision"), f"encoder={config.encoder!r}")
    if config.get("lora_rank", 0):
        layers = lora.enable_lora(encoder, config.lora_rank, config.get("lora_alpha") or None)
        logging.info("LoRA rank %d (scale %g) on %d %s layers (%s); the backbone's other "
                     "weights are frozen", config.lora_rank, layers[0].lora_alpha /
                     config.lora_rank, len(layers), encoder.family,
                     ", ".join(families.TABLE[encoder.family].lora_targets))
    lora.log_parameter_counts(model)
    model.set_grad_cache(config.grad_cache_chunk)
    optimizer = make_optimizer(config, steps)
    model.compile(optimizer=optimizer, jit_compile=jit,
                  steps_per_execution=config.steps_per_execution)
    optimizer.build(model.trainable_variables)
    return encoder, model, optimizer


def check_position_limit(encoder, config):
    """ConfigError when the run's `max_seq_length` exceeds the encoder's position table
    (training would fail inside the position embedding; `encode` cuts to the table)."""
    length = config.get("max_seq_length")
    if length and encoder.clamp_length(length) < length:
        raise ConfigError(f"max_seq_length={length}: encoder {config.encoder!r} has "
                          f"{encoder.clamp_length(length)} positions; set "
                          f"--config.max_seq_length to at most that")


def log_own_truncate_dim(encoder, model):
    """For an encoder with a `truncate_dim` of its own (a sentence-transformers folder's):
    one line saying that training uses the whole embedding (as sentence-transformers'
    losses do: they call the model's forward, which does not cut) while the dev scores,
    the exports and OUTPUT_DIR/encoder keep that size; a warning when the run's
    `matryoshka_dims` leave that size out (no loss then trains the size that is served)."""
    own = getattr(encoder, "truncate_dim", None)
    if own is None:
        return
    if getattr(model, "export_head", None) is not None:
        logging.info("the encoder's own truncate_dim %d does not apply to this method's "
                     "export head; the exports serve the head's whole output", own)
        return
    logging.info("the encoder's own truncate_dim is %d: training uses all %d dimensions; "
                 "dev selection, the exports and OUTPUT_DIR/encoder keep truncate_dim %d "
                 "(export again with --truncate_dim=0 for all of them)", own,
                 encoder.hidden_dim, own)
    dims = getattr(model, "matryoshka_dims", None)
    if dims and own not in dims:
        logging.warning("matryoshka_dims=%s does not include the encoder's own truncate_dim "
                        "%d, the size its exports serve: add %d to matryoshka_dims, or "
                        "export with a --truncate_dim the run trains", dims_text(dims), own,
                        own)


def make_optimizer(config, steps):
    """AdamW (default) or LARS with the configured warmup + linear/cosine/constant schedule."""
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


def make_dataset(spec, config, encoder, examples, skip_batches, output_dir, model=None):
    """The training tf.data.Dataset of the method (`kinds.dataset_for_kind`, the
    pipeline `fit` uses too; a `SourceMixture` of several sources mixes one such pipeline
    per source). `model`: the method model (distill reads its teacher)."""
    embed = None
    embedder = kinds.get_kind(spec.data_kind).embedder
    if embedder == "frozen encoder":  # CLSR: the base encoder's cached embeddings
        embed = _cached_embedder(
            config, output_dir, config.encoder, config.pooling,
            lambda s: encoder.encode(s, batch_size=128, pooling=config.pooling,
                                     normalize=False, truncate_dim=FULL_DIM))
    elif embedder == "teacher":  # distill: the teacher's cached embeddings
        if model is None or model.teacher is None:
            raise ConfigError("distill: make_dataset needs model= (the Distill model whose "
                              "teacher embeds the sentences)")
        teacher = model.teacher
        target = f"{teacher.pooling}|{'normalized' if model.normalized else 'raw'}"
        embed = _cached_embedder(config, output_dir, teacher_name(config), target,
                                 model.teacher_embeddings)
    if isinstance(examples, mixture.SourceMixture):
        return examples.dataset(
            spec.data_kind, encoder.tokenizer, config.batch_size, skip_batches=skip_batches,
            mask_rate=config.get("mask_rate"),
            duplicate_free=config.get("duplicate_free_batches", False),
            premise_grouped=spec.premise_grouped, embed=embed,
            query_prompt=config.query_prompt, document_prompt=config.document_prompt)
    return kinds.dataset_for_kind(
        spec.data_kind, examples, encoder.tokenizer, config.batch_size, config.seed,
        skip_batches=skip_batches, mask_rate=config.get("mask_rate"),
        duplicate_free=config.get("duplicate_free_batches", False),
        premise_grouped=spec.premise_grouped, embed=embed,
        query_prompt=config.query_prompt, document_prompt=config.document_prompt)


class Run:
    """The state one training run passes between its steps (see `run`)."""

    def __init__(self, method, config, output_dir, overwrite=False):
        self.method = method
        self.config = config
        self.output_dir = output_dir
        self.overwrite = overwrite
        self.status = None  # "new" | "resume" | "finished" (run_dir.prepare_run_dir)
        self.spec = None
        self.strategy = None
        self.chief = True
        self.task_id = 0
        self.write_dir = output_dir
        self.jit = cpu_settings.jit_train(config.jit_compile)
        self.examples = None
        self.steps = 0
        self.dev_pairs = None   # STS dev: (sentences1, sentences2, scores)
        self.dev_split = None   # retrieval dev: a tfsent.data.beir.RetrievalSplit
        self.monitor = "spearman"
        self.reranked = False   # a cross-encoder: selection by reranked dev nDCG@10
        self.first_stage = None  # ... its retriever's dev (Ranking, measures)
        self.encoder = self.model = self.optimizer = None
        self.state = None
        self.start_step = 0
        self.metrics = {}
        self.metrics_path = os.path.join(output_dir, "metrics.json")


def run(method, config, output_dir, overwrite=False):
    """Trains, selects, exports. Returns the metrics dict written to metrics.json.

    Five named steps: `resolve_run` (strategy, roles, data, the run directory's status),
    `build_run` (encoder, method, optimizer), `restore_run` (resume or score the starting
    encoder), `fit_run` (Keras fit with the callbacks of `tfsent.training.callbacks`),
    `finalize_run` (selection, export). A run already finished in `output_dir` with the
    same config is reported, not repeated; `overwrite` discards an earlier run there.
    Keras' global dtype policy (set from `mixed_precision` for the run) is the caller's
    again when it returns or raises."""
    policy = keras.mixed_precision.global_policy()
    try:
        r = Run(method, config, output_dir, overwrite)
        resolve_run(r)
        if r.status == "finished":
            metrics = read_json(r.metrics_path, {})
            logging.info("the run in %s has already finished", output_dir)
            print(f"already finished: {output_dir} holds this run's export "
                  f"{metrics['export']} (step {metrics.get('steps')}); to train again "
                  f"choose a new --output_dir or pass --overwrite")
            return metrics
        build_run(r)
        restore_run(r)
        guards = fit_run(r)
        metrics = finalize_run(r, *guards)
        if "export" in metrics:  # the chief (other workers of a multi-worker run: none)
            print(f"export: {metrics['export']}")
            print(size_summary(output_dir))
            lines = (rerank_dev.next_steps(r.config, metrics["export"], output_dir)
                     if r.reranked else next_steps(r.config, metrics, output_dir,
                                                   r.encoder.family))
            print("\n".join(lines))
        return metrics
    finally:
        keras.mixed_precision.set_global_policy(policy)


def next_steps(config, metrics, output_dir, family=None):
    """The lines a finished run ends with: what to do with its export (evaluate it on the
    test side of its dev data, load or serve it, publish the encoder directory when the
    encoder `family` has that export)."""
    export = metrics["export"]
    if monitor_of(config.eval_data) == "ndcg@10":
        directory, _ = parse_beir(config.eval_data, "dev")
        tasks = f"--tasks=beir:{directory}:test"
    else:
        tasks = "--tasks=STSBenchmark,SICKRelatedness"
        if config.eval_data_dir:  # else evaluate's own default, ../shared/data
            tasks += f" --data_dir={config.eval_data_dir}"
    lines = ["next:",
             f"  evaluate: python -m tfsent.evaluate --model={export} {tasks}",
             f"  load:     tf.saved_model.load(\"{export}\").signatures[\"serving_default\"]"
             "(sentences=tf.constant([...]))  (README: serving it with TF Serving)"]
    encoder_dir = os.path.join(output_dir, "encoder")
    formats_of_family = families.TABLE[family].export_formats if family else None
    if not os.path.isdir(encoder_dir):
        return lines
    if formats_of_family is None or "sentence_transformers" in formats_of_family:
        lines.append(f"  publish:  python -m tfsent.export --model={encoder_dir} "
                     f"--format=sentence_transformers --export_dir={output_dir}/st")
    else:
        lines.append(f"  publish:  not yet for {family} encoders (they export as SavedModels "
                     "only: docs/families.md)")
    return lines


def resolve_run(r):
    """Strategy, mixed precision, the worker's role and directory, the data and the steps.
    Everything that can be refused (bad data, an output folder holding something else) is
    refused here, before the run writes a file or loads a model."""
    config = resolve_encoder_fields(r.config)  # (a config built without build_config)
    r.spec = get_method(r.method)
    r.reranked = getattr(r.spec.cls, "dev_selection", None) == "reranked"
    if r.reranked:
        rerank_dev.check_rerank_config(config)
    if config.cpu_replicas:
        _split_cpu(config.cpu_replicas)
    # First, before anything initialises TensorFlow's context (multi-worker collectives
    # must be configured at startup).
    r.strategy = distribute.get_strategy(config.strategy, config.tpu)
    keras.utils.set_random_seed(config.seed)
    if config.mixed_precision:
        keras.mixed_precision.set_global_policy(config.mixed_precision)
    replicas = r.strategy.num_replicas_in_sync
    if config.batch_size % replicas:
        raise ConfigError(f"batch_size {config.batch_size} is not divisible by the "
                          f"{replicas} replicas")
    r.examples = load_training_sources(r.spec, config)
    if not len(r.examples):
        raise ConfigError(f"train_data={config.train_data!r} holds no training examples "
                          f"for {r.method} (data kind {r.spec.data_kind})")
    r.steps = total_steps(config, len(r.examples))
    r.monitor = monitor_of(config.eval_data)
    if r.monitor == "spearman":
        if config.dev_pool:
            raise ConfigError(f"dev_pool={config.dev_pool}: a candidate pool narrows a "
                              f"retrieval dev split (eval_data=beir:DIR:dev), not "
                              f"eval_data={config.eval_data!r}")
        r.dev_pairs = readers.read_dev_pairs(config.eval_data, config.eval_data_dir)
    else:
        r.dev_split = read_task_split(config.eval_data, default_split="dev")
        if r.reranked:
            rerank_dev.check_rerank_depth(config, r.dev_split)
    # Multi-worker: only the chief writes the run directory; the other workers write
    # checkpoints (saving may need every worker) to a private directory removed at the end.
    r.chief, r.task_id = distribute.worker_role(r.strategy)
    check_test_tasks(config, need_data_dir=True)
    if config.get("report_geometry") and not config.get("eval_data_dir"):
        raise ConfigError("report_geometry needs eval_data_dir (alignment and uniformity are "
                          "measured on its STS-B test pairs): set --config.eval_data_dir")
    check_encoder_name(config.encoder)  # a misspelt name, before the folder is judged
    if r.chief:
        r.status = prepare_run_dir(r.output_dir, dict(config, method=r.method), r.overwrite)
    else:  # the chief judges the folder; a worker only follows a finished run
        r.status = "finished" if run_finished(r.output_dir) else "resume"
    if r.status == "finished":
        return
    if not r.chief:
        r.write_dir = os.path.join(r.output_dir, ".workers", f"worker-{r.task_id}")
    if r.jit and replicas > 1 and not tf.config.list_logical_devices("GPU"):
        logging.info("jit_compile off: XLA on CPU cannot place variables across %d replicas",
                     replicas)
        r.jit = False


def build_run(r):
    """The encoder, the method model and its optimizer, in the strategy's scope; then
    the run takes its folder (`claim_run_dir`): a run whose encoder cannot load writes
    nothing and removes nothing."""
    with r.strategy.scope():
        r.encoder, r.model, r.optimizer = build_model(r.spec, r.config, r.steps, r.jit)
    claim_run_dir(r)


def claim_run_dir(r):
    """Writes the run's folder once the run can start: with --overwrite, the earlier run's
    files go now (`discard_run`), then the folder and config.json (the chief's)."""
    if r.status == "overwrite":
        discard_run(r.output_dir)
        r.status = "new"
    os.makedirs(r.write_dir, exist_ok=True)
    if r.chief:
        write_json_atomic(os.path.join(r.output_dir, "config.json"),
                          dict(r.config, method=r.method))


def _set_loss_scale(r):
    """mixed_float16: the checkpoint restores the dynamic loss scale as the earlier attempt
    adapted it. A resume that changes `loss_scale` (a recovery knob) starts from the new
    value instead; metrics.json's `loss_scale` records the setting (with each checkpoint)
    and, once the run ends, the final scale."""
    scale = getattr(r.optimizer, "dynamic_scale", None)
    if scale is None:
        return
    earlier = (r.metrics.get("loss_scale") or {}).get("setting")
    if r.start_step and earlier is not None and earlier != r.config.loss_scale:
        restored = float(keras.ops.convert_to_numpy(scale))
        scale.assign(r.config.loss_scale)
        logging.info("loss scale %g (loss_scale changed from %g; the checkpoint's adapted "
                     "scale %g is dropped)", r.config.loss_scale, earlier, restored)
    r.metrics["loss_scale"] = {"setting": r.config.loss_scale}


def restore_run(r):
    """Resumes from the last checkpoint, or (a new run) scores the starting encoder on the
    dev set and keeps its weights: it is the first candidate of dev selection."""
    config = r.config
    if r.dev_split is not None and not r.reranked and dev_pool_depth(
            config.dev_pool, len(r.dev_split.corpus)):
        _pool_dev_split(r)  # before restoring: the pool is the starting encoder's
    r.state = RunState(r.output_dir, r.model, r.optimizer, write_dir=r.write_dir)
    r.start_step = r.state.restore()
    # Every worker reads it (only the chief writes it): their divergence guards must agree.
    r.metrics = read_json(r.metrics_path, {}) if r.start_step else {}
    r.metrics.pop("stopped", None)  # an earlier attempt's divergence, being resumed
    _set_loss_scale(r)
    if r.reranked:
        # The retriever's dev top N: searched once per run (read back when resuming).
        r.first_stage = rerank_dev.first_stage(config, r.dev_split, r.output_dir,
                                               write=r.chief)
    if r.start_step:
        logging.info("resuming from step %d (checkpoint in %s)", r.start_step,
                     os.path.join(r.output_dir, "checkpoints"))
        if r.start_step % config.eval_every:
            raise ConfigError(
                f"the checkpoint in {r.output_dir} is at step {r.start_step}, not a multiple "
                f"of eval_every={config.eval_every} (an earlier tfsent saved one when an "
                "early stop cut an epoch short): resuming there would run past the last "
                "step; rerun with --overwrite to start again")
        if "dev_history" in r.metrics:  # written before each checkpoint: none past it
            r.metrics["dev_history"] = [h for h in r.metrics["dev_history"]
                                        if h.get("step", 0) <= r.start_step]
        return
    # A run from step 0 in a folder it owns (an earlier attempt that stopped before its
    # first checkpoint, e.g. the divergence guard's early check): that attempt's best/
    # would compete with this run's evaluations and could be exported.
    r.state.discard_best()
    if r.reranked:
        # The starting encoder under an untrained score head is no candidate: the best
        # trained checkpoint is exported, measured against the retriever alone.
        r.metrics["dev_before"] = rerank_dev.RerankDevEvaluation(
            r.dev_split, *r.first_stage, config.rerank_top).retriever_report()
        if r.chief:
            write_json_atomic(r.metrics_path, r.metrics)
        return
    # "Before training" is the pretrained encoder itself (without an untrained head).
    before = _dev_evaluation(r, use_head=False).evaluate(r.model)
    before.pop("per_query", None)
    r.metrics["dev_before"] = before
    logging.info("dev before training: %s %.2f (the starting encoder is the first "
                 "candidate for the best)", r.monitor, before[r.monitor])
    if not r.chief:
        return
    r.state.save_start(before[r.monitor])
    if config.get("report_geometry") and config.eval_data_dir:
        r.metrics["geometry_before"] = _geometry(r.model, config, use_head=False)
    write_json_atomic(r.metrics_path, r.metrics)


# dev_pool None: the pool depth, and the corpus size above which it applies (measured on
# Climate-FEVER dev: at depth 100 nDCG@10 within 0.1 of the whole corpus', docs/search.md)
AUTO_DEV_POOL, AUTO_DEV_POOL_MIN_DOCUMENTS = 100, 20_000


def dev_pool_depth(dev_pool, corpus_size):
    """The pool depth a run uses: `dev_pool` when set (0: the whole corpus), else
    AUTO_DEV_POOL for a corpus above AUTO_DEV_POOL_MIN_DOCUMENTS documents."""
    if dev_pool is not None:
        return dev_pool
    return AUTO_DEV_POOL if corpus_size > AUTO_DEV_POOL_MIN_DOCUMENTS else 0


def _pool_dev_split(r):
    """Narrows the retrieval dev split to a fixed candidate pool (`dev_pool`: the judged
    documents and the starting encoder's top N of each dev query, docs/search.md): read
    from the run folder's dev_pool.json, or built from the model as it is before any
    checkpoint is restored (the starting encoder) and written there."""
    config = r.config
    top = dev_pool_depth(config.dev_pool, len(r.dev_split.corpus))
    path = os.path.join(r.output_dir, DEV_POOL_FILE)
    saved = read_json(path, None)
    if saved and saved.get("top") == top and saved.get("split") == config.eval_data:
        r.dev_split = r.dev_split.with_corpus_subset(saved["documents"])
        logging.info("dev candidate pool: %d of %d documents (from %s)",
                     len(saved["documents"]), saved["corpus_documents"], path)
        return
    corpus_size = len(r.dev_split.corpus)
    r.dev_split, doc_ids = pooled_split(
        DevEncoder(r.model, use_head=False), r.dev_split, top,
        max_seq_length=config.eval_max_seq_length, query_prompt=config.query_prompt or "",
        document_prompt=config.document_prompt or "")
    if r.chief:
        write_json_atomic(path, {"split": config.eval_data, "top": top,
                                 "corpus_documents": corpus_size, "documents": doc_ids})


def fit_run(r):
    """Keras fit with the CLI's callbacks; returns (nan_guard, divergence_guard)."""
    config = r.config
    tb_dir = os.path.join(r.write_dir, "tb")
    r.writer = tf.summary.create_file_writer(tb_dir)
    history = r.metrics.setdefault("dev_history", [])
    name = dev_name(config.eval_data)
    start = r.metrics.get("dev_before", {})
    nan_guard = NanGuard(config.max_grad_norm)
    throughput = Throughput(config.batch_size)
    evaluation = _dev_evaluation(r, skip_when=nan_guard.failed)
    keeper = BestEncoderKeeper(r.state, evaluation, name=name, baseline=start.get(r.monitor),
                               history=history, monitor=r.monitor)
    board = DevTensorBoard(r.writer, evaluation, name=name, log_dir=tb_dir,
                           projector_every=config.projector_every,
                           projector_points=config.projector_points)
    guard = DivergenceGuard(evaluation, start=start, max_drop=config.divergence_drop,
                            collapse_cosine_rise=config.collapse_cosine_rise,
                            collapse_uniformity_ratio=config.collapse_uniformity_ratio,
                            monitor=r.monitor)
    guard.remember(history)  # a resumed run: the best before the interruption counts

    # Seconds in `fit` over every attempt: an interrupted one's count up to its last
    # checkpoint is read back from metrics.json (the steps after it are trained again).
    clock = {"before": r.metrics.get("train_seconds", 0.0), "start": None}

    def count_train_seconds():
        if clock["start"] is not None:
            r.metrics["train_seconds"] = clock["before"] + time.time() - clock["start"]

    def write_metrics():  # the dev history so far, with each checkpoint
        count_train_seconds()
        write_json_atomic(r.metrics_path, r.metrics)

    callbacks = [
        # The progress bar first: its epoch line ends before the dev evaluation logs
        # (Keras adds its own last, and the dev log lines were glued onto the bar).
        keras.callbacks.ProgbarLogger(),
        nan_guard, throughput, evaluation, keeper,
        RunCheckpoint(r.state, skip_when=nan_guard.failed, every=config.eval_every,
                      before_save=write_metrics if r.chief else None), board, guard,
        keras.callbacks.TensorBoard(log_dir=tb_dir,
                                    update_freq=max(1, 10 // config.steps_per_execution),
                                    write_graph=False),
        RunClock(r.steps, throughput),
    ]
    if r.start_step == 0 and 0 < config.first_eval_step < config.eval_every:
        callbacks.insert(4, EarlyDevCheck(config.first_eval_step, evaluation, keeper, board,
                                          guard, skip_when=nan_guard.failed))
    if r.start_step < r.steps:
        dataset = make_dataset(r.spec, config, r.encoder, r.examples, r.start_step,
                               r.output_dir, model=r.model)
        logging.info("training %s: %d steps, global batch %d on %d replica(s), jit %s",
                     r.method, r.steps, config.batch_size, r.strategy.num_replicas_in_sync,
                     r.model.jit_compile)
        clock["start"] = time.time()
        r.model.fit(dataset, epochs=r.steps // config.eval_every,
                    steps_per_epoch=config.eval_every,
                    initial_epoch=r.start_step // config.eval_every, callbacks=callbacks,
                    verbose=1)
        count_train_seconds()
        r.metrics["examples_per_second"] = throughput.examples_per_second()
    if isinstance(r.examples, mixture.SourceMixture):
        # Replayed from the seeded choice stream for the steps taken (tfsent.data.mixture):
        # exact under steps_per_execution, prefetching and any replica count.
        drawn = r.examples.drawn(int(r.optimizer.iterations.numpy()), config.batch_size)
        r.metrics.update(drawn)
        for key, counts in sorted(drawn.items()):
            logging.info("%s drawn: %s", key, ", ".join(f"{k} {v}" for k, v in counts.items()))
    return nan_guard, guard


def finalize_run(r, nan_guard, guard):
    """Stops on a divergence; otherwise picks the export (best checkpoint, or the starting
    encoder when nothing beat it), exports, saves the encoder directory, reports."""
    config, metrics, state = r.config, r.metrics, r.state
    final_step = int(r.optimizer.iterations.numpy())
    metrics["steps"] = final_step
    if getattr(r.optimizer, "dynamic_scale", None) is not None:
        metrics.setdefault("loss_scale", {})["final"] = float(
            keras.ops.convert_to_numpy(r.optimizer.dynamic_scale))
    if nan_guard.failed_step is not None:
        _stop_diverged(state, metrics, r.metrics_path if r.chief else None,
                       nan_guard.failed_step, nan_guard.reason)
    if guard.reason is not None:
        metrics["divergence_guard"] = f"{guard.reason} at step {guard.stopped_step}"
    if not r.chief:
        r.writer.close()
        shutil.rmtree(r.write_dir, ignore_errors=True)
        logging.info("worker %d done at step %d (the chief exports)", r.task_id, final_step)
        return metrics
    history = metrics.get("dev_history", [])
    if history:
        metrics["dev_final"] = {k: v for k, v in history[-1].items() if k != "step"}
    head, exported = choose_export(r.state, r.model,
                                   metrics.get("dev_before", {}).get(r.monitor),
                                   config.export_if_worse, metrics, r.monitor)
    export_step = exported["step"] if exported["step"] is not None else final_step
    if r.reranked:
        return _finalize_cross_encoder(r, exported, export_step)
    export_path = formats.export(r.encoder, os.path.join(r.output_dir, "export"),
                                 format="tf_saved_model", pooling=r.model.export_pooling,
                                 head=head, metadata={"method": r.method, "step": export_step,
                                                      "exported": exported["which"]},
                                 max_seq_length=config.eval_max_seq_length,
                                 query_prompt=config.query_prompt,
                                 document_prompt=config.document_prompt)
    metrics["export"] = export_path
    metrics["exported"] = exported
    # The other formats `export_formats` names (any of tfsent.formats.FORMATS but the
    # corpus-indexing ones), each to OUTPUT_DIR/export_<format>/<version>.
    others = formats.export_run_formats(
        r.encoder, r.output_dir, config.export_formats, pooling=r.model.export_pooling,
        head=head, max_seq_length=config.eval_max_seq_length,
        metadata={"method": r.method, "step": export_step},
        query_prompt=config.query_prompt, document_prompt=config.document_prompt)
    if others:
        metrics["exports"] = others
    if head is None:  # a head on top has no place in an encoder directory
        r.encoder.pooling = r.model.export_pooling
        # The run's prompts (the folder's unless the config set others), as the export's.
        prompts = {"query_prompt": config.query_prompt or "",
                   "document_prompt": config.document_prompt or ""}
        r.encoder.prompts = prompts if any(prompts.values()) else None
        r.encoder.save_encoder_dir(os.path.join(r.output_dir, "encoder"))
    if config.test_tasks:
        metrics["test"] = _evaluate_tasks(r.model, config)
    if config.get("report_geometry") and config.eval_data_dir:
        metrics["geometry_after"] = _geometry(r.model, config, use_head=head is not None)
    if config.get("nli_eval_split"):
        _nli_accuracy(r.model, config, metrics)
    write_json_atomic(r.metrics_path, metrics)
    score = exported["score"]
    logging.info("exported the %s (dev %s %s, step %s): %s", exported["which"], r.monitor,
                 "n/a" if score is None else f"{score:.2f}", exported["step"], export_path)
    return metrics


def _finalize_cross_encoder(r, exported, export_step):
    """A cross-encoder run's end: the chosen weights exported as format cross_encoder
    (`score(queries, passages)`), metrics.json, a warning when reranking did not beat
    the retriever on dev."""
    config, metrics = r.config, r.metrics
    metrics["export"] = r.model.export(
        os.path.join(r.output_dir, "export"), max_seq_length=config.eval_max_seq_length,
        metadata={"step": export_step, "exported": exported["which"],
                  "retriever": rerank_dev.retriever_of(config),
                  "rerank_top": config.rerank_top})
    metrics["exported"] = exported
    write_json_atomic(r.metrics_path, metrics)
    score, first = exported["score"], metrics["dev_before"]["retriever_ndcg@10"]
    if score is not None and score <= first:
        logging.warning("the best reranked dev nDCG@10 (%.2f) does not beat the retriever's "
                        "own (%.2f): reranking with this export makes its ranking worse",
                        score, first)
    logging.info("exported the %s (dev reranked nDCG@10 %s, retriever %.2f, step %s): %s",
                 exported["which"], "n/a" if score is None else f"{score:.2f}", first,
                 exported["step"], metrics["export"])
    return metrics


def _nli_accuracy(model, config, metrics):
    """NLI accuracy of the model's head on the train_data source's `nli_eval_split`
    (skipped for the demo, which has no such split, and for a mixture of sources)."""
    sources = parse_sources(config.train_data)
    if len(sources) > 1:
        logging.info("nli_eval_split: skipped (train_data is a mixture of %d sources)",
                     len(sources))
        return
    if sources[0] in DEMO_NAMES:
        return
    rows = readers.read_nli_pairs(sources[0], config.nli_eval_split)
    acc = model.nli_accuracy(rows, max_seq_length=config.eval_max_seq_length)
    metrics[f"nli_accuracy_{config.nli_eval_split}"] = acc
    logging.info("NLI accuracy on %s (%s): %.2f", sources[0], config.nli_eval_split, acc)


def _cached_embedder(config, output_dir, encoder_name, pooling, compute):
    """`embed(sentences)`: `compute(sentences)`, the embeddings of a frozen encoder
    (CLSR's base, distill's teacher), through the on-disk embedding cache
    (config.cache_dir, default beside the run directory) keyed by `encoder_name`,
    `pooling` (what else defines the embeddings), max_seq_length and the sentences."""
    cache_dir = config.cache_dir or os.path.join(
        os.path.dirname(os.path.abspath(output_dir)), "embedding_cache")

    def embed(sentences):
        emb, _ = cached_embeddings(cache_dir, encoder_name, pooling, config.max_seq_length,
                                   sentences, compute)
        return emb

    return embed


def _dev_evaluation(r, use_head=True, skip_when=None):
    """The run's dev evaluation callback: STS pairs (Spearman) or a BEIR split (nDCG@10,
    the corpus re-encoded at each evaluation)."""
    config = r.config
    if r.reranked:
        return rerank_dev.RerankDevEvaluation(r.dev_split, *r.first_stage, config.rerank_top,
                                              max_seq_length=config.eval_max_seq_length,
                                              skip_when=skip_when, verbose=1)
    if r.monitor == "spearman":
        return STSDevEvaluation(*r.dev_pairs, prefix="val", use_head=use_head,
                                max_seq_length=config.eval_max_seq_length,
                                skip_when=skip_when)
    return RetrievalDevEvaluation(r.dev_split, prefix="val", use_head=use_head,
                                  max_seq_length=config.eval_max_seq_length,
                                  query_prompt=config.query_prompt,
                                  document_prompt=config.document_prompt,
                                  skip_when=skip_when, verbose=1)


def _stop_diverged(state, metrics, metrics_path, failed_step, reason):
    """Records a divergence (non-finite loss, exploding gradients) and raises TrainingError:
    no export, the best weights and the last good checkpoint stay as they were."""
    metrics["stopped"] = f"{reason} at step {failed_step}"
    if metrics_path:
        write_json_atomic(metrics_path, metrics)
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
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * n)
    except RuntimeError as e:
        raise ConfigError(f"cpu_replicas={n}: TensorFlow's devices are already initialised "
                          f"in this process ({e})") from None


def _geometry(model, config, use_head=True):
    """Alignment / uniformity (Wang and Isola) on STS-B test, logged and returned."""
    result = align_uniform(
        lambda s: model.encode(s, batch_size=128, max_seq_length=config.eval_max_seq_length,
                               use_head=use_head), config.eval_data_dir)
    logging.info("alignment %.4f uniformity %.4f (STS-B test)", result["align"],
                 result["uniform"])
    return result


def _evaluate_tasks(model, config):
    """The run's `test_tasks` on the exported weights (checked before training:
    `tfsent.training.config.check_test_tasks`)."""
    return run_tasks(model, config.eval_data_dir, config.test_tasks,
                     max_seq_length=config.eval_max_seq_length)
