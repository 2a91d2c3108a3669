"""The Keras-native behaviours that are not per method (those are the harness classes of
tests/method_harness.py, one in each method's test file): every registered layer's config
round trip, `.keras` save/load in a fresh process (same embeddings, same optimizer state,
training continues identically), fit on datasets of other shapes (batched, dict rows),
the shuffle seed, and a `ModelCheckpoint` on the dev score that keeps the best epoch."""

import json
import os
import subprocess
import sys
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import (NLI_ROWS, PROBE, RAW, REPO, SENTENCES, TINY_VOCAB, TRIPLETS,
                      tiny_method_encoder)
from method_harness import string_dataset, strip_names
from tfsent.data import readers
from tfsent.errors import ConfigError
from tfsent.testing import tiny_encoder


def _build(name):
    """A tiny instance of each method (and each mode that reads other data)."""
    from tfsent import methods

    enc = tiny_method_encoder()
    return {
        "simcse_unsup": lambda: methods.SimCSE(enc),
        "simcse_sup": lambda: methods.SimCSE(enc, supervised=True),
        "cmlm_cse": lambda: methods.CMLMCSE(enc, extractor_layers=2, fusion_layers=1,
                                            mask_rate=0.3),
        "supcon": lambda: methods.SupConSBERT(enc, scl_weight=0.3),
        "scd": lambda: methods.SCD(enc, projector_width=32),
        "consert": lambda: methods.ConSERT(enc, mode="unsup"),
        "consert_joint": lambda: methods.ConSERT(enc, mode="joint"),
        "clsr": lambda: methods.CLSR(enc, hidden_dim=24, output_dim=8),
    }[name]()


# One instance per class in the fresh process: the modes of a class (SimCSE supervised,
# ConSERT joint) differ only in constructor arguments, which each method's harness class
# round-trips through a `.keras` file in-process (tests/method_harness.py).
FRESH_PROCESS_METHODS = ("simcse_unsup", "cmlm_cse", "supcon", "scd", "consert", "clsr")


def _layer_cases(hf_dirs):
    """A small instance of every registered tfsent layer, with an input to call it on."""
    from tfsent.encoders import SentenceTokenizer, load_encoder
    from tfsent.layers.augment import Augmentation
    from tfsent.layers.cmlm import Fusioner, LexicalExtractor
    from tfsent.layers.heads import MLPEncoder
    from tfsent.layers.nli_head import NLIHead
    from tfsent.layers.projector import Projector

    enc = tiny_encoder(TINY_VOCAB, num_layers=2, max_seq_length=12, seed=4)
    feats = enc.tokenizer(PROBE)
    h = tf.random.stateless_normal([3, 16], seed=[1, 2])
    seq = tf.random.stateless_normal([3, 12, 16], seed=[3, 4])
    cases = {
        "SentenceTokenizer": (SentenceTokenizer(TINY_VOCAB, max_seq_length=12),
                              tf.constant(PROBE)),
        "SentenceEncoder": (enc, feats),
        "Augmentation": (Augmentation("token_cutoff", 0.2), None),
        "MLPEncoder": (MLPEncoder(24, 8), h),
        "Projector": (Projector(32), h),
        "LexicalExtractor": (LexicalExtractor(
            _backbone_config(enc.backbone), 1), None),
        "Fusioner": (Fusioner(len(TINY_VOCAB), 16, 2, 32, num_layers=1), None),
        "NLIHead": (NLIHead(16, hidden_dim=8, max_square_feature=True), None),
    }
    for family in ("roberta", "xlm-roberta"):  # ByteBPETokenizer, SentencePieceTokenizer
        tokenizer = load_encoder(hf_dirs[family], max_seq_length=12).tokenizer
        cases[type(tokenizer).__name__] = (tokenizer, tf.constant(PROBE))
    # QwenBPETokenizer (the qwen3 family), from a tiny Qwen3-Embedding folder
    from hf_decoder_checkpoints import make_qwen3_embedding_dir
    qwen_dir = make_qwen3_embedding_dir(tempfile.mkdtemp(prefix="tfsent-qwen-"))
    tokenizer = load_encoder(qwen_dir, max_seq_length=12).tokenizer
    cases[type(tokenizer).__name__] = (tokenizer, tf.constant(PROBE))
    # GemmaSentencePieceTokenizer and DenseHead (the gemma3 family)
    from hf_decoder_checkpoints import gemma_sentencepiece_model
    from tfsent.encoders.dense_head import DenseHead
    from tfsent.encoders.tokenizers import GemmaSentencePieceTokenizer
    cases["GemmaSentencePieceTokenizer"] = (GemmaSentencePieceTokenizer(
        gemma_sentencepiece_model(), max_seq_length=12), tf.constant(PROBE))
    cases["DenseHead"] = (DenseHead([{"units": 24, "use_bias": False, "activation": None},
                                     {"units": 8, "use_bias": True, "activation": "tanh"}]), h)
    del seq
    return cases


