"""The workload `tfsent.cpu_settings` times to choose TensorFlow's CPU settings, run as a
script (`python .../tfsent/cpu_probe.py SPEC_JSON`, the package importable) in one fresh
process per candidate (oneDNN and the thread pools are fixed when TensorFlow
starts). The parent sets TF_ENABLE_ONEDNN_OPTS and TFSENT_THREADS for the candidate and
TFSENT_CPU_SETTINGS=default, so this process's `import tfsent` applies the candidate and
does not calibrate again.

The workload is tfsent's own code on a randomly initialised encoder with minilm-l6's layer
shape (BERT blocks, hidden 384, 12 heads, MLP 1536, a 30,522-token vocabulary, dropout 0.1,
mean pooling), 2 layers deep so that the calibration stays short:
  train   unsupervised SimCSE's `train_step` (two dropout views in one pass, in-batch
          InfoNCE, AdamW with the embedding table's sparse gradient), batch 16 x 32 tokens,
          as a plain tf.function ("train_graph") and with jit_compile ("train_xla"), as the
          training run compiles it;
  encode  `SentenceEncoder.encode`'s batch function (`encode_ids_function`: the forward
          pass and pooling; `encode` tokenizes every sentence before it) on three batches
          of 32 sentences of 11, 23 and 37 tokens, with a truncation length of 128: plain
          ("encode_graph"), each batch as wide as its longest sentence, and with XLA
          ("encode_xla"), padded up to its width bucket (16, 24, 40). The widths are near
          the 1/6, 1/2 and 5/6 quantiles of the batch widths `encode` forms from wiki
          sentences with minilm-l6's tokenizer (batch 64, sorted by token count), and the
          buckets add 12.7% token slots to them, as they add 12.9% to those batches: the
          padding XLA pays on real text (tests/test_cpu_settings.py checks both). (Earlier
          versions timed batches `encode` no longer forms: one of exactly 42 tokens at a
          truncation length of 42, where the bucket adds nothing, which put XLA ~13% ahead
          of where it is on real text; then 15, 33 and 45 tokens, the quantiles of batches
          sorted by characters; benchmarks/README.md.)
Calls interleaved, median per function; prints one JSON line: the medians (seconds), TF's own
oneDNN state, the thread pools that ran, the number of calls.

An earlier probe (a bare matmul stack with SGD) ranked oneDNN the other way from the full
training benchmark on one machine kind (benchmarks/README.md, "CPU settings"); timing the
real step and the real encode function is what this one fixes.
"""

import json
import sys
import time

# The workload sizes: "minilm" for the calibration, "tiny" for tests of the mechanism.
SIZES = {
    "minilm": dict(vocabulary=30522, hidden_dim=384, num_heads=12, intermediate_dim=1536,
                   num_layers=2, train_batch=16, train_length=32, encode_batch=32,
                   encode_widths=(11, 23, 37), encode_length=128),
    "tiny": dict(vocabulary=200, hidden_dim=32, num_heads=2, intermediate_dim=64,
                 num_layers=1, train_batch=4, train_length=16, encode_batch=4,
                 encode_widths=(6, 11), encode_length=32),
}
_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _texts(rng, count, words, vocabulary_size):
    """`count` strings of `words` vocabulary words each (one wordpiece per word)."""
    ids = rng.integers(0, vocabulary_size - len(_SPECIAL), size=(count, words))
    return [" ".join(f"w{i}" for i in row) for row in ids]


