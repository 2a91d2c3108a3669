"""Hard-negative mining: (anchor, positive) pairs -> (anchor, positive, negative) triplets.

The library of `python -m tfsent.mine` (`tfsent.search.mined_files.mine_to_file` is the
command's whole run); `mine_hard_negatives` mines a list of pairs, `mine_beir` a BEIR
folder's (query, relevant document) rows.

Candidates are the corpus sentences given, else every positive of the pairs; duplicates are
merged. From a BEIR folder (`tfsent/data/beir.py`; split `train` by default) the anchors
are the split's queries with a qrel score > 0, one row per (query, relevant document), the
document text as the retrieval evaluation builds it (title + " " + text), and the
candidates are the corpus's distinct non-empty document texts. Documents judged with score
<= 0 are judged non-relevant: valid negatives. A query with several positives gets one row
per positive; the rows share the query's ranked candidates and each row's margin filters
use its own positive's score.

Every text is embedded once with the encoder (the query prompt before anchors, the
document prompt before candidates and positives, the rows returned without them), and
for each distinct anchor the most similar candidates by exact cosine are found chunk by
chunk (`tfsent.search.exact.top_k_cosine`: memory grows with chunk sizes and k, never
with anchors x candidates; the embeddings themselves, 1.5 GB for 1M sentences at 384
dims, are the largest allocation).

Candidates that are never negatives of an anchor: the candidate with the anchor's own
text and every positive the pairs (or the qrels) give for that anchor. Ranks count the
remaining candidates (rank 0 = the most similar). From ranks [range_min, range_max) a
candidate is kept if
  sim(anchor, neg) <= max_score                              (max_score)
  sim(anchor, neg) <  sim(anchor, pos) - margin              (margin)
  sim(anchor, neg) <  sim(anchor, pos) - |sim(anchor, pos)| * relative_margin
                                                             (relative_margin)
(NV-Retriever's TopK-Abs, TopK-MarginPos and TopK-PercPos; sentence-transformers'
`max_score`, `absolute_margin`, `relative_margin`), and the first `num_negatives` kept
(the hardest) are the row's negatives. How many anchors got fewer negatives than asked,
and which filter removed their candidates, is logged, with the cosines of positives and
selected negatives.

With a cross-encoder (`rescorer`: anything with `score(queries, passages, batch_size)`,
sentence-transformers' `cross_encoder=` of `mine_hard_negatives`), the candidates the
cosine search found (its top range_max, or range_min + 10 * num_negatives) are scored
again, each (anchor, candidate) pair read jointly from the texts without prompts, and so is
each (anchor, positive): ranks, the rank window and the three filters then use the
cross-encoder's scores (the candidates in its order, hardest first), so a near-duplicate of
the positive the embeddings miss is caught by --margin on what a reranker says. The
cosine search only chooses which candidates are scored. One filter at least is required
then: unfiltered, the candidates a reranker scores highest are the likeliest unlabelled
positives (sentence-transformers rescores only when a filter is set). A NaN score makes
its candidate none (with a warning).

`num_negatives` larger than what any anchor can get (the distinct candidates minus the
fewest excluded texts of an anchor, minus range_min), or than the rank window, is an
error before the model is loaded; anchors that get fewer for their own reasons (more
positives excluded, filters) are counted in a warning and returned with what they got.
"""

import os
import time

import keras
import numpy as np
from absl import logging

from tfsent.data import beir
from tfsent.data.beir import read_split
from tfsent.errors import ConfigError, InputError
from tfsent.search.exact import top_k_cosine

OUTPUT_FORMATS = ("triplet", "n-tuple")


# -- pure functions -------------------------------------------------------------------------
def pair_cosines(unit_embeddings, left, right, chunk=65536):
    """cos(e[left[r]], e[right[r]]) per row r of unit-norm embeddings, `chunk` rows at a
    time (no copy of all the pairs' embeddings at once)."""
    out = np.zeros(len(left), np.float32)
    for start in range(0, len(left), chunk):
        a = unit_embeddings[left[start:start + chunk]]
        b = unit_embeddings[right[start:start + chunk]]
        out[start:start + chunk] = np.einsum("ij,ij->i", a, b)
    return out


