"""tfsent's side of the benchmarks, run in a fresh process by the benchmark scripts.

    python benchmarks/tfsent_worker.py --mode=train|encode|peak [flags]

Prints one result line (see common.emit_result). Each mode runs in its own process so that
its memory high-water mark (ru_maxrss) belongs to that measurement alone.

  train   unsupervised SimCSE on minilm-l6 built exactly as `python -m tfsent.train
          --method=simcse_unsup` builds it (tfsent.training.resolve_config / make_optimizer /
          make_dataset, the registry's builder, model.compile with the config's jit_compile,
          model.fit on the tf.data pipeline), without the dev-evaluation, checkpoint and
          TensorBoard callbacks, which are not training. Steps are timed by a callback that
          reads the loss (which waits for the step, as the CLI's NaN guard does).
  profile the same model's train_step taken apart (train_profile.py): forward, forward +
          backward (with and without the token-embedding gradient), the optimizer update
          (with and without the embedding), the whole step, each compiled alone on one
          batch, and the input pipeline alone.
  encode  the exported SavedModel (strings in, `serving_default`) and
          `SentenceEncoder.encode`, on the same sentences and batch size, alternating repeats;
          each also with XLA (`export_encoder(jit_compile=True)`, `encode(jit_compile=True)`:
          bucketed shapes, compiled during the warmup passes).
  peak    float32 matmul FLOP/s of this machine (tf.linalg.matmul, eager and XLA).
  gemm    FLOP/s of each matmul of a training step (common.training_gemms), XLA-compiled
          and in TF's graph executor.
  serve   serve_latency.py's tfsent side (the rows named by --serve_paths): minilm-l6
          exported with tfsent.export (plain, and `jit_compile=True`), loaded with
          tf.saved_model.load, and `serving_default(sentences=...)` timed per request
          (common.measure_serving); the plain export also loaded as TF Serving's C++
          loader loads it (TF1 session, variables restored through the saver_def;
          `session.run` per request), and its batch-1 requests traced op by op in that
          session (--op_profile_calls); and tfsent's onnx export (tfsent.formats.onnx,
          fp32 / int8) in ONNX Runtime, each request tokenized by the exported
          tokenizer.json (rows onnx, onnx_int8).
  serve_litert
          serve_latency.py's LiteRT rows: minilm-l6 exported with tfsent.formats.litert
          (fp32, and dynamic-range int8), each request tokenized as a LiteRT user does it
          (the `tokenizers` library on the tokenizer.json written beside the model,
          truncation at --max_seq_length, padding to the longest row) and run by
          ai-edge-litert's Interpreter (XNNPACK, --litert_threads threads; one Interpreter
          per calling thread, as a server's workers would each hold one).
  serve_student
          serve_latency.py's student rows: the encoder folder --student (e.g. a
          `--method=distill` run's export) exported and timed as `serve` times minilm-l6
          (SavedModel serving_default; onnx fp32 / int8 in ONNX Runtime): rows
          student_savedmodel, student_onnx, student_onnx_int8 (--serve_paths).
"""

import os
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
# tfsent before TensorFlow: its CPU settings (oneDNN on or off) are chosen before TF starts
# (tfsent.cpu_settings); imported after TF, oneDNN would be TF's default whatever they say.
import tfsent  # noqa: E402,F401

FLAGS = flags.FLAGS
flags.DEFINE_enum("mode", None, ["train", "profile", "op_profile", "encode", "peak", "gemm",
                                  "serve", "serve_litert", "serve_student"],
                  "What to measure.")
flags.DEFINE_string("data", None, "Sentence file (one a line).")
flags.DEFINE_integer("max_sentences", 0, "Use only the first N sentences (0: all).")
flags.DEFINE_integer("batch_size", 64, "Batch size.")
flags.DEFINE_integer("max_seq_length", 32, "Truncation length.")
flags.DEFINE_integer("steps", 30, "train: optimizer steps.")
flags.DEFINE_integer("warmup_steps", 3, "train: first steps left out of the timing.")
flags.DEFINE_multi_string("tfsent_config", [], "train: FIELD=VALUE run-config overrides "
                          "(as --config.FIELD=VALUE of tfsent.train).")
flags.DEFINE_integer("repeats", 3, "encode/peak: timed repetitions.")
flags.DEFINE_integer("warmup_passes", 1, "encode: untimed passes over the sentences first.")
flags.DEFINE_integer("keep_embeddings", 8, "encode: embeddings of the first K sentences to "
                     "return (agreement check).")
