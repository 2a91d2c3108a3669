"""Exact top-k search inside a SavedModel at 10k / 100k / 1M documents, beside faiss-cpu.

    python benchmarks/retrieval_scale.py --json=FILE [--sizes=10000,100000,1000000
        --dim=384 --repeats=30 --large_repeats=8 --kinds=float32,int8,binary]

For each corpus size M, synthetic unit vectors (--dim wide; clustered, see
`synthetic_corpus`) are written as a search export (`tfsent.formats.search_index`, wrapped around
a tiny random encoder of the same width whose text path is not used here), once per
index kind, and loaded back with `tf.saved_model.load`. What is timed is one call of the
export's `search_embeddings` signature (precomputed query vectors and k = --k in, ids and
scores out as NumPy: the index search alone, without the encoder), p50 over --repeats
calls at batch 1 and batch 32 (--large_repeats from 500k documents on), after warmup calls.
Beside it, in the same process, one after the other:

  float32  faiss IndexFlatIP.search on the same normalised vectors;
  int8     faiss IndexScalarQuantizer(QT_8bit, inner product): per-dimension min/max
           codes, as tfsent's int8 index;
  binary   faiss IndexBinaryFlat.search for rescore_multiplier * k Hamming candidates
           plus the same rescoring in NumPy (float query . +-1 signs): the same pipeline.

Also reported: the size on disk of each export version (the index variables dominate
from 100k documents on; the tiny encoder is ~3 MB) and of the index arrays alone, and
recall@k of the int8 / binary results against exact float32 search (NumPy), over the
batch-32 queries.
"""

import os
import shutil
import sys
import tempfile

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("sizes", "10000,100000,1000000", "Corpus sizes (comma-separated).")
flags.DEFINE_integer("dim", 384, "Embedding width (minilm-l6: 384).")
flags.DEFINE_integer("k", 10, "Results per query.")
flags.DEFINE_integer("repeats", 30, "Timed calls per cell (p50 reported).")
flags.DEFINE_integer("large_repeats", 8, "Timed calls per cell from 500,000 documents on.")
flags.DEFINE_string("kinds", "float32,int8,binary", "Index kinds to measure.")
flags.DEFINE_integer("rescore_multiplier", 4, "Binary: Hamming candidates per result.")
flags.DEFINE_string("work_dir", None, "Where the exports are written (a temporary folder "
                    "inside it, removed at the end; default: the system's temp folder).")
flags.DEFINE_integer("seed", 0, "Seed of the synthetic corpus.")
flags.DEFINE_string("json", None, "Where to write the results (JSON).")

BATCH_SIZES = (1, 32)
KINDS = ("float32", "int8", "binary")


def synthetic_corpus(size, dim, queries, seed):
    """(documents [size, dim], queries [queries, dim]) of unit float32 vectors: documents
    around size / 50 random centres (noise of norm ~1.2 the centre's: each cluster is
    loose), queries a noisy copy of a random document (so each has a few clear
    neighbours, as real retrieval queries do)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(1, size // 50), dim), dtype=np.float32)
    docs = centres[rng.integers(0, len(centres), size)]
    docs += 1.2 * rng.standard_normal((size, dim), dtype=np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    picks = docs[rng.integers(0, size, queries)]
    query = picks + 0.8 * rng.standard_normal((queries, dim), dtype=np.float32) / np.sqrt(dim)
    query /= np.linalg.norm(query, axis=1, keepdims=True)
    return docs, query.astype(np.float32)


def exact_top_k(docs, queries, k):
    """Positions of the exact float32 top-k (inner product), best first (NumPy)."""
    import numpy as np

    scores = queries @ docs.T
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, part, 1), axis=1, kind="stable")
    return np.take_along_axis(part, order, 1)


def recall(found, truth):
    """Mean over queries of |found & truth| / |truth| (rows of positions)."""
    return sum(len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)) / len(truth)


def p50_ms(call, batches, repeats):
    """Median ms of `repeats` calls, cycling through `batches`, after 2 warmup calls."""
    it = iter(range(10 ** 9))
    seconds = common.time_calls(lambda: call(batches[next(it) % len(batches)]), repeats,
                                warmup=2)
    return 1000.0 * common.percentile(seconds, 50)


def faiss_searchers(kind, docs, k, rescore_multiplier):
    """(searcher(queries) -> positions, index bytes) of faiss's counterpart of `kind`."""
    import faiss  # benchmark-only dependency (the test extra installs it)
    import numpy as np

    dim = docs.shape[1]
    if kind == "float32":
        index = faiss.IndexFlatIP(dim)
        index.add(docs)
        return (lambda q: index.search(q, k)[1]), docs.nbytes
    if kind == "int8":
        index = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_8bit,
                                           faiss.METRIC_INNER_PRODUCT)
        index.train(docs)
        index.add(docs)
        return (lambda q: index.search(q, k)[1]), len(docs) * dim
    codes = np.packbits(docs > 0, axis=1)
    index = faiss.IndexBinaryFlat(dim)
    index.add(codes)
    candidates = min(k * rescore_multiplier, len(docs))

    def search(q):
        _, positions = index.search(np.packbits(q > 0, axis=1), candidates)
        signs = np.unpackbits(codes[positions], axis=-1)[..., :dim].astype(np.float32) * 2 - 1
        scores = np.einsum("nd,ncd->nc", q, signs)
        best = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(positions, best, 1)

    return search, codes.nbytes


