"""SupCon-SBERT: premise-grouped sampler, SCL against NumPy, lambda = 0 is plain CE."""

import numpy as np
import pytest

from conftest import TINY_VOCAB
from method_harness import MethodHarness
from tfsent import losses
from tfsent.data import pipelines
from tfsent.data.grouping import grouped_batches, premise_groups
from tfsent.testing import tiny_encoder
from tfsent.methods import SupConSBERT

ROWS = [("a man plays a guitar", "a man plays music", "entailment"),
        ("a man plays a guitar", "a man sleeps", "contradiction"),
        ("a man plays a guitar", "a man is on the mat", "neutral"),
        ("a man plays a guitar", "someone plays", "entailment"),
        ("the dog runs", "a dog runs", "entailment"),
        ("the dog runs", "the dog sleeps", "contradiction"),
        ("a child reads a book", "the child reads", "entailment"),
        ("a child reads a book", "the child swims", "contradiction"),
        ("the cat sleeps", "a cat sleeps", "entailment"),
        ("the cat sleeps", "the cat eats", "neutral")]


def test_sampler_keeps_groups_and_covers_every_example_once():
    rng = np.random.default_rng(0)
    premises = [f"p{rng.integers(0, 120)}" for _ in range(400)]
    groups = premise_groups(premises)
    for epoch in range(3):
        batches = grouped_batches(groups, 16, np.random.default_rng(epoch))
        assert batches.shape[1] == 16
        seen = batches[batches >= 0]
        assert sorted(seen.tolist()) == list(range(400))  # each example exactly once
        where = {int(i): b for b, row in enumerate(batches) for i in row if i >= 0}
        for g in groups:
            assert len({where[i] for i in g}) == 1  # a premise's rows share one batch
        # Packing wastes little: at most a few padding slots per batch on average.
        assert (batches < 0).sum() < 0.25 * batches.size
    assert not np.array_equal(grouped_batches(groups, 16, np.random.default_rng(1)),
                              grouped_batches(groups, 16, np.random.default_rng(2)))


def _scl_numpy(u, v, pos, neg, tau, similarity):
    if similarity == "cosine":
        u = u / np.linalg.norm(u, axis=1, keepdims=True)
        v = v / np.linalg.norm(v, axis=1, keepdims=True)
    logits = u @ v.T / tau
    total, count = 0.0, 0
    for i in range(len(u)):
        p = np.flatnonzero(pos[i])
        if len(p) == 0:
            continue
        allowed = np.flatnonzero(pos[i] | neg[i])
        m = logits[i, allowed].max()
        log_den = m + np.log(np.exp(logits[i, allowed] - m).sum())
        total += -np.mean(logits[i, p] - log_den)
        count += 1
    return total / max(count, 1)


def _cap_numpy(mask, cap, keys):
    out = np.zeros_like(mask)
    for i in range(mask.shape[0]):
        idx = np.flatnonzero(mask[i])
        keep = idx[np.argsort(-keys[i, idx], kind="stable")[:cap]]
        out[i, keep] = True
    return out


def _masks(premise_ids, labels, valid):
    ok = (valid[:, None] > 0) & (valid[None, :] > 0)
    pos = ok & (premise_ids[:, None] == premise_ids[None, :]) & (labels[None, :] == 0)
    return pos, ok & ~pos


@pytest.mark.parametrize("similarity", ["dot", "cosine"])
@pytest.mark.parametrize("caps", [(0, 0), (3, 3)])
def test_scl_matches_numpy(similarity, caps):
    rng = np.random.default_rng(1)
    n = 12
    premise_ids = np.array([0, 0, 0, 0, 0, 1, 1, 2, 2, 2, 3, 3])  # repeated premises
    labels = np.array([0, 0, 0, 1, 2, 0, 2, 0, 0, 1, 0, 1])
    valid = np.ones(n)
    valid[-1] = 0.0  # a padding slot
    u = rng.normal(size=(n, 5)).astype("float32")
    v = rng.normal(size=(n, 5)).astype("float32")
    pos, neg = _masks(premise_ids, labels, valid)
    keys_p = rng.uniform(size=(n, n)).astype("float32")
    keys_n = rng.uniform(size=(n, n)).astype("float32")
    if caps[0]:
        pos_c = losses.cap_mask(pos, caps[0], keys_p).numpy()
        neg_c = losses.cap_mask(neg, caps[1], keys_n).numpy()
        np.testing.assert_array_equal(pos_c, _cap_numpy(pos, caps[0], keys_p))
        np.testing.assert_array_equal(neg_c, _cap_numpy(neg, caps[1], keys_n))
        assert pos_c.sum(1).max() <= 3 and neg_c.sum(1).max() <= 3
        pos, neg = pos_c, neg_c
    got = float(losses.supervised_contrastive_loss(u, v, pos, neg, 0.7, similarity))
    want = _scl_numpy(u, v, pos, neg, 0.7, similarity)
    assert abs(got - want) < 1e-5


