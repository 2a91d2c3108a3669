"""SupCon-SBERT: premise-grouped sampler, SCL against NumPy, lambda = 0 is plain CE."""

import numpy as np
import pytest
import tensorflow as tf

from conftest import TINY_VOCAB
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
    # Independent CE on the same embeddings.
    feats = [batch["premise"], batch["hypothesis"]]
    u = model.encoder(feats[0], pooling="mean_no_cls")["embedding"]
    v = model.encoder(feats[1], pooling="mean_no_cls")["embedding"]
    logits = model.classifier(tf.concat([u, v, tf.abs(u - v)], -1)).numpy()
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