def negative_filters(scores, indices, positive_scores, range_min=0, range_max=None,
                     max_score=None, margin=None, relative_margin=None):
    """Which ranked candidates each filter removes.

    Args:
        scores, indices: (R, K) ranked candidates per row (as `top_k_cosine` returns them,
            index -1 = no candidate).
        positive_scores: (R,) sim(anchor, positive) of each row.
        range_min, range_max: rank window [range_min, range_max) (None: to the end).
        max_score: keep only sim <= max_score (None: off).
        margin: keep only sim < positive_score - margin (None: off).
        relative_margin: keep only sim < positive_score - |positive_score| *
            relative_margin (None: off; below the positive whatever its sign).
    Returns:
        dict of (R, K) boolean arrays: "candidate" (a real candidate inside the rank
        window), "max_score", "margin", "relative_margin" (True where that filter removes
        a candidate; all False when the filter is off), and "keep" (a candidate no filter
        removes).
    """
    scores = np.asarray(scores, np.float32)
    positive = np.asarray(positive_scores, np.float32)[:, None]
    ranks = np.arange(scores.shape[1])[None, :]
    in_window = ranks >= range_min
    if range_max is not None:
        in_window &= ranks < range_max
    masks = {"candidate": in_window & (np.asarray(indices) >= 0)}
    off = np.zeros(scores.shape, bool)
    masks["max_score"] = off if max_score is None else scores > max_score
    masks["margin"] = off if margin is None else ~(scores < positive - margin)
    masks["relative_margin"] = (off if relative_margin is None else
                                ~(scores < positive - np.abs(positive) * relative_margin))
    masks["keep"] = (masks["candidate"] & ~masks["max_score"] & ~masks["margin"]
                     & ~masks["relative_margin"])
    return masks


def first_n(keep, n):
    """(R, K) booleans -> the first `n` True entries of each row (the others False)."""
    keep = np.asarray(keep, bool)
    return keep & (np.cumsum(keep, axis=1) <= n)


def shortfall_report(masks, selected, n):
    """Counts for the log: rows with fewer than `n` selected negatives, rows with none, and
    among the in-window candidates of the short rows how many each filter removed."""
    short = selected.sum(axis=1) < n
    report = {"short": int(short.sum()), "none": int((selected.sum(axis=1) == 0).sum()),
              "window_candidates": int(masks["candidate"][short].sum())}
    for name in ("max_score", "margin", "relative_margin"):
        report[name] = int((masks[name] & masks["candidate"])[short].sum())
    return report



class MiningProblem:
    """The texts of a mining run, deduplicated and indexed.

    `texts` lists the candidates first (indices 0..num_candidates-1) and then the anchors
    and positives that are not candidates, so the candidate embeddings are a prefix of the
    embedding matrix; `embed_texts` are the same texts as the encoder sees them (with the
    query prompt before anchors and the document prompt before candidates and positives).
    With equal prompts an anchor that is also a candidate is embedded once; with different
    prompts the anchors get entries of their own after the documents. `anchor_ids` /
    `positive_ids` index `texts` per pair row; `unique_anchors` are the distinct anchor
    ids and `row_anchor` maps each row to its position there; `exclude`
    (len(unique_anchors), E) holds the candidate indices no anchor may take as a negative
    (the candidate with the anchor's own text, all of its positives), -1 padded.
    """

    def __init__(self, pairs, corpus=None, query_prompt="", document_prompt=""):
        candidates = list(dict.fromkeys(corpus if corpus is not None
                                        else (p for _, p in pairs)))
        self.pairs, self.candidates = pairs, candidates
        self.prompts = (query_prompt, document_prompt)
        index = {t: i for i, t in enumerate(candidates)}
        self.num_candidates = len(candidates)
        if query_prompt == document_prompt:
            for text in (t for pair in pairs for t in pair):
                index.setdefault(text, len(index))
            anchor_index = index
            self.texts = list(index)
            self.embed_texts = [document_prompt + t for t in self.texts]
        else:
            for _, positive in pairs:
                index.setdefault(positive, len(index))
            anchor_index = {}
            for anchor, _ in pairs:
                anchor_index.setdefault(anchor, len(index) + len(anchor_index))
            self.texts = list(index) + list(anchor_index)
            self.embed_texts = ([document_prompt + t for t in index]
                                + [query_prompt + t for t in anchor_index])
        self.anchor_ids = np.array([anchor_index[a] for a, _ in pairs], np.int64)
        self.positive_ids = np.array([index[p] for _, p in pairs], np.int64)
        self.unique_anchors, self.row_anchor = np.unique(self.anchor_ids, return_inverse=True)
        excluded = {}
        for (anchor, _), a, p in zip(pairs, self.anchor_ids, self.positive_ids):
            banned = excluded.setdefault(int(a), set())
            banned.add(int(p))
            if anchor in index:  # the candidate with the anchor's own text
                banned.add(index[anchor])
        lists = [sorted(i for i in excluded[int(a)] if i < self.num_candidates)
                 for a in self.unique_anchors]
        width = max(1, max(len(x) for x in lists))
        self.exclude = np.full((len(lists), width), -1, np.int64)
        for row, ids in enumerate(lists):
            self.exclude[row, :len(ids)] = ids
        self.min_excluded = min(len(x) for x in lists)

    def with_prompts(self, query_prompt, document_prompt):
        """This problem for other prompts (itself when they are the same): the prompts
        an encoder was saved with are known only once it loads, after the checks."""
        if (query_prompt, document_prompt) == self.prompts:
            return self
        return MiningProblem(self.pairs, self.candidates, query_prompt, document_prompt)

    def max_negatives(self, range_min=0):
        """The most negatives any anchor can get: the candidates minus the fewest excluded
        candidates of an anchor, minus the skipped ranks. Asking for more is an error;
        anchors that get fewer (more excluded candidates, filters) are counted in the
        log instead."""
        return self.num_candidates - self.min_excluded - range_min