def test_scl_hand_case():
    """One anchor, candidates with dot logits [2, 0, 0] (tau 1), positive = candidate 0,
    negatives 1 and 2: loss = -(2 - log(e^2 + 1 + 1)) = log(e^2 + 2) - 2 = 0.2395."""
    u = np.array([[1.0, 0.0]], "float32")
    v = np.array([[2.0, 0.0], [0.0, 1.0], [0.0, -1.0]], "float32")
    pos = np.array([[True, False, False]])
    neg = np.array([[False, True, True]])
    got = float(losses.supervised_contrastive_loss(u, v, pos, neg, 1.0, "dot"))
    assert abs(got - (np.log(np.e ** 2 + 2) - 2)) < 1e-6


def _model(scl_weight):
    enc = tiny_encoder(TINY_VOCAB, max_seq_length=12, dropout=0.0, seed=4)
    return SupConSBERT(enc, scl_weight=scl_weight, temperature=1.0)


def _batch(model):
    ds = pipelines.nli_pair_dataset(ROWS, model.encoder.tokenizer, 8, seed=0)
    return next(iter(ds))


def test_lambda_zero_is_exactly_cross_entropy():
    model = _model(0.0)
    batch = _batch(model)
    objective, logs = model.compute_losses(batch, training=False)
    assert float(objective) == pytest.approx(float(logs["ce_loss"]), abs=0.0)
    # Independent CE on the same embeddings: the head in NumPy, linear 1.5H then 3.
    feats = [batch["premise"], batch["hypothesis"]]
    u = model.encoder(feats[0], pooling="mean_no_cls")["embedding"].numpy()
    v = model.encoder(feats[1], pooling="mean_no_cls")["embedding"].numpy()
    (k1, b1), (k2, b2) = (layer.get_weights() for layer in (model.classifier.hidden,
                                                             model.classifier.logits))
    assert k1.shape == (3 * u.shape[1], int(1.5 * u.shape[1]))
    logits = (np.concatenate([u, v, np.abs(u - v)], 1) @ k1 + b1) @ k2 + b2
    labels, valid = batch["label"].numpy(), batch["valid"].numpy()
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    ce = -(logp[np.arange(len(labels)), labels] * valid).sum() / valid.sum()
    assert abs(float(logs["ce_loss"]) - ce) < 1e-5
    assert float(logs["scl_loss"]) > 0  # computed, weighted by 0


def test_fit_with_caps_and_xla():
    model = _model(0.3)
    model.max_positives = model.max_negatives = 3
    import keras

    model.compile(optimizer=keras.optimizers.AdamW(1e-3), jit_compile=True)
    ds = pipelines.nli_pair_dataset(ROWS, model.encoder.tokenizer, 8, seed=0)
    hist = model.fit(ds, epochs=1, steps_per_epoch=3, verbose=0).history
    for key in ("loss", "ce_loss", "scl_loss", "nli_accuracy"):
        assert np.isfinite(hist[key][0])


# --------------------------------------------------------------------------------------
# Anchors: one per premise (issue #18)
# --------------------------------------------------------------------------------------

def np_supcon_paper(u, v, labels, premise_ids, valid, tau, positives_of=None):
    """Eq. (2) of supcon_sbert.txt with "each premise as one single anchor sentence":
    for every premise of the batch that entails a hypothesis, the anchor is that premise
    (the embedding u of its first entailment row, as the author's code takes the premise
    of an entailment row); positives are the hypotheses it entails, negatives every other
    hypothesis of the batch; L_i = -1/N+ sum_{j in P} log(e^{u_i.v_j/tau} /
    sum_{k in P u N} e^{u_i.v_k/tau}); the SCL term is the mean of L_i over anchors.
    `positives_of(i, P)` may narrow P (the capped variant). Loops, no masks."""
    rows = [i for i in range(len(labels)) if valid[i] > 0]
    seen, per_anchor = set(), []
    for i in rows:
        if labels[i] != 0 or premise_ids[i] in seen:
            continue
        seen.add(premise_ids[i])
        entailed = [j for j in rows if premise_ids[j] == premise_ids[i] and labels[j] == 0]
        negatives = [j for j in rows if j not in entailed]
        positives = positives_of(i, entailed) if positives_of else entailed
        cands = positives + negatives
        logit = {k: float(np.dot(u[i], v[k])) / tau for k in cands}
        m = max(logit.values())
        lse = m + np.log(sum(np.exp(logit[k] - m) for k in cands))
        per_anchor.append(-np.mean([logit[j] - lse for j in positives]))
    return float(np.mean(per_anchor))


# Premise 0 has all three labels (two entailments), premise 1 entailment + contradiction,
# premise 2 no entailment (no anchor), premise 3 three entailments; the last row pads.
SCL_PIDS = np.array([0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 3, 3], np.float32)
SCL_LABELS = np.array([1, 0, 2, 0, 2, 0, 1, 2, 0, 0, 0, 0], np.float32)
SCL_VALID = np.array([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0], np.float32)


