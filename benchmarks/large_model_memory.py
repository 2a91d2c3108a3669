"""One training step's time and the peak memory of the full-size decoder embedders, randomly
initialised (no weights offline): Qwen3-Embedding-0.6B and EmbeddingGemma-300m built as
keras-hub backbones from their published config.json numbers, SimCSE (in-batch InfoNCE,
dropout off as both models ship) at batch 8 / length 128, three ways:

    full        every weight trains (AdamW: two slots per weight)
    lora16      keras-hub LoRA rank 16 on the attention query / value projections
                (tfsent.encoders.lora), the backbone frozen
    grad_cache  full fine-tuning with GradCache, chunks of 2 sentences

    python benchmarks/large_model_memory.py [--json=FILE] [--tiny] [--steps=2]
        [--models=qwen3_0.6b,embeddinggemma_300m] [--modes=full,lora16,grad_cache]
        [--precision=float32|mixed_bfloat16]

Each (model, mode) runs in its own process (this script with --worker), so each peak is
its own: `peak_rss_mb` is resource.getrusage(RUSAGE_SELF).ru_maxrss at the end (weights,
optimizer slots, activations kept for the backward pass, TF's runtime),
`rss_after_build_mb` the resident set once the model and optimizer are built; `step_s` is
the last step's wall time (the first, traced, step is reported as `first_step_s`).
`--tiny` swaps in tiny configs of the same shapes, run eagerly (a test runs it in
seconds). A row that fails (out of memory) is reported with its error, the others still
run.
"""

import json
import os
import resource
import subprocess
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("json", "", "Write the result JSON here.")
flags.DEFINE_bool("tiny", False, "Tiny configs of the same shapes (tests).")
flags.DEFINE_integer("steps", 2, "Training steps per row (the last one is timed).")
flags.DEFINE_integer("batch_size", 8, "Sentences per step.")
flags.DEFINE_integer("length", 128, "Tokens per sentence.")
flags.DEFINE_integer("grad_cache_chunk", 2, "GradCache chunk (sentences) of grad_cache rows.")
flags.DEFINE_integer("lora_rank", 16, "LoRA rank of lora rows.")
flags.DEFINE_list("models", ["qwen3_0.6b", "embeddinggemma_300m"], "Models to measure.")
flags.DEFINE_list("modes", ["full", "lora16", "grad_cache"], "Ways to train.")
flags.DEFINE_enum("precision", "float32", ["float32", "mixed_bfloat16"], "dtype policy.")
flags.DEFINE_string("worker", "", "internal: MODEL:MODE, measured in this process.")

# The published config.json numbers (Hugging Face releases), as keras-hub arguments.
MODELS = {
    "qwen3_0.6b": ("qwen3", dict(
        vocabulary_size=151669, num_layers=28, num_query_heads=16, num_key_value_heads=8,
        head_dim=128, hidden_dim=1024, intermediate_dim=3072, rope_max_wavelength=1e6,
        layer_norm_epsilon=1e-6, dropout=0.0, tie_word_embeddings=True,
        sliding_window_size=None), None),
    "embeddinggemma_300m": ("gemma3", dict(
        vocabulary_size=262144, image_size=None, num_layers=24, num_query_heads=3,
        num_key_value_heads=1, hidden_dim=768, intermediate_dim=1152, head_dim=256,
        query_head_dim_normalize=True, use_query_key_norm=True, use_post_ffw_norm=True,
        use_post_attention_norm=True, use_sliding_window_attention=True,
        sliding_window_size=513, use_bidirectional_attention=True, layer_norm_epsilon=1e-6,
        dropout=0, is_embedding_model=False), (3072, 768)),
}
TINY = {
    "qwen3_0.6b": dict(vocabulary_size=500, num_layers=2, num_query_heads=4,
                       num_key_value_heads=2, head_dim=8, hidden_dim=32, intermediate_dim=64),
    "embeddinggemma_300m": dict(vocabulary_size=500, num_layers=2, num_query_heads=2,
                                num_key_value_heads=1, head_dim=16, hidden_dim=32,
                                intermediate_dim=48, sliding_window_size=9),
}
TINY_DENSE = (64, 32)


