"""Dev selection of a cross-encoder run (docs/methods.md, "Cross-encoder"): a first-stage
retriever's top `rerank_top` documents of each dev query, reranked by the model being
trained at every evaluation; the checkpoint with the best reranked nDCG@10 is exported.

The retriever (`retriever`, default: the run's `encoder`, a bi-encoder) searches the dev
corpus ONCE per run: `first_stage` writes its ranking and its own measures to the run
folder (`FIRST_STAGE_FILE`), so a resumed run reads them instead of re-encoding the
corpus, and each evaluation only scores `queries x rerank_top` pairs with the
cross-encoder. `check_rerank_config` refuses what a run cannot select on before anything
is read or loaded; `RerankDevEvaluation` is the Keras callback.
"""

import os
import time

import keras
import numpy as np
from absl import logging

from tfsent.data.sources import is_beir, parse_beir
from tfsent.encoders import families
from tfsent.errors import ConfigError
from tfsent.evaluation import RETRIEVAL_MEASURES
from tfsent.evaluation.rerank import check_retriever, count_documents
from tfsent.formats.metadata import read_metadata
from tfsent.evaluation.retrieval import (RUN_DEPTH, Ranking, evaluate_ranking, rerank,
                                         search_split)
from tfsent.search.mined_files import resolve_prompts
from tfsent.serving import load_any
from tfsent.training.callbacks import DevEvaluation
from tfsent.training.run_dir import FIRST_STAGE_FILE, read_json, write_json_atomic
RETRIEVER_PREFIX = "retriever_"  # the first stage's measures in a dev report


def retriever_of(config):
    """The run's first-stage retriever: `retriever`, or the starting `encoder`."""
    return config.get("retriever") or config.encoder


def check_rerank_config(config):
    """Refuses (ConfigError) a cross-encoder run that cannot select by reranked nDCG@10,
    reading no model: `eval_data` must be a BEIR split (`beir:DIR[:SPLIT]`, split dev by
    default), the retriever not a cross-encoder export nor a missing path; `rerank_top`
    is checked by its field (>= 1) and against the dev corpus in `check_rerank_depth`."""
    if not is_beir(config.eval_data):
        raise ConfigError(
            f"eval_data={config.eval_data!r}: a cross_encoder run selects its checkpoint by "
            f"the reranked nDCG@10 of a BEIR dev split; set --config.eval_data=beir:DIR:dev "
            f"(a folder with corpus.jsonl, queries.jsonl and qrels/dev.tsv)")
    retriever = retriever_of(config)
    if (os.sep in retriever or retriever.startswith(".")) and not os.path.exists(retriever):
        raise ConfigError(f"retriever={retriever!r}: no such file or folder")
    check_retriever(retriever, "retriever" if config.get("retriever") else
                    "retriever (default: encoder)")
    for field in ("test_tasks", "report_geometry"):
        if config.get(field):
            raise ConfigError(f"{field}: a cross-encoder has no sentence embeddings; "
                              f"evaluate its export with python -m tfsent.evaluate "
                              f"--rerank=RUN_DIR (the closing lines of the run name it)")
    if config.get("dev_pool"):  # (the retrieval dev pool: embedding candidates)
        raise ConfigError(f"dev_pool={config.dev_pool}: a cross_encoder run's dev candidates "
                          f"are the retriever's top rerank_top; leave dev_pool unset")
    if config.get("export_formats", "saved_model") not in ("", "saved_model",
                                                           "cross_encoder"):
        raise ConfigError(f"export_formats={config.export_formats!r}: a cross_encoder run "
                          f"exports the cross_encoder SavedModel (score(queries, "
                          f"passages)) only; publish the finished run with python -m "
                          f"tfsent.export --model=RUN_DIR --format=cross_encoder_hf")


def check_rerank_depth(config, split):
    """`rerank_top` against the dev split's corpus size (before any model loads)."""
    size = len(split.corpus)
    if config.rerank_top > size:
        raise ConfigError(f"rerank_top={config.rerank_top} is above the corpus size of "
                          f"{config.eval_data} ({size} documents)")


def _stamp(config, split):
    """What the stored first stage was computed from (a different one is recomputed)."""
    return {"retriever": retriever_of(config), "directory": os.path.abspath(split.directory),
            "split": split.split, "documents": count_documents(split.directory),
            "depth": max(RUN_DEPTH, config.rerank_top), "rerank_top": config.rerank_top}


def first_stage(config, split, output_dir, write=True, verbose=1):
    """(Ranking, measures) of the retriever's exact search over the dev `split`, read from
    OUTPUT_DIR/FIRST_STAGE_FILE when it was computed there from the same retriever and
    split (a resumed run), else computed (the retriever loaded, the corpus encoded with the
    retriever's own prompts and truncation length, as `python -m tfsent.evaluate
    --model=RETRIEVER` does) and written there (`write`: the chief of a multi-worker run
    only)."""
    path = os.path.join(output_dir, FIRST_STAGE_FILE)
    stamp = _stamp(config, split)
    stored = read_json(path)
    if stored is not None and stored.get("stamp") == stamp:
        logging.info("first stage of dev reranking read from %s (%s: nDCG@10 %.2f)", path,
                     stamp["retriever"], stored["measures"]["ndcg@10"])
        ranking = Ranking(stored["query_ids"], stored["doc_ids"],
                          [np.asarray(s, np.float32) for s in stored["scores"]])
        return ranking, stored["measures"]
    start = time.perf_counter()
    retriever = load_any(stamp["retriever"], None, None)
    query_prompt, document_prompt = resolve_prompts(retriever)
    ranking = search_split(retriever, split, 64, None, query_prompt, document_prompt,
                           stamp["depth"], verbose=verbose)
    measures = evaluate_ranking(ranking.as_dict(), split.qrels, split.query_ids)
    measures = {m: float(measures[m]) for m in RETRIEVAL_MEASURES}
    top = config.rerank_top
    measures[f"recall@{top}"] = recall_at(ranking, split, top)
    logging.info("first stage of dev reranking: %s on %s (%s) nDCG@10 %.2f; recall@%d "
                 "%.2f, the share of relevant documents a reranking can reach; %.1f s, "
                 "once per run", stamp["retriever"], split.directory, split.split,
                 measures["ndcg@10"], top, measures[f"recall@{top}"],
                 time.perf_counter() - start)
    if write:
        write_json_atomic(path, {"stamp": stamp, "measures": measures,
                                 "query_ids": ranking.query_ids, "doc_ids": ranking.doc_ids,
                                 "scores": [np.asarray(s).tolist() for s in ranking.scores]})
    return ranking, measures