def _scl_embeddings(seed=2):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(12, 5)).astype("float32"),  # every row's own premise pass
            rng.normal(size=(12, 5)).astype("float32"))


@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_scl_one_anchor_per_premise_matches_the_paper(tau):
    u, v = _scl_embeddings()
    model = SupConSBERT(tiny_encoder(TINY_VOCAB, max_seq_length=12), temperature=tau)
    got = float(model.scl(u, v, SCL_LABELS, SCL_PIDS, SCL_VALID))
    want = np_supcon_paper(u, v, SCL_LABELS, SCL_PIDS, SCL_VALID, tau)
    assert got == pytest.approx(want, abs=1e-5)
    # The anchors are the premise embeddings of rows 1, 5 and 8 and of no other row.
    pos, neg = losses.supcon_sbert_masks(SCL_LABELS, SCL_PIDS, SCL_VALID)
    assert np.flatnonzero(pos.numpy().any(1)).tolist() == [1, 5, 8]
    assert np.flatnonzero(neg.numpy().any(1)).tolist() == [1, 5, 8]
    assert np.flatnonzero(pos.numpy()[1]).tolist() == [1, 3]
    assert np.flatnonzero(neg.numpy()[1]).tolist() == [0, 2, 4, 5, 6, 7, 8, 9, 10]


def test_capped_positives_keep_the_anchors_own_hypothesis():
    """N+ = 2: the anchor's own entailed hypothesis plus one other, the one with the
    largest key (a random key in training), even when its own key is the smallest."""
    n = 12
    keys = np.tile(np.arange(n, dtype=np.float32) / n, (n, 1))  # increasing in j
    pos, _ = losses.supcon_sbert_masks(SCL_LABELS, SCL_PIDS, SCL_VALID, max_positives=2,
                                       positive_keys=keys, negative_keys=keys)
    pos = pos.numpy()
    # Anchor 8 entails 8, 9, 10; its own key is the smallest, and it is kept anyway.
    assert np.flatnonzero(pos[8]).tolist() == [8, 10]
    assert np.flatnonzero(pos[1]).tolist() == [1, 3]
    one, _ = losses.supcon_sbert_masks(SCL_LABELS, SCL_PIDS, SCL_VALID, max_positives=1,
                                       positive_keys=keys, negative_keys=keys)
    assert np.flatnonzero(one.numpy().any(1)).tolist() == [1, 5, 8]
    np.testing.assert_array_equal(one.numpy(), np.diag(one.numpy().any(1)))  # own only
    # N- = 3: three negatives per anchor, those with the largest keys.
    _, neg3 = losses.supcon_sbert_masks(SCL_LABELS, SCL_PIDS, SCL_VALID, max_negatives=3,
                                        positive_keys=keys, negative_keys=keys)
    assert np.flatnonzero(neg3.numpy()[1]).tolist() == [8, 9, 10]


def test_capped_scl_matches_the_paper_and_works_before_compile():
    """max_positives=1 keeps the own hypothesis only; the model computes it before
    compile() (no optimizer yet: step 0)."""
    u, v = _scl_embeddings(3)
    model = SupConSBERT(tiny_encoder(TINY_VOCAB, max_seq_length=12), max_positives=1)
    got = float(model.scl(u, v, SCL_LABELS, SCL_PIDS, SCL_VALID))
    want = np_supcon_paper(u, v, SCL_LABELS, SCL_PIDS, SCL_VALID, 1.0,
                           positives_of=lambda i, entailed: [i])
    assert got == pytest.approx(want, abs=1e-5)
    model.max_negatives = 3
    objective, logs = model.compute_losses(_batch(model), training=True)
    assert np.isfinite(float(objective)) and np.isfinite(float(logs["scl_loss"]))


def test_matryoshka_wraps_the_scl_term():
    """Matryoshka composes with SupCon-SBERT: its SCL is the weighted sum of the SCL of
    the embeddings' prefixes (the CE head still sees the full embedding)."""
    plain = _model(1.0)
    nested = SupConSBERT(plain.encoder, scl_weight=1.0, temperature=1.0,
                         matryoshka_dims=(16, 4), matryoshka_weights=(1.0, 0.5))
    batch = _batch(plain)
    u, v = plain.embed_parts(batch, training=False)
    meta = [batch["label"], batch["premise_id"], batch["valid"]]
    label, pid, valid = (np.asarray(m, np.float32) for m in meta)
    want = sum(w * float(plain.scl(u[:, :d], v[:, :d], label, pid, valid))
               for d, w in ((16, 1.0), (4, 0.5)))
    _, logs = nested.compute_losses(batch, training=False)
    assert float(logs["scl_loss"]) == pytest.approx(want, rel=1e-5)
    assert nested.get_config()["matryoshka_dims"] == [16, 4]


class TestSupConSBERTHarness(MethodHarness):
    def build(self, encoder):
        return SupConSBERT(encoder, scl_weight=0.3)
