"""Retrieval evaluation on BEIR-layout data: exact cosine search of a split's queries over
the whole corpus, scored with trec_eval's definitions (the figures BEIR, MTEB and
pytrec_eval report), x100.

Measures (a document is relevant when its qrels score is >= 1, trec_eval's default
relevance level):
  ndcg@10     trec_eval's ndcg_cut.10: gain = the qrels score (unjudged and negative
              scores: 0), discount log2(rank + 1); the ideal ranking sorts the query's
              positive qrels scores. The primary figure.
  mrr@10      recip_rank on the run cut to its top 10: 1 / the rank of the first
              relevant document, 0 when none is in the top 10.
  recall@10, recall@100   relevant documents in the top k / relevant documents judged.
  map@100     map_cut.100: the precision at each relevant document's rank in the top 100,
              summed, over the number of relevant documents judged.
Figures are per query and their mean over the split's queries.

Ranking follows trec_eval: by score, descending; equal scores by document id, descending
(trec_eval sorts a run by score, then by docno with strcmp, reversed). The search makes
the same order (`tfsent.search.exact.top_k_cosine` with a tie order), so the figures equal
trec_eval's on the written run.

Run files (`write_run`): the top 100 of each query, as a TREC run (`qid Q0 docid rank
score tag`, one line each, rank from 1) or, for a path ending in .json, as
{query id: {document id: score}} (what pytrec_eval and BEIR take). TREC runs are
whitespace-separated, so whitespace and "%" inside an id are written percent-encoded
("Global warming:14" -> "Global%20warming:14"; urllib.parse.unquote reverses it); the
JSON run keeps ids as they are. (trec_eval on such a file orders equal scores by the
encoded ids, which can differ from the order of the ids themselves: only exactly equal
float32 scores of documents with encoded ids are affected.) Scores are written as the
shortest decimal that reads back as the same float32, so no tie is made or lost.
"""

import inspect
import json
import math
import os
import time
import urllib.parse

import keras
import numpy as np
from absl import logging

from tfsent import fsio
from tfsent.data import beir
from tfsent.data.sources import is_beir, parse_beir
from tfsent.errors import ConfigError, InputError
from tfsent.evaluation import RETRIEVAL_MEASURES as MEASURES, RETRIEVAL_PREFIX as TASK_PREFIX
from tfsent.search.exact import top_k_cosine

RUN_DEPTH = 100  # documents kept per query: what the deepest measure (@100) needs
# Batches of (query, document) pairs per reranker call: the reranker orders each call's
# pairs by length (CrossEncoder.score by token count), so more pairs a call pad less.
RERANK_CHUNK_BATCHES = 64


# -- tasks ----------------------------------------------------------------------------------
def is_retrieval_task(name):
    """True for a `beir:DIR[:SPLIT]` task name."""
    return is_beir(str(name))


class RetrievalTask:
    """A `beir:DIR[:SPLIT]` task: `source` (as given), `directory`, `split` and `label`
    (`beir:<folder name>:<split>`, the key of its results)."""

    def __init__(self, source, default_split="test"):
        self.source = source
        self.directory, self.split = parse_beir(source, default_split)
        name = os.path.basename(os.path.normpath(self.directory)) or self.directory
        self.label = f"{TASK_PREFIX}{name}:{self.split}"

    def check(self):
        """Refuses a folder without the split's BEIR files (cheap: before a model loads)."""
        beir.check_folder(self.directory, self.split)
        return self


def check_tasks(sources):
    """The RetrievalTasks of the `beir:` names among `sources`, each folder checked;
    ConfigError when two tasks would report under the same label."""
    tasks = [RetrievalTask(s).check() for s in sources if is_retrieval_task(s)]
    seen = {}
    for task in tasks:
        if task.label in seen:
            raise ConfigError(f"tasks {seen[task.label]} and {task.source} both report as "
                              f"{task.label}: evaluate them in separate runs")
        seen[task.label] = task.source
    return tasks


def run_file_paths(path, tasks):
    """{task label: run file} for `--run_file=path`: `path` itself for one task; for
    several, the task's folder name and split inserted before the extension
    (run.trec -> run.climate-fever.test.trec)."""
    if len(tasks) == 1:
        return {tasks[0].label: path}
    root, ext = os.path.splitext(path)
    return {t.label: f"{root}.{t.label[len(TASK_PREFIX):].replace(':', '.')}{ext}"
            for t in tasks}


