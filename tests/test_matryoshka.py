"""Matryoshka SimCSE: the nested InfoNCE against a NumPy transcription and a hand-computed
case, its option checks, GradCache, Keras save/load, `fit`, and a CLI run whose export
is evaluated at several sizes."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, SHARED_DATA, TINY_RUN_FLAGS, TINY_VOCAB, shared_data_or_skip
from tfsent.errors import ConfigError
from tfsent.matryoshka import check_dims, parse_weights
from tfsent.methods import CMLMCSE, SimCSE
from tfsent.testing import tiny_encoder


def _info_nce_numpy(z1, z2, z3=None, tau=0.05):
    """SimCSE's InfoNCE: cosine / tau against every positive (and hard negative), the
    diagonal as target, mean cross-entropy."""
    def unit(x):
        n = np.linalg.norm(x, axis=1, keepdims=True)
        return x / np.maximum(n, 1e-12)

    cands = z2 if z3 is None else np.concatenate([z2, z3])
    logits = unit(z1) @ unit(cands).T / tau
    logits -= logits.max(axis=1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -np.mean(np.diag(log_probs[:, :len(z1)]))


def _nested_numpy(views, dims, weights, tau):
    return sum(w * _info_nce_numpy(*[v[:, :d] for v in views], tau=tau)
               for d, w in zip(dims, weights))


def test_hand_computed_case():
    # z1 = [[1, 0], [0, 1]], z2 = [[1, 0], [1, 1]], tau = 1, sizes (2, 1).
    # Size 2: cosines row 0: (1, 1/sqrt2), row 1: (0, 1/sqrt2); losses log(1 + e^(0.7071-1))
    #   = 0.55737 and log(1 + e^-0.7071) = 0.40083, mean 0.47910.
    # Size 1: z1 -> (1), (0) (a zero vector's cosines are 0), z2 -> (1), (1): both rows'
    #   logits are equal, each loss log 2 = 0.69315. Total 1.17225.
    model = SimCSE(tiny_encoder(TINY_VOCAB, hidden_dim=16), temperature=1.0,
                   matryoshka_dims=(2, 1))
    z1 = tf.constant([[1.0, 0.0], [0.0, 1.0]])
    z2 = tf.constant([[1.0, 0.0], [1.0, 1.0]])
    assert float(model.contrastive_loss(z1, z2)) == pytest.approx(1.17225, abs=1e-4)


@pytest.mark.parametrize("supervised", [False, True])
def test_nested_loss_matches_numpy(supervised):
    rng = np.random.default_rng(1)
    dims, weights = (16, 8, 4, 2), (1.0, 0.5, 2.0, 0.25)
    model = SimCSE(tiny_encoder(TINY_VOCAB, hidden_dim=16), supervised=supervised,
                   matryoshka_dims=dims, matryoshka_weights=weights)
    views = [rng.normal(size=(6, 16)).astype(np.float32) for _ in range(2)]
    if supervised:  # two hard negatives per anchor, anchor-major
        views.append(rng.normal(size=(12, 16)).astype(np.float32))
    got = float(model.contrastive_loss(*[tf.constant(v) for v in views]))
    assert got == pytest.approx(_nested_numpy(views, dims, weights, 0.05), rel=1e-5)
    plain = SimCSE(model.encoder, supervised=supervised)
    assert float(plain.contrastive_loss(*[tf.constant(v) for v in views])) == pytest.approx(
        _info_nce_numpy(*views), rel=1e-5)


@pytest.mark.parametrize("dims, message", [
    ("16,32", "matryoshka_dims: sizes must be in decreasing order"),
    ((8, 8, 4), "matryoshka_dims: size 8 is repeated"),
    ("32,16", "matryoshka_dims: size 32 is larger than the embedding (16 dimensions)"),
    ("16,0", "matryoshka_dims: sizes must be >= 1"),
    ("16,x", "matryoshka_dims: 'x' is not an integer"),
])
def test_bad_dims(dims, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SimCSE(tiny_encoder(TINY_VOCAB, hidden_dim=16), matryoshka_dims=dims)


def test_bad_weights():
    encoder = tiny_encoder(TINY_VOCAB, hidden_dim=16)
    with pytest.raises(ConfigError, match="matryoshka_weights: 1 weights for 2 sizes"):
        SimCSE(encoder, matryoshka_dims="16,8", matryoshka_weights="1")
    with pytest.raises(ConfigError, match="not all 0"):
        parse_weights("0,0", 2)
    with pytest.raises(ConfigError, match="matryoshka_dims is not"):
        SimCSE(encoder, matryoshka_weights="1,1")
    assert check_dims("384, 128,64", 384, "--dims") == (384, 128, 64)
    assert check_dims([64], None, "--truncate_dim") == (64,)


def test_grad_cache_gradients_equal_plain():
    encoder = tiny_encoder(TINY_VOCAB, dropout=0.0, hidden_dim=16)
    model = SimCSE(encoder, supervised=True, matryoshka_dims=(16, 8, 4))
    sents = ["a man plays the guitar", "the dog runs", "a cat sleeps on the mat",
             "the woman reads a book", "a child eats food", "the red car"]
    feats = lambda s: encoder.tokenizer(tf.constant(s))  # noqa: E731
    batch = {"anchor": feats(sents), "positive": feats(sents[1:] + sents[:1]),
             "negative": feats(sents[::-1] + sents)}  # two hard negatives per anchor
    variables = model.trainable_variables
    plain, logs = model.gradients(batch, variables)
    model.set_grad_cache(2)
    cached, cached_logs = model.grad_cache_gradients(batch, variables)
    for a, b in zip(plain, cached):
        if a is not None:
            a, b = tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy()
            assert np.abs(a - b).max() <= 1e-5 * max(1.0, np.abs(a).max())
    assert float(logs["loss"]) == pytest.approx(float(cached_logs["loss"]), rel=1e-5)
    # The nested loss is not the plain one: its gradients differ.
    model.set_grad_cache(0)
    plain_model = SimCSE(encoder, supervised=True)
    other, _ = plain_model.gradients(batch, plain_model.trainable_variables)
    assert any(np.abs(tf.convert_to_tensor(a).numpy() - tf.convert_to_tensor(b).numpy())
               .max() > 1e-4 for a, b in zip(plain, other) if a is not None)


def test_fit_and_keras_round_trip(tmp_path):
    model = CMLMCSE(tiny_encoder(TINY_VOCAB, hidden_dim=16), extractor_layers=1,
                    fusion_layers=1, matryoshka_dims="16,4", matryoshka_weights="1,2")
    model.compile(optimizer=keras.optimizers.AdamW(1e-3))
    sents = [f"the {w} runs in the park" for w in TINY_VOCAB[7:]]
    history = model.fit(sents, batch_size=8, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.matryoshka_dims == (16, 4) and loaded.matryoshka_weights == (1.0, 2.0)
    np.testing.assert_allclose(loaded.encode(sents[:3], truncate_dim=4),
                               model.encode(sents[:3])[:, :4], atol=1e-5)


def test_cli_train_then_evaluate_at_several_sizes(tmp_path, tiny_encoder_dir):
    shared_data_or_skip("STS", "STSBenchmark")
    out = str(tmp_path / "run")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    r = subprocess.run(
        [sys.executable, "-m", "tfsent.train", "--method=simcse_unsup", f"--output_dir={out}",
         f"--config.encoder={tiny_encoder_dir}", "--config.max_seq_length=16",
         "--config.batch_size=8", "--config.steps=4", "--config.eval_every=4",
         "--config.jit_compile=false", "--config.matryoshka_dims=16,8,4", *TINY_RUN_FLAGS],
        cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.load(open(os.path.join(out, "config.json")))["matryoshka_dims"] == "16,8,4"
    result = str(tmp_path / "r.json")
    r = subprocess.run(
        [sys.executable, "-m", "tfsent.evaluate", f"--model={out}/export",
         f"--data_dir={SHARED_DATA}", "--tasks=STSBenchmark", "--dims=16,8,4",
         f"--output_json={result}"], cwd=REPO, capture_output=True, text=True, timeout=600,
        env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.load(open(result))["STSBenchmark"]
    assert res["spearman"] == res["dim_16"]["spearman"]
    assert res["dim_4"]["spearman"] != res["dim_16"]["spearman"]
    assert "dim_8" in r.stdout and "STS-B" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "tfsent.train", "--method=simcse_unsup",
         f"--output_dir={tmp_path}/bad", f"--config.encoder={tiny_encoder_dir}",
         "--config.matryoshka_dims=8,16"], cwd=REPO, capture_output=True, text=True,
        timeout=600, env=env)
    assert r.returncode != 0 and "matryoshka_dims: sizes must be in decreasing order" in \
        r.stderr and "Traceback" not in r.stderr