def recall_at(ranking, split, top):
    """Mean over the split's queries of the share of its relevant documents (qrel score
    > 0) in the ranking's first `top` (x100)."""
    shares = []
    for qid, docs in zip(ranking.query_ids, ranking.doc_ids):
        relevant = {d for d, score in split.qrels[qid].items() if score > 0}
        shares.append(len(relevant.intersection(docs[:top])) / max(1, len(relevant)))
    return 100.0 * float(np.mean(shares)) if shares else 0.0


class RerankDevEvaluation(DevEvaluation):
    """At every epoch end: the first-stage `ranking`'s top `top` of each dev query
    reranked by the model's `score`, the measures of the reranked ranking (x100; its tail
    beyond `top` keeps the first-stage order) in the report and as `{prefix}_{measure}`
    logs, with the retriever's own as `retriever_{measure}`. The monitor is "ndcg@10".

    Args:
        split: the dev `tfsent.data.beir.RetrievalSplit`.
        ranking, retriever_measures: `first_stage`'s result.
        top: documents reranked per query.
        prefix, batch_size, max_seq_length: log prefix, scoring batch and truncation.
        skip_when: optional callable; when it returns True the epoch is not evaluated.
        verbose: 1 shows a progress bar over the pairs scored (the training command's
            choice: thousands of pairs take minutes on a CPU), 0 none.
    """

    def __init__(self, split, ranking, retriever_measures, top, prefix="val", batch_size=64,
                 max_seq_length=None, skip_when=None, verbose=0):
        super().__init__()
        self.split = split
        self.ranking = ranking
        self.retriever_measures = dict(retriever_measures)
        self.top = top
        self.prefix = prefix
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.skip_when = skip_when
        self.verbose = verbose
        self.last_report = None

    def retriever_report(self):
        """The first stage's measures under `retriever_` keys."""
        return {RETRIEVER_PREFIX + m: v for m, v in self.retriever_measures.items()}

    def evaluate(self, model=None):
        """The reranked report of `model` (default: the callback's model)."""
        model = model or self.model
        start = time.perf_counter()
        pairs = sum(min(len(d), self.top) for d in self.ranking.doc_ids)
        bar = keras.utils.Progbar(pairs, unit_name="pair") if self.verbose else None

        def score(queries, passages):
            out = model.score(queries, passages, batch_size=self.batch_size,
                              max_seq_length=self.max_seq_length)
            if bar is not None:
                bar.add(len(queries))
            return out

        reranked = rerank(self.ranking, self.split, score, self.top, self.batch_size)
        result = evaluate_ranking(reranked.as_dict(), self.split.qrels, self.split.query_ids)
        report = {m: float(result[m]) for m in RETRIEVAL_MEASURES}
        report.update(self.retriever_report())
        logging.info("reranked dev (%s, %s: %d queries, top %d): nDCG@10 %.2f (retriever "
                     "%.2f), MRR@10 %.2f (retriever %.2f) in %.1f s", self.split.directory,
                     self.split.split, len(self.ranking.query_ids), self.top,
                     report["ndcg@10"], report["retriever_ndcg@10"], report["mrr@10"],
                     report["retriever_mrr@10"], time.perf_counter() - start)
        self.last_report = report
        return report

    def log_keys(self, report):
        """The report as `{prefix}_{key}` log entries."""
        return {f"{self.prefix}_{k}": float(v) for k, v in report.items()}


def next_steps(config, export, output_dir):
    """The lines a finished cross-encoder run ends with: its export evaluated as the
    reranker of the retriever on the test split, served behind it in one SavedModel, and
    (where its family has a Hugging Face head) published for sentence-transformers."""
    directory, _ = parse_beir(config.eval_data, "dev")
    retriever = retriever_of(config)
    family = families.TABLE.get(read_metadata(export, required=False).get("family"))
    publish = [] if family is None or family.classification_head is None else [
        f"  publish:  python -m tfsent.export --model={output_dir} --format=cross_encoder_hf "
        f"--export_dir={output_dir.rstrip(os.sep)}_hf  (sentence-transformers' "
        "CrossEncoder)"]
    return ["next:",
            f"  evaluate: python -m tfsent.evaluate --tasks=beir:{directory}:test "
            f"--model={retriever} --rerank={output_dir} --rerank_top={config.rerank_top}",
            f"  serve:    python -m tfsent.index --model={retriever} --corpus={directory} "
            f"--export_dir={output_dir}/search --reranker={export}  (docs/search.md, "
            f"reranking)",
            f"  load:     tf.saved_model.load(\"{export}\").signatures[\"score\"]"
            f"(queries=tf.constant([...]), passages=tf.constant([...]))", *publish]