def measure_size(size, kinds, encoder, work_dir):
    """The rows of one corpus size: per kind, sizes, p50 latencies and recall."""
    import gc

    import numpy as np
    import tensorflow as tf

    from tfsent.data.beir import Corpus
    from tfsent.formats.search_index import export_search_index, saved_model_size

    k, repeats = FLAGS.k, FLAGS.large_repeats if size >= 500_000 else FLAGS.repeats
    docs, queries = synthetic_corpus(size, FLAGS.dim, 64, FLAGS.seed)
    truth = exact_top_k(docs, queries[:32], k)
    batches = {b: [queries[i:i + b] for i in range(0, 32, b)] for b in BATCH_SIZES}
    ids = [f"d{i}" for i in range(size)]
    rows = []
    for kind in kinds:
        path = export_search_index(encoder, Corpus(ids, [""] * size),
                                   os.path.join(work_dir, f"{size}"),
                                   quantize_index=None if kind == "float32" else kind,
                                   rescore_multiplier=FLAGS.rescore_multiplier,
                                   embeddings=docs, verbose=0)
        search = tf.saved_model.load(path).signatures["search_embeddings"]
        k_tensor = tf.constant(k)
        position = {i.encode(): n for n, i in enumerate(ids)}

        def ours(q):
            out = search(query_embeddings=tf.constant(q), k=k_tensor)
            return out["ids"].numpy(), out["scores"].numpy()

        found = np.array([[position[i] for i in row] for row in ours(queries[:32])[0]])
        theirs, faiss_bytes = faiss_searchers(kind, docs, k, FLAGS.rescore_multiplier)
        row = {"documents": size, "kind": kind, "repeats": repeats,
               "disk_bytes": saved_model_size(path),
               "index_bytes": {"float32": docs.nbytes, "int8": docs.size,
                               "binary": size * -(-FLAGS.dim // 8)}[kind],
               "faiss_index_bytes": faiss_bytes,
               "recall_at_k": recall(found, truth),
               "faiss_recall_at_k": recall(theirs(queries[:32]), truth)}
        for b in BATCH_SIZES:
            row[f"p50_ms_b{b}"] = p50_ms(ours, batches[b], repeats)
            row[f"faiss_p50_ms_b{b}"] = p50_ms(theirs, batches[b], repeats)
            row[f"ratio_b{b}"] = row[f"p50_ms_b{b}"] / row[f"faiss_p50_ms_b{b}"]
        print(f"[bench] {size} {kind}: {row}", file=sys.stderr, flush=True)
        rows.append(row)
        del search, ours, theirs, position
        shutil.rmtree(os.path.join(work_dir, f"{size}"))
        gc.collect()
    return rows


def main(argv):
    """Builds, times and compares every (size, kind); writes --json, prints the table."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS.json:
        raise app.UsageError("--json is required (where to write the results)")
    try:
        sizes = [int(s) for s in FLAGS.sizes.split(",") if s.strip()]
    except ValueError:
        raise app.UsageError(f"--sizes: expected comma-separated integers, got {FLAGS.sizes!r}")
    if not sizes or min(sizes) < FLAGS.k:
        raise app.UsageError(f"--sizes: every size must be >= --k ({FLAGS.k}), got {sizes}")
    kinds = [s.strip() for s in FLAGS.kinds.split(",") if s.strip()]
    if not kinds or any(kind not in KINDS for kind in kinds):
        raise app.UsageError(f"--kinds: choose among {', '.join(KINDS)}, got {FLAGS.kinds!r}")
    for name in ("dim", "k", "repeats", "large_repeats", "rescore_multiplier"):
        if getattr(FLAGS, name) < 1:
            raise app.UsageError(f"--{name} must be >= 1, got {getattr(FLAGS, name)}")
    busy, warning = common.check_busy()
    from tfsent.testing import tiny_encoder

    # The text path is not timed: a 1-layer random encoder of the right width suffices.
    encoder = tiny_encoder(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"], num_layers=1,
                           hidden_dim=FLAGS.dim, num_heads=2, intermediate_dim=32)
    work_dir = tempfile.mkdtemp(prefix="retrieval_scale-", dir=FLAGS.work_dir)
    try:
        rows = [row for size in sizes for row in measure_size(size, kinds, encoder,
                                                                work_dir)]
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    result = {"rows": rows, "cpu_busy_before": busy,
              "settings": {"sizes": sizes, "dim": FLAGS.dim, "k": FLAGS.k,
                           "repeats": FLAGS.repeats, "large_repeats": FLAGS.large_repeats,
                           "kinds": kinds, "rescore_multiplier": FLAGS.rescore_multiplier,
                           "seed": FLAGS.seed, "faiss": common._package_version("faiss-cpu")},
              "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])}
    if warning:
        result["warning"] = warning
    result = common.write_result(FLAGS.json, result)

    def mb(n):
        return f"{n / 2 ** 20:.1f}"

    common.print_table(
        ["documents", "kind", "disk MiB", "index MiB", "p50 b1 ms (faiss)",
         "p50 b32 ms (faiss)", "b32 ratio", f"recall@{FLAGS.k} (faiss)"],
        [[r["documents"], r["kind"], mb(r["disk_bytes"]), mb(r["index_bytes"]),
          f"{r['p50_ms_b1']:.2f} ({r['faiss_p50_ms_b1']:.2f})",
          f"{r['p50_ms_b32']:.2f} ({r['faiss_p50_ms_b32']:.2f})", f"{r['ratio_b32']:.2f}",
          f"{r['recall_at_k']:.3f} ({r['faiss_recall_at_k']:.3f})"] for r in rows],
        title=f"search_embeddings vs faiss-cpu, {FLAGS.dim} dims, k = {FLAGS.k}")
    if warning:
        print(f"warning: {warning}")
    print(f"wrote {FLAGS.json}")


if __name__ == "__main__":
    app.run(main)
