"""Encoding throughput: tfsent's SavedModel and SentenceEncoder.encode vs sentence-transformers.

    python benchmarks/encode_throughput.py --json=FILE [--n=2000 --batch_size=64
        --max_seq_length=256 --data=../shared/data/wiki/wiki1m_prefix.txt --repeats=3
        --skip_peer]

The same first `n` sentences (the wiki prefix, or tfsent's demo corpus when ../shared/data is
absent), the same batch size and truncation length (256, all-MiniLM-L6-v2's own), the same
checkpoint with mean pooling, float32 on the CPU:

  savedmodel  minilm-l6 exported with tfsent.export.export_encoder to a temporary dir, loaded
              with tf.saved_model.load, `serving_default(sentences=...)` called batch by batch
              (strings in: tokenization is inside the graph). Sentences go longest first by
              characters, as sentence-transformers' encode orders them, so each batch pads
              to its own longest.
  savedmodel_by_tokens  the same export through tfsent's client,
              `tfsent.serving.SavedModelEncoder.encode`: it asks the export's
              `count_tokens` signature for each sentence's tokens and sends
              `serving_default` batches formed by token count, as `encode` forms them.
  encoder     `SentenceEncoder.encode(sentences, batch_size)` (in-process, no export): it
              tokenizes all sentences first and batches them by token count (the
              SavedModel path and sentence-transformers batch by characters), so its
              batches are narrower: fewer FLOPs for the same sentences.
  *_xla       the same two with XLA: exported with `jit_compile=True` / called with
              `encode(..., jit_compile=True)`; batches padded to bucketed shapes
              (tfsent.encoders.WIDTH_BUCKETS, rows to a power of two), compiled during the
              warmup passes. Their MFU counts the same model FLOPs (the padding to a bucket
              is extra work the model FLOPs leave out).
  peer        sentence-transformers `SentenceTransformer.encode(sentences, batch_size)` in the
              peer venv (peer_env.py).

Each path first makes `warmup_passes` untimed passes over the sentences, then `repeats` timed
passes (tfsent's paths alternate); sentences/s is n over the fastest pass. `ratio` =
savedmodel / peer (the default export), `encoder_ratio` = encoder / peer, `xla_ratio` =
savedmodel_xla / peer. As a check that all three compute the
same model, the JSON holds the lowest cosine between their embeddings of the first 8
sentences (1.0 = identical directions).

MFU: each side reports the padded width of every batch it forms (tfsent from its
tokenizer's lengths in its own orders: characters for the SavedModel, tokens for `encode`;
the peer from its own tokenizer in its own order), so
`*_flops_per_pass` = the sum over batches of the forward FLOPs of train_throughput.py's
formula at that width, and `*_mfu` = flops_per_pass / fastest pass / peak, the peak being
the best float32 n x n x n matmul of TF and PyTorch measured in this run. A side's MFU
bounds what any implementation of the same computation can gain over it: a ratio of 2.0
needs the peer's MFU below half of what tfsent reaches.
"""

import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import peer_env  # noqa: E402  (defines --peer_venv, --peer_python)

FLAGS = flags.FLAGS
flags.DEFINE_integer("n", 2000, "Number of sentences (the first n of --data).")
flags.DEFINE_integer("batch_size", 64, "Sentences per encode batch.")
flags.DEFINE_integer("max_seq_length", 256, "Truncation length of every path.")
flags.DEFINE_string("data", common.DEFAULT_WIKI, "Sentence file, one a line (default: the "
                    "wiki prefix; the demo corpus when ../shared/data is absent).")
flags.DEFINE_integer("repeats", 3, "Timed passes per path (the fastest counts).")
flags.DEFINE_integer("warmup_passes", 1, "Untimed passes per path first.")
flags.DEFINE_string("json", None, "Where to write the results (JSON).")
flags.DEFINE_bool("skip_peer", False, "Measure tfsent only (no PyTorch venv).")
flags.DEFINE_integer("peer_threads", 0, "torch intra-op threads (0: torch's default).")
flags.DEFINE_integer("matmul_size", 2048, "n of the n x n x n matmul that measures the peak.")
flags.DEFINE_integer("peak_repeats", 5, "Timed matmuls per peak measurement.")


