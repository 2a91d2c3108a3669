"""Distillation (--method=distill): layer-dropped students of every family, zero MSE for a
student that is the whole teacher, the loss against a NumPy transcription, training, the
CLI on a tiny checkpoint (teacher embeddings cached, the student's export served by a
fresh TF-only process) and the bad-input errors raised before any model loads.
(Every family's layer-dropped student also trains one step and serves in
tests/test_families_methods.py's grid.)"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import (PROBE, REPO, SENTENCES, TINY_RUN_FLAGS, TINY_VOCAB,
                      mirrored_cpu_strategy, serve_in_fresh_process)
from hf_checkpoints import FAMILIES
from method_harness import MethodHarness
from tfsent.encoders import load_encoder
from tfsent.encoders.layer_drop import keep_layers, parse_layers
from tfsent.errors import ConfigError
from tfsent.methods import Distill
from tfsent.testing import tiny_encoder
from tfsent.training import resolve_config

MAX_LEN = 16


class TestDistillHarness(MethodHarness):
    """A 2-layer student of 8 dimensions with a learned projection to the 3-layer
    teacher's 16, plus the in-batch contrastive term."""

    def build(self, encoder):
        student = tiny_encoder(TINY_VOCAB, num_layers=2, hidden_dim=8, max_seq_length=12,
                               seed=5)
        return Distill(student, teacher=encoder, projection=True, contrastive_weight=0.5)


@pytest.fixture(scope="module")
def teachers(hf_checkpoint_dirs):
    """{family: the tiny 4-layer checkpoint loaded as a SentenceEncoder}."""
    return {f: load_encoder(d, max_seq_length=MAX_LEN) for f, d in hf_checkpoint_dirs.items()}


def _batch(model, sentences):
    return {"features": model.encoder.tokenizer(sentences),
            "target": model.teacher_embeddings(sentences)}


@pytest.mark.parametrize("family", FAMILIES)
def test_layer_dropped_student_keeps_the_teachers_layers(family, teachers):
    """keep_layers((0, 2)) is a real 2-layer backbone of the family whose embeddings,
    pooler and layers 0, 1 are copies (not shared variables) of the teacher's 0 and 2;
    the student with all layers reproduces the teacher: MSE 0 at step 0."""
    teacher = teachers[family]
    student = keep_layers(teacher, (0, 2))
    assert type(student.backbone) is type(teacher.backbone)
    assert student.num_layers == 2 and student.backbone.get_config()["num_layers"] == 2
    for j, i in enumerate((0, 2)):
        for got, want in zip(student.backbone.transformer_layers[j].weights,
                             teacher.backbone.transformer_layers[i].weights):
            np.testing.assert_array_equal(got.numpy(), want.numpy())
    blocks = {id(v) for layer in teacher.backbone.transformer_layers for v in layer.weights}
    rest = [v for v in teacher.backbone.weights if id(v) not in blocks]
    student_blocks = {id(v) for layer in student.backbone.transformer_layers
                      for v in layer.weights}
    student_rest = [v for v in student.backbone.weights if id(v) not in student_blocks]
    assert len(rest) == len(student_rest)
    for got, want in zip(student_rest, rest):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert not {id(v) for v in student.weights} & {id(v) for v in teacher.weights}

    whole = Distill(keep_layers(teacher, range(teacher.num_layers)), teacher=teacher)
    _, logs = whole.compute_losses(_batch(whole, PROBE + SENTENCES[:5]), training=False)
    assert float(logs["mse"]) < 1e-10 and float(logs["cosine"]) > 1 - 1e-6, logs


def test_zero_mse_at_step_0_with_normalized_targets():
    teacher = tiny_encoder(TINY_VOCAB, num_layers=3, max_seq_length=MAX_LEN, seed=1)
    model = Distill(keep_layers(teacher, (0, 1, 2)), teacher=teacher, normalized=True)
    targets = model.teacher_embeddings(PROBE)
    np.testing.assert_allclose(np.linalg.norm(targets, axis=1), 1.0, atol=1e-6)
    model.compile(optimizer="adamw")
    result = model.evaluate(PROBE * 4, batch_size=4, verbose=0, return_dict=True)
    assert result["mse"] < 1e-12 and set(result) == {"loss", "mse", "cosine"}


