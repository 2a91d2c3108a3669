"""CMLM-CSE: frozen extractor, MLM gradient through h, h'' layout, masked-only loss."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import TINY_VOCAB
from method_harness import MethodHarness
from tfsent.data import pipelines
from tfsent.testing import tiny_encoder
from tfsent.layers import Fusioner, LexicalExtractor
from tfsent.methods import CMLMCSE

SENTS = ["a man plays a guitar", "a woman sits on the mat", "the dog runs in the park",
         "a child reads a book", "the cat sleeps", "a man rides a red bike",
         "the woman eats food", "a big tree in the street"]


def _model(**kwargs):
    enc = tiny_encoder(TINY_VOCAB, num_layers=3, max_seq_length=12, seed=1)
    args = dict(extractor_layers=2, fusion_layers=1, mlm_weight=0.5, temperature=0.05)
    args.update(kwargs)
    return CMLMCSE(enc, **args)


def _batch(model, rate=0.3):
    ds = pipelines.sentence_dataset(SENTS, model.encoder.tokenizer, 8, shuffle=False,
                                    mlm_mask_rate=rate)
    return next(iter(ds))


def test_extractor_is_frozen_and_unchanged_by_training():
    model = _model()
    assert model.extractor.trainable_variables == []
    extractor_ids = {id(v) for v in model.extractor.weights}
    assert not extractor_ids & {id(v) for v in model.trainable_variables}
    before = [w.numpy().copy() for w in model.extractor.weights]
    enc_before = [w.numpy().copy() for w in model.encoder.trainable_variables]
    model.compile(optimizer=keras.optimizers.AdamW(1e-2), jit_compile=False)
    ds = pipelines.sentence_dataset(SENTS, model.encoder.tokenizer, 4, mlm_mask_rate=0.3)
    hist = model.fit(ds, epochs=1, steps_per_epoch=3, verbose=0).history
    for key in ("loss", "contrastive_loss", "mlm_loss", "mlm_accuracy"):
        assert np.isfinite(hist[key][0]), key
    for a, b in zip(before, model.extractor.weights):
        np.testing.assert_array_equal(a, b.numpy())
    assert any(not np.allclose(a, b.numpy())
               for a, b in zip(enc_before, model.encoder.trainable_variables))


def test_extractor_copies_initial_encoder_layers():
    model = _model()
    src, dst = model.encoder.backbone, model.extractor.encoder.backbone
    assert len(dst.transformer_layers) == 2
    for a, b in zip(src.transformer_layers[1].weights, dst.transformer_layers[1].weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # The extractor's states equal the encoder's own layer-2 states (inference mode).
    batch = _batch(model)
    feats = {"token_ids": batch["token_ids"], "padding_mask": batch["padding_mask"]}
    ours = model.extractor(feats).numpy()
    ref = model.encoder(feats, output_hidden_states=True)["hidden_states"][2].numpy()
    np.testing.assert_allclose(ours, ref, atol=1e-5)


def test_mlm_gradient_reaches_encoder_through_h_only():
    """Contrastive term off: the encoder still gets non-zero gradients, via h."""
    model = _model(contrastive_weight=0.0, tie_mlm_embeddings=False)
    batch = _batch(model)
    with tf.GradientTape() as tape:
        objective, logs = model.compute_losses(batch, training=True)
    assert float(logs["contrastive_loss"]) > 0  # computed, but weighted by 0
    variables = model.encoder.backbone.transformer_layers[-1].trainable_variables
    grads = tape.gradient(objective, variables)
    assert all(g is not None for g in grads)
    assert sum(float(tf.reduce_sum(tf.abs(g))) for g in grads) > 0
    # The last encoder layer influences the MLM loss only through h: with h cut off
    # (stop_gradient), no gradient reaches it.
    original = model.fused_states
    model.fused_states = lambda h, b: original(tf.stop_gradient(h), b)
    with tf.GradientTape() as tape:
        objective, _ = model.compute_losses(batch, training=True)
    grads = tape.gradient(objective, variables)
    assert all(g is None or float(tf.reduce_sum(tf.abs(g))) == 0 for g in grads)


def test_fused_states_layout():
    model = _model()
    batch = _batch(model)
    h = tf.random.normal([8, model.encoder.hidden_dim])
    fused = model.fused_states(h, batch).numpy()
    h_prime = model.extractor({"token_ids": batch["masked_token_ids"],
                               "padding_mask": batch["padding_mask"]}).numpy()
    np.testing.assert_allclose(fused[:, 0], h.numpy(), atol=1e-6)
    np.testing.assert_allclose(fused[:, 1:], h_prime[:, 1:], atol=1e-6)
    assert fused.shape == h_prime.shape


def test_mlm_loss_counts_masked_positions_only():
    """Hand case: logits that are wrong only at unused slots leave the loss unchanged."""
    model = _model()
    batch = dict(_batch(model))
    weights = batch["mask_weights"].numpy()
    assert (weights == 0).any(), "need unused slots for this test"

    def mlm(b):
        _, logs = model.compute_losses(b, training=False)
        return float(logs["mlm_loss"])

    base = mlm(batch)
    labels = batch["mask_labels"].numpy().copy()
    labels[weights == 0] = (labels[weights == 0] + 1) % len(TINY_VOCAB)
    batch["mask_labels"] = tf.constant(labels)
    assert abs(mlm(batch) - base) < 1e-6
    # Changing a label at a real slot changes the loss.
    labels[weights == 1] = (labels[weights == 1] + 1) % len(TINY_VOCAB)
    batch["mask_labels"] = tf.constant(labels)
    assert abs(mlm(batch) - base) > 1e-4


def test_layers_get_config_round_trip():
    model = _model()
    ext = model.extractor
    ext2 = LexicalExtractor.from_config(ext.get_config())
    assert ext2.num_layers == ext.num_layers and ext2.trainable_variables == []
    fus = model.fusioner
    fus2 = Fusioner.from_config(fus.get_config())
    fus2.build()
    assert fus2.get_config() == fus.get_config()
    assert len(fus2.weights) == len(fus.weights)


def test_logged_losses_are_the_means_of_their_terms():
    """mlm_loss / mlm_accuracy are means over the masked tokens (NumPy, from the model's
    own logits) and loss = contrastive + lambda * mlm_loss: the mean scale of lambda."""
    model = _model()
    batch = _batch(model)
    objective, logs = model.compute_losses(batch, training=False)
    h = model.contrastive_views(batch, False)[0]
    logits = model.mlm_logits(h, batch, False).numpy().astype(np.float64)
    labels, w = batch["mask_labels"].numpy(), batch["mask_weights"].numpy()
    m = logits.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[..., 0]
    ce = lse - np.take_along_axis(logits, labels[..., None], -1)[..., 0]
    assert float(logs["mlm_loss"]) == pytest.approx((ce * w).sum() / w.sum(), rel=1e-5)
    correct = (np.argmax(logits, -1) == labels) * w
    assert float(logs["mlm_accuracy"]) == pytest.approx(correct.sum() / w.sum(), abs=1e-6)
    want = float(logs["contrastive_loss"]) + model.mlm_weight * float(logs["mlm_loss"])
    assert float(objective) == pytest.approx(want, rel=1e-6)
    assert float(logs["loss"]) == pytest.approx(want, rel=1e-6)


class TestCMLMCSEHarness(MethodHarness):
    def build(self, encoder):
        return CMLMCSE(encoder, extractor_layers=2, fusion_layers=1, mask_rate=0.3)