def _backbone_config(backbone):
    from tfsent.encoders.encoder_dir import _backbone_config as config_of

    return config_of(backbone)


def test_every_registered_layer_round_trips(hf_checkpoint_dirs):
    """Every layer registered under the 'tfsent' package has a harness case here (a new
    layer without one fails), and `from_config(get_config())` rebuilds it; layers that can
    be called on their own give the same outputs with the same weights."""
    registered = {name.split(">", 1)[1] for name, cls in
                  keras.saving.get_custom_objects().items()
                  if name.startswith("tfsent>") and issubclass(cls, keras.layers.Layer)
                  and not issubclass(cls, keras.Model)}
    registered.add("SentenceEncoder")
    cases = _layer_cases(hf_checkpoint_dirs)
    missing = registered - set(cases)
    assert not missing, f"registered tfsent layers without a harness case: {missing}"
    for name, (layer, inputs) in cases.items():
        config = layer.get_config()
        clone = type(layer).from_config(config)
        assert strip_names(clone.get_config()) == strip_names(config), name
        if inputs is None:
            continue
        out = layer(inputs)
        if layer.weights:
            clone(inputs)
            clone.set_weights(layer.get_weights())
        again = clone(inputs)
        for a, b in zip(tf.nest.flatten(out), tf.nest.flatten(again)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, err_msg=name)


def test_pre_tokenized_path_still_works():
    from tfsent.data import pipelines

    model = _build("simcse_unsup")
    model.compile(optimizer=keras.optimizers.AdamW(1e-3))
    ds = pipelines.sentence_dataset(SENTENCES, model.encoder.tokenizer, 8)
    history = model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_bad_raw_examples_are_clear():
    model = _build("simcse_sup")
    model.compile(optimizer="adamw")
    with pytest.raises(Exception, match=r"x\[0\].*anchor, positive, negative"):
        model.fit([("only", "two")] * 16, batch_size=8, verbose=0)
    with pytest.raises(ConfigError, match="fewer than one batch"):
        model.fit(TRIPLETS[:3], batch_size=8, verbose=0)
    supcon = _build("supcon")
    supcon.compile(optimizer="adamw")
    with pytest.raises(Exception, match="NLI label 'maybe'"):
        supcon.fit([("a", "b", "maybe")] * 16, batch_size=8, verbose=0)


# Reads `NAME<TAB>PATH.keras` lines from stdin and handles each model as soon as its line
# arrives (loads it, embeds, takes one training step); prints the results at end of input.
LOAD_SCRIPT = r"""
import json, sys
import numpy as np
import keras
import tfsent  # registers tfsent's classes
from tfsent.data import preprocessing
probe, raw = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {}
for line in sys.stdin:
    name, path = line.rstrip("\n").split("\t")
    model = keras.saving.load_model(path)
    emb = model.encode(probe)
    step = int(model.optimizer.iterations.numpy())
    opt = {v.path: v.numpy() for v in model.optimizer.variables}
    rows = [tuple(r) if isinstance(r, list) else r for r in raw[model.input_kind]]
    ds = preprocessing.dataset_for(model, rows, 8, shuffle=False)
    model.fit(ds, epochs=1, steps_per_epoch=1, verbose=0)
    out[name] = {"class": type(model).__name__, "embedding": emb.tolist(), "step": step,
                 "opt_norm": float(sum(np.abs(v).sum() for v in opt.values())),
                 "after": model.encode(probe).tolist()}
json.dump(out, sys.stdout)
"""