def _rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def measure(model_name, mode):
    """Builds, trains `FLAGS.steps` steps, returns the row (runs in the worker process)."""
    import keras
    import keras_hub
    import numpy as np
    import tensorflow as tf

    from tfsent.encoders import SentenceEncoder, families, lora
    from tfsent.encoders.dense_head import DenseHead
    from tfsent.methods import SimCSE

    family, config, dense = MODELS[model_name]
    config = dict(config, **(TINY[model_name] if FLAGS.tiny else {}))
    dense = TINY_DENSE if FLAGS.tiny and dense else dense
    if FLAGS.precision != "float32":
        keras.mixed_precision.set_global_policy(FLAGS.precision)
    keras.utils.set_random_seed(0)
    t0 = time.time()
    backbone = getattr(keras_hub.models, families.TABLE[family].keras_hub_backbone)(**config)
    head = None
    if dense:
        head = DenseHead([{"units": units, "use_bias": False, "activation": None}
                          for units in dense])
        head.build((None, config["hidden_dim"]))
    encoder = SentenceEncoder(backbone, None, pooling=families.TABLE[family].default_pooling,
                              activation=families.TABLE[family].activation,
                              dense_head=head)
    if mode == "lora16":
        lora.enable_lora(encoder, FLAGS.lora_rank)
    model = SimCSE(encoder, grad_cache_chunk=FLAGS.grad_cache_chunk
                   if mode == "grad_cache" else 0)
    # Tiny rows run eagerly: tracing the step (GradCache's loop above all) would cost more
    # than the step itself; the full-size rows run the traced step (`first_step_s`).
    model.compile(optimizer=keras.optimizers.AdamW(1e-5), jit_compile=False,
                  run_eagerly=FLAGS.tiny)
    model.optimizer.build(model.trainable_variables)
    trainable, total = lora.parameter_counts(model)
    build_s = time.time() - t0
    rss_after_build = _rss_mb()
    rng = np.random.default_rng(0)
    ids = rng.integers(3, config["vocabulary_size"], (FLAGS.batch_size, FLAGS.length))
    batch = {"token_ids": tf.constant(ids, tf.int32),
             "padding_mask": tf.ones((FLAGS.batch_size, FLAGS.length), tf.int32)}
    times, losses = [], []
    for _ in range(FLAGS.steps):
        t = time.time()
        logs = model.train_on_batch(batch, return_dict=True)
        times.append(time.time() - t)
        losses.append(float(logs["loss"]))
    return {"model": model_name, "mode": mode, "family": family, "tiny": FLAGS.tiny,
            "precision": FLAGS.precision, "batch_size": FLAGS.batch_size,
            "length": FLAGS.length, "trainable_params": trainable, "total_params": total,
            "build_s": build_s, "first_step_s": times[0], "step_s": times[-1],
            "rss_after_build_mb": rss_after_build,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "losses_finite": bool(np.isfinite(losses).all())}


def run_worker(spec):
    model_name, mode = spec.split(":")
    print("ROW " + json.dumps(measure(model_name, mode)), flush=True)


def run_row(model_name, mode):
    """One row in a fresh process (its own peak RSS)."""
    args = [sys.executable, os.path.abspath(__file__), f"--worker={model_name}:{mode}",
            f"--steps={FLAGS.steps}", f"--batch_size={FLAGS.batch_size}",
            f"--length={FLAGS.length}", f"--grad_cache_chunk={FLAGS.grad_cache_chunk}",
            f"--lora_rank={FLAGS.lora_rank}", f"--precision={FLAGS.precision}"]
    if FLAGS.tiny:
        args.append("--tiny")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(args, capture_output=True, text=True, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("ROW "):
            return json.loads(line[4:])
    return {"model": model_name, "mode": mode, "error":
            f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"}


def table(rows, machine_line):
    lines = [f"{machine_line}", "",
             "| model | mode | trainable / total params | step (s) | first step (s) | "
             "RSS after build (MB) | peak RSS (MB) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['mode']} | failed: {r['error']} | | | | |")
            continue
        lines.append(f"| {r['model']} | {r['mode']} | {r['trainable_params']:,} / "
                     f"{r['total_params']:,} | {r['step_s']:.1f} | {r['first_step_s']:.1f} | "
                     f"{r['rss_after_build_mb']:,.0f} | {r['peak_rss_mb']:,.0f} |")
    return "\n".join(lines)


def main(argv):
    del argv
    if FLAGS.worker:
        run_worker(FLAGS.worker)
        return
    for name in FLAGS.models:
        if name not in MODELS:
            raise app.UsageError(f"--models: unknown {name!r}; known: {', '.join(MODELS)}")
    for mode in FLAGS.modes:
        if mode not in ("full", "lora16", "grad_cache"):
            raise app.UsageError(f"--modes: unknown {mode!r}; known: full, lora16, grad_cache")
    rows = []
    for name in FLAGS.models:
        for mode in FLAGS.modes:
            rows.append(run_row(name, mode))
            print(json.dumps(rows[-1]), flush=True)
    machine = common.machine_description()
    print(table(rows, common.describe_machine(machine)))
    if FLAGS.json:
        common.write_result(FLAGS.json, {"rows": rows, "settings": {
            "batch_size": FLAGS.batch_size, "length": FLAGS.length, "steps": FLAGS.steps,
            "grad_cache_chunk": FLAGS.grad_cache_chunk, "lora_rank": FLAGS.lora_rank,
            "precision": FLAGS.precision, "tiny": FLAGS.tiny}})


if __name__ == "__main__":
    app.run(main)
