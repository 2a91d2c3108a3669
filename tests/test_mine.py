"""Hard-negative mining (tfsent.search): the chunked top-k and the filters against NumPy
transcriptions, a hand-computed case, bad input, and one CLI run on a tiny encoder."""

import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, mirrored_cpu_strategy
from tfsent.search import exact, mined_files, mining
from tfsent.errors import ConfigError, InputError


def _brute_force_top_k(queries, candidates, k, exclude):
    """Full similarity matrix, excluded entries removed, sorted per row (the reference)."""
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    c = candidates / np.linalg.norm(candidates, axis=1, keepdims=True)
    sims = (q.astype(np.float64) @ c.astype(np.float64).T)
    out_scores, out_indices = [], []
    for row in range(len(q)):
        banned = set(int(i) for i in exclude[row] if i >= 0)
        allowed = [j for j in range(len(c)) if j not in banned]
        ranked = sorted(allowed, key=lambda j: -sims[row, j])[:k]
        out_indices.append(ranked + [-1] * (k - len(ranked)))
        out_scores.append([sims[row, j] for j in ranked] + [-np.inf] * (k - len(ranked)))
    return np.array(out_scores), np.array(out_indices)


@pytest.mark.parametrize("query_chunk,candidate_chunk", [(5, 13), (64, 1000), (1, 7), (9, 1)])
def test_chunked_top_k_matches_brute_force(query_chunk, candidate_chunk):
    rng = np.random.default_rng(query_chunk * 100 + candidate_chunk)
    queries = rng.normal(size=(23, 8)).astype(np.float32)
    candidates = rng.normal(size=(61, 8)).astype(np.float32) * rng.uniform(0.5, 3, (61, 1))
    exclude = rng.integers(-1, 61, size=(23, 3))
    k = 9
    calls = []
    scores, indices = exact.top_k_cosine(queries, candidates, k, exclude=exclude,
                                        query_chunk=query_chunk,
                                        candidate_chunk=candidate_chunk, on_chunk=calls.append)
    ref_scores, ref_indices = _brute_force_top_k(queries, candidates, k, exclude)
    np.testing.assert_array_equal(indices, ref_indices)
    np.testing.assert_allclose(scores, ref_scores, atol=1e-5)
    assert sum(calls) == len(queries)
    assert len(calls) == -(-len(queries) // query_chunk)


def test_top_k_pads_when_fewer_candidates_are_allowed_than_k():
    rng = np.random.default_rng(0)
    candidates = rng.normal(size=(4, 3))
    scores, indices = exact.top_k_cosine(rng.normal(size=(2, 3)), candidates, 10,
                                        exclude=[[0, 2], [-1, -1]], candidate_chunk=3)
    assert indices.shape == (2, 4)  # k clamped to the number of candidates
    assert sorted(indices[0][:2]) == [1, 3] and list(indices[0][2:]) == [-1, -1]
    assert np.isneginf(scores[0][2:]).all()
    assert sorted(indices[1]) == [0, 1, 2, 3]


def _filters_reference(scores, indices, positive, range_min, range_max, max_score, margin,
                       relative_margin, n):
    """Element by element, in Python floats: the selected (row, rank) entries."""
    selected = set()
    for r in range(scores.shape[0]):
        taken = 0
        for rank in range(scores.shape[1]):
            s, p = float(scores[r, rank]), float(positive[r])
            if indices[r, rank] < 0 or rank < range_min:
                continue
            if range_max is not None and rank >= range_max:
                continue
            if max_score is not None and s > max_score:
                continue
            if margin is not None and not s < p - margin:
                continue
            if relative_margin is not None and not s < p - abs(p) * relative_margin:
                continue
            if taken < n:
                selected.add((r, rank))
                taken += 1
    return selected


@pytest.mark.parametrize("options", [
    dict(),
    dict(max_score=0.3),
    dict(margin=0.1),
    dict(relative_margin=0.05),
    dict(margin=0.05, relative_margin=0.1, max_score=0.6, range_min=2, range_max=12),
])
def test_filters_match_transcription(options):
    rng = np.random.default_rng(len(options))
    scores = -np.sort(-rng.uniform(-0.2, 0.95, size=(40, 15)), axis=1).astype(np.float32)
    indices = rng.integers(0, 100, size=(40, 15))
    indices[rng.uniform(size=indices.shape) < 0.1] = -1
    positive = rng.uniform(-0.3, 0.95, size=40).astype(np.float32)  # some below 0
    full = dict(range_min=0, range_max=None, max_score=None, margin=None,
                relative_margin=None)
    full.update(options)
    masks = mining.negative_filters(scores, indices, positive, **full)
    selected = mining.first_n(masks["keep"], 3)
    got = set(zip(*np.nonzero(selected)))
    assert got == _filters_reference(scores, indices, positive, n=3, **full)
    assert (selected.sum(axis=1) <= 3).all()
    if options:  # the options remove something on this data: the test can see a filter
        assert masks["keep"].sum() < masks["candidate"].sum()


class _TableEncoder:
    """A fake encoder: each text has a fixed 2-d vector (cosines are hand-computable)."""

    def __init__(self, table):
        self.table = table

    def encode(self, sentences, batch_size=64, normalize=False, verbose=0):
        del batch_size, verbose
        out = np.array([self.table[s] for s in sentences], np.float32)
        if normalize:
            out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out


def _unit(cosine):
    return [cosine, float(np.sqrt(1 - cosine ** 2))]


# anchor "a" at (1, 0): cos(a, x) is x's first coordinate; cos(a, pos) = 0.9.
HAND_TABLE = {"a": [1.0, 0.0], "pos": _unit(0.9), "n95": _unit(0.95), "n85": _unit(0.85),
              "n80": _unit(0.8), "n50": _unit(0.5), "n10": _unit(0.1)}
HAND_CORPUS = ["n10", "n95", "a", "pos", "n50", "n85", "n80"]


@pytest.mark.parametrize("options,expected", [
    (dict(), ["n95", "n85", "n80"]),                      # the hardest; "a", "pos" excluded
    (dict(margin=0.12), ["n50", "n10"]),                  # sim < 0.9 - 0.12 = 0.78
    (dict(relative_margin=0.05), ["n85", "n80", "n50"]),  # sim < 0.9 * 0.95 = 0.855
    (dict(max_score=0.82), ["n80", "n50", "n10"]),        # sim <= 0.82
    (dict(range_min=1, range_max=4), ["n85", "n80", "n50"]),  # ranks 1..3 only
    (dict(range_min=2), ["n80", "n50", "n10"]),
    (dict(margin=0.0, max_score=0.6), ["n50", "n10"]),
])
def test_hand_computed_case(options, expected):
    negatives, report = mining.mine_hard_negatives(
        _TableEncoder(HAND_TABLE), [("a", "pos")], corpus=HAND_CORPUS, num_negatives=3,
        verbose=0, candidate_chunk=4, **options)
    assert negatives == [expected]
    assert report["short"] == (len(expected) < 3)


@pytest.mark.parametrize("options,report", [
    (dict(margin=0.12), dict(short=1, none=0, window_candidates=5, margin=3, max_score=0,
                             relative_margin=0)),
    (dict(margin=0.12, max_score=0.3), dict(short=1, none=0, window_candidates=5, margin=3,
                                            max_score=4, relative_margin=0)),
    (dict(max_score=0.05, relative_margin=0.5), dict(short=1, none=1, window_candidates=5,
                                                     margin=0, max_score=5,
                                                     relative_margin=4)),
])
def test_shortfall_report_counts_what_each_filter_removed(options, report):
    _, got = mining.mine_hard_negatives(_TableEncoder(HAND_TABLE), [("a", "pos")],
                                      corpus=HAND_CORPUS, num_negatives=3, verbose=0,
                                      **options)
    assert got == report


def test_triplet_and_n_tuple_rows():
    pairs = [("a", "p"), ("b", "q")]
    negatives = [["x", "y"], ["z"]]
    assert mined_files.format_rows(pairs, negatives, "triplet", 2) == [
        ("a", "p", "x"), ("a", "p", "y"), ("b", "q", "z")]
    assert mined_files.format_rows(pairs, negatives, "n-tuple", 2) == [("a", "p", "x", "y")]


def test_other_positives_of_the_same_anchor_are_never_negatives():
    problem = mining.MiningProblem([("a", "p1"), ("a", "p2"), ("b", "p3")])
    assert problem.texts[:3] == ["p1", "p2", "p3"] and problem.num_candidates == 3
    excluded = {problem.texts[problem.unique_anchors[r]]: sorted(
        problem.texts[i] for i in problem.exclude[r] if i >= 0) for r in range(2)}
    assert excluded == {"a": ["p1", "p2"], "b": ["p3"]}
    assert problem.max_negatives() == 2  # "b" can get p1 and p2 ("a" only p3)
    assert problem.max_negatives(range_min=1) == 1


def test_too_many_negatives_is_a_clear_error():
    pairs = [("a", "p1"), ("b", "p2"), ("c", "p3")]
    with pytest.raises(ConfigError, match=r"--num_negatives=3 .* 3 distinct candidates "
                                          r"\(the positives of the pairs\), minus 1 .* "
                                          r"leaves 2"):
        mining.mine_hard_negatives(_TableEncoder({}), pairs, num_negatives=3, verbose=0)
    with pytest.raises(ConfigError, match="range_min"):
        mining.mine_hard_negatives(_TableEncoder({}), pairs, num_negatives=2, range_min=1,
                                 verbose=0)
    with pytest.raises(ConfigError, match="rank window"):
        mining.check_options(3, 2, 4, None, None, None, "triplet")
    with pytest.raises(ConfigError, match="--relative_margin"):
        mining.check_options(1, 0, None, None, None, 1.5, "triplet")


def test_malformed_pairs_name_file_and_line(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("an anchor\ta positive\n\nonly one column\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"pairs.tsv, line 3: expected 2 tab-separated "
                                         r"columns \(anchor, positive\), found 1"):
        mined_files.read_pairs(str(path))
    with pytest.raises(InputError, match="file not found"):
        mined_files.read_pairs(str(tmp_path / "missing.tsv"))
    (tmp_path / "empty.tsv").write_text("\n", encoding="utf-8")
    with pytest.raises(InputError, match="no .anchor, positive. pairs"):
        mined_files.read_pairs(str(tmp_path / "empty.tsv"))


def test_cli_on_a_tiny_encoder_writes_triplets_training_reads(tmp_path, tiny_encoder_dir):
    from tfsent.data.readers import read_nli_triplets

    pairs = [("a man plays the guitar .", "the man plays music ."),
             ("a dog runs in the park .", "the dog runs ."),
             ("a woman reads a book .", "the woman reads ."),
             ("a child rides a bike .", "the child rides ."),
             ("a cat sleeps on the mat .", "the cat sleeps .")]
    (tmp_path / "pairs.tsv").write_text("".join(f"{a}\t{p}\n" for a, p in pairs))
    corpus = [p for _, p in pairs] + ["a red car drives on the street .", "the tree is big ."]
    (tmp_path / "corpus.txt").write_text("\n".join(corpus) + "\n")
    out = tmp_path / "triplets.tsv"
    r = subprocess.run(
        [sys.executable, "-m", "tfsent.mine", f"--model={tiny_encoder_dir}",
         f"--pairs={tmp_path / 'pairs.tsv'}", f"--corpus={tmp_path / 'corpus.txt'}",
         f"--out={out}", "--num_negatives=2", "--noprogress"],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"wrote 10 triplet rows to {out}" in r.stdout
    assert "  train: python -m tfsent.train --method=retrieval " in r.stderr
    assert "--config.eval_data" not in r.stderr  # no BEIR folder, no dev split to name
    triplets = read_nli_triplets(str(out))
    assert len(triplets) == 10
    assert [t[:2] for t in triplets[::2]] == pairs
    for anchor, positive, negative in triplets:
        assert negative in corpus and negative not in (anchor, positive)


# -- simcse_sup with several hard negatives per anchor (n-tuple rows) ------------------------
def _info_nce_reference(z1, z2, z3, temperature, weight):
    """SimCSE's InfoNCE with N hard negatives per anchor, in float64 NumPy loops."""
    def unit(x):
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    z1, z2, z3 = (unit(np.asarray(z, np.float64)) for z in (z1, z2, z3))
    per = len(z3) // len(z1)
    total = 0.0
    for i in range(len(z1)):
        logits = [z1[i] @ z2[j] / temperature for j in range(len(z2))]
        logits += [z1[i] @ z3[j] / temperature + (weight if j // per == i else 0.0)
                   for j in range(len(z3))]
        total += -(logits[i] - np.log(np.sum(np.exp(logits))))
    return total / len(z1)


@pytest.mark.parametrize("negatives,weight", [(1, 0.0), (3, 0.0), (3, 0.7), (1, 0.7)])
def test_info_nce_with_several_hard_negatives_matches_numpy(negatives, weight):
    from tfsent import losses

    rng = np.random.default_rng(negatives)
    z1, z2 = rng.normal(size=(5, 6)), rng.normal(size=(5, 6))
    z3 = rng.normal(size=(5 * negatives, 6))
    got = float(losses.info_nce(z1.astype(np.float32), z2.astype(np.float32),
                                z3.astype(np.float32), 0.1, weight))
    np.testing.assert_allclose(got, _info_nce_reference(z1, z2, z3, 0.1, weight), rtol=1e-5)


N_TUPLES = [("the cat sits on the mat", "a cat sits", "a dog runs", "the car is red"),
            ("a man plays the guitar", "a man plays music", "a woman reads", "the tree"),
            ("the dog swims in the water", "a dog swims", "a cat sleeps", "a big house"),
            ("a child eats food", "the child eats", "a man rides a bike", "blue water")]


def test_n_tuple_file_reads_and_batches_anchor_major(tmp_path):
    from conftest import TINY_VOCAB
    from tfsent.data import pipelines, readers
    from tfsent.encoders import SentenceTokenizer

    path = tmp_path / "tuples.tsv"
    path.write_text("".join("\t".join(row) + "\n" for row in N_TUPLES))
    rows = readers.read_triplets_tsv(str(path))
    assert rows == N_TUPLES
    tokenizer = SentenceTokenizer(TINY_VOCAB, True, True, 8)
    batch = next(iter(pipelines.triplet_dataset(rows, tokenizer, 4, shuffle=False)))
    flat = [neg for row in N_TUPLES for neg in row[2:]]
    assert batch["negative"]["token_ids"].shape == (8, 8)
    np.testing.assert_array_equal(batch["negative"]["token_ids"],
                                  tokenizer(flat)["token_ids"])
    path.write_text("".join("\t".join(row) + "\n" for row in N_TUPLES) + "a\tb\tc\n")
    with pytest.raises(InputError, match=r"tuples.tsv, line 5: expected 4 tab-separated .*"
                                         r"2 negatives, as in the first row"):
        readers.read_triplets_tsv(str(path))


def test_simcse_sup_loss_and_grad_cache_with_several_negatives():
    from conftest import TINY_VOCAB
    from test_grad_cache import _compare
    from tfsent.data import pipelines
    from tfsent.methods import SimCSE
    from tfsent.testing import tiny_encoder

    encoder = tiny_encoder(TINY_VOCAB, dropout=0.0)
    model = SimCSE(encoder, supervised=True, hard_negative_weight=0.5)
    batch = next(iter(pipelines.triplet_dataset(N_TUPLES, encoder.tokenizer, 4,
                                                shuffle=False)))
    loss, _ = model.compute_losses(batch, training=False)
    z = {k: model.embed(batch[k], False).numpy() for k in ("anchor", "positive", "negative")}
    assert z["negative"].shape[0] == 8
    expected = _info_nce_reference(z["anchor"], z["positive"], z["negative"], 0.05, 0.5)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-4)
    _compare(model, batch, chunk=3)  # GradCache chunks parts of 4 and 8 rows alike


def test_simcse_sup_on_n_tuples_two_replicas_match_one():
    """fit on raw n-tuples (2 negatives per anchor), one SGD step on a global batch of 4:
    2 replicas x 2 anchors (x 2 negatives each) == 1 replica x 4 in the loss and every
    weight, so the negatives gathered across replicas stay with their anchors."""
    import keras
    import tensorflow as tf

    from conftest import TINY_VOCAB
    from tfsent.methods import SimCSE
    from tfsent.testing import tiny_encoder

    def build(strategy, weights=None):
        with strategy.scope():
            model = SimCSE(tiny_encoder(TINY_VOCAB, dropout=0.0, num_layers=1),
                           supervised=True, hard_negative_weight=0.3)
            model.compile(optimizer=keras.optimizers.SGD(0.1), jit_compile=False)
            model.optimizer.build(model.trainable_variables)
        for v, w in zip(model.weights, weights or []):
            v.assign(w)
        return model

    single = build(tf.distribute.get_strategy())
    init = [v.numpy() for v in single.weights]
    h1 = single.fit(N_TUPLES, batch_size=4, shuffle=False, verbose=0).history
    mirrored = build(mirrored_cpu_strategy(tf.distribute.ReductionToOneDevice()), init)
    assert mirrored.distribute_strategy.num_replicas_in_sync == 2
    h2 = mirrored.fit(N_TUPLES, batch_size=4, shuffle=False, verbose=0).history
    np.testing.assert_allclose(h1["loss"], h2["loss"], rtol=1e-5)
    assert any(not np.allclose(v.numpy(), w) for v, w in zip(single.weights, init))
    for a, b in zip(single.weights, mirrored.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5, err_msg=a.path)
    with pytest.raises(InputError, match=r"x\[1\]"):
        single.fit([N_TUPLES[0], N_TUPLES[1][:3]] * 4, batch_size=4, verbose=0)


def test_pair_cosines_in_chunks():
    rng = np.random.default_rng(1)
    unit = exact.l2_normalize_rows(rng.normal(size=(10, 4)))
    left, right = rng.integers(0, 10, 23), rng.integers(0, 10, 23)
    np.testing.assert_allclose(mining.pair_cosines(unit, left, right, chunk=5),
                               np.sum(unit[left] * unit[right], axis=1), rtol=1e-6)


def test_relative_margin_stays_below_a_negative_positive_score():
    """pos - |pos| * r: with pos = -0.5 and r = 0.2 the bound is -0.6 (the old
    pos * (1 - r) gave -0.4, above the positive)."""
    masks = mining.negative_filters(np.array([[-0.45, -0.55, -0.65]]), np.array([[0, 1, 2]]),
                                    np.array([-0.5]), relative_margin=0.2)
    assert masks["keep"].tolist() == [[False, False, True]]


class _TableScorer:
    """A cross-encoder stand-in for the hand case: a fixed score per (query, passage)."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def score(self, queries, passages, batch_size=64):
        self.calls.append(len(queries))
        return np.array([self.table[q, p] for q, p in zip(queries, passages)], np.float32)


# The reranker's view of HAND_CORPUS for anchor "a": n95 is a false negative (above the
# positive's 1.5), and the order differs from the cosines' (n95 n85 n80 n50 n10).
HAND_CE = {("a", "pos"): 1.5, ("a", "n95"): 2.0, ("a", "n85"): -1.0, ("a", "n80"): 0.5,
           ("a", "n50"): 1.0, ("a", "n10"): -3.0}


@pytest.mark.parametrize("options,expected", [
    (dict(margin=0.2), ["n50", "n80", "n85"]),          # score < 1.5 - 0.2
    (dict(max_score=0.7), ["n80", "n85", "n10"]),       # score <= 0.7 (not a cosine)
    (dict(relative_margin=0.5), ["n80", "n85", "n10"]),  # score < 1.5 - 0.75
    (dict(range_max=3, margin=0.0), ["n80", "n85"]),    # the cosine top 3, reranked
    (dict(range_min=1, max_score=5.0), ["n50", "n80", "n85"]),  # ranks of its order
    (dict(range_min=2, max_score=5.0), ["n80", "n85", "n10"]),
])
def test_hand_computed_case_with_a_cross_encoder(options, expected):
    scorer = _TableScorer(HAND_CE)
    negatives, _ = mining.mine_hard_negatives(
        _TableEncoder(HAND_TABLE), [("a", "pos")], corpus=HAND_CORPUS, num_negatives=3,
        verbose=0, rescorer=scorer, **options)
    assert negatives == [expected]
    # only the cosine search's candidates (5, or range_max) and the positive are scored
    assert scorer.calls == [options.get("range_max", 5), 1]


def test_a_cross_encoder_without_a_filter_is_refused_and_nan_scores_are_no_candidates(
        absl_messages):
    """Unfiltered, the reranker's top candidates are the likeliest false negatives (n95
    here): refused. A NaN score leaves its candidate out (n50), with a warning."""
    args = (_TableEncoder(HAND_TABLE), [("a", "pos")])
    with pytest.raises(ConfigError, match="likeliest unlabelled positives: set --margin"):
        mining.mine_hard_negatives(*args, corpus=HAND_CORPUS, verbose=0,
                                   rescorer=_TableScorer(HAND_CE))
    broken = _TableScorer({**HAND_CE, ("a", "n50"): float("nan")})
    negatives, _ = mining.mine_hard_negatives(*args, corpus=HAND_CORPUS, verbose=0,
                                              rescorer=broken, margin=0.2)
    assert negatives == [["n80", "n85", "n10"]]
    assert any("scored 1 of 5 (anchor, candidate) pairs NaN" in m for m in absl_messages)


def test_rescoring_with_a_real_cross_encoder_matches_a_transcription():
    """A tiny random CrossEncoder rescoring the cosine top 6 of a tiny encoder: the
    negatives equal a Python transcription (cosine top 6 without the anchor's own text and
    its positives, re-sorted by model.score, window and margin on those scores), for
    anchors with two positives too."""
    import keras

    from conftest import TINY_WORDS, TINY_VOCAB
    from tfsent.methods import CrossEncoder
    from tfsent.testing import tiny_encoder

    rng = np.random.default_rng(5)
    corpus = list(dict.fromkeys(" ".join(rng.choice(TINY_WORDS, 5)) for _ in range(30)))
    pairs = [(" ".join(rng.choice(TINY_WORDS, 4)), corpus[i]) for i in range(8)]
    pairs.append((pairs[0][0], corpus[9]))  # a second positive of the first anchor
    keras.utils.set_random_seed(0)
    encoder = tiny_encoder(TINY_VOCAB, max_seq_length=16)
    reranker = CrossEncoder(tiny_encoder(TINY_VOCAB, max_seq_length=32, pooling="cls"),
                            seed=0)
    options = dict(num_negatives=2, range_min=1, range_max=6, margin=0.0)
    got, _ = mining.mine_hard_negatives(encoder, pairs, corpus=corpus, verbose=0,
                                        rescorer=reranker, query_chunk=3, **options)
    unit = encoder.encode(corpus + [a for a, _ in pairs], normalize=True)
    cosine = unit[len(corpus):] @ unit[:len(corpus)].T
    for row, (anchor, positive) in enumerate(pairs):
        banned = {p for a, p in pairs if a == anchor} | {anchor}
        pool = [c for c in sorted(corpus, key=lambda c: -cosine[row, corpus.index(c)])
                if c not in banned][:6]
        scores = reranker.score([anchor] * len(pool), pool)
        positive_score = float(reranker.score([anchor], [positive])[0])
        ranked = [pool[i] for i in np.argsort(-scores, kind="stable")]
        by_score = dict(zip(pool, scores))
        want = [c for c in ranked[1:6] if by_score[c] < positive_score][:2]
        assert got[row] == want, row
    assert any(got), "no negative passed the margin: the test would see nothing"


MINE_PAIRS = [("a man plays the guitar .", "the man plays music ."),
              ("a dog runs in the park .", "the dog runs ."),
              ("a woman reads a book .", "the woman reads ."),
              ("a child rides a bike .", "the child rides .")]
MINE_CORPUS = [p for _, p in MINE_PAIRS] + ["a red car drives on the street .",
                                            "the tree is big .", "a cat sleeps ."]


def test_cli_rescores_with_a_cross_encoder_export(tmp_path, tiny_encoder_dir):
    """`python -m tfsent.mine ... --cross_encoder=EXPORT`: the rows of the library's
    mining with that export's scores (a --max_score no cosine could have); refusals of
    cross-encoder flags without one, a bi-encoder as --cross_encoder, and a cosine
    --max_score out of [-1, 1] without a cross-encoder, before anything loads."""
    import json

    import keras

    from conftest import TINY_VOCAB
    from tfsent.evaluation.rerank import check_reranker
    from tfsent.methods import CrossEncoder
    from tfsent.serving import ServedCrossEncoder, load_any
    from tfsent.testing import tiny_encoder

    (tmp_path / "pairs.tsv").write_text("".join(f"{a}\t{p}\n" for a, p in MINE_PAIRS))
    (tmp_path / "corpus.txt").write_text("\n".join(MINE_CORPUS) + "\n")
    keras.utils.set_random_seed(1)
    version = CrossEncoder(tiny_encoder(TINY_VOCAB, max_seq_length=32, pooling="cls"),
                           seed=0).export(str(tmp_path / "ce"))
    out = tmp_path / "rows.jsonl"
    args = [f"--model={tiny_encoder_dir}", f"--pairs={tmp_path / 'pairs.tsv'}",
            f"--corpus={tmp_path / 'corpus.txt'}", "--num_negatives=2", "--max_score=5",
            "--noprogress"]
    r = subprocess.run(
        [sys.executable, "-m", "tfsent.mine", *args, f"--out={out}",
         f"--cross_encoder={tmp_path / 'ce'}", "--output_format=n-tuple"],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "the cross-encoder scored" in r.stderr
    want, _ = mining.mine_hard_negatives(
        load_any(tiny_encoder_dir, None, None), MINE_PAIRS, corpus=MINE_CORPUS,
        num_negatives=2, max_score=5.0, verbose=0, rescorer=ServedCrossEncoder(version))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [[row["negative_1"], row["negative_2"]] for row in rows] == want
    cosine, _ = mining.mine_hard_negatives(load_any(tiny_encoder_dir, None, None),
                                           MINE_PAIRS, corpus=MINE_CORPUS, num_negatives=2,
                                           verbose=0)
    assert want != cosine  # the reranker's order, not the cosines'
    r = subprocess.run(
        [sys.executable, "-m", "tfsent.mine", *args, f"--out={tmp_path / 'never.tsv'}",
         "--cross_encoder_prompt=qwen3_reranker"], capture_output=True, text=True,
        timeout=300, env=dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 2, r.stderr[-2000:]
    assert "error: --cross_encoder_prompt goes with --cross_encoder" in r.stderr
    assert not (tmp_path / "never.tsv").exists()
    with pytest.raises(ConfigError, match="--cross_encoder=.* is a sentence encoder's "
                                          "folder, a bi-encoder"):
        check_reranker(tiny_encoder_dir, "--cross_encoder")
    for load_rescorer, max_score, message in (
            (None, 5.0, "--max_score is a cosine, in \\[-1, 1\\]"),
            (lambda: 1 / 0, None, "likeliest unlabelled positives"),
            (lambda: 1 / 0, 5.0, "")):  # the checks pass, then it loads
        with pytest.raises(ConfigError if message else ZeroDivisionError, match=message):
            mined_files.mine_to_file(str(tmp_path / "never.tsv"),
                                     lambda: load_any(tiny_encoder_dir, None, None),
                                     pairs=str(tmp_path / "pairs.tsv"), max_score=max_score,
                                     load_rescorer=load_rescorer, verbose=0)
