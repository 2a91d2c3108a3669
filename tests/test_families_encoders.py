"""Encoder families (bert, roberta, xlm-roberta, distilbert): loading every form, the forward
against keras-hub's backbones and against an independent NumPy transcription of Hugging
Face's modelling code, per-site dropout / hidden states / hooks, and bad checkpoints."""

import ast
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from scipy.special import erf

from conftest import REPO, minilm_or_skip
from hf_checkpoints import FAMILIES, make_sentence_transformers_dir, make_tiny_checkpoint
from tfsent.encoders import (DROPOUT_SITES, SentenceEncoder, hf_config, hf_state_dict,
                             load_encoder)
from tfsent.encoders import keras_hub_adapter as kh
from tfsent.encoders.families import TABLE
from tfsent.errors import ConfigError, InputError
from tfsent.layers.augment import shuffle_position_ids

SENTENCES = ["A man plays the guitar in the park.", "", "Water boils at a lower temperature.",
             "Café crème, naïve 😀 東京"]
MAX_LEN = 24


@pytest.fixture(scope="module")
def encoders(hf_checkpoint_dirs):
    return {f: load_encoder(d, max_seq_length=MAX_LEN) for f, d in hf_checkpoint_dirs.items()}


def _features(encoder, sentences=SENTENCES):
    return encoder.tokenizer.with_options(pad_to_max_length=False)(sentences)


# --------------------------------------------------------------------------------------
# Hugging Face's forward, transcribed in NumPy (float64) from the checkpoint files
# --------------------------------------------------------------------------------------

def _hf_weights(directory):
    from safetensors.numpy import load_file

    raw = load_file(os.path.join(directory, "model.safetensors"))
    out = {}
    for name, value in raw.items():
        for prefix in ("bert.", "roberta.", "distilbert."):
            if name.startswith(prefix):
                name = name[len(prefix):]
        out[name] = value.astype(np.float64)
    return out


def _layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _gelu(x):
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def hf_forward(directory, ids, mask, position_ids=None):
    """All hidden states (embedding output first) of the checkpoint in `directory`, as
    Hugging Face's BertModel / RobertaModel / XLMRobertaModel / DistilBertModel compute them
    (no dropout). Position ids default to HF's: 0..L-1, or for RoBERTa-like models
    padding_idx + 1 + i on real tokens (create_position_ids_from_input_ids)."""
    config = json.load(open(os.path.join(directory, "config.json")))
    family = config["model_type"]
    w = _hf_weights(directory)
    ids, mask = np.asarray(ids), np.asarray(mask)
    if position_ids is None:
        if family in ("roberta", "xlm-roberta"):
            pad = config["pad_token_id"]
            real = (ids != pad).astype(np.int64)
            position_ids = np.cumsum(real, axis=1) * real + pad
        else:
            position_ids = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
    if family == "distilbert":
        heads, eps = config["n_heads"], 1e-12
        names = {"q": "attention.q_lin", "k": "attention.k_lin", "v": "attention.v_lin",
                 "o": "attention.out_lin", "ln1": "sa_layer_norm", "i": "ffn.lin1",
                 "o2": "ffn.lin2", "ln2": "output_layer_norm"}
        layer_prefix, n_layers = "transformer.layer", config["n_layers"]
    else:
        heads, eps = config["num_attention_heads"], config["layer_norm_eps"]
        names = {"q": "attention.self.query", "k": "attention.self.key",
                 "v": "attention.self.value", "o": "attention.output.dense",
                 "ln1": "attention.output.LayerNorm", "i": "intermediate.dense",
                 "o2": "output.dense", "ln2": "output.LayerNorm"}
        layer_prefix, n_layers = "encoder.layer", config["num_hidden_layers"]
    x = w["embeddings.word_embeddings.weight"][ids] + \
        w["embeddings.position_embeddings.weight"][position_ids]
    if family != "distilbert":
        x = x + w["embeddings.token_type_embeddings.weight"][0]
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    states = [x]
    bias = (1.0 - mask[:, None, None, :]) * -1e9
    for i in range(n_layers):
        p = lambda key, part: w[f"{layer_prefix}.{i}.{names[key]}.{part}"]  # noqa: E731
        lin = lambda key, h: h @ p(key, "weight").T + p(key, "bias")  # noqa: E731
        b, n, hdim = x.shape
        split = lambda h: h.reshape(b, n, heads, hdim // heads).transpose(0, 2, 1, 3)  # noqa
        q, k, v = split(lin("q", x)), split(lin("k", x)), split(lin("v", x))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hdim // heads) + bias
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, n, hdim)
        x = _layer_norm(x + lin("o", context), p("ln1", "weight"), p("ln1", "bias"), eps)
        x = _layer_norm(x + lin("o2", _gelu(lin("i", x))), p("ln2", "weight"), p("ln2", "bias"),
                        eps)
        states.append(x)
    return states