flags.DEFINE_integer("matmul_size", 2048, "peak: n of the n x n x n matmul.")
flags.DEFINE_integer("tokens", 4096, "gemm: rows (tokens of a step).")
flags.DEFINE_integer("hidden", 384, "gemm: hidden size.")
flags.DEFINE_integer("intermediate", 1536, "gemm: FFN size.")
flags.DEFINE_integer("calls", 200, "serve: timed requests per batch-1/batch-8 scenario.")
flags.DEFINE_integer("throughput_calls", 32, "serve: timed requests of the throughput batch.")
flags.DEFINE_integer("throughput_batch", 64, "serve: batch size of the throughput scenario.")
flags.DEFINE_integer("warmup_calls", 5, "serve: untimed requests per caller first.")
flags.DEFINE_list("serve_paths", ["savedmodel", "savedmodel_tf1", "savedmodel_xla"],
                  "serve: the rows to time (serve_latency.py's tfsent --paths names).")
flags.DEFINE_integer("op_profile_calls", 50, "serve: batch-1 requests traced op by op in "
                     "the TF1 session (0: no op profile).")
flags.DEFINE_string("student", None, "serve_student: the student's encoder folder.")
flags.DEFINE_integer("encode_sentences", 512, "op_profile: sentences encoded in the trace.")
flags.DEFINE_integer("encode_max_seq_length", 256, "op_profile: truncation of the encode trace.")
flags.DEFINE_integer("litert_threads", 0, "serve_litert: threads of each LiteRT "
                     "Interpreter (0: one per CPU core).")


def _build_training():
    """(config, encoder, model, optimizer, examples, dataset) of unsupervised SimCSE on
    minilm-l6, built as `python -m tfsent.train --method=simcse_unsup` builds them, at the
    peer's tau 0.05 and lr 3e-5."""
    import keras

    from tfsent.cpu_settings import jit_train
    from tfsent.training import distribute
    from tfsent.methods import get_method
    from tfsent.training import build_model, load_training_data, make_dataset, resolve_config

    # tau 0.05 and lr 3e-5 as the peer trains (the paper's; simcse_unsup's CPU demo
    # defaults are tau 0.2, lr 1e-5 since #21): the same FLOPs either way, the same update.
    overrides = [f"train_data={FLAGS.data}", f"batch_size={FLAGS.batch_size}",
                 f"max_seq_length={FLAGS.max_seq_length}", f"steps={FLAGS.steps}",
                 "encoder=minilm-l6", "pooling=mean", "temperature=0.05",
                 "learning_rate=3e-5"] + list(FLAGS.tfsent_config)
    config = resolve_config("simcse_unsup", None, overrides)
    spec = get_method("simcse_unsup")
    keras.utils.set_random_seed(config.seed)
    if config.mixed_precision:
        keras.mixed_precision.set_global_policy(config.mixed_precision)
    strategy = distribute.get_strategy(config.strategy, config.tpu)
    examples = load_training_data(spec, config)
    if FLAGS.max_sentences:
        examples = examples[:FLAGS.max_sentences]
    with strategy.scope():
        encoder, model, optimizer = build_model(spec, config, FLAGS.steps,
                                                jit_train(config.jit_compile))
    dataset = make_dataset(spec, config, encoder, examples, 0, output_dir=None)
    return config, encoder, model, optimizer, examples, dataset


def train_mode():
    """Times SimCSE training steps; returns the result dict."""
    import keras
    import numpy as np
    import tensorflow as tf

    from tfsent.cpu_settings import jit_train, summary
    from tfsent.encoders import resolve_short_name

    config, encoder, model, optimizer, examples, dataset = _build_training()
    mask = encoder.tokenizer(examples)["padding_mask"]
    mean_tokens = float(tf.reduce_mean(tf.reduce_sum(tf.cast(mask, tf.float32), axis=1)))
    rss_after_load = common.current_rss_mb()

    class StepTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.ends, self.losses = [], []

        def on_train_batch_end(self, batch, logs=None):
            self.losses.append(float(logs["loss"]))  # waits for the step to finish
            self.ends.append(time.perf_counter())

    timer = StepTimer()
    t0 = time.perf_counter()
    model.fit(dataset, epochs=1, steps_per_epoch=FLAGS.steps,
              callbacks=[timer], verbose=0)
    result = common.window_throughput(timer.ends, FLAGS.warmup_steps, FLAGS.batch_size *
                                      config.steps_per_execution)
    model_dir = resolve_short_name("minilm-l6")
    result.update({
        "first_step_s": round(timer.ends[0] - t0, 2),
        "final_loss": timer.losses[-1], "losses_finite": bool(np.all(np.isfinite(timer.losses))),
        "max_rss_mb": round(common.max_rss_mb(), 1), "rss_after_load_mb": round(rss_after_load, 1),
        "num_layers": encoder.num_layers, "hidden": encoder.hidden_dim,
        "intermediate": int(encoder.backbone.intermediate_dim),
        "n_sentences": len(examples), "mean_tokens": round(mean_tokens, 2),
        "jit_compile": jit_train(config.jit_compile), "cpu_settings": summary(),
        "mixed_precision": config.mixed_precision,
        "overrides": list(FLAGS.tfsent_config), "optimizer": type(optimizer).__name__,
        "tensorflow": tf.__version__, "keras": keras.__version__,
        "checkpoint_sha256": common.file_sha256(os.path.join(model_dir, "model.safetensors")),
    })
    return result


