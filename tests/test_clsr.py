"""CLSR: frozen base, LARS update formula, embedding cache keys, a CLI run on a pair file."""

import os
import subprocess
import sys

import keras
import numpy as np
import tensorflow as tf

from conftest import REPO, TINY_VOCAB, TINY_RUN_FLAGS
from method_harness import MethodHarness
from tfsent.data import cache
from tfsent.errors import ConfigError
from tfsent.testing import tiny_encoder
from tfsent.methods import CLSR
from tfsent.training.optimizers import LARS

PAIRS = [("a man plays a guitar", "a man plays music"), ("the dog runs", "a dog runs"),
         ("a child reads a book", "the child reads"), ("the cat sleeps", "a cat sleeps"),
         ("a woman eats food", "the woman eats"), ("a red car", "a small red car"),
         ("the big tree", "a big tree in the park"), ("a man rides a bike", "a man rides")]


def _lars_numpy(w, v, g, lr, momentum, wd, eta, adapted):
    if adapted:
        g = g + wd * w
        wn, gn = np.linalg.norm(w), np.linalg.norm(g)
        trust = eta * wn / gn if wn > 0 and gn > 0 else 1.0
        g = g * trust
    v = momentum * v + lr * g
    return w - v, v


def test_lars_matches_its_formula_over_steps():
    rng = np.random.default_rng(0)
    kernel = keras.Variable(rng.normal(size=(4, 3)).astype("float32"), name="kernel")
    bias = keras.Variable(rng.normal(size=(3,)).astype("float32"), name="bias")
    opt = LARS(learning_rate=0.5, momentum=0.9, weight_decay=1e-2, eta=0.01)
    ref = {"kernel": (kernel.numpy(), np.zeros((4, 3))), "bias": (bias.numpy(), np.zeros(3))}
    for _ in range(3):
        gk = rng.normal(size=(4, 3)).astype("float32")
        gb = rng.normal(size=(3,)).astype("float32")
        opt.apply_gradients([(tf.constant(gk), kernel), (tf.constant(gb), bias)])
        ref["kernel"] = _lars_numpy(*ref["kernel"], gk, 0.5, 0.9, 1e-2, 0.01, True)
        ref["bias"] = _lars_numpy(*ref["bias"], gb, 0.5, 0.9, 1e-2, 0.01, False)
    np.testing.assert_allclose(kernel.numpy(), ref["kernel"][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bias.numpy(), ref["bias"][0], rtol=1e-5, atol=1e-6)


def test_lars_hand_case():
    """w = [3, 4] (|w| = 5), g = [0, 1], wd 0, eta 0.1, lr 1, momentum 0:
    trust = 0.1 * 5 / 1 = 0.5, so w <- [3, 4] - 0.5 * [0, 1] = [3, 3.5]."""
    w = keras.Variable(np.array([3.0, 4.0], "float32"), name="kernel")
    LARS(learning_rate=1.0, momentum=0.0, weight_decay=0.0, eta=0.1).apply_gradients(
        [(tf.constant([0.0, 1.0]), w)])
    np.testing.assert_allclose(w.numpy(), [3.0, 3.5], atol=1e-6)


def _model():
    enc = tiny_encoder(TINY_VOCAB, max_seq_length=12, seed=2)
    return CLSR(enc, temperature=0.1)


def test_base_encoder_is_frozen_and_unchanged():
    model = _model()
    base_ids = {id(v) for v in model.encoder.weights}
    assert not base_ids & {id(v) for v in model.trainable_variables}
    assert len(model.trainable_variables) == 6  # e: 2 Dense, h: 1 Dense (kernel + bias)
    before = [w.numpy().copy() for w in model.encoder.weights]
    sentences = sorted({s for p in PAIRS for s in p})
    emb = model.encoder.encode(sentences)
    idx = {s: i for i, s in enumerate(sentences)}
    ds = tf.data.Dataset.from_tensor_slices(
        {"a": emb[[idx[a] for a, _ in PAIRS]], "b": emb[[idx[b] for _, b in PAIRS]]}
    ).repeat().batch(4, drop_remainder=True)
    model.compile(optimizer=LARS(learning_rate=0.5), jit_compile=True)
    hist = model.fit(ds, epochs=1, steps_per_epoch=20, verbose=0).history
    assert np.isfinite(hist["loss"][0])
    for a, b in zip(before, model.encoder.weights):
        np.testing.assert_array_equal(a, b.numpy())
    with tf.GradientTape() as tape:
        loss, _ = model.compute_losses(next(iter(ds)))
    grads = tape.gradient(loss, model.encoder.weights)
    assert all(g is None for g in grads)
    # The representation is e's output, on top of the base embedding.
    out = model.encode(["a dog runs"])
    np.testing.assert_allclose(out, model.mlp(model.encoder.encode(["a dog runs"])).numpy(),
                               atol=1e-6)
    normed = model.encode(["a dog runs", "a cat"], normalize=True)
    np.testing.assert_allclose(np.linalg.norm(normed, axis=1), 1.0, atol=1e-5)


def test_identity_head_starts_as_the_base_encoder_and_then_trains():
    from tfsent.layers.heads import MLPEncoder

    model = CLSR(tiny_encoder(TINY_VOCAB, max_seq_length=12, seed=2), head_init="identity")
    dim = model.encoder.hidden_dim
    assert (model.hidden_dim, model.output_dim) == (2 * dim, dim)
    sentences = ["a dog runs", "a cat", "the sun is hot"]
    base = model.encoder.encode(sentences, normalize=False)
    # Step 0: e(m(x)) is m(x) itself, for positive and negative coordinates alike.
    np.testing.assert_allclose(model.encode(sentences), base, rtol=1e-6, atol=1e-6)
    # Hidden units beyond 2D start with zero outputs: still the identity.
    wide = MLPEncoder(2 * dim + 5, dim, initializer="identity")
    wide.build((None, dim))
    x = np.random.default_rng(0).normal(size=(7, dim)).astype(np.float32)
    np.testing.assert_allclose(wide(x).numpy(), x, rtol=1e-6, atol=1e-6)
    assert np.abs(wide.hidden.kernel.numpy()[:, 2 * dim:]).sum() > 0
    restored = MLPEncoder.from_config(wide.get_config())
    assert restored.initializer == "identity"
    # And it trains like the random head: the loss falls and e moves away from identity.
    emb = model.encoder.encode(sorted({s for p in PAIRS for s in p}), normalize=False)
    idx = {s: i for i, s in enumerate(sorted({s for p in PAIRS for s in p}))}
    ds = tf.data.Dataset.from_tensor_slices(
        {"a": emb[[idx[a] for a, _ in PAIRS]], "b": emb[[idx[b] for _, b in PAIRS]]}
    ).repeat().batch(4, drop_remainder=True)
    batch = next(iter(ds))
    before = float(model.compute_losses(batch)[0])
    model.compile(optimizer=LARS(learning_rate=0.1))
    model.fit(ds, epochs=1, steps_per_epoch=30, verbose=0)
    assert float(model.compute_losses(batch)[0]) < before
    assert not np.allclose(model.encode(sentences), base, atol=1e-4)


def test_identity_head_refuses_sizes_that_cannot_be_the_identity():
    import pytest

    from tfsent.layers.heads import MLPEncoder

    with pytest.raises(ValueError, match="hidden_dim >= 2 x the input size"):
        MLPEncoder(10, 8, initializer="identity").build((None, 8))
    with pytest.raises(ValueError, match="output_dim == the input size"):
        MLPEncoder(16, 4, initializer="identity").build((None, 8))
    with pytest.raises(ValueError, match="initializer must be one of"):
        MLPEncoder(16, 8, initializer="eye")
    enc = tiny_encoder(TINY_VOCAB, max_seq_length=12, seed=2)
    with pytest.raises(ConfigError, match="clsr_output_dim"):
        CLSR(enc, output_dim=32, head_init="identity")
    with pytest.raises(ConfigError, match="head_init"):
        CLSR(enc, head_init="eye")


def test_cache_key_changes_with_each_input(tmp_path, tiny_encoder_dir):
    sents = ["a dog", "a cat"]
    base = cache.cache_key(tiny_encoder_dir, "mean", 16, sents)
    assert cache.cache_key(tiny_encoder_dir, "mean", 16, list(sents)) == base
    assert cache.cache_key(tiny_encoder_dir, "cls_before_pooler", 16, sents) != base
    assert cache.cache_key(tiny_encoder_dir, "mean", 32, sents) != base
    assert cache.cache_key(tiny_encoder_dir, "mean", 16, sents + ["more"]) != base
    assert cache.cache_key("minilm-l6", "mean", 16, sents) != base
    # Rewriting the encoder directory (retraining into it) changes the key too.
    other = str(tmp_path / "enc")
    tiny_encoder(TINY_VOCAB, max_seq_length=16, seed=5).save_encoder_dir(other)
    key1 = cache.cache_key(other, "mean", 16, sents)
    os.utime(os.path.join(other, "backbone.weights.h5"), (1, 1))
    assert cache.cache_key(other, "mean", 16, sents) != key1

    calls = []

    def compute(s):
        calls.append(len(s))
        return np.ones((len(s), 3), np.float32)

    _, hit = cache.cached_embeddings(str(tmp_path / "c"), tiny_encoder_dir, "mean", 16, sents,
                                     compute)
    assert not hit
    emb, hit = cache.cached_embeddings(str(tmp_path / "c"), tiny_encoder_dir, "mean", 16, sents,
                                       compute)
    assert hit and calls == [2] and emb.shape == (2, 3)


def test_cli_run_reuses_the_cache(tmp_path, tiny_encoder_dir):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{a}\t{b}\n" for a, b in PAIRS * 4), encoding="utf-8")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    logs = []
    for run in ("r1", "r2"):
        r = subprocess.run(
            [sys.executable, "-m", "tfsent.train", "--method=clsr",
             f"--output_dir={tmp_path / run}", f"--config.encoder={tiny_encoder_dir}",
             f"--config.train_data={pairs}", "--config.batch_size=8", "--config.steps=200",
             "--config.eval_every=100", *TINY_RUN_FLAGS], cwd=REPO, env=env, capture_output=True, text=True,
            timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        logs.append(r.stderr)
        assert os.path.exists(tmp_path / run / "export" / "1" / "saved_model.pb")
    assert "embedding cache miss" in logs[0]
    assert "embedding cache hit" in logs[1]
    # The export serves base + e: compare with the trained model's own encode().
    loaded = tf.saved_model.load(str(tmp_path / "r2" / "export" / "1"))
    served = loaded.signatures["serving_default"](sentences=tf.constant(["a dog runs"]))
    assert served["embedding"].shape == (1, 16)


def test_demo_positive_pairs_leave_the_demo_dev_set_out():
    """The no-flag CLSR run selects on the demo scored pairs: its training positives must
    not include them (they did: 102 of its 771 pairs were dev pairs scored above 4)."""
    from tfsent.data import readers

    pairs = readers.read_positive_pairs("demo")
    s1, s2, _ = readers.read_scored_pairs(readers.DEMO_PAIRS)
    dev = {frozenset(p) for p in zip(s1, s2)}
    assert not [p for p in pairs if frozenset(p) in dev]
    triplets = readers.read_triplets_tsv(readers.DEMO_TRIPLETS)
    assert pairs == [(p, e) for p, e, _ in triplets]


def test_projection_dim_sets_the_loss_space_from_the_config():
    """clsr_projection_dim (0: e's output size) sizes h, the space of the NT-Xent; the
    representation (e's output) keeps its size; the field is checked like the argument."""
    import re

    import pytest

    from tfsent.training.config import build_config
    from tfsent.methods.clsr import SPEC

    enc = tiny_encoder(TINY_VOCAB, hidden_dim=16)
    config = build_config(SPEC.defaults, {}, ["clsr_projection_dim=4"], method="clsr")
    model = SPEC.build(enc, config)
    assert model.projection.kernel.shape == (16, 4) and model.mlp.output_dim == 16
    rng = np.random.default_rng(0)
    batch = {k: tf.constant(rng.normal(size=(6, 16)).astype(np.float32)) for k in "ab"}
    loss, _ = model.compute_losses(batch)
    assert np.isfinite(float(loss))
    assert CLSR.from_config(model.get_config()).projection.kernel.shape == (16, 4)
    default = SPEC.build(enc, build_config(SPEC.defaults, {}, method="clsr"))
    assert default.projection.kernel.shape == (16, 16)  # 0: the paper's h, output size
    with pytest.raises(ConfigError, match=re.escape("clsr_projection_dim must be an integer")):
        build_config(SPEC.defaults, {}, ["clsr_projection_dim=-1"], method="clsr")


class TestCLSRHarness(MethodHarness):
    def build(self, encoder):
        return CLSR(encoder, hidden_dim=24, output_dim=8)