# -- ranking and measures -------------------------------------------------------------------
def trec_tie_order(doc_ids):
    """(M,) int64: each document's position when the ids are sorted descending, trec_eval's
    order among equal scores (a smaller value ranks first). Python compares str by code
    point, which is the byte order of UTF-8, so this is strcmp's order."""
    order = sorted(range(len(doc_ids)), key=doc_ids.__getitem__, reverse=True)
    ranks = np.empty(len(doc_ids), np.int64)
    ranks[order] = np.arange(len(doc_ids))
    return ranks


def rank_run(run, depth=None):
    """{query id: {document id: score}} -> {query id: [document ids]} in trec_eval's order
    (score descending, then document id descending), the first `depth` (None: all)."""
    return {qid: [d for d, _ in sorted(scored.items(), key=lambda x: (x[1], x[0]),
                                       reverse=True)][:depth]
            for qid, scored in run.items()}


def query_measures(ranked, judged):
    """The measures (fractions, not x100) of one query: `ranked` document ids in rank
    order, `judged` {document id: qrels score}."""
    relevant = sum(1 for s in judged.values() if s >= 1)
    gains = [max(judged.get(d, 0), 0) for d in ranked[:10]]
    ideal = sorted((s for s in judged.values() if s > 0), reverse=True)[:10]
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains) if g)
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    hits = [judged.get(d, 0) >= 1 for d in ranked[:RUN_DEPTH]]
    first = next((i for i, h in enumerate(hits[:10]) if h), None)
    precisions = [sum(hits[:i + 1]) / (i + 1) for i, h in enumerate(hits) if h]
    return {"ndcg@10": dcg / idcg if idcg > 0 else 0.0,
            "mrr@10": 0.0 if first is None else 1.0 / (first + 1),
            "recall@10": sum(hits[:10]) / relevant if relevant else 0.0,
            "recall@100": sum(hits[:100]) / relevant if relevant else 0.0,
            "map@100": sum(precisions) / relevant if relevant else 0.0}


def evaluate_ranking(ranked, qrels, query_ids=None):
    """Per-query and mean measures x100 of a ranking ({query id: [document ids]}) against
    qrels ({query id: {document id: score}}), over `query_ids` (default: the ranked ones;
    a query without a ranking scores 0). Returns {measure: mean, "queries": n,
    "per_query": {query id: {measure: value}}}."""
    query_ids = list(ranked) if query_ids is None else list(query_ids)
    if not query_ids:
        raise InputError("no query to evaluate")
    per_query = {qid: {m: 100.0 * v for m, v in
                       query_measures(ranked.get(qid, []), qrels.get(qid, {})).items()}
                 for qid in query_ids}
    result = {m: float(np.mean([per_query[q][m] for q in query_ids])) for m in MEASURES}
    result.update(queries=len(query_ids), per_query=per_query)
    return result


# -- encoding -------------------------------------------------------------------------------
def encode_kwargs(encoder, verbose):
    """{"verbose": verbose} when `encoder.encode` takes a `verbose` argument (or **kwargs)
    and `verbose` is not None, else {}: the `encode(sentences, batch_size, normalize,
    max_seq_length)` protocol does not require it."""
    if verbose is None:
        return {}
    try:
        params = inspect.signature(encoder.encode).parameters
    except (TypeError, ValueError):
        return {}
    if "verbose" in params or any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return {"verbose": verbose}
    return {}


def _clean(embeddings, what):
    """float32 2-D embeddings; non-finite values replaced by 0 with a warning (a diverged
    model then scores low instead of ranking NaN first)."""
    embeddings = np.asarray(embeddings, np.float32)
    if embeddings.ndim != 2:
        raise ConfigError(f"the encoder returned an array of shape {embeddings.shape} for "
                          f"the {what}; expected (N, D)")
    if not np.all(np.isfinite(embeddings)):
        logging.warning("the %s' embeddings have non-finite values; replaced by 0", what)
        embeddings = np.nan_to_num(embeddings, nan=0.0, posinf=0.0, neginf=0.0)
    return embeddings


