"""Exact cosine search in bounded memory: the k most similar candidates of each query,
found by a running top-k over candidate chunks x query chunks (hard-negative mining in
`tfsent.search.mining`, retrieval evaluation in `tfsent.evaluation.retrieval`).

Ranking is deterministic: by score, descending, and among equal scores by a tie order
the caller gives (`tie_order`; default: the lower candidate index first). Memory grows
with the chunk sizes and k, never with queries x candidates.
"""

import numpy as np

from tfsent.errors import ConfigError

_LOW_BITS = np.int64(0xFFFFFFFF)


def l2_normalize_rows(x):
    """Rows of `x` scaled to unit L2 norm (zero rows stay zero), float32."""
    x = np.asarray(x, np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _ranking_keys(scores, tie_rank):
    """int64 keys ordered as (score, then -tie_rank): the float32 score's bits mapped to
    an order-preserving int32 in the high half, 2**32 - 1 - tie_rank in the low half. Keys
    of distinct candidates are distinct, so partitions and sorts on them are exact."""
    bits = (scores + np.float32(0.0)).view(np.int32)  # + 0.0 turns -0.0 into +0.0
    ordered = np.where(bits < 0, bits ^ np.int32(0x7FFFFFFF), bits).astype(np.int64)
    return (ordered << 32) | (_LOW_BITS - tie_rank)


def top_k_cosine(queries, candidates, k, exclude=None, query_chunk=256,
                 candidate_chunk=16384, on_chunk=None, tie_order=None):
    """The k candidates most cosine-similar to each query, exact, in bounded memory.

    Queries are processed `query_chunk` at a time; for each query chunk the candidates
    are scanned `candidate_chunk` at a time and a running top-k is merged with each
    chunk's similarities, so the largest similarity block is
    query_chunk x (candidate_chunk + k), never queries x candidates.

    Args:
        queries: (Q, D) embeddings (normalised here).
        candidates: (M, D) embeddings (normalised chunk by chunk here).
        k: how many to return per query (clamped to M).
        exclude: optional (Q, E) int array of candidate indices that are never returned
            for that query; -1 entries are padding.
        query_chunk, candidate_chunk: chunk sizes (>= 1).
        on_chunk: optional callable, called after each query chunk with its size.
        tie_order: optional (M,) distinct non-negative ints: among equal scores the
            candidate with the smaller value ranks first (None: the smaller index).
    Returns:
        (scores, indices): (Q, k) float32 and int64, each row by descending score. Where a
        query has fewer than k allowed candidates, the tail has index -1 and score -inf.
    """
    if query_chunk < 1 or candidate_chunk < 1:
        raise ConfigError(f"chunk sizes must be >= 1, got {query_chunk}, {candidate_chunk}")
    queries = l2_normalize_rows(queries)
    candidates = np.asarray(candidates, np.float32)
    n_queries, n_candidates = len(queries), len(candidates)
    if tie_order is None:
        tie_order = np.arange(n_candidates, dtype=np.int64)
    tie_order = np.asarray(tie_order, np.int64)
    if tie_order.shape != (n_candidates,):
        raise ConfigError(f"tie_order has shape {tie_order.shape}, expected ({n_candidates},)")
    if n_candidates and (tie_order.min() < 0 or tie_order.max() > _LOW_BITS):
        raise ConfigError("tie_order values must be in [0, 2**32)")
    k = max(0, min(int(k), n_candidates))
    scores = np.full((n_queries, k), -np.inf, np.float32)
    indices = np.full((n_queries, k), -1, np.int64)
    if k == 0 or n_queries == 0:
        return scores, indices
    if exclude is not None:
        exclude = np.asarray(exclude, np.int64).reshape(n_queries, -1)
    for q0 in range(0, n_queries, query_chunk):
        q = queries[q0:q0 + query_chunk]
        best_k = np.zeros((len(q), 0), np.int64)
        best_s = np.zeros((len(q), 0), np.float32)
        best_i = np.zeros((len(q), 0), np.int64)
        for c0 in range(0, n_candidates, candidate_chunk):
            block = l2_normalize_rows(candidates[c0:c0 + candidate_chunk])
            sims = q @ block.T
            if exclude is not None:
                ex = exclude[q0:q0 + query_chunk]
                rows, cols = np.nonzero((ex >= c0) & (ex < c0 + len(block)))
                sims[rows, ex[rows, cols] - c0] = -np.inf
            merged_k = np.concatenate(
                [best_k, _ranking_keys(sims, tie_order[c0:c0 + len(block)])], axis=1)
            merged_s = np.concatenate([best_s, sims], axis=1)
            merged_i = np.concatenate(
                [best_i, np.broadcast_to(np.arange(c0, c0 + len(block)), sims.shape)], axis=1)
            width = merged_k.shape[1]
            if width > k:
                part = np.argpartition(merged_k, width - k, axis=1)[:, width - k:]
                merged_k = np.take_along_axis(merged_k, part, axis=1)
                merged_s = np.take_along_axis(merged_s, part, axis=1)
                merged_i = np.take_along_axis(merged_i, part, axis=1)
            best_k, best_s, best_i = merged_k, merged_s, merged_i
        order = np.argsort(best_k, axis=1)[:, ::-1]
        best_s = np.take_along_axis(best_s, order, axis=1)
        best_i = np.take_along_axis(best_i, order, axis=1)
        best_i[np.isneginf(best_s)] = -1
        scores[q0:q0 + len(q)] = best_s
        indices[q0:q0 + len(q)] = best_i
        if on_chunk is not None:
            on_chunk(len(q))
    return scores, indices