def check_options(num_negatives, range_min, range_max, max_score, margin, relative_margin,
                  output_format, rescored=False):
    """Raises ConfigError naming the flag for option values that cannot work (`rescored`:
    the scores are a cross-encoder's, not cosines: max_score may be any number, and one
    filter is required)."""
    if num_negatives < 1:
        raise ConfigError(f"--num_negatives must be >= 1, got {num_negatives}")
    if range_min < 0:
        raise ConfigError(f"--range_min must be >= 0, got {range_min}")
    if range_max is not None and range_max - range_min < num_negatives:
        raise ConfigError(f"the rank window [--range_min={range_min}, --range_max="
                          f"{range_max}) holds {max(0, range_max - range_min)} candidates, "
                          f"fewer than --num_negatives={num_negatives}")
    if rescored and max_score is None and margin is None and relative_margin is None:
        raise ConfigError("a cross-encoder rescoring with no filter would take the "
                          "candidates it scores highest, the likeliest unlabelled positives: "
                          "set --margin (e.g. 0: below the positive's score), "
                          "--relative_margin or --max_score")
    if max_score is not None and not rescored and not -1.0 <= max_score <= 1.0:
        raise ConfigError(f"--max_score is a cosine, in [-1, 1] (any score with a "
                          f"cross-encoder); got {max_score}")
    if margin is not None and margin < 0:
        raise ConfigError(f"--margin must be >= 0, got {margin}")
    if relative_margin is not None and not 0.0 <= relative_margin < 1.0:
        raise ConfigError(f"--relative_margin must be in [0, 1), got {relative_margin}")
    if output_format not in OUTPUT_FORMATS:
        raise ConfigError(f"--output_format must be one of {OUTPUT_FORMATS}, got "
                          f"{output_format!r}")


def check_available(problem, num_negatives, range_min, candidates_source):
    """Raises ConfigError when `num_negatives` is more than any anchor of `problem` can
    get (see `MiningProblem.max_negatives`)."""
    available = problem.max_negatives(range_min)
    if num_negatives > available:
        raise ConfigError(
            f"--num_negatives={num_negatives} is more than any anchor can get: "
            f"{problem.num_candidates} distinct candidates ({candidates_source}), minus "
            f"{problem.min_excluded} that are the anchor or its positives, minus "
            f"--range_min={range_min}, leaves {max(0, available)}")