def build_workload(size):
    """{name: zero-argument function that runs one call and waits for its result}."""
    import keras
    import numpy as np
    import tensorflow as tf

    from tfsent.methods.simcse import SimCSE
    from tfsent.testing import tiny_encoder

    s = SIZES[size]
    vocabulary = _SPECIAL + [f"w{i}" for i in range(s["vocabulary"] - len(_SPECIAL))]
    encoder = tiny_encoder(vocabulary, num_layers=s["num_layers"], hidden_dim=s["hidden_dim"],
                           num_heads=s["num_heads"], intermediate_dim=s["intermediate_dim"],
                           max_seq_length=s["encode_length"], pooling="mean", dropout=0.1)
    model = SimCSE(encoder, temperature=0.05)
    optimizer = keras.optimizers.AdamW(learning_rate=3e-5)
    model.compile(optimizer=optimizer)
    optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(0)
    # Words per training sentence: enough to fill train_length after [CLS] / [SEP].
    train_tokenizer = encoder.tokenizer.with_options(max_seq_length=s["train_length"])
    train_batch = train_tokenizer(tf.constant(
        _texts(rng, s["train_batch"], s["train_length"], s["vocabulary"])))
    # One batch per width: `width` - 2 words, one wordpiece each, plus [CLS] and [SEP];
    # tokenized beforehand, as `encode` tokenizes before it batches.
    length = s["encode_length"]
    encode_batches = []
    for width in s["encode_widths"]:
        tokens = encoder.tokenize_all(_texts(rng, s["encode_batch"], width - 2,
                                             s["vocabulary"]), length)
        features = tokens.batch(np.arange(len(tokens)))
        encode_batches.append((tf.constant(features["token_ids"]),
                               tf.constant(features["padding_mask"])))
    train_graph = tf.function(model.train_step)
    train_xla = tf.function(model.train_step, jit_compile=True)
    calls = {
        "encode_graph": (encoder.encode_ids_function("mean", length, jit_compile=False),
                         encode_batches),
        "encode_xla": (encoder.encode_ids_function("mean", length, jit_compile=True),
                       encode_batches),
        "train_graph": (train_graph, [(train_batch,)]),
        "train_xla": (train_xla, [(train_batch,)]),
    }

    def runner(fn, args):
        def run():
            for arg in args:
                tf.nest.map_structure(lambda t: t.numpy(), fn(*arg))  # waits for the result
        return run

    return {name: runner(fn, args) for name, (fn, args) in calls.items()}


def time_interleaved(workload, budget, min_calls=3, max_calls=15):
    """Medians (seconds) of the workload's functions, called in turn: each compiled and
    warmed by two calls, then at least `min_calls` timed calls each, more while the budget
    (4 x `budget` seconds of timing) lasts, at most `max_calls`."""
    import numpy as np

    for run in workload.values():
        run()
        run()
    times = {name: [] for name in workload}
    deadline = time.perf_counter() + 4 * budget
    while min(len(t) for t in times.values()) < min_calls or (
            time.perf_counter() < deadline and min(len(t) for t in times.values()) < max_calls):
        for name, run in workload.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}, \
        min(len(t) for t in times.values())


def main(spec_json):
    """Runs the probe described by `spec_json` ({"budget", "size", "threads"}) and prints
    its JSON line."""
    spec = json.loads(spec_json)
    import tensorflow as tf
    from tensorflow.python.util import _pywrap_util_port

    import tfsent  # noqa: F401  (applies TF_ENABLE_ONEDNN_OPTS / TFSENT_THREADS' candidate)

    result, calls = time_interleaved(build_workload(spec.get("size", "minilm")),
                                     float(spec["budget"]))
    intra = tf.config.threading.get_intra_op_parallelism_threads()
    inter = tf.config.threading.get_inter_op_parallelism_threads()
    result.update(onednn_enabled=bool(_pywrap_util_port.IsMklEnabled()), calls=calls,
                  threads=spec["threads"], threads_running=f"{intra}/{inter}",
                  size=spec.get("size", "minilm"))
    sys.stdout.write(json.dumps(result) + "\n")  # the probe's answer to its parent


if __name__ == "__main__":
    # Run as a file: its folder (tfsent/) leads sys.path, where tfsent's module names
    # (data, search, ...) would shadow other packages; the package is imported by name.
    import os
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    main(sys.argv[1])