def encode_texts(encoder, texts, batch_size=64, max_seq_length=None, verbose=1,
                 what="documents", batches_per_call=8):
    """Embeddings (N, D) float32 of `texts`, in order, unnormalised.

    Texts go to `encoder.encode` longest first (by token count when the encoder can
    count them, `SentenceEncoder.tokenize_all`; by characters otherwise),
    `batches_per_call` batches a call, with a Keras progress bar over the texts
    (`verbose=1`; the encoder's own bar is silenced when it has one); the time taken is
    logged.
    """
    texts = list(texts)
    start = time.perf_counter()
    if hasattr(encoder, "tokenize_all") and texts:
        lengths = encoder.tokenize_all(texts, max_seq_length, keep_ids=False).lengths
    else:
        lengths = np.array([len(t) for t in texts])
    order = np.argsort(-lengths, kind="stable")
    step = max(1, batch_size * batches_per_call)
    bar = keras.utils.Progbar(len(texts), unit_name=what[:-1] if what.endswith("s") else
                              what) if verbose and len(texts) > step else None
    if not texts:
        raise InputError(f"no {what} to encode")
    quiet = encode_kwargs(encoder, 0)
    out = None  # (N, D), filled slice by slice: no second copy of all the embeddings
    for s in range(0, len(texts), step):
        rows = order[s:s + step]
        emb = _clean(encoder.encode([texts[i] for i in rows], batch_size=batch_size,
                                    normalize=False, max_seq_length=max_seq_length, **quiet),
                     what)
        if len(emb) != len(rows) or (out is not None and emb.shape[1] != out.shape[1]):
            raise ConfigError(f"the encoder returned an array of shape {emb.shape} for "
                              f"{len(rows)} {what}")
        if out is None:
            out = np.empty((len(texts), emb.shape[1]), np.float32)
        out[rows] = emb
        if bar is not None:
            bar.add(len(rows))
    seconds = time.perf_counter() - start
    logging.info("encoded %d %s in %.1f s (%.0f per second)", len(texts), what, seconds,
                 len(texts) / max(seconds, 1e-9))
    return out


# -- evaluation -----------------------------------------------------------------------------
class Ranking:
    """The top documents of each query: `query_ids`, `doc_ids` (list per query, rank
    order) and `scores` (float32 cosines, same shape)."""

    def __init__(self, query_ids, doc_ids, scores):
        self.query_ids = list(query_ids)
        self.doc_ids = doc_ids
        self.scores = scores

    def as_dict(self):
        """{query id: [document ids]} (what `evaluate_ranking` takes)."""
        return dict(zip(self.query_ids, self.doc_ids))


def search_split(encoder, split, batch_size=64, max_seq_length=None, query_prompt="",
                 document_prompt="", depth=RUN_DEPTH, query_chunk=256, corpus_chunk=16384,
                 verbose=1):
    """Encodes the split's queries and the whole corpus (prompts prepended) and returns
    the exact cosine top `depth` of every query as a Ranking, in trec_eval's order."""
    corpus = split.corpus
    docs = encode_texts(encoder, [document_prompt + t for t in corpus.texts], batch_size,
                        max_seq_length, verbose, "documents")
    queries = encode_texts(encoder, [query_prompt + t for t in split.query_texts],
                           batch_size, max_seq_length, 0, "queries")
    if docs.shape[1] != queries.shape[1]:
        raise ConfigError(f"documents embed to {docs.shape[1]} dimensions, queries to "
                          f"{queries.shape[1]}")
    start = time.perf_counter()
    scores, indices = top_k_cosine(queries, docs, depth, query_chunk=query_chunk,
                                   candidate_chunk=corpus_chunk,
                                   tie_order=trec_tie_order(corpus.ids))
    logging.info("searched %d queries over %d documents in %.1f s", len(queries), len(docs),
                 time.perf_counter() - start)
    doc_ids = [[corpus.ids[i] for i in row if i >= 0] for row in indices]
    return Ranking(split.query_ids, doc_ids,
                   [s[:len(d)] for s, d in zip(scores, doc_ids)])