def _info_nce_numpy(z, tau):
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    logits = z @ z.T / tau
    logits -= logits.max(axis=1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -np.mean(np.diag(log_probs))


@pytest.mark.parametrize("normalized", [True, False])
def test_loss_matches_numpy(normalized):
    """loss = mean over batch and dimensions of (s - t)^2, s the projected (and with
    normalized targets L2-normalised) student embedding, + w x InfoNCE of the student's
    embeddings (two identical views in inference mode)."""
    teacher = tiny_encoder(TINY_VOCAB, num_layers=3, max_seq_length=MAX_LEN, seed=1)
    model = Distill(keep_layers(teacher, (0, 2)), teacher=teacher, normalized=normalized,
                    projection=True, contrastive_weight=0.5, temperature=0.1)
    rng = np.random.default_rng(0)
    model.projection.kernel.assign(rng.normal(size=(16, 16)).astype("float32") * 0.3)
    batch = _batch(model, PROBE + SENTENCES[:5])
    loss, logs = model.compute_losses(batch, training=False)
    z = model.encoder(batch["features"])["embedding"].numpy() @ model.projection.kernel.numpy()
    s = z / np.linalg.norm(z, axis=1, keepdims=True) if normalized else z
    t = batch["target"]
    mse = np.mean((s - t) ** 2)
    cosine = np.mean(np.sum(z * t, 1) / np.linalg.norm(z, axis=1) / np.linalg.norm(t, axis=1))
    contrastive = _info_nce_numpy(z, 0.1)
    np.testing.assert_allclose(float(logs["mse"]), mse, rtol=1e-5)
    np.testing.assert_allclose(float(logs["cosine"]), cosine, rtol=1e-5)
    np.testing.assert_allclose(float(logs["contrastive"]), contrastive, rtol=1e-5)
    np.testing.assert_allclose(float(loss), mse + 0.5 * contrastive, rtol=1e-5)
    np.testing.assert_allclose(float(logs["loss"]), mse + 0.5 * contrastive, rtol=1e-5)


def test_student_learns_the_teacher():
    """A 1-layer random student of a 3-layer teacher (a student far from its target; a
    layer-dropped tiny random student starts within 1e-4 of it): its MSE on the training
    sentences falls over a few steps, and the teacher does not move."""
    teacher = tiny_encoder(TINY_VOCAB, num_layers=3, max_seq_length=MAX_LEN, seed=1)
    before_teacher = [w.numpy().copy() for w in teacher.weights]
    student = tiny_encoder(TINY_VOCAB, num_layers=1, max_seq_length=MAX_LEN, seed=7)
    model = Distill(student, teacher=teacher)
    model.compile(optimizer=keras.optimizers.AdamW(3e-3))
    start = model.evaluate(SENTENCES[:32], batch_size=16, verbose=0, return_dict=True)
    model.fit(SENTENCES[:32], batch_size=16, epochs=5, verbose=0)
    end = model.evaluate(SENTENCES[:32], batch_size=16, verbose=0, return_dict=True)
    assert end["mse"] < 0.5 * start["mse"], (start, end)
    for before, after in zip(before_teacher, teacher.weights):
        np.testing.assert_array_equal(before, after.numpy())


def test_two_replicas_match_one_replica():
    """One SGD step on a global batch of 8, MSE + contrastive with a projection: 2 replicas
    x 4 == 1 replica x 8 in the logged losses and every weight (the MSE is a global mean,
    the InfoNCE runs on gathered embeddings). ReductionToOneDevice: see
    tests/test_scd.py's mirrored_strategy."""
    mirrored = mirrored_cpu_strategy(tf.distribute.ReductionToOneDevice())
    teacher = tiny_encoder(TINY_VOCAB, num_layers=2, max_seq_length=MAX_LEN, seed=1)
    sentences = SENTENCES[:8]
    batch = {"features": teacher.tokenizer(sentences),
             "target": teacher.encode(sentences, normalize=True)}
    runs = []
    for strategy in (tf.distribute.get_strategy(), mirrored):
        with strategy.scope():
            student = tiny_encoder(TINY_VOCAB, num_layers=1, max_seq_length=MAX_LEN, seed=7)
            model = Distill(student, teacher_dim=16, normalized=True, projection=True,
                            contrastive_weight=0.5, encoder_dropout=0.0)
            model.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=False)
        history = model.fit(tf.data.Dataset.from_tensors(batch), epochs=1,
                            steps_per_epoch=1, verbose=0).history
        runs.append((history, [w.numpy() for w in model.weights]))
        projection = model.projection.kernel.numpy()
    (h1, w1), (h2, w2) = runs
    assert set(h1) == {"loss", "mse", "cosine", "contrastive", "grad_norm"}
    for key in ("loss", "mse", "cosine", "contrastive"):
        np.testing.assert_allclose(h1[key][0], h2[key][0], rtol=1e-5, err_msg=key)
    for a, b in zip(w1, w2):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert not np.allclose(projection, np.eye(16))  # the projection moved (from identity)