def _close_on_real_tokens(ours, want, mask, atol):
    m = np.asarray(mask, bool)
    np.testing.assert_allclose(np.asarray(ours, np.float64)[m], want[m], atol=atol, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_equals_hugging_face_numpy(family, encoders, hf_checkpoint_dirs):
    enc = encoders[family]
    feats = _features(enc)
    out = enc(feats, output_hidden_states=True)
    want = hf_forward(hf_checkpoint_dirs[family], feats["token_ids"], feats["padding_mask"])
    assert len(out["hidden_states"]) == len(want) == enc.num_layers + 1
    for ours, ref in zip(out["hidden_states"], want):
        _close_on_real_tokens(ours, ref, feats["padding_mask"], 1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_equals_keras_hub_backbone(family, encoders):
    """The same weights through keras-hub's own backbone (its activation, dropout off)."""
    enc = encoders[family]
    same = SentenceEncoder(enc.backbone, enc.tokenizer, "cls", TABLE[family].activation)
    feats = _features(enc)
    ours = same(feats, training=False)
    inputs = {"token_ids": feats["token_ids"], "padding_mask": feats["padding_mask"]}
    if family == "bert":
        inputs["segment_ids"] = feats["segment_ids"]
    ref = enc.backbone(inputs, training=False)
    sequence = ref["sequence_output"] if family == "bert" else ref
    _close_on_real_tokens(ours["sequence_output"], np.asarray(sequence, np.float64),
                          feats["padding_mask"], 1e-5)
    if family == "bert":  # `cls` = the pooler
        np.testing.assert_allclose(ours["embedding"], ref["pooled_output"], atol=1e-5)
    else:  # no pooler: `cls` = the first token's state
        np.testing.assert_allclose(ours["embedding"], np.asarray(sequence)[:, 0], atol=1e-6)
        assert same.pooler_dense is None


@pytest.mark.parametrize("family", FAMILIES)
def test_weights_equal_keras_hub_converter(family, encoders, hf_checkpoint_dirs):
    """tfsent reads the safetensors itself; keras-hub's converter gives the same variables."""
    reference = kh.backbone_class(family).from_preset(hf_checkpoint_dirs[family])
    for ours, ref in zip(encoders[family].backbone.weights, reference.weights):
        assert ours.path == ref.path
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())


@pytest.mark.parametrize("family", FAMILIES)
def test_family_record_matches_backbone_tokenizer_and_checkpoint(family, encoders,
                                                                 hf_checkpoint_dirs):
    """What a `Family` record says sets the family apart is what keras-hub's backbone,
    tfsent's tokenizer and the Hugging Face checkpoint (written by transformers) have."""
    import transformers

    record, enc = TABLE[family], encoders[family]
    backbone = enc.backbone
    config = json.load(open(os.path.join(hf_checkpoint_dirs[family], "config.json")))
    # Token types: True for BERT only (RoBERTa's single all-zero row is not an input).
    assert record.has_segments == (family == "bert")
    assert hasattr(backbone, "segment_embedding") == record.has_segments
    assert ("segment_ids" in backbone.input) == record.has_segments
    assert ("segment_ids" in _features(enc)) == record.has_segments
    assert (config.get("type_vocab_size", 1) > 1) == record.has_segments
    # Pooler: BERT only, in keras-hub's backbone and in Hugging Face's names.
    assert hasattr(backbone, "pooled_dense") == record.has_pooler == (family == "bert")
    assert (kh.pooler_dense(backbone) is not None) == record.has_pooler
    # Positions: config.json's table is longer by the offset (2 for RoBERTa / XLM-R).
    assert config["max_position_embeddings"] - backbone.max_sequence_length == \
        record.position_offset(config["pad_token_id"]) == record.position_offset()
    assert record.positions_after_padding == (family in ("roberta", "xlm-roberta"))
    # config.json: transformers' field names and defaults for the family.
    defaults = transformers.AutoConfig.for_model(family)
    assert record.pad_token_id == defaults.pad_token_id == enc.tokenizer.pad_id
    assert set(record.hf_config_keys.values()) <= set(config)
    assert all(config[k] == v for k, v in record.hf_config_fixed.items() if k in config)


def test_no_family_name_outside_the_family_table():
    """Code asks a family's record what differs (`has_segments`, ...), never compares or
    spells its name: the names appear as string constants in families.py only."""
    names = set(TABLE)
    found = []
    for folder, _, files in os.walk(os.path.join(REPO, "tfsent")):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or path.endswith(os.path.join("encoders",
                                                                      "families.py")):
                continue
            for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
                if isinstance(node, ast.Constant) and node.value in names:
                    found.append(f"{os.path.relpath(path, REPO)}:{node.lineno} "
                                 f"{node.value!r}")
    assert not found, "\n".join(found)


def test_minilm_weights_equal_keras_hub_converter():
    """minilm-l6 (a sentence-transformers directory) loads the very weights keras-hub's BERT
    converter gives, so its figures cannot move."""
    minilm_or_skip()
    from tfsent.encoders.loading import resolve_short_name

    enc = load_encoder("minilm-l6", pooling="mean", max_seq_length=512)
    reference = kh.backbone_class("bert").from_preset(resolve_short_name("minilm-l6"))
    for ours, ref in zip(enc.backbone.weights, reference.weights):
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    assert (enc.pooling, enc.tokenizer.max_seq_length, enc.normalize) == ("mean", 512, True)


def test_roberta_position_ids_offset_and_shuffle(encoders, hf_checkpoint_dirs):
    """tfsent position p is Hugging Face's p + padding_idx + 1; ConSERT's shuffled position
    ids (a permutation over real tokens) keep that meaning."""
    enc = encoders["roberta"]
    feats = _features(enc)
    mask = feats["padding_mask"]
    shuffled = shuffle_position_ids(mask, tf.constant([3, 4]))
    assert not np.array_equal(shuffled.numpy(), np.broadcast_to(np.arange(mask.shape[1]),
                                                                mask.shape))
    out = enc(feats, position_ids=shuffled, output_hidden_states=True)
    want = hf_forward(hf_checkpoint_dirs["roberta"], feats["token_ids"], mask,
                      position_ids=shuffled.numpy() + 2)
    _close_on_real_tokens(out["sequence_output"], want[-1], mask, 1e-4)


def test_nonzero_token_type_row_is_folded(hf_checkpoint_dirs, tmp_path):
    """A RoBERTa checkpoint whose (single) token-type row is not zero: added into the
    position table, so the forward still equals Hugging Face's."""
    from safetensors.numpy import load_file, save_file

    path = shutil.copytree(hf_checkpoint_dirs["roberta"], tmp_path / "rob")
    weights = load_file(os.path.join(path, "model.safetensors"))
    name = "roberta.embeddings.token_type_embeddings.weight"
    weights[name] = np.random.default_rng(1).normal(0, 0.3, weights[name].shape).astype(
        np.float32)
    save_file(weights, os.path.join(path, "model.safetensors"))
    enc = load_encoder(str(path), max_seq_length=MAX_LEN)
    feats = _features(enc)
    want = hf_forward(str(path), feats["token_ids"], feats["padding_mask"])
    _close_on_real_tokens(enc(feats)["sequence_output"], want[-1], feats["padding_mask"], 1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_per_site_dropout_hidden_states_and_hooks(family, encoders):
    enc = encoders[family]
    feats = _features(enc)
    base = enc(feats, training=False, output_hidden_states=True)
    off = enc(feats, training=True, dropout=0.0)["embedding"]
    np.testing.assert_allclose(off, base["embedding"], atol=1e-6)
    for site in DROPOUT_SITES:
        rates = dict.fromkeys(DROPOUT_SITES, 0.0)
        rates[site] = 0.5
        changed = enc(feats, training=True, dropout=rates)["embedding"]
        assert not np.allclose(changed, base["embedding"], atol=1e-4), site
    doubled = enc(feats, embedding_fn=lambda x, m: x * 0.0, output_hidden_states=True)
    assert np.abs(doubled["hidden_states"][0]).max() == 0.0
    ident = tf.broadcast_to(tf.range(tf.shape(feats["token_ids"])[1])[None],
                            tf.shape(feats["token_ids"]))
    np.testing.assert_allclose(enc(feats, position_ids=ident)["embedding"], base["embedding"],
                               atol=1e-6)
    assert [h.shape[-1] for h in base["hidden_states"]] == [enc.hidden_dim] * (
        enc.num_layers + 1)
    for pooling in ("cls", "cls_before_pooler", "mean", "last2_avg", "first_last_avg"):
        assert enc(feats, pooling=pooling)["embedding"].shape == (len(SENTENCES),
                                                                  enc.hidden_dim)


@pytest.mark.parametrize("family", FAMILIES)
def test_tfsent_encoder_dir_round_trip(family, encoders, hf_checkpoint_dirs, tmp_path):
    enc = encoders[family]
    path = str(tmp_path / "enc")
    enc.save_encoder_dir(path)
    meta = json.load(open(os.path.join(path, "tfsent_encoder.json")))
    assert meta["family"] == family
    files = {"bert": ["vocab.txt"], "distilbert": ["vocab.txt"],
             "roberta": ["vocab.json", "merges.txt"],
             "xlm-roberta": ["sentencepiece.bpe.model"]}[family]
    assert all(os.path.exists(os.path.join(path, f)) for f in files)
    again = load_encoder(path)
    assert again.family == family and again.tokenizer.max_seq_length == MAX_LEN
    np.testing.assert_allclose(again.encode(SENTENCES), enc.encode(SENTENCES), atol=1e-6)
    for key, value in enc.mlm_head.items():  # the checkpoint's MLM head travels along
        np.testing.assert_array_equal(again.mlm_head[key], value)
    # hf_state_dict / hf_config write the weights back under Hugging Face's names.
    state = hf_state_dict(enc.backbone, prefix=False)
    config = hf_config(enc.backbone, enc.activation)
    assert config["model_type"] == family
    stored = {n.split(".", 1)[1] if n.split(".", 1)[0] in ("bert", "roberta", "distilbert")
              else n: v for n, v in _hf_weights(hf_checkpoint_dirs[family]).items()}
    for name, value in state.items():
        if name.endswith("position_embeddings.weight") and family in ("roberta",
                                                                       "xlm-roberta"):
            np.testing.assert_array_equal(value[2:], stored[name][2:])
        elif name.endswith("token_type_embeddings.weight") and family != "bert":
            assert not value.any()
        else:
            np.testing.assert_array_equal(value, stored[name])


@pytest.mark.parametrize("family", FAMILIES)
def test_keras_hub_preset_directory(family, encoders, tmp_path):
    """A keras-hub preset saved locally (what a preset name downloads) loads as the same
    family, with the same tokenizer ids."""
    import keras_hub

    enc = encoders[family]
    tok = enc.tokenizer
    if family in ("bert", "distilbert"):
        cls = keras_hub.models.BertTokenizer if family == "bert" else \
            keras_hub.models.DistilBertTokenizer
        kh_tok = cls(vocabulary=tok.vocabulary, lowercase=True)
    elif family == "roberta":
        kh_tok = keras_hub.models.RobertaTokenizer(vocabulary=tok.vocabulary,
                                                   merges=tok.merges)
    else:
        kh_tok = keras_hub.models.XLMRobertaTokenizer(proto=tok.model)
    path = str(tmp_path / "preset")
    enc.backbone.save_to_preset(path)
    kh_tok.save_to_preset(path)
    loaded = load_encoder(path, max_seq_length=MAX_LEN)
    assert loaded.family == family
    if family in ("bert", "distilbert"):  # keras-hub's WordPiece keeps accents
        assert not loaded.tokenizer.strip_accents
        enc = SentenceEncoder(enc.backbone, tok.with_options(strip_accents=False))
    a, b = _features(loaded), _features(enc)
    np.testing.assert_array_equal(a["token_ids"], b["token_ids"])
    for ours, ref in zip(loaded.backbone.weights, enc.backbone.weights):
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())


def test_sentence_transformers_directory(tmp_path, absl_messages):
    path = make_sentence_transformers_dir("roberta", str(tmp_path / "st"), pooling="cls",
                                          max_seq_length=20, normalize=True)
    enc = load_encoder(path)
    assert (enc.pooling, enc.tokenizer.max_seq_length, enc.normalize) == (
        "cls_before_pooler", 20, True)
    notes = [m for m in absl_messages if m.startswith("encoder settings")]
    assert len(notes) == 1 and all(f"{key} (from sentence-transformers directory" in notes[0]
                                   for key in ("pooling='cls_before_pooler'",
                                               "max_seq_length=20", "normalize=True"))
    emb = enc.encode(SENTENCES)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    raw = enc.encode(SENTENCES, normalize=False)
    np.testing.assert_allclose(emb, raw / np.linalg.norm(raw, axis=1, keepdims=True),
                               atol=1e-6)
    assert enc.mlm_head is None  # a base model
    caller = load_encoder(path, pooling="mean", max_seq_length=12, normalize=False)
    assert (caller.pooling, caller.tokenizer.max_seq_length, caller.normalize) == (
        "mean", 12, False)
    maxpool = make_sentence_transformers_dir("bert", str(tmp_path / "mx"), pooling="max")
    with pytest.raises(InputError, match="1_Pooling/config.json.*pooling_mode_max_tokens"):
        load_encoder(maxpool)
    assert load_encoder(maxpool, pooling="mean").pooling == "mean"


def test_minilm_is_a_sentence_transformers_directory():
    minilm_or_skip()
    enc = load_encoder("minilm-l6")
    assert (enc.family, enc.pooling, enc.tokenizer.max_seq_length, enc.normalize) == (
        "bert", "mean", 256, True)


# --------------------------------------------------------------------------------------
# Bad checkpoints: errors name the file and what is wrong
# --------------------------------------------------------------------------------------

def _copy(hf_checkpoint_dirs, family, tmp_path):
    return str(shutil.copytree(hf_checkpoint_dirs[family], tmp_path / family))


def test_no_config_json(hf_checkpoint_dirs, tmp_path):
    path = _copy(hf_checkpoint_dirs, "bert", tmp_path)
    os.remove(os.path.join(path, "config.json"))
    with pytest.raises(InputError, match=f"{path}.*no config.json"):
        load_encoder(path)


@pytest.mark.parametrize("model_type", ["mpnet", "deberta-v2", "modernbert", "gibberish"])
def test_unsupported_model_type(model_type, hf_checkpoint_dirs, tmp_path):
    path = _copy(hf_checkpoint_dirs, "bert", tmp_path)
    config = json.load(open(os.path.join(path, "config.json")))
    config["model_type"] = model_type
    json.dump(config, open(os.path.join(path, "config.json"), "w"))
    with pytest.raises(ConfigError, match=f"config.json: model_type '{model_type}' is not "
                       "supported; supported families: bert, roberta, xlm-roberta, distilbert"):
        load_encoder(path)


def test_invalid_config_json_names_line(hf_checkpoint_dirs, tmp_path):
    path = _copy(hf_checkpoint_dirs, "distilbert", tmp_path)
    with open(os.path.join(path, "config.json"), "w") as f:
        f.write('{\n  "model_type": "distilbert",\n  oops\n}')
    with pytest.raises(InputError, match="config.json, line 3: invalid JSON"):
        load_encoder(path)


@pytest.mark.parametrize("family", FAMILIES)
def test_missing_and_misshaped_weights(family, hf_checkpoint_dirs, tmp_path):
    from safetensors.numpy import load_file, save_file

    path = _copy(hf_checkpoint_dirs, family, tmp_path)
    file = os.path.join(path, "model.safetensors")
    weights = load_file(file)
    name = next(n for n in sorted(weights) if "layer.1." in n and n.endswith("weight"))
    broken = dict(weights)
    del broken[name]
    save_file(broken, file)
    with pytest.raises(InputError, match=f"model.safetensors: missing weight {name}"):
        load_encoder(path)
    broken = dict(weights)
    broken[name] = np.zeros(broken[name].shape[:-1] + (3,), np.float32)
    save_file(broken, file)
    with pytest.raises(InputError, match=f"model.safetensors: weight {name} has shape"):
        load_encoder(path)
    os.remove(file)
    with pytest.raises(InputError, match="no model.safetensors"):
        load_encoder(path)


@pytest.mark.parametrize("family", FAMILIES)
def test_tokenizer_files_must_fit_vocab_size(family, hf_checkpoint_dirs, tmp_path):
    path = _copy(hf_checkpoint_dirs, family, tmp_path)
    config_path = os.path.join(path, "config.json")
    config = json.load(open(config_path))
    config["vocab_size"] -= 10
    json.dump(config, open(config_path, "w"))
    file = {"bert": "vocab.txt", "distilbert": "vocab.txt", "roberta": "vocab.json",
            "xlm-roberta": "sentencepiece.bpe.model"}[family]
    with pytest.raises(InputError, match=f"{file}: the tokenizer has \\d+ ids but "
                       "config.json's vocab_size is"):
        load_encoder(path)


def test_missing_tokenizer_file(hf_checkpoint_dirs, tmp_path):
    path = _copy(hf_checkpoint_dirs, "xlm-roberta", tmp_path)
    os.remove(os.path.join(path, "sentencepiece.bpe.model"))
    with pytest.raises(InputError, match="no sentencepiece.bpe.model"):
        load_encoder(path)


def test_checkpoint_without_mlm_head_or_pooler(tmp_path):
    path = make_tiny_checkpoint("bert", str(tmp_path / "b"), mlm_head=False, pooler=False)
    enc = load_encoder(path)
    assert enc.mlm_head is None and enc.pooler_dense is not None  # fresh pooler (logged)