def evaluate_retrieval(encoder, split, batch_size=64, max_seq_length=None, query_prompt="",
                       document_prompt="", run_file=None, run_tag="tfsent", verbose=1,
                       query_chunk=256, corpus_chunk=16384):
    """nDCG@10, MRR@10, Recall@10/@100 and MAP@100 (x100, trec_eval's definitions) of
    exact cosine search over a BEIR split.

    Args:
        encoder: anything with `encode(sentences, batch_size, normalize, max_seq_length)`.
        split: a `tfsent.data.beir.RetrievalSplit` (or a folder / `beir:DIR[:SPLIT]`
            string, read with the test split by default).
        query_prompt, document_prompt: strings put before each query / document before
            encoding (e.g. "query: " and "passage: " for E5 models).
        run_file: optional path: the top 100 of each query written there (`write_run`).
        run_tag: the TREC run's last column.
        verbose: 1 shows a progress bar while the corpus is encoded.
        query_chunk, corpus_chunk: the search's chunk sizes (`top_k_cosine`).
    Returns:
        {measure: mean, "queries": n, "documents": m, "per_query": {qid: {measure: x}}}.
    """
    if isinstance(split, str):
        split = read_task_split(split)
    ranking = search_split(encoder, split, batch_size, max_seq_length, query_prompt,
                           document_prompt, RUN_DEPTH, query_chunk, corpus_chunk, verbose)
    result = evaluate_ranking(ranking.as_dict(), split.qrels, split.query_ids)
    result["documents"] = len(split.corpus)
    if run_file:
        write_run(run_file, ranking, run_tag)
    return result


def candidate_pool(ranking, split, top):
    """The document ids of a fixed dev pool, as NanoBEIR builds its subsets: every document
    judged for one of the split's queries (any qrels score) and the first `top` documents
    of each query in `ranking` (the starting encoder's search over the whole corpus).
    One pool for all queries: a query still meets the other queries' candidates. Sorted in
    corpus order by `RetrievalSplit.with_corpus_subset`, which makes the pooled split."""
    if top < 1:
        raise ConfigError(f"candidate pool depth {top}: must be >= 1")
    pool = {d for judged in split.qrels.values() for d in judged}
    for docs in ranking.doc_ids:
        pool.update(docs[:top])
    return sorted(pool.intersection(split.corpus.ids))


def pooled_split(encoder, split, top, batch_size=64, max_seq_length=None, query_prompt="",
                 document_prompt="", verbose=1):
    """(the split searching its candidate pool only, the pool's document ids): the pool of
    `candidate_pool` from `encoder`'s exact search over the whole corpus (once)."""
    ranking = search_split(encoder, split, batch_size, max_seq_length, query_prompt,
                           document_prompt, max(top, 1), verbose=verbose)
    doc_ids = candidate_pool(ranking, split, top)
    logging.info("dev candidate pool: %d of %d documents (the %d queries' judged documents "
                 "and the top %d of each)", len(doc_ids), len(split.corpus),
                 len(split.query_ids), top)
    return split.with_corpus_subset(doc_ids), doc_ids


def rerank(ranking, split, score, top=100, batch_size=64):
    """A Ranking whose first `top` documents of each query are reordered by
    `score(queries, passages) -> (N,) scores` (a cross-encoder's `score`, or a served
    export's), highest first, ties in trec_eval's order; the documents after `top` keep
    their place. Scores fall with rank, so trec_eval re-sorting a written run (by score)
    sees the same ranking: the tail's first-stage scores, when not already below the
    lowest reranked score, are shifted to 1 below it (their gaps kept, and no two distinct
    scores rounded to one float32); a NaN or -inf reranker score counts as 1 below the
    query's lowest finite one, +inf as 1 above its highest (a warning says how many)."""
    if top < 1:
        raise ConfigError(f"rerank top must be >= 1, got {top}")
    texts = dict(zip(split.corpus.ids, split.corpus.texts))
    queries = dict(zip(split.query_ids, split.query_texts))
    pairs = [(qid, d) for qid, docs in zip(ranking.query_ids, ranking.doc_ids)
             for d in docs[:top]]
    scores = []
    step = batch_size * RERANK_CHUNK_BATCHES
    for start in range(0, len(pairs), step):
        chunk = pairs[start:start + step]
        scores.append(np.asarray(score([queries[q] for q, _ in chunk],
                                       [texts[d] for _, d in chunk]), np.float32))
    flat = np.concatenate(scores) if scores else np.zeros(0, np.float32)
    if flat.shape != (len(pairs),):
        raise ConfigError(f"the reranker returned {flat.shape} scores for {len(pairs)} "
                          "(query, passage) pairs: one score per pair expected")
    bad = int(np.sum(~np.isfinite(flat)))
    if bad:
        logging.warning("the reranker gave %d of %d pairs a NaN or infinite score: NaN and "
                        "-inf ranked last of their query's top %d, +inf first", bad,
                        len(pairs), top)
    doc_ids, new_scores, at = [], [], 0
    for docs, first_stage in zip(ranking.doc_ids, ranking.scores):
        head_scores = flat[at:at + len(docs[:top])].astype(np.float64)
        at += len(head_scores)
        finite = np.isfinite(head_scores)
        if not finite.all():  # +inf first, NaN / -inf last (1 beyond the finite ones)
            low, high = ((head_scores[finite].min(), head_scores[finite].max())
                         if finite.any() else (0.0, 0.0))
            head_scores[np.isnan(head_scores) | (head_scores == -np.inf)] = low - 1.0
            head_scores[head_scores == np.inf] = high + 1.0
        head = sorted(zip(head_scores.tolist(), docs[:top]), reverse=True)
        tail = np.asarray(first_stage[top:len(docs)], np.float64)
        if len(tail) and head and tail[0] >= head[-1][0]:  # below the head, gaps kept
            tail = _falling_float32(tail, tail - tail[0] + head[-1][0] - 1.0)
        doc_ids.append([d for _, d in head] + list(docs[top:]))
        new_scores.append(np.concatenate([np.asarray([s for s, _ in head], np.float32),
                                          np.asarray(tail, np.float32)]))
    return Ranking(ranking.query_ids, doc_ids, new_scores)


