"""Latency of the two-stage search SavedModel (retrieve, then rerank with a cross-encoder in
the same call) next to retrieval alone, strings in, batch 1 by default.

    python benchmarks/rerank_latency.py --json=FILE [--corpus=BEIR_DIR --model=minilm-l6
        --reranker_model=minilm-l6 --rerank_tops=10,100 --batch_sizes=1 --repeats=20]

One search export with a reranker is written (`tfsent.formats.search_index`, `reranker=`
a `tfsent.methods.CrossEncoder` built on --reranker_model with a fresh score head: latency
does not depend on its weights) and loaded back with `tf.saved_model.load`, as a client in
Python would. Timed, p50 / p90 ms over --repeats calls after warm-up, the calls of the
cells interleaved so that load on the machine falls on all of them alike:

  search             the retrieval alone (`search(queries, k)`);
  search_reranked@N  `search_reranked(queries, k, rerank_top=N)` for each N of
                     --rerank_tops: the top N retrieved, N (query, document) pairs
                     through the cross-encoder, the k best returned.

Queries are the split's first queries (--split); k = --k.
"""

import os
import sys
import tempfile
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("corpus", os.path.join(os.path.dirname(common.REPO_DIR), "shared", "data",
                                           "retrieval", "climate-fever"),
                    "A BEIR folder: its corpus is indexed, its --split queries sent.")
flags.DEFINE_string("split", "test", "The split whose queries are sent.")
flags.DEFINE_string("model", "minilm-l6", "The retriever (anything load_encoder takes).")
flags.DEFINE_string("reranker_model", "minilm-l6", "The cross-encoder's backbone.")
flags.DEFINE_integer("reranker_length", 256, "The cross-encoder's pair length.")
flags.DEFINE_string("rerank_tops", "10,100", "Rerank depths (comma-separated).")
flags.DEFINE_string("batch_sizes", "1", "Queries per call (comma-separated).")
flags.DEFINE_integer("k", 10, "Results per query.")
flags.DEFINE_integer("repeats", 20, "Timed calls per cell.")
flags.DEFINE_integer("warmup", 3, "Untimed calls per cell first.")
flags.DEFINE_string("work_dir", None, "Where the export is written (a temporary folder "
                    "inside it, removed at the end).")
flags.DEFINE_string("json", None, "Where to write the results (JSON).")


def _ints(text, flag):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise app.UsageError(f"--{flag} must be positive integers, got {text!r}")
    return values


def main(argv):
    del argv
    tops = _ints(FLAGS.rerank_tops, "rerank_tops")
    batch_sizes = _ints(FLAGS.batch_sizes, "batch_sizes")
    import tensorflow as tf

    from tfsent.data import beir
    from tfsent.encoders import load_encoder
    from tfsent.formats.search_index import export_search_index
    from tfsent.methods import CrossEncoder

    split = beir.read_split(FLAGS.corpus, FLAGS.split)
    if max(tops) > len(split.corpus) or FLAGS.k > min(tops):
        raise app.UsageError(f"need k={FLAGS.k} <= every rerank top <= the corpus size "
                             f"({len(split.corpus)})")
    retriever = load_encoder(FLAGS.model)
    reranker = CrossEncoder(load_encoder(FLAGS.reranker_model, pooling="cls",
                                         max_seq_length=FLAGS.reranker_length))
    with tempfile.TemporaryDirectory(dir=FLAGS.work_dir) as work:
        start = time.perf_counter()
        path = export_search_index(retriever, split.corpus, os.path.join(work, "search"),
                                   reranker=reranker, verbose=1)
        export_seconds = time.perf_counter() - start
        index = tf.saved_model.load(path)
        search, reranked = index.signatures["search"], index.signatures["search_reranked"]
        k = tf.constant(FLAGS.k, tf.int32)
        cells = {}
        for batch in batch_sizes:
            queries = tf.constant(split.query_texts[:batch])
            cells[f"search b{batch}"] = lambda q=queries: search(queries=q, k=k)
            for top in tops:
                cells[f"search_reranked@{top} b{batch}"] = (
                    lambda q=queries, t=tf.constant(top, tf.int32):
                    reranked(queries=q, k=k, rerank_top=t))
        for call in cells.values():
            for _ in range(FLAGS.warmup):
                call()
        times = {name: [] for name in cells}
        for _ in range(FLAGS.repeats):  # interleaved: one call of each cell per round
            for name, call in cells.items():
                start = time.perf_counter()
                call()
                times[name].append((time.perf_counter() - start) * 1000)
    rows = {name: {"p50_ms": round(common.percentile(t, 50), 2),
                   "p90_ms": round(common.percentile(t, 90), 2)} for name, t in times.items()}
    for batch in batch_sizes:
        base = rows[f"search b{batch}"]["p50_ms"]
        for top in tops:
            row = rows[f"search_reranked@{top} b{batch}"]
            row["ratio_to_search"] = round(row["p50_ms"] / base, 2)
    print(f"{'cell':<28} {'p50 ms':>9} {'p90 ms':>9} {'x search':>9}")
    for name, row in rows.items():
        print(f"{name:<28} {row['p50_ms']:>9.2f} {row['p90_ms']:>9.2f} "
              f"{row.get('ratio_to_search', 1.0):>9.2f}")
    result = {"rows": rows, "export_seconds": round(export_seconds, 1),
              "settings": {"corpus": FLAGS.corpus, "documents": len(split.corpus),
                           "model": FLAGS.model, "reranker_model": FLAGS.reranker_model,
                           "reranker_length": FLAGS.reranker_length, "k": FLAGS.k,
                           "rerank_tops": tops, "batch_sizes": batch_sizes,
                           "repeats": FLAGS.repeats}}
    if FLAGS.json:
        common.write_result(FLAGS.json, result)


if __name__ == "__main__":
    app.run(main)
