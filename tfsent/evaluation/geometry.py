"""Alignment and uniformity of an embedding space (Wang and Isola, 2020).

Both are computed on L2-normalised embeddings, lower is better for both:
    align   = mean over positive pairs (x, x+) of ||x - x+||^2
    uniform = log of the mean over all distinct pairs i < j of exp(-2 ||x_i - x_j||^2)
As in SimCSE's and SCD's analyses, positive pairs are the STS Benchmark pairs with a gold
score above 4, and uniformity is taken over the distinct sentences of the same split.
"""

import numpy as np

from tfsent.errors import InputError
from tfsent.data import senteval as senteval_data
from tfsent.evaluation.sts import embed

MAX_POINTS = 5000


def l2_normalize(x):
    """Rows scaled to unit L2 norm (a zero row stays zero), as float64."""
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def alignment(x, y, alpha=2.0):
    """Mean ||x_i - y_i||^alpha over paired rows of x and y, after L2 normalisation."""
    x, y = l2_normalize(x), l2_normalize(y)
    if x.shape != y.shape or len(x) == 0:
        raise InputError(f"alignment needs two non-empty arrays of one shape, got "
                         f"{x.shape} and {y.shape}")
    return float(np.mean(np.linalg.norm(x - y, axis=1) ** alpha))


def uniformity(x, t=2.0, max_points=MAX_POINTS, seed=0, chunk=1024):
    """log mean over pairs i < j of exp(-t ||x_i - x_j||^2), after L2 normalisation.

    With more than `max_points` rows, a fixed subsample of `max_points` rows (drawn
    without replacement by numpy's default_rng(seed), so repeatable) is used instead of
    all of them; `max_points=None` uses every row. Computed in row chunks, so memory is
    O(chunk * N).
    """
    x = l2_normalize(x)
    n = len(x)
    if n < 2:
        raise InputError(f"uniformity needs at least 2 embeddings, got {n}")
    if max_points is not None and n > max_points:
        keep = np.sort(np.random.default_rng(seed).choice(n, max_points, replace=False))
        x, n = x[keep], max_points
    total = 0.0
    for start in range(0, n - 1, chunk):
        block = x[start:start + chunk]
        # squared distances of block rows to all later rows (j > i)
        sq = np.maximum(2.0 - 2.0 * (block @ x.T), 0.0)
        rows = np.arange(start, start + len(block))[:, None]
        upper = np.arange(n)[None, :] > rows
        total += float(np.sum(np.exp(-t * sq) * upper))
    return float(np.log(total / (n * (n - 1) / 2)))


def align_uniform(encode_fn, data_dir, split="test", threshold=4.0,
                  max_points=MAX_POINTS, seed=0):
    """Alignment and uniformity of `encode_fn` on an STS Benchmark split.

    Positive pairs are the pairs scored above `threshold`; uniformity uses the distinct
    sentences of the split (subsampled to `max_points`, see `uniformity`). Returns
    {"align", "uniform", "n_pairs", "n_sentences"}.
    """
    s1, s2, scores = senteval_data.read_stsbenchmark(data_dir, split)
    positive = np.flatnonzero(scores > threshold)
    if len(positive) == 0:
        raise InputError(f"no STS-B {split} pair scores above {threshold}")
    sentences = list(dict.fromkeys(s1 + s2))
    emb = embed(encode_fn, sentences)
    row = {s: i for i, s in enumerate(sentences)}
    a = emb[[row[s1[i]] for i in positive]]
    b = emb[[row[s2[i]] for i in positive]]
    return {"align": alignment(a, b),
            "uniform": uniformity(emb, max_points=max_points, seed=seed),
            "n_pairs": int(len(positive)), "n_sentences": len(sentences)}


def random_pair_cosines(x, n_pairs=1000, seed=0):
    """Cosines of `n_pairs` random pairs of distinct rows of x (fixed by `seed`).

    Their mean is the collapse signature: near 1 when every sentence points the same way
    (raw BERT's anisotropy), near 0 for a well spread space.
    """
    x = l2_normalize(x)
    n = len(x)
    if n < 2:
        raise InputError(f"random pairs need at least 2 embeddings, got {n}")
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, n_pairs)
    j = (i + rng.integers(1, n, n_pairs)) % n   # j != i
    return np.sum(x[i] * x[j], axis=1)


def positive_threshold(gold):
    """Gold score above which a dev pair counts as a positive pair for alignment: 80% of
    the way from the lowest to the highest score (4.0 on STS-B's 0-5 scale)."""
    gold = np.asarray(gold, dtype=np.float64)
    return float(gold.min() + 0.8 * (gold.max() - gold.min()))


def pair_geometry(emb1, emb2, gold, sentence_emb, max_points=2000, seed=0):
    """Alignment over the high-scoring pairs, uniformity and mean random-pair cosine over
    `sentence_emb` (the distinct sentences). Returns {"alignment", "uniformity",
    "random_pair_cosine"}; alignment is nan when no pair clears `positive_threshold`."""
    gold = np.asarray(gold, dtype=np.float64)
    positive = np.flatnonzero(gold > positive_threshold(gold))
    align = (alignment(np.asarray(emb1)[positive], np.asarray(emb2)[positive])
             if len(positive) else float("nan"))
    return {"alignment": align,
            "uniformity": uniformity(sentence_emb, max_points=max_points, seed=seed),
            "random_pair_cosine": float(np.mean(random_pair_cosines(sentence_emb, seed=seed)))}