def profile_mode():
    """Where a SimCSE training step's time goes: each part of `train_step` compiled alone
    (as the step is: XLA when the config's jit_compile is on) on one fixed batch, and the
    tf.data pipeline alone."""
    import numpy as np
    import tensorflow as tf

    from tfsent.cpu_settings import jit_train

    config, encoder, model, optimizer, examples, dataset = _build_training()
    jit = jit_train(config.jit_compile)
    variables = list(model.trainable_variables)
    optimizer.build(variables)
    embedding = encoder.token_embedding_matrix
    others = [v for v in variables if v.path != embedding.path]
    assert len(others) == len(variables) - 1, "the token embedding is not trainable?"
    iterator = iter(dataset)
    batch = next(iterator)
    parts = {}

    def input_batch():
        next(iterator)

    def compiled(fn):
        return tf.function(fn, jit_compile=jit)

    def loss_fn():
        return model.compute_losses(batch, training=True)[0]

    def gradient_norm(var_list):
        def fn():
            with tf.GradientTape() as tape:
                loss = loss_fn()
            return tf.linalg.global_norm(tape.gradient(loss, var_list))
        return compiled(fn)

    def gradients():
        with tf.GradientTape() as tape:
            loss = loss_fn()
        return [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]

    grads = compiled(gradients)()
    by_path = {v.path: g for v, g in zip(variables, grads)}

    def apply(var_list):
        pairs = [(by_path[v.path], v) for v in var_list]

        def fn():
            optimizer.apply_gradients(pairs)
            return tf.constant(0)
        return compiled(fn)

    def step_fn():
        return model.train_step(batch)["loss"]

    timed = [("input_pipeline", input_batch),
             ("forward", compiled(loss_fn)),
             ("forward_backward", gradient_norm(variables)),
             ("forward_backward_without_embedding", gradient_norm(others)),
             ("optimizer_update", apply(variables)),
             ("optimizer_update_without_embedding", apply(others)),
             ("train_step", compiled(step_fn))]
    for name, fn in timed:
        if name == "input_pipeline":
            call = fn
        else:
            def call(fn=fn):
                np.asarray(fn())  # waits for the result
        seconds = common.time_calls(call, FLAGS.repeats)
        parts[name] = {"best_ms": min(seconds) * 1e3,
                       "median_ms": common.median(seconds) * 1e3}
    return {"parts": parts, "jit_compile": jit, "optimizer": type(optimizer).__name__,
            "num_layers": encoder.num_layers, "hidden": encoder.hidden_dim,
            "intermediate": int(encoder.backbone.intermediate_dim),
            "parameters": int(sum(np.prod(v.shape) for v in variables)),
            "embedding_parameters": int(np.prod(embedding.shape)),
            "batch_shapes": tf.nest.map_structure(lambda t: list(t.shape), batch),
            "mixed_precision": config.mixed_precision, "tensorflow": tf.__version__}


def _time_passes(fns, warmup_passes, repeats):
    """Runs each fn `warmup_passes` times, then `repeats` timed rounds that alternate the fns;
    returns {name: [seconds, ...]}."""
    for fn in fns.values():
        for _ in range(warmup_passes):
            fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def op_profile_mode():
    """Op by op, under TensorFlow's profiler: `--steps` SimCSE training steps run by
    `model.fit` as train_mode runs them (after `--warmup_steps` untraced), and one
    `SentenceEncoder.encode` of `--encode_sentences` sentences (after one untraced pass),
    with the CPU settings in force (`tfsent.cpu_settings`: the environment picks them).
    Returns each trace's self time per op kind (common.xplane_self_times) and wall time."""
    import glob
    import shutil
    import tempfile

    import tensorflow as tf

    from tfsent import cpu_settings

    config, encoder, model, optimizer, examples, dataset = _build_training()
    model.fit(dataset, epochs=1, steps_per_epoch=FLAGS.warmup_steps, verbose=0)
    sentences = common.read_sentences(FLAGS.data, FLAGS.encode_sentences)

    def encode():
        encoder.encode(sentences, batch_size=FLAGS.batch_size, verbose=0,
                       max_seq_length=FLAGS.encode_max_seq_length)

    encode()
    result = {"cpu_settings": cpu_settings.summary(), "steps": FLAGS.steps,
              "encode_sentences": len(sentences), "jit_train": bool(model.jit_compile),
              "jit_encode": cpu_settings.jit_encode()}
    for name, run in (("train", lambda: model.fit(dataset, epochs=1, verbose=0,
                                                  steps_per_epoch=FLAGS.steps)),
                      ("encode", encode)):
        logdir = tempfile.mkdtemp(prefix=f"tfsent-op-profile-{name}-")
        try:
            tf.profiler.experimental.start(logdir)
            start = time.perf_counter()
            run()
            wall = time.perf_counter() - start
            tf.profiler.experimental.stop()
            (path,) = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
            result[name] = dict(common.top_ops(common.xplane_self_times(path), 30),
                                wall_s=round(wall, 3))
        finally:
            shutil.rmtree(logdir, ignore_errors=True)
    return result


