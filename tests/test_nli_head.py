"""The shared NLI head (SupCon-SBERT, ConSERT) against NumPy, and its serialization."""

import keras
import numpy as np
import pytest

from tfsent.layers.nli_head import NLIHead


def _np_head(head, u, v):
    """Features concat(u, v, |u - v| [, max(u, v)^2]), then the Dense layers, in NumPy."""
    parts = [u, v, np.abs(u - v)]
    if head.max_square_feature:
        parts.append(np.maximum(u, v) ** 2)
    x = np.concatenate(parts, axis=1)
    if head.hidden is not None:
        k, b = head.hidden.get_weights()
        x = x @ k + b  # linear: no nonlinearity (SupCon-SBERT's reference)
    k, b = head.logits.get_weights()
    return x @ k + b


@pytest.mark.parametrize("hidden_dim,max_square", [(0, False), (0, True), (9, False)])
def test_logits_and_cross_entropy_match_numpy(hidden_dim, max_square):
    rng = np.random.default_rng(0)
    u, v = rng.normal(size=(2, 5, 6)).astype("float32")
    labels = np.array([0, 1, 2, 1, 0])
    head = NLIHead(6, hidden_dim=hidden_dim, max_square_feature=max_square)
    head.build()
    assert head.feature_dim == (4 if max_square else 3) * 6
    logits = _np_head(head, u, v)
    np.testing.assert_allclose(head(u, v).numpy(), logits, rtol=1e-5, atol=1e-5)
    ce, correct = head.cross_entropy(u, v, labels)
    lse = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
    # atol: the logits agree to 1e-5 (above) and the head's weights are drawn unseeded, so
    # a loss near 0 (lse - logit, float32 cancellation) may differ by more than rtol alone
    # (one CI run, 2026-11-29: 0.0029013 against 0.0029011).
    np.testing.assert_allclose(ce.numpy(), lse - logits[np.arange(5), labels], rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_array_equal(correct.numpy(), np.argmax(logits, 1) == labels)
    rows = [(f"p{i}", f"h{i}", name) for i, name in
            enumerate(["entailment", "neutral", "contradiction", "neutral", "entailment"])]
    table = {**{f"p{i}": u[i] for i in range(5)}, **{f"h{i}": v[i] for i in range(5)}}
    acc = head.rows_accuracy(lambda s: np.stack([table[x] for x in s]), rows)
    assert acc == pytest.approx(100.0 * np.mean(np.argmax(logits, 1) == labels))


def test_serialization_round_trip():
    head = NLIHead(4, hidden_dim=6, max_square_feature=True, name="nli")
    head.build()
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(head))
    assert isinstance(clone, NLIHead)
    assert (clone.embedding_dim, clone.hidden_dim, clone.max_square_feature,
            clone.num_classes) == (4, 6, True, 3)
    clone.build()
    clone.set_weights(head.get_weights())
    u, v = np.random.default_rng(1).normal(size=(2, 3, 4)).astype("float32")
    np.testing.assert_allclose(clone(u, v).numpy(), head(u, v).numpy(), atol=1e-6)
