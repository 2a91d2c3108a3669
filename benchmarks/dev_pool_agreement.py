"""How far a fixed dev candidate pool agrees with the whole corpus (docs/search.md, "A
fixed dev pool").

    python benchmarks/dev_pool_agreement.py --beir=DIR [--split=dev] [--tops=10,30,100]
        [--pool_from=minilm-l6] [--models=minilm-l6,runs/search/export,...]
        [--poolings=mean,cls] [--json=FILE]

The pool of depth N (`tfsent.evaluation.retrieval.candidate_pool`): the split's judged
documents and the first N documents of each query in --pool_from's exact search of the
whole corpus (the starting encoder of a training run). For every model of --models (names,
encoder folders or exports; a plain encoder is also tried with each of --poolings, so that
one starting encoder gives several different rankers), the corpus is encoded once and the
split is searched twice, over the whole corpus and over each pool; the table gives nDCG@10
and recall@100 both ways, the pool's size, and whether the ranking of the models by
nDCG@10 is the same both ways (what checkpoint selection needs).
"""

import os
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("beir", None, "BEIR folder (corpus.jsonl, queries.jsonl, qrels/).")
flags.DEFINE_string("split", "dev", "Split whose queries are searched.")
flags.DEFINE_string("tops", "10,30,100", "Pool depths N (comma-separated).")
flags.DEFINE_string("pool_from", "minilm-l6", "The encoder whose top N make the pool.")
flags.DEFINE_string("pool_pooling", "mean", "--pool_from's pooling (a plain encoder).")
flags.DEFINE_string("models", "minilm-l6", "Models compared (comma-separated).")
flags.DEFINE_string("poolings", "mean,cls", "Poolings tried for each plain encoder.")
flags.DEFINE_integer("max_seq_length", 256, "Encoding length.")
flags.DEFINE_string("json", None, "Where to write the results (JSON).")


def _rankers(models, poolings):
    """[(label, encoder)]: exports as they are, plain encoders once per pooling."""
    from tfsent.serving import SavedModelEncoder, load_any

    out = []
    for model in models:
        first = load_any(model, pooling=poolings[0], max_seq_length=FLAGS.max_seq_length)
        if isinstance(first, SavedModelEncoder):
            out.append((model, first))
            continue
        out.append((f"{model} ({poolings[0]})", first))
        out += [(f"{model} ({p})", load_any(model, pooling=p,
                                            max_seq_length=FLAGS.max_seq_length))
                for p in poolings[1:]]
    return out


def _measures(queries, docs, split, doc_rows):
    """nDCG@10 and recall@100 of exact search over the corpus rows `doc_rows`."""
    import numpy as np

    from tfsent.evaluation import retrieval
    from tfsent.search.exact import top_k_cosine

    ids = [split.corpus.ids[i] for i in doc_rows]
    _, idx = top_k_cosine(queries, docs[np.asarray(doc_rows)], retrieval.RUN_DEPTH,
                          tie_order=retrieval.trec_tie_order(ids))
    ranked = {q: [ids[i] for i in row if i >= 0] for q, row in zip(split.query_ids, idx)}
    got = retrieval.evaluate_ranking(ranked, split.qrels, split.query_ids)
    return {"ndcg@10": got["ndcg@10"], "recall@100": got["recall@100"]}


def main(argv):
    del argv
    if not FLAGS.beir:
        raise app.UsageError("--beir=DIR is required")
    tops = sorted({int(t) for t in FLAGS.tops.split(",") if t.strip()})
    if not tops or tops[0] < 1:
        raise app.UsageError(f"--tops: depths >= 1, got {FLAGS.tops!r}")
    busy, _ = common.check_busy()
    from tfsent.data import beir
    from tfsent.evaluation import retrieval
    from tfsent.serving import load_any

    split = beir.read_split(FLAGS.beir, FLAGS.split)
    start = load_any(FLAGS.pool_from, pooling=FLAGS.pool_pooling,
                     max_seq_length=FLAGS.max_seq_length)
    ranking = retrieval.search_split(start, split, max_seq_length=FLAGS.max_seq_length,
                                     depth=max(tops))
    row_of = {d: i for i, d in enumerate(split.corpus.ids)}
    pools = {n: [row_of[d] for d in retrieval.candidate_pool(ranking, split, n)]
             for n in tops}
    everything = list(range(len(split.corpus)))
    rows = []
    for label, encoder in _rankers([m.strip() for m in FLAGS.models.split(",") if m.strip()],
                                   [p.strip() for p in FLAGS.poolings.split(",")]):
        t0 = time.perf_counter()
        docs = retrieval.encode_texts(encoder, split.corpus.texts, 64, FLAGS.max_seq_length,
                                      1, "documents")
        queries = retrieval.encode_texts(encoder, split.query_texts, 64,
                                         FLAGS.max_seq_length, 0, "queries")
        row = {"model": label, "encode_s": round(time.perf_counter() - t0, 1),
               "full": _measures(queries, docs, split, everything)}
        row["pools"] = {n: _measures(queries, docs, split, pools[n]) for n in tops}
        rows.append(row)
    order = lambda key: [r["model"] for r in sorted(rows, key=key, reverse=True)]  # noqa: E731
    full_order = order(lambda r: r["full"]["ndcg@10"])
    result = {"beir": FLAGS.beir, "split": FLAGS.split, "queries": len(split.query_ids),
              "documents": len(split.corpus), "pool_from": FLAGS.pool_from,
              "pool_sizes": {n: len(p) for n, p in pools.items()}, "rows": rows,
              "same_order": {n: order(lambda r, n=n: r["pools"][n]["ndcg@10"]) == full_order
                             for n in tops},
              "cpu_busy_before": busy}
    print(f"{split.directory} {FLAGS.split}: {len(split.query_ids)} queries, "
          f"{len(split.corpus)} documents; pools from {FLAGS.pool_from}")
    head = "".join(f" | pool {n} ({len(pools[n])} docs)" for n in tops)
    print(f"{'model':40s} | whole corpus{head}   (nDCG@10 / recall@100)")
    for row in rows:
        cells = "".join(f" | {row['pools'][n]['ndcg@10']:6.2f} / {row['pools'][n]['recall@100']:6.2f}"
                        for n in tops)
        print(f"{row['model'][:40]:40s} | {row['full']['ndcg@10']:6.2f} / "
              f"{row['full']['recall@100']:6.2f}{cells}")
    print("models in the same nDCG@10 order as over the whole corpus: " + ", ".join(
        f"pool {n}: {'yes' if same else 'no'}" for n, same in result["same_order"].items()))
    if FLAGS.json:
        common.write_result(FLAGS.json, result)


if __name__ == "__main__":
    app.run(main)