def test_cli_distills_a_layer_dropped_student(hf_checkpoint_dirs, tmp_path):
    """`python -m tfsent.train --method=distill --config.student_layers=0,2` on a tiny
    checkpoint: the teacher's embeddings land in the cache, the saved encoder has 2
    layers, and its export serves in a fresh TF-only process what the encoder gives."""
    checkpoint = hf_checkpoint_dirs["bert"]
    out = str(tmp_path / "run")
    cache = str(tmp_path / "cache")
    r = subprocess.run([sys.executable, "-m", "tfsent.train", "--method=distill",
                        f"--config.encoder={checkpoint}", "--config.student_layers=0,2",
                        "--config.steps=4", "--config.eval_every=2", "--config.batch_size=8",
                        f"--config.max_seq_length={MAX_LEN}", f"--config.cache_dir={cache}",
                        "--config.eval_max_seq_length=32", "--config.jit_compile=False",
                        f"--output_dir={out}", *TINY_RUN_FLAGS],
                       cwd=REPO, capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["steps"] == 4
    meta = json.load(open(os.path.join(out, "encoder", "tfsent_encoder.json")))
    assert meta["family"] == "bert" and meta["backbone_config"]["num_layers"] == 2
    entries = [f for f in os.listdir(cache) if f.endswith(".json")]
    assert len(entries) == 1
    entry = json.load(open(os.path.join(cache, entries[0])))
    assert entry["encoder"] == checkpoint and entry["pooling"] == "mean|raw"
    assert entry["max_seq_length"] == MAX_LEN and entry["dim"] == 32
    served = serve_in_fresh_process(metrics["export"], PROBE)
    assert served["modules"] == []
    student = load_encoder(os.path.join(out, "encoder"), max_seq_length=32)
    np.testing.assert_allclose(served["embedding"], student.encode(PROBE), atol=1e-5)


# --------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("layers,message", [
    ("0,4", r"layer 4 is out of range; indices are layers of 0\.\.3 \(the model has 4\); "
            "an empty student_layers keeps every layer"),
    ("2,0", "increasing order"), ("0,2,2", "layer 2 is given twice"),
    ("zero", "comma-separated layer indices"), ("-1,2", "layer -1 is out of range")])
def test_bad_student_layers_are_refused_before_loading(layers, message,
                                                       hf_checkpoint_dirs):
    with pytest.raises(ConfigError, match=message):
        resolve_config("distill", None, [f"encoder={hf_checkpoint_dirs['bert']}",
                                         f"student_layers={layers}"])


def test_student_with_another_tokenizer_or_size_is_refused(hf_checkpoint_dirs,
                                                            tiny_encoder_dir):
    """Before loading: a RoBERTa student of a BERT teacher (byte-level BPE vs WordPiece),
    a 16-wide student of a 32-wide teacher without student_projection. After loading
    (same tokenizer kind, other vocabulary): the constructor says what to do."""
    with pytest.raises(ConfigError, match="does not tokenize like.*student_layers"):
        resolve_config("distill", None, [f"encoder={hf_checkpoint_dirs['roberta']}",
                                         f"teacher={hf_checkpoint_dirs['bert']}",
                                         "student_layers="])
    with pytest.raises(ConfigError, match="16 dimensions.*32.*student_projection=True"):
        resolve_config("distill", None, [f"encoder={tiny_encoder_dir}",
                                         f"teacher={hf_checkpoint_dirs['bert']}",
                                         "student_layers="])
    config = resolve_config("distill", None, [f"encoder={tiny_encoder_dir}",
                                              f"teacher={hf_checkpoint_dirs['bert']}",
                                              "student_projection=True", "student_layers="])
    assert config.student_projection is True
    teacher = tiny_encoder(TINY_VOCAB[:-3], max_seq_length=MAX_LEN)
    student = tiny_encoder(TINY_VOCAB, max_seq_length=MAX_LEN)
    with pytest.raises(ConfigError, match="tokenizer.*differs.*student_layers"):
        Distill(student, teacher=teacher)
    with pytest.raises(ConfigError, match="student_projection=True"):
        Distill(tiny_encoder(TINY_VOCAB, hidden_dim=8), teacher=student)


def test_raw_sentences_need_the_teacher():
    teacher = tiny_encoder(TINY_VOCAB, num_layers=3, max_seq_length=MAX_LEN, seed=1)
    loaded = Distill.from_config(Distill(keep_layers(teacher, (0,)), teacher=teacher)
                                 .get_config())
    assert loaded.teacher is None
    loaded.compile(optimizer="adamw")
    with pytest.raises(ConfigError, match="teacher="):
        loaded.fit(SENTENCES[:16], batch_size=8, verbose=0)


def test_parse_layers_accepts_lists():
    assert parse_layers([0, 2, 4], 6) == (0, 2, 4)
    assert parse_layers("1, 3", None) == (1, 3)