def validate_flags():
    """Raises app.UsageError naming the offending flag."""
    if not FLAGS.json:
        raise app.UsageError("--json is required (where to write the results)")
    for name in ("n", "batch_size", "repeats", "matmul_size", "peak_repeats"):
        if getattr(FLAGS, name) < 1:
            raise app.UsageError(f"--{name} must be >= 1, got {getattr(FLAGS, name)}")
    if FLAGS.warmup_passes < 0:
        raise app.UsageError(f"--warmup_passes must be >= 0, got {FLAGS.warmup_passes}")
    if FLAGS.max_seq_length < 2:
        raise app.UsageError(f"--max_seq_length must be >= 2, got {FLAGS.max_seq_length}")


def min_cosine(a, b):
    """Lowest row-wise cosine between two lists of vectors (None if either is empty)."""
    import numpy as np

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.size == 0 or b.size == 0:
        return None
    cos = np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(np.min(cos))


def _mean_width(widths, n):
    """Mean padded length per sentence over batches of FLAGS.batch_size."""
    return sum(w * b for w, b in common.padded_batches(widths, n, FLAGS.batch_size)) / n


def main(argv):
    """Runs the three paths, writes --json, prints the table."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    validate_flags()
    data, note = common.data_or_usage_error(FLAGS.data)
    shared = [f"--data={data}", f"--max_sentences={FLAGS.n}",
              f"--batch_size={FLAGS.batch_size}", f"--max_seq_length={FLAGS.max_seq_length}",
              f"--repeats={FLAGS.repeats}", f"--warmup_passes={FLAGS.warmup_passes}"]
    peer_env.worker_env()  # checks --peer_env
    busy, warning = common.check_busy()
    peer_python = None
    if not FLAGS.skip_peer:
        peer_python = peer_env.ensure_peer_env(FLAGS.peer_venv, FLAGS.peer_python)
    load_before = common.load_average()
    peaks = common.measure_peak(peer_python, FLAGS.matmul_size, FLAGS.peak_repeats,
                                peer_env.worker_env() if peer_python else None)
    ours = common.run_worker(sys.executable, "tfsent_worker.py", ["--mode=encode"] + shared,
                             what="tfsent encode (SavedModel and SentenceEncoder.encode)")
    peer = None
    if peer_python:
        peer = common.run_worker(peer_python, "peer_worker.py",
                                 ["--mode=encode", f"--threads={FLAGS.peer_threads}"] + shared,
                                 env=peer_env.worker_env(),
                                 what="sentence-transformers encode")
    sm, enc = ours["savedmodel_sent_per_s"], ours["encoder_sent_per_s"]
    sm_tokens = ours["savedmodel_by_tokens_sent_per_s"]
    sm_xla, enc_xla = ours["savedmodel_xla_sent_per_s"], ours["encoder_xla_sent_per_s"]
    p = peer["sent_per_s"] if peer else None
    peak = max(v for v in peaks.values() if v)
    n = ours["n_sentences"]

    def pass_flops(side):
        return common.encode_flops(ours["num_layers"], ours["hidden"], ours["intermediate"],
                                   side["batch_widths"], n, FLAGS.batch_size)

    flops = pass_flops(ours)
    encoder_flops = common.encode_flops(ours["num_layers"], ours["hidden"],
                                        ours["intermediate"], ours["encoder_batch_widths"],
                                        n, FLAGS.batch_size)
    peer_flops = pass_flops(peer) if peer else None
    result = {
        "tfsent_sent_per_s": sm, "encoder_encode_sent_per_s": enc, "peer_sent_per_s": p,
        "savedmodel_xla_sent_per_s": sm_xla, "encoder_xla_sent_per_s": enc_xla,
        "xla_ratio": sm_xla / p if p else None, "encoder_xla_ratio": enc_xla / p if p else None,
        "xla_mfu": flops * sm_xla / n / peak,
        "encoder_xla_mfu": encoder_flops * enc_xla / n / peak,
        "ratio": sm / p if p else None, "encoder_ratio": enc / p if p else None,
        "savedmodel_by_tokens_sent_per_s": sm_tokens,
        "savedmodel_by_tokens_ratio": sm_tokens / p if p else None,
        "savedmodel_by_tokens_mfu": encoder_flops * sm_tokens / n / peak,
        "mfu": flops * sm / n / peak, "encoder_mfu": encoder_flops * enc / n / peak,
        "peer_mfu": peer_flops * p / n / peak if peer else None,
        "tfsent_flops_per_pass": flops, "peer_flops_per_pass": peer_flops,
        "encoder_flops_per_pass": encoder_flops,
        "tfsent_mean_padded_length": _mean_width(ours["batch_widths"], n),
        "encoder_mean_padded_length": _mean_width(ours["encoder_batch_widths"], n),
        "peer_mean_padded_length": _mean_width(peer["batch_widths"], n) if peer else None,
        "peak_flops": peak, "peak_measurements": peaks,
        "min_cosine_savedmodel_vs_encoder": min(
            min_cosine(ours["savedmodel_embeddings"], ours["encoder_embeddings"]),
            min_cosine(ours["savedmodel_by_tokens_embeddings"], ours["encoder_embeddings"])),
        "min_cosine_xla_vs_plain": min(
            min_cosine(ours["savedmodel_xla_embeddings"], ours["savedmodel_embeddings"]),
            min_cosine(ours["encoder_xla_embeddings"], ours["savedmodel_embeddings"])),
        "min_cosine_savedmodel_vs_peer": (min_cosine(ours["savedmodel_embeddings"],
                                                     peer["embeddings"]) if peer else None),
        "same_checkpoint": (ours["checkpoint_sha256"] == peer["checkpoint_sha256"]
                            if peer else None),
        "tfsent_max_rss_mb": ours["max_rss_mb"], "peer_max_rss_mb": peer["max_rss_mb"] if peer
        else None,
        "seconds": {"savedmodel": ours["savedmodel_seconds"], "encoder": ours["encoder_seconds"],
                    "savedmodel_by_tokens": ours["savedmodel_by_tokens_seconds"],
                    "savedmodel_xla": ours["savedmodel_xla_seconds"],
                    "encoder_xla": ours["encoder_xla_seconds"],
                    "peer": peer["seconds"] if peer else None},
        "settings": {"n": ours["n_sentences"], "batch_size": FLAGS.batch_size,
                     "max_seq_length": FLAGS.max_seq_length, "data": data,
                     "repeats": FLAGS.repeats, "warmup_passes": FLAGS.warmup_passes,
                     "peer_env": list(FLAGS.peer_env),
                     "cpu_count": os.cpu_count()},
        "versions": {"tensorflow": ours["tensorflow"],
                     **({k: peer[k] for k in ("torch", "sentence_transformers", "transformers",
                                              "torch_threads")} if peer else {})},
        "load_average": [load_before, common.load_average()],
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
    }
    result["cpu_busy_before"] = busy
    if warning:
        result["warning"] = warning
    if note:
        result["note"] = note
    if peer and peer["n_sentences"] != ours["n_sentences"]:
        raise RuntimeError(f"the two sides read different sentence counts "
                           f"({ours['n_sentences']} vs {peer['n_sentences']})")
    result = common.write_result(FLAGS.json, result, peer_python)
    pct = lambda x: common.fmt(100 * x) + "%" if x is not None else "-"  # noqa: E731
    rows = [["tfsent SavedModel (strings in)", common.fmt(sm), common.fmt(sm / p, 2) if p
             else "-", pct(result["mfu"])],
            ["tfsent SavedModel, batched by count_tokens", common.fmt(sm_tokens),
             common.fmt(sm_tokens / p, 2) if p else "-",
             pct(result["savedmodel_by_tokens_mfu"])],
            ["tfsent SentenceEncoder.encode", common.fmt(enc), common.fmt(enc / p, 2) if p
             else "-", pct(result["encoder_mfu"])],
            ["tfsent SavedModel, jit_compile=True", common.fmt(sm_xla),
             common.fmt(sm_xla / p, 2) if p else "-", pct(result["xla_mfu"])],
            ["tfsent encode(jit_compile=True)", common.fmt(enc_xla),
             common.fmt(enc_xla / p, 2) if p else "-", pct(result["encoder_xla_mfu"])],
            ["sentence-transformers encode", common.fmt(p), "1.00" if p else "-",
             pct(result["peer_mfu"])]]
    common.print_table(["path", "sent/s", "vs peer", "MFU"], rows,
                       title=f"encode throughput: minilm-l6 mean pooling, "
                             f"{ours['n_sentences']} sentences, batch {FLAGS.batch_size}, "
                             f"max_seq_length {FLAGS.max_seq_length}")
    if warning:
        print(f"warning: {warning}")
    print(f"wrote {FLAGS.json}")


if __name__ == "__main__":
    app.run(main)