def mine_hard_negatives(encoder, pairs, corpus=None, num_negatives=3, range_min=0,
                        range_max=None, max_score=None, margin=None, relative_margin=None,
                        batch_size=64, query_chunk=256, candidate_chunk=16384, verbose=1,
                        candidates_source="the positives of the pairs", query_prompt="",
                        document_prompt="", rescorer=None):
    """Mines hard negatives for (anchor, positive) pairs; see the module docstring.

    Args:
        encoder: an object with `encode(sentences, batch_size=, normalize=, verbose=)`.
        pairs: list of (anchor, positive) strings.
        corpus: candidate sentences (None: the positives of `pairs`).
        num_negatives, range_min, range_max, max_score, margin, relative_margin: see
            `negative_filters`; range_max None searches range_min + 10 * num_negatives
            ranks.
        batch_size: encoding batch size; query_chunk, candidate_chunk: see `top_k_cosine`.
        verbose: 1 shows progress bars, 0 none.
        candidates_source: how the candidates are named in errors.
        query_prompt, document_prompt: put before each anchor / each candidate and
            positive when embedding (the negatives returned are the texts without it).
        rescorer: None, or a cross-encoder (`score(queries, passages, batch_size=)`, e.g.
            a `tfsent.methods.CrossEncoder`) whose scores of the candidates found rank
            and filter them (module docstring); max_score / margin are then on its scale.
    Returns:
        a list, per pair row, of its negatives (strings, hardest first; possibly fewer
        than num_negatives), and the shortfall report (`shortfall_report`).
    """
    check_options(num_negatives, range_min, range_max, max_score, margin, relative_margin,
                  "triplet", rescored=rescorer is not None)
    problem = MiningProblem(pairs, corpus, query_prompt, document_prompt)
    check_available(problem, num_negatives, range_min, candidates_source)
    return mine_problem(encoder, problem, num_negatives, range_min, range_max, max_score,
                        margin, relative_margin, batch_size, query_chunk, candidate_chunk,
                        verbose, rescorer)


def score_summary(positive_scores, negative_scores, hardest_negative_scores):
    """Numbers for the log (and docs/search.md): mean and 10/50/90th percentiles of the
    positives' and the selected negatives' cosines to their anchor, and the share of rows
    whose hardest selected negative scores at least as high as the row's positive."""
    def stats(values):
        values = np.asarray(values, np.float64)
        if not len(values):
            return None
        p10, p50, p90 = np.percentile(values, [10, 50, 90])
        return {"mean": float(values.mean()), "p10": float(p10), "p50": float(p50),
                "p90": float(p90)}

    hardest = np.asarray(hardest_negative_scores, np.float64)
    positive = np.asarray(positive_scores, np.float64)
    with_negative = ~np.isnan(hardest)
    above = hardest[with_negative] >= positive[with_negative]
    return {"positive": stats(positive), "negative": stats(negative_scores),
            "hardest_at_least_positive": float(above.mean()) if above.size else 0.0}


def _format_stats(stats):
    """'mean 0.512 (p10 0.401, p50 0.515, p90 0.620)' or 'none'."""
    if stats is None:
        return "none"
    return (f"mean {stats['mean']:.3f} (p10 {stats['p10']:.3f}, p50 {stats['p50']:.3f}, "
            f"p90 {stats['p90']:.3f})")


def rescore_candidates(rescorer, problem, indices, batch_size=64, anchor_chunk=256,
                       verbose=1):
    """The cross-encoder's view of the cosine search's candidates: `indices` (A, K), the
    candidates of each unique anchor of `problem` (-1: none), scored as (anchor text,
    candidate text) pairs by `rescorer.score(queries, passages, batch_size=)`,
    `anchor_chunk` anchors per call, and sorted by that score, highest first. Returns
    (scores, indices) (A, K), as `top_k_cosine` returns them (-inf / -1 for no
    candidate; a NaN score makes its pair no candidate, with a warning)."""
    scores = np.full(indices.shape, -np.inf, np.float32)
    valid = indices >= 0
    bar = keras.utils.Progbar(int(valid.sum()), unit_name="pair") if verbose else None
    for start in range(0, len(indices), anchor_chunk):
        rows, ranks = np.nonzero(valid[start:start + anchor_chunk])
        if not len(rows):
            continue
        anchors = problem.unique_anchors[start + rows]
        candidates = indices[start + rows, ranks]
        got = rescorer.score([problem.texts[i] for i in anchors],
                             [problem.texts[i] for i in candidates], batch_size=batch_size)
        scores[start + rows, ranks] = np.asarray(got, np.float32)
        if bar is not None:
            bar.add(len(rows))
    broken = np.isnan(scores)
    if broken.any():  # a diverged reranker: such a candidate is no candidate
        logging.warning("the cross-encoder scored %d of %d (anchor, candidate) pairs NaN: "
                        "they are left out", int(broken.sum()), int(valid.sum()))
        scores[broken], indices = -np.inf, np.where(broken, -1, indices)
    order = np.argsort(-scores, axis=1, kind="stable")
    return (np.take_along_axis(scores, order, axis=1),
            np.take_along_axis(indices, order, axis=1))