def test_keras_save_and_load_model_in_a_fresh_process(tmp_path):
    """model.save("x.keras") then keras.saving.load_model in a new interpreter: the same
    class, identical embeddings and optimizer state, and one more training step gives the
    same weights as the same step taken by the original model.

    The new interpreter starts first and gets each model as soon as it is saved, so its
    imports and its work on one model overlap the training of the next."""
    from tfsent.data import preprocessing

    raw = {k: [list(r) if isinstance(r, tuple) else r for r in v] for k, v in RAW.items()}
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "w") as err:
        loader = subprocess.Popen([sys.executable, "-c", LOAD_SCRIPT, json.dumps(PROBE),
                                   json.dumps(raw)], cwd=REPO, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=err, text=True,
                                  env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    expected = {}
    try:
        for name in FRESH_PROCESS_METHODS:
            model = _build(name)
            model.compile(optimizer=keras.optimizers.AdamW(1e-3))
            # One dataset for both fits: each fit iterates it from its first batch, as the
            # new interpreter's fit does.
            dataset = preprocessing.dataset_for(model, RAW[model.input_kind], 8,
                                                shuffle=False)
            model.fit(dataset, epochs=1, steps_per_epoch=2, verbose=0)
            path = str(tmp_path / f"{name}.keras")
            model.save(path)
            try:
                loader.stdin.write(f"{name}\t{path}\n")
                loader.stdin.flush()
            except BrokenPipeError:  # the loader died: its stderr is reported below
                pass
            emb = model.encode(PROBE)
            opt_norm = float(sum(np.abs(v.numpy()).sum() for v in model.optimizer.variables))
            model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0)
            expected[name] = (type(model).__name__, emb, opt_norm, model.encode(PROBE))
        out, _ = loader.communicate(timeout=900)
    finally:
        if loader.poll() is None:
            loader.kill()
    assert loader.returncode == 0, stderr.read_text()[-3000:]
    loaded = json.loads(out)
    for name, (cls, emb, opt_norm, after) in expected.items():
        got = loaded[name]
        assert got["class"] == cls
        np.testing.assert_allclose(got["embedding"], emb, atol=1e-6, err_msg=name)
        assert got["step"] == 2, name
        np.testing.assert_allclose(got["opt_norm"], opt_norm, rtol=1e-6, err_msg=name)
        # Same weights, optimizer state and dropout stream: the next step agrees to float
        # summation order (~1e-5 seen); a different dropout stream moves it by ~1e-2.
        np.testing.assert_allclose(got["after"], after, atol=1e-4, err_msg=name)


def test_model_checkpoint_on_dev_spearman_keeps_the_best_epoch(tmp_path):
    """STSDevEvaluation writes val_spearman; ModelCheckpoint(save_best_only) and
    EarlyStopping read it; the saved model is the best epoch's."""
    from tfsent.training.callbacks import STSDevEvaluation

    s1, s2, gold = readers.read_scored_pairs(readers.DEMO_PAIRS)
    model = _build("simcse_unsup")
    model.compile(optimizer=keras.optimizers.AdamW(3e-3))
    dev = STSDevEvaluation(s1[:40], s2[:40], gold[:40])
    path = str(tmp_path / "best.keras")
    checkpoint = keras.callbacks.ModelCheckpoint(path, monitor="val_spearman", mode="max",
                                                 save_best_only=True)
    stop = keras.callbacks.EarlyStopping(monitor="val_spearman", mode="max", patience=10)
    history = model.fit(SENTENCES, batch_size=8, epochs=4, steps_per_epoch=2, verbose=0,
                        callbacks=[dev, checkpoint, stop])
    scores = history.history["val_spearman"]
    assert len(scores) == 4 and all(np.isfinite(scores))
    for key in ("val_pearson", "val_alignment", "val_uniformity", "val_random_pair_cosine"):
        assert key in history.history
    best = keras.saving.load_model(path)
    again = dev.evaluate(best)["spearman"]
    np.testing.assert_allclose(again, max(scores), atol=1e-4)


def test_from_preset_one_line_start(tiny_encoder_dir):
    from tfsent.methods import SimCSE

    model = SimCSE.from_preset(tiny_encoder_dir, max_seq_length=12, temperature=0.1)
    assert model.temperature == 0.1 and model.encoder.tokenizer.max_seq_length == 12
    model.compile(optimizer="adamw")
    model.fit(SENTENCES, batch_size=8, epochs=1, steps_per_epoch=1, verbose=0)