def _falling_float32(original, shifted):
    """`shifted` as float32, each value below the one before wherever `original` fell
    there (a shift to larger magnitudes can round distinct scores to one float32: a tie
    trec_eval would break by document id), equal where `original` was."""
    out = np.asarray(shifted, np.float32).copy()
    for i in range(1, len(out)):
        if original[i] < original[i - 1] and not out[i] < out[i - 1]:
            out[i] = np.nextafter(out[i - 1], np.float32(-np.inf))
        elif original[i] == original[i - 1]:
            out[i] = out[i - 1]
    return out


def read_task_split(source, default_split="test"):
    """The RetrievalSplit of a folder or a `beir:DIR[:SPLIT]` name."""
    directory, split = parse_beir(source, default_split, bare=True)
    return beir.read_split(directory, split)


# -- run files ------------------------------------------------------------------------------
def trec_id(identifier):
    """An id as a TREC run writes it: whitespace and "%" percent-encoded."""
    if "%" not in identifier and not any(c.isspace() for c in identifier):
        return identifier
    return "".join(urllib.parse.quote(c, safe="") if c == "%" or c.isspace() else c
                   for c in identifier)


def _score_text(score):
    """The shortest decimal that reads back as the same float32 (no ties invented, none
    lost: the order of the scores is kept exactly)."""
    return np.format_float_positional(np.float32(score), unique=True, trim="0")


def write_run(path, ranking, tag="tfsent"):
    """Writes `ranking` (a Ranking) atomically: TREC lines `qid Q0 docid rank score tag`,
    or {qid: {docid: score}} JSON when `path` ends with .json."""
    if path.lower().endswith(".json"):
        run = {q: {d: float(_score_text(s)) for d, s in zip(docs, scores)}
               for q, docs, scores in zip(ranking.query_ids, ranking.doc_ids, ranking.scores)}
        fsio.write_file_atomic(path, json.dumps(run, indent=1))
    else:
        if any(c.isspace() for c in tag) or not tag:
            raise ConfigError(f"the run tag {tag!r} must be one word")
        encoded = sum(trec_id(d) != d for docs in ranking.doc_ids for d in docs)
        if encoded:
            logging.info("%s: %d document ids hold whitespace or %%: written "
                         "percent-encoded", path, encoded)
        lines = [f"{trec_id(q)} Q0 {trec_id(d)} {rank} {_score_text(s)} {tag}\n"
                 for q, docs, scores in zip(ranking.query_ids, ranking.doc_ids,
                                            ranking.scores)
                 for rank, (d, s) in enumerate(zip(docs, scores), start=1)]
        fsio.write_file_atomic(path, "".join(lines))
    logging.info("wrote the run (top %d of %d queries) to %s", RUN_DEPTH,
                 len(ranking.query_ids), path)