def mine_problem(encoder, problem, num_negatives, range_min=0, range_max=None,
                 max_score=None, margin=None, relative_margin=None, batch_size=64,
                 query_chunk=256, candidate_chunk=16384, verbose=1, rescorer=None):
    """`mine_hard_negatives` on a prepared, checked `MiningProblem` (same arguments and
    result). Logs the time of each stage and the score summary (`score_summary`)."""
    depth = range_max if range_max is not None else range_min + 10 * num_negatives
    depth = min(depth, problem.num_candidates)
    num_rows = len(problem.anchor_ids)
    logging.info("mining: %d pairs, %d distinct anchors, %d candidates, %d texts to embed, "
                 "top %d per anchor", num_rows, len(problem.unique_anchors),
                 problem.num_candidates, len(problem.texts), depth)
    start = time.perf_counter()
    embeddings = np.asarray(encoder.encode(problem.embed_texts, batch_size=batch_size,
                                           normalize=True, verbose=verbose), np.float32)
    embeddings /= np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    logging.info("embedded %d texts in %.1f s", len(problem.texts),
                 time.perf_counter() - start)
    start = time.perf_counter()
    bar = None
    if verbose:
        bar = keras.utils.Progbar(len(problem.unique_anchors), unit_name="anchor")
    scores, indices = top_k_cosine(
        embeddings[problem.unique_anchors], embeddings[:problem.num_candidates], depth,
        exclude=problem.exclude, query_chunk=query_chunk, candidate_chunk=candidate_chunk,
        on_chunk=None if bar is None else bar.add)
    logging.info("searched %d anchors over %d candidates in %.1f s",
                 len(problem.unique_anchors), problem.num_candidates,
                 time.perf_counter() - start)
    what = "cosine"
    if rescorer is not None:
        start = time.perf_counter()
        scores, indices = rescore_candidates(rescorer, problem, indices, batch_size,
                                             query_chunk, verbose)
        positive_scores = np.asarray(rescorer.score(
            [problem.texts[i] for i in problem.anchor_ids],
            [problem.texts[i] for i in problem.positive_ids], batch_size=batch_size),
            np.float32)
        if np.isnan(positive_scores).any():
            logging.warning("the cross-encoder scored %d of the %d (anchor, positive) pairs "
                            "NaN: their margin filters remove every candidate",
                            int(np.isnan(positive_scores).sum()), len(positive_scores))
        pairs = int((indices >= 0).sum()) + len(positive_scores)
        seconds = time.perf_counter() - start
        logging.info("the cross-encoder scored %d (anchor, candidate or positive) pairs in "
                     "%.1f s (%.1f pairs/s); its scores rank and filter the candidates",
                     pairs, seconds, pairs / max(seconds, 1e-9))
        what = "cross-encoder score"
    else:
        positive_scores = pair_cosines(embeddings, problem.anchor_ids, problem.positive_ids)
    row_scores, row_indices = scores[problem.row_anchor], indices[problem.row_anchor]
    masks = negative_filters(row_scores, row_indices, positive_scores, range_min, range_max,
                             max_score, margin, relative_margin)
    selected = first_n(masks["keep"], num_negatives)
    negatives = [[problem.texts[i] for i in row_indices[r][selected[r]]]
                 for r in range(num_rows)]
    first = np.argmax(selected, axis=1)
    hardest = np.where(selected.any(axis=1), row_scores[np.arange(num_rows), first], np.nan)
    summary = score_summary(positive_scores, row_scores[selected], hardest)
    logging.info("%s to the anchor: positives %s; selected negatives %s; rows whose "
                 "hardest negative scores >= their positive: %.1f%%", what,
                 _format_stats(summary["positive"]), _format_stats(summary["negative"]),
                 100 * summary["hardest_at_least_positive"])
    return negatives, shortfall_report(masks, selected, num_negatives)