def encode_mode():
    """Times the SavedModel and SentenceEncoder.encode; returns the result dict."""
    import shutil
    import tempfile

    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

    from tfsent import cpu_settings
    from tfsent.encoders import load_encoder, resolve_short_name
    from tfsent.formats.saved_model import export_encoder
    from tfsent.serving import SavedModelEncoder

    sentences = common.read_sentences(FLAGS.data, FLAGS.max_sentences)
    n, bs = len(sentences), FLAGS.batch_size
    encoder = load_encoder("minilm-l6", pooling="mean", max_seq_length=FLAGS.max_seq_length)
    tmp = tempfile.mkdtemp(prefix="tfsent-bench-export-")
    try:
        serves, paths = {}, {}
        for name, jit in (("savedmodel", False), ("savedmodel_xla", True)):
            paths[name] = export_encoder(encoder, tmp, pooling="mean", jit_compile=jit,
                                         max_seq_length=FLAGS.max_seq_length)
            serves[name] = tf.saved_model.load(paths[name]).signatures["serving_default"]
        client = SavedModelEncoder(paths["savedmodel"])
        # Longest first by characters, as sentence-transformers' encode batches (a client
        # of the SavedModel sends strings): each batch is padded to its own longest
        # sentence. SentenceEncoder.encode batches by token count instead.
        order = sorted(range(n), key=lambda i: -len(sentences[i]))
        outputs = {}

        def savedmodel(name):
            def run():
                out = np.zeros((n, encoder.hidden_dim), np.float32)
                for start in range(0, n, bs):
                    idx = order[start:start + bs]
                    batch = tf.constant([sentences[i] for i in idx])
                    out[idx] = serves[name](sentences=batch)["embedding"].numpy()
                outputs[name] = out
            return run

        def encoder_encode(name, jit):
            def run():
                outputs[name] = encoder.encode(sentences, batch_size=bs, verbose=0,
                                               jit_compile=jit)
            return run

        def savedmodel_by_tokens():  # tfsent's client: batches by `count_tokens`
            outputs["savedmodel_by_tokens"] = client.encode(sentences, batch_size=bs)

        times = _time_passes({"savedmodel": savedmodel("savedmodel"),
                              "savedmodel_by_tokens": savedmodel_by_tokens,
                              "encoder": encoder_encode("encoder", False),
                              "savedmodel_xla": savedmodel("savedmodel_xla"),
                              "encoder_xla": encoder_encode("encoder_xla", True)},
                             FLAGS.warmup_passes, FLAGS.repeats)
        lengths = encoder.tokenize_all(sentences).lengths
        widths = [int(max(lengths[i] for i in order[s:s + bs])) for s in range(0, n, bs)]
        by_tokens = np.argsort(-lengths, kind="stable")  # as SentenceEncoder.encode
        encoder_widths = [int(lengths[by_tokens[s:s + bs]].max()) for s in range(0, n, bs)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    k = FLAGS.keep_embeddings
    model_dir = resolve_short_name("minilm-l6")
    result = {}
    for name in times:
        result[f"{name}_sent_per_s"] = n / min(times[name])
        result[f"{name}_seconds"] = [round(t, 3) for t in times[name]]
        result[f"{name}_embeddings"] = outputs[name][:k].tolist()
    return {
        **result,
        "n_sentences": n, "max_rss_mb": round(common.max_rss_mb(), 1),
        "tensorflow": tf.__version__, "batch_widths": widths,
        "encoder_batch_widths": encoder_widths,
        "cpu_settings": cpu_settings.summary(),
        "num_layers": encoder.num_layers, "hidden": encoder.hidden_dim,
        "intermediate": int(encoder.backbone.intermediate_dim),
        "checkpoint_sha256": common.file_sha256(os.path.join(model_dir, "model.safetensors")),
    }


def serve_mode():
    """Times requests to the exported SavedModel's serving_default; returns the result."""
    import shutil
    import tempfile

    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

    from tfsent.encoders import load_encoder, resolve_short_name
    from tfsent.formats.saved_model import export_encoder

    sentences = common.read_sentences(FLAGS.data, FLAGS.max_sentences)
    encoder = load_encoder("minilm-l6", pooling="mean", max_seq_length=FLAGS.max_seq_length)
    scenarios = common.serving_scenarios(FLAGS.calls, FLAGS.throughput_calls,
                                         FLAGS.throughput_batch)
    paths = FLAGS.serve_paths
    result = {"n_sentences": len(sentences), "scenarios": {}, "embeddings": {}}
    k = FLAGS.keep_embeddings
    measure = _measurer(result, sentences, scenarios)

    def saved_model_call(path):
        serve = tf.saved_model.load(path).signatures["serving_default"]
        return lambda batch: serve(sentences=tf.constant(batch))["embedding"].numpy()

    tmp = tempfile.mkdtemp(prefix="tfsent-bench-serve-")
    try:
        # The plain export is always written: its embeddings are every row's reference.
        plain = export_encoder(encoder, os.path.join(tmp, "savedmodel"), pooling="mean",
                               max_seq_length=FLAGS.max_seq_length)
        call = saved_model_call(plain)
        if "savedmodel" in paths:
            measure("savedmodel", call)
            result["encode_ids"] = _time_encode_ids(tf.saved_model.load(plain), encoder,
                                                    sentences, scenarios)
        else:
            result["embeddings"]["savedmodel"] = np.asarray(call(sentences[:k])).tolist()
        if "savedmodel_tf1" in paths:
            session = TFServingSession(plain)
            measure("savedmodel_tf1", session.embed)
            if FLAGS.op_profile_calls:
                result["op_profile_b1"] = session.op_profile(common.request_batches(
                    sentences, 1, FLAGS.op_profile_calls))
                result["op_profile_b1"]["matmul_weight_bytes"] = _matmul_weight_bytes(encoder)
        if "savedmodel_xla" in paths:
            call = saved_model_call(export_encoder(
                encoder, os.path.join(tmp, "savedmodel_xla"), pooling="mean",
                jit_compile=True, max_seq_length=FLAGS.max_seq_length))
            # compile every bucketed shape the timed requests will hit, untimed
            for _, bs, _, calls in scenarios:
                for batch in common.request_batches(sentences, bs, calls):
                    call(batch)
            measure("savedmodel_xla", call)
        onnx_paths = [p for p in ("onnx", "onnx_int8") if p in paths]
        if onnx_paths:
            result["onnx"] = _onnx_rows(encoder, os.path.join(tmp, "onnx"), onnx_paths,
                                        measure)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # Model FLOPs per request (each request padded to its longest sentence), for the
    # compute-bound time at the machine's matmul peak.
    tokenizer = encoder.tokenizer.with_options(
        max_seq_length=encoder.clamp_length(FLAGS.max_seq_length), pad_to_max_length=False)
    dims = (encoder.num_layers, encoder.hidden_dim, int(encoder.backbone.intermediate_dim))
    result["request_flops"] = {}
    for name, bs, _, calls in scenarios:
        flops = []
        for batch in common.request_batches(sentences, bs, calls):
            width = int(tokenizer(tf.constant(batch))["padding_mask"].shape[1])
            flops.append(common.transformer_forward_flops(*dims, width, bs))
        result["request_flops"][name] = sum(flops) / len(flops)
    model_dir = resolve_short_name("minilm-l6")
    result.update({
        "max_rss_mb": round(common.max_rss_mb(), 1), "tensorflow": tf.__version__,
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "checkpoint_sha256": common.file_sha256(os.path.join(model_dir, "model.safetensors")),
    })
    return result


def _measurer(result, sentences, scenarios):
    """measure(name, call): keeps the first --keep_embeddings embeddings of `call` and its
    serving scenarios' timings in `result` under row `name`, and logs the p50s."""
    import numpy as np

    def measure(name, call):
        result["embeddings"][name] = np.asarray(
            call(sentences[:FLAGS.keep_embeddings])).tolist()
        result["scenarios"][name] = common.measure_serving(call, sentences, scenarios,
                                                           FLAGS.warmup_calls)
        print(f"[tfsent_worker] {name}: " + ", ".join(
            f"{s}: p50 {m['p50_ms']:.1f} ms" for s, m in result["scenarios"][name].items()),
            file=sys.stderr, flush=True)

    return measure


def _onnx_rows(encoder, directory, names, measure):
    """tfsent's onnx export (fp32, and int8 for `onnx_int8`) in ONNX Runtime, each request
    tokenized by the exported tokenizer.json (Hugging Face `tokenizers`, as an ORT user
    does), then one session.run; returns the details for the result."""
    import numpy as np
    import onnxruntime as ort
    from tokenizers import Tokenizer

    from tfsent.formats import onnx as onnx_format

    onnx_format.export_onnx(encoder, directory, pooling=encoder.pooling,
                            quantize=("int8",) if "onnx_int8" in names else (),
                            max_seq_length=FLAGS.max_seq_length)
    tokenizer = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
    tokenizer.enable_truncation(encoder.clamp_length(FLAGS.max_seq_length))
    tokenizer.enable_padding()
    files = {"onnx": onnx_format.ONNX_FILE, "onnx_int8": onnx_format.INT8_FILE}
    for name in names:
        session = ort.InferenceSession(os.path.join(directory, files[name]),
                                       providers=["CPUExecutionProvider"])
        inputs = [i.name for i in session.get_inputs()]

        def call(batch, session=session, inputs=inputs):
            encoded = tokenizer.encode_batch(list(batch))
            feeds = {"input_ids": np.array([e.ids for e in encoded], np.int64),
                     "attention_mask": np.array([e.attention_mask for e in encoded], np.int64),
                     "token_type_ids": np.array([e.type_ids for e in encoded], np.int64)}
            return session.run(["embedding"], {k: feeds[k] for k in inputs})[0]

        measure(name, call)
    return {"onnxruntime": ort.__version__, "files": [files[n] for n in names],
            "intra_op_threads": "onnxruntime default"}


def serve_student_mode():
    """Times the student encoder's SavedModel and onnx exports, as serve_mode times
    minilm-l6's; returns the result (embeddings keyed by row, the student's size)."""
    import shutil
    import tempfile

    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

    from tfsent.encoders import load_encoder
    from tfsent.formats.saved_model import export_encoder

    sentences = common.read_sentences(FLAGS.data, FLAGS.max_sentences)
    encoder = load_encoder(FLAGS.student, max_seq_length=FLAGS.max_seq_length)
    scenarios = common.serving_scenarios(FLAGS.calls, FLAGS.throughput_calls,
                                         FLAGS.throughput_batch)
    result = {"n_sentences": len(sentences), "scenarios": {}, "embeddings": {},
              "student": {"path": os.path.abspath(FLAGS.student),
                          "num_layers": encoder.num_layers, "hidden_dim": encoder.hidden_dim,
                          "pooling": encoder.pooling,
                          "parameters": int(encoder.backbone.count_params())}}
    k = FLAGS.keep_embeddings
    measure = _measurer(result, sentences, scenarios)

    tmp = tempfile.mkdtemp(prefix="tfsent-bench-student-")
    try:
        serve = tf.saved_model.load(export_encoder(
            encoder, os.path.join(tmp, "savedmodel"), pooling=encoder.pooling,
            max_seq_length=FLAGS.max_seq_length)).signatures["serving_default"]

        def saved_model(batch):
            return serve(sentences=tf.constant(batch))["embedding"].numpy()

        if "student_savedmodel" in FLAGS.serve_paths:
            measure("student_savedmodel", saved_model)
        else:  # the reference of the onnx rows' cosine
            result["embeddings"]["student_savedmodel"] = np.asarray(
                saved_model(sentences[:k])).tolist()
        onnx_paths = [p for p in ("onnx", "onnx_int8") if f"student_{p}" in FLAGS.serve_paths]
        if onnx_paths:
            result["onnx"] = _onnx_rows(
                encoder, os.path.join(tmp, "onnx"), onnx_paths,
                lambda name, call: measure(f"student_{name}", call))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result.update({"max_rss_mb": round(common.max_rss_mb(), 1), "tensorflow": tf.__version__})
    return result


def serve_litert_mode():
    """Times requests to minilm-l6's LiteRT exports (fp32, int8): tokenization with the
    exported tokenizer.json plus one Interpreter call each; returns the result."""
    import shutil
    import tempfile
    import threading

    import numpy as np
    import tokenizers

    from tfsent.encoders import load_encoder, resolve_short_name
    from tfsent.formats import litert

    interpreter_cls = litert.interpreter_class()
    sentences = common.read_sentences(FLAGS.data, FLAGS.max_sentences)
    encoder = load_encoder("minilm-l6", pooling="mean", max_seq_length=FLAGS.max_seq_length)
    scenarios = common.serving_scenarios(FLAGS.calls, FLAGS.throughput_calls,
                                         FLAGS.throughput_batch)
    threads = FLAGS.litert_threads or os.cpu_count()
    result = {"n_sentences": len(sentences), "scenarios": {}, "embeddings": {},
              "litert_threads": threads, "model_bytes": {}}
    tmp = tempfile.mkdtemp(prefix="tfsent-bench-litert-")
    try:
        for name, quantize in (("litert_fp32", ""), ("litert_int8", "int8")):
            path = litert.export_litert(encoder, os.path.join(tmp, name), pooling="mean",
                                        quantize=quantize,
                                        max_seq_length=FLAGS.max_seq_length)
            model_file = os.path.join(path, litert.MODEL_FILE)
            result["model_bytes"][name] = os.path.getsize(model_file)
            tokenizer = tokenizers.Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
            tokenizer.enable_truncation(FLAGS.max_seq_length)
            tokenizer.enable_padding()
            local = threading.local()  # one Interpreter per calling thread

            def call(batch, model_file=model_file, tokenizer=tokenizer, local=local):
                if not hasattr(local, "runner"):
                    local.runner = interpreter_cls(
                        model_path=model_file, num_threads=threads).get_signature_runner()
                encodings = tokenizer.encode_batch(list(batch))
                ids = np.array([e.ids for e in encodings], np.int32)
                mask = np.array([e.attention_mask for e in encodings], np.int32)
                return local.runner(input_ids=ids, attention_mask=mask)["embedding"]

            result["embeddings"][name] = np.asarray(
                call(sentences[:FLAGS.keep_embeddings])).tolist()
            result["scenarios"][name] = common.measure_serving(call, sentences, scenarios,
                                                               FLAGS.warmup_calls)
            print(f"[tfsent_worker] {name}: " + ", ".join(
                f"{s}: p50 {m['p50_ms']:.1f} ms" for s, m in
                result["scenarios"][name].items()), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    model_dir = resolve_short_name("minilm-l6")
    result.update({
        "max_rss_mb": round(common.max_rss_mb(), 1),
        "checkpoint_sha256": common.file_sha256(os.path.join(model_dir, "model.safetensors")),
    })
    return result


class TFServingSession:
    """A SavedModel loaded as TF Serving's C++ loader loads it: the MetaGraph imported into a
    TF1 session, variables restored through its saver_def, the init op run; each request is
    one `session.run` of the serving_default signature's tensors."""

    def __init__(self, path):
        import tensorflow as tf

        self._tf = tf
        self.session = tf.compat.v1.Session(graph=tf.Graph())
        with self.session.graph.as_default():
            meta = tf.compat.v1.saved_model.loader.load(self.session, ["serve"], path)
        signature = meta.signature_def["serving_default"]
        self.input = signature.inputs["sentences"].name
        self.output = signature.outputs["embedding"].name

    def embed(self, batch, options=None, run_metadata=None):
        """Embeddings of the sentences in `batch` (a numpy array)."""
        import numpy as np

        return self.session.run(self.output, {self.input: np.array(batch, dtype=object)},
                                options=options, run_metadata=run_metadata)

    def op_profile(self, batches):
        """Each request of `batches` traced (RunOptions FULL_TRACE): per op type, the mean
        time per request (sum of its kernels' start-to-end times) and kernel count, and
        the median traced wall time (first kernel start to last kernel end)."""
        tf = self._tf
        for batch in batches[:3]:  # warm caches, untimed
            self.embed(batch)
        per_type, walls = {}, []
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        for batch in batches:
            metadata = tf.compat.v1.RunMetadata()
            self.embed(batch, options, metadata)
            starts, ends = [], []
            for device in metadata.step_stats.dev_stats:
                for node in device.node_stats:
                    op = common.op_type_of(node.timeline_label, node.node_name)
                    entry = per_type.setdefault(op, [0.0, 0])
                    entry[0] += node.all_end_rel_micros / 1000.0
                    entry[1] += 1
                    starts.append(node.all_start_micros)
                    ends.append(node.all_start_micros + node.all_end_rel_micros)
            walls.append((max(ends) - min(starts)) / 1000.0)
        n = len(batches)
        return {"requests": n, "traced_wall_ms": common.median(walls),
                "op_types": {op: {"ms": total / n, "kernels": count / n}
                             for op, (total, count) in per_type.items()}}


def _matmul_weight_bytes(encoder):
    """Bytes of the transformer layers' matmul kernels (not the embedding tables, biases
    or the unused [CLS] pooler): what every request streams from memory at least once."""
    return int(sum(w.numpy().nbytes for w in encoder.backbone.weights
                   if w.path.endswith("kernel") and "transformer_layer" in w.path))


def _time_encode_ids(loaded, encoder, sentences, scenarios):
    """The single-caller scenarios through the export's `encode_ids` signature on
    pre-tokenized requests: the same model without the in-graph tokenizer and string
    handling, so serving_default minus this is what tokenization costs per request."""
    import tensorflow as tf

    fn = loaded.signatures["encode_ids"]
    tokenizer = encoder.tokenizer.with_options(  # as the export's serving tokenizer
        max_seq_length=encoder.clamp_length(FLAGS.max_seq_length), pad_to_max_length=False)
    cache = {}

    def call(batch):
        key = tuple(batch)
        if key not in cache:
            features = tokenizer(tf.constant(batch))
            cache[key] = (tf.cast(features["token_ids"], tf.int32),
                          tf.cast(features["padding_mask"], tf.int32))
        ids, mask = cache[key]
        return fn(token_ids=ids, padding_mask=mask)["embedding"].numpy()

    out = {}
    for name, bs, conc, calls in scenarios:
        if conc == 1:
            for batch in common.request_batches(sentences, bs, calls):
                call(batch)  # tokenize outside the timing
            out[name] = common.time_requests(call, sentences, bs, calls, 1, 0)
    return out


def peak_mode():
    """Best float32 matmul FLOP/s over eager and XLA-compiled tf.linalg.matmul."""
    import tensorflow as tf

    n = FLAGS.matmul_size
    a = tf.random.normal([n, n], dtype=tf.float32, seed=1)
    b = tf.random.normal([n, n], dtype=tf.float32, seed=2)
    xla = tf.function(tf.linalg.matmul, jit_compile=True)
    flops = 2.0 * n ** 3
    best = {}
    for name, fn in (("eager", tf.linalg.matmul), ("xla", xla)):
        # 2 warmup calls (and the XLA compile); .numpy() waits for the result.
        best[name] = flops / common.time_best(lambda fn=fn: fn(a, b)[0, 0].numpy(),
                                              FLAGS.repeats, warmup=2)
    return {"peak_flops": max(best.values()), "eager_flops": best["eager"],
            "xla_flops": best["xla"], "matmul_size": n, "repeats": FLAGS.repeats}


def gemm_mode():
    """FLOP/s of the training step's matmuls under XLA and TF's graph executor."""
    import tensorflow as tf

    rows = []
    for name, a, b, ta, tb in common.training_gemms(FLAGS.tokens, FLAGS.hidden,
                                                    FLAGS.intermediate):
        x, y = tf.random.normal(a, seed=1), tf.random.normal(b, seed=2)

        def matmul(x, y, ta=ta, tb=tb):
            return tf.linalg.matmul(x, y, transpose_a=ta, transpose_b=tb)

        row = {"name": name}
        for mode, fn in (("xla", tf.function(matmul, jit_compile=True)),
                         ("graph", tf.function(matmul))):
            seconds = common.time_best(lambda: fn(x, y)[0, 0].numpy(), FLAGS.repeats)
            row[mode] = common.gemm_flops(a, b, ta, tb) / seconds
        rows.append(row)
    return {"gemms": rows}


def main(argv):
    """Runs the chosen mode and emits its result."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if FLAGS.mode is None:
        raise app.UsageError("--mode is required (train, profile, encode, peak, gemm, "
                             "serve, serve_litert or serve_student)")
    if FLAGS.mode in ("train", "profile", "op_profile", "encode", "serve", "serve_litert",
                      "serve_student") and not FLAGS.data:
        raise app.UsageError("--data is required for --mode=train/profile/encode/serve/"
                             "serve_litert/serve_student")
    if FLAGS.mode == "serve_student" and not FLAGS.student:
        raise app.UsageError("--student is required for --mode=serve_student")
    if FLAGS.mode == "train" and FLAGS.steps <= FLAGS.warmup_steps:
        raise app.UsageError(f"--steps ({FLAGS.steps}) must exceed --warmup_steps "
                             f"({FLAGS.warmup_steps})")
    if FLAGS.repeats < 1:
        raise app.UsageError(f"--repeats must be >= 1, got {FLAGS.repeats}")
    result = {"train": train_mode, "profile": profile_mode, "op_profile": op_profile_mode,
              "encode": encode_mode,
              "peak": peak_mode,
              "gemm": gemm_mode, "serve": serve_mode,
              "serve_litert": serve_litert_mode,
              "serve_student": serve_student_mode}[FLAGS.mode]()
    result["load_average"] = common.load_average()
    common.emit_result(result)


if __name__ == "__main__":
    app.run(main)