def test_encoder_save_is_keras_save(tmp_path):
    """SentenceEncoder.save keeps Keras' meaning (a .keras archive); the tfsent encoder
    directory is save_encoder_dir."""
    from tfsent.encoders import load_encoder

    enc = tiny_encoder(TINY_VOCAB, max_seq_length=12, seed=6)
    enc.save(str(tmp_path / "enc.keras"))
    again = keras.saving.load_model(str(tmp_path / "enc.keras"))
    np.testing.assert_allclose(again.encode(PROBE), enc.encode(PROBE), atol=1e-6)
    enc.save_encoder_dir(str(tmp_path / "dir"))
    np.testing.assert_allclose(load_encoder(str(tmp_path / "dir")).encode(PROBE),
                               enc.encode(PROBE), atol=1e-6)


def _first_step_losses(seeds):
    """The first fit step's loss of a dropout-free supervised SimCSE (so it depends only
    on which triplets the shuffled, duplicate-free batch holds) after
    `keras.utils.set_random_seed(seed)`, for each seed: one model whose weights are reset
    before each fit (the loss is computed before the step's update), so its train step is
    traced once."""
    from tfsent import methods

    model = methods.SimCSE(tiny_encoder(TINY_VOCAB, num_layers=1, max_seq_length=12, seed=3,
                                        dropout=0.0), supervised=True, encoder_dropout=0.0)
    model.compile(optimizer=keras.optimizers.AdamW(1e-3))
    initial = {v.path: v.numpy() for v in model.trainable_variables}
    losses = []
    for seed in seeds:
        assert {v.path for v in model.trainable_variables} == set(initial)
        for v in model.trainable_variables:
            v.assign(initial[v.path])
        keras.utils.set_random_seed(seed)
        history = model.fit(TRIPLETS, batch_size=8, epochs=1, steps_per_epoch=1, verbose=0)
        losses.append(history.history["loss"][0])
    return losses


def test_fit_shuffles_with_the_users_seed():
    """fit's shuffle follows keras.utils.set_random_seed (the duplicate-free triplet and
    NLI batches used seed 0 always): the same seed gives the same first batch, another
    seed another batch."""
    seed_1, seed_1_again, seed_2 = _first_step_losses([1, 1, 2])
    assert seed_1_again == pytest.approx(seed_1, rel=1e-6)
    assert seed_2 != pytest.approx(seed_1, rel=1e-4)


DICT_ROWS = {
    "triplets": [{"anchor": a, "positive": p, "negative": n} for a, p, n in TRIPLETS],
    "nli_pairs": [{"premise": p, "hypothesis": h, "label": y} for p, h, y in NLI_ROWS],
}


# One method per data kind (sentences, MLM sentences, triplets, NLI rows, pairs), rows as
# lists or dicts.
@pytest.mark.parametrize("name,rows", [
    ("simcse_unsup", "list"), ("simcse_sup", "dicts"), ("supcon", "dicts"),
    ("cmlm_cse", "list"), ("clsr", "list")])
@pytest.mark.parametrize("batch", [0, 8])
def test_fit_and_evaluate_on_a_dataset_of_strings(name, rows, batch):
    """What Keras users pass: a tf.data.Dataset of raw strings (or rows of them, tuples or
    dicts), batched or not, is tokenized inside the pipeline like a list (it failed with
    "argument of type 'SymbolicTensor' is not iterable")."""
    model = _build(name)
    model.compile(optimizer=keras.optimizers.AdamW(1e-3))
    raw = DICT_ROWS[model.input_kind] if rows == "dicts" else RAW[model.input_kind]
    ds = string_dataset(raw, batch)
    history = model.fit(ds, batch_size=None if batch else 8, epochs=1, steps_per_epoch=2,
                        validation_data=string_dataset(raw[:16], batch), verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert np.isfinite(history.history["val_loss"]).all()
    result = model.evaluate(ds, batch_size=None if batch else 8, verbose=0,
                            return_dict=True)
    assert all(np.isfinite(v) for v in result.values())


def test_anything_else_says_what_to_pass():
    model = _build("simcse_sup")
    model.compile(optimizer="adamw")
    with pytest.raises(Exception, match=r"neither raw examples nor tokenized batches.*"
                                        r"\(anchor, positive, negative\)"):
        model.fit(tf.data.Dataset.from_tensor_slices(np.zeros((16, 4), np.float32)),
                  verbose=0)
    with pytest.raises(Exception, match=r"x: a list of int .*is not raw examples"):
        model.fit(list(range(16)), batch_size=8, verbose=0)
    with pytest.raises(Exception, match="neither raw examples nor tokenized batches"):
        model.evaluate(tf.data.Dataset.from_tensor_slices(
            [[["a", "b"]]] * 16), verbose=0)  # strings nested too deep