def log_report(report, num_rows, num_negatives, hint):
    """Logs how many pair rows got fewer negatives than asked and which filter removed
    their candidates."""
    if not report["short"]:
        logging.info("every one of the %d pairs got %d negatives", num_rows, num_negatives)
        return
    logging.warning(
        "%d of %d pairs got fewer than %d negatives (%d got none). Among the %d candidates "
        "in their rank window: %d above --max_score, %d not below the positive by "
        "--margin, %d not below the positive by --relative_margin (a candidate can fail "
        "several); the others were taken. %s", report["short"], num_rows, num_negatives,
        report["none"], report["window_candidates"], report["max_score"], report["margin"],
        report["relative_margin"], hint)


# -- BEIR -----------------------------------------------------------------------------------
def beir_pairs(split):
    """(query text, document text) for every qrel with score > 0 of a
    `tfsent.data.beir.RetrievalSplit`: queries in queries.jsonl order, each query's
    positives in qrels order; rows repeated because two documents share a text are
    merged. InputError naming the file and id for an empty query or positive text."""
    doc_text = dict(zip(split.corpus.ids, split.corpus.texts))
    queries_path = beir.data_file(split.directory, "queries.jsonl")
    pairs = []
    for query_id, query_text in zip(split.query_ids, split.query_texts):
        if not query_text.strip():
            raise InputError(f"query {query_id!r} has an empty text", path=queries_path)
        for doc_id, score in split.qrels[query_id].items():
            if score <= 0:
                continue  # judged non-relevant: a valid negative, not a positive
            if not doc_text[doc_id].strip():
                raise InputError(f"document {doc_id!r}, a positive of query {query_id!r}, "
                                 f"has an empty title and text",
                                 path=beir.data_file(split.directory, "corpus.jsonl"))
            pairs.append((query_text, doc_text[doc_id]))
    unique = list(dict.fromkeys(pairs))
    if len(unique) < len(pairs):
        logging.info("%d repeated (query, positive) rows merged (documents or queries with "
                     "the same text)", len(pairs) - len(unique))
    return unique


def prepare_beir(directory, split="train", query_prompt="", document_prompt=""):
    """Reads split `split` of a BEIR folder (`tfsent.data.beir.read_split`: missing files,
    malformed lines, no qrel with score > 0 are errors; qrels naming unknown ids are
    counted in a warning and ignored, as the retrieval evaluation does) and builds its
    mining problem: anchors = the split's queries with a positive, candidates = the
    distinct non-empty document texts. Returns (pairs, MiningProblem, a description of the
    candidates for errors). Cheap: run before the model loads."""
    data = read_split(directory, split)
    pairs = beir_pairs(data)
    documents = [t for t in data.corpus.texts if t.strip()]
    if len(documents) < len(data.corpus.texts):
        logging.info("%d documents with an empty text are not candidates",
                     len(data.corpus.texts) - len(documents))
    logging.info("%s, split %s: %d queries with a relevant document, %d (query, positive) "
                 "rows, %d documents", directory, split, len(data.query_ids), len(pairs),
                 len(data.corpus))
    problem = MiningProblem(pairs, documents, query_prompt, document_prompt)
    source = f"the documents of {os.path.join(directory, 'corpus.jsonl')}"
    return pairs, problem, source


def mine_beir(encoder, directory, split="train", num_negatives=3, range_min=0,
              range_max=None, max_score=None, margin=None, relative_margin=None,
              query_prompt="", document_prompt="", batch_size=64, query_chunk=256,
              candidate_chunk=16384, verbose=1, rescorer=None):
    """Mines hard negatives for the (query, relevant document) rows of a BEIR split.

    One row per qrel with score > 0 (a query with several positives gets several rows,
    which share the query's ranked candidates; each row's margin filters use that row's
    positive score). A query's positives (and documents with the same text) are never its
    negatives; documents judged with score <= 0 are non-relevant and may be. Arguments as
    `mine_hard_negatives`; `directory`/`split` name the BEIR folder and qrels split.
    Returns (pairs, negatives per pair, shortfall report).
    """
    check_options(num_negatives, range_min, range_max, max_score, margin, relative_margin,
                  "triplet", rescored=rescorer is not None)
    pairs, problem, source = prepare_beir(directory, split, query_prompt, document_prompt)
    check_available(problem, num_negatives, range_min, source)
    negatives, report = mine_problem(encoder, problem, num_negatives, range_min, range_max,
                                     max_score, margin, relative_margin, batch_size,
                                     query_chunk, candidate_chunk, verbose, rescorer)
    return pairs, negatives, report
