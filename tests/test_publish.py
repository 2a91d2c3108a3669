"""The other ecosystems' formats of tfsent.formats (sentence_transformers, huggingface,
keras_hub), without torch: the weight maps through
keras-hub's own Hugging Face converters, round trips through `load_encoder` and keras-hub,
sentence-transformers' module pipeline transcribed in NumPy, tokenizer.json through the
`tokenizers` library, refusals, and the CLIs. The real clients (sentence-transformers,
transformers on PyTorch) are in test_publish_peer.py."""

import json
import os
import subprocess
import sys

import keras
import keras_hub
import numpy as np
import pytest

from conftest import REPO, TINY_VOCAB, minilm_or_skip
from tfsent import formats
from tfsent.encoders.huggingface import hf_config, hf_state_dict
from tfsent.encoders.huggingface.writing import write_hf_model, write_tokenizer_files
from tfsent.formats.metadata import read_metadata
from tfsent.formats.sentence_transformers import ST_POOLINGS
from tfsent.encoders import SentenceEncoder, load_encoder
from tfsent.errors import ConfigError
from tfsent.layers.heads import MLPEncoder
from tfsent.testing import tiny_encoder

SENTENCES = ["a man plays the guitar .", "the dog runs in the park", "", "a red car",
             "the small child reads a book with the big cat . " * 4]
BACKBONES = {"bert": keras_hub.models.BertBackbone,
             "roberta": keras_hub.models.RobertaBackbone,
             "xlm-roberta": keras_hub.models.XLMRobertaBackbone,
             "distilbert": keras_hub.models.DistilBertBackbone}


def randomize(backbone, seed=0):
    """Random values in every variable (fresh keras-hub backbones have zero biases and unit
    LayerNorms, which would hide a bias or LayerNorm mapped to the wrong place)."""
    rng = np.random.default_rng(seed)
    for v in backbone.weights:
        base = 1.0 if v.path.endswith("gamma") else 0.0
        v.assign((base + 0.2 * rng.standard_normal(tuple(v.shape))).astype("float32"))
    return backbone


def cosines(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture(scope="module")
def encoder():
    """A tiny random BERT with keras-hub's own (tanh-approximate) GELU, every weight random."""
    enc = tiny_encoder(TINY_VOCAB, num_layers=2, hidden_dim=16, max_seq_length=16)
    randomize(enc.backbone)
    return SentenceEncoder(enc.backbone, enc.tokenizer, "mean", "gelu_approximate")


@pytest.fixture(scope="module")
def head():
    mlp = MLPEncoder(24, 12, name="clsr_encoder")
    mlp.build((None, 16))
    for v, seed in zip(mlp.weights, range(10)):
        v.assign(np.random.default_rng(seed).standard_normal(tuple(v.shape)).astype("float32"))
    return mlp


# --------------------------------------------------------------------------------------
# Weight maps, per family, through keras-hub's converters
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", list(BACKBONES))
def test_weight_map_is_the_inverse_of_keras_hub_converter(tmp_path, family):
    """A random keras-hub backbone written as a Hugging Face checkpoint and read back by
    keras-hub's own converter (Backbone.from_preset on the directory) has the same weights."""
    backbone = randomize(BACKBONES[family](
        vocabulary_size=40, num_layers=2, num_heads=2, hidden_dim=8, intermediate_dim=12,
        max_sequence_length=20), seed=1)
    write_hf_model(backbone, str(tmp_path))
    config = json.load(open(tmp_path / "config.json"))
    assert config["model_type"] == family
    loaded = keras_hub.models.Backbone.from_preset(str(tmp_path))
    assert type(loaded) is type(backbone)
    assert loaded.get_config() | {"name": None} == backbone.get_config() | {"name": None}
    mine = {v.path: v.numpy() for v in backbone.weights}
    theirs = {v.path: v.numpy() for v in loaded.weights}
    assert mine.keys() == theirs.keys()
    for path in mine:
        np.testing.assert_array_equal(theirs[path], mine[path], err_msg=path)


def test_names_carry_the_base_model_prefix_and_positions_their_offset():
    backbone = keras_hub.models.RobertaBackbone(vocabulary_size=30, num_layers=1, num_heads=2,
                                                hidden_dim=8, intermediate_dim=12,
                                                max_sequence_length=10)
    tensors = hf_state_dict(randomize(backbone))
    assert all(name.startswith("roberta.") for name in tensors)
    positions = tensors["roberta.embeddings.position_embeddings.weight"]
    assert positions.shape == (12, 8) and not positions[:2].any()
    np.testing.assert_array_equal(positions[2:], backbone.embeddings.position_embedding
                                  .position_embeddings.numpy())
    assert hf_config(backbone)["max_position_embeddings"] == 12


def test_unsupported_family_is_refused(tmp_path):
    albert = keras_hub.models.AlbertBackbone(vocabulary_size=30, num_layers=1, num_heads=2,
                                             embedding_dim=8, hidden_dim=8, intermediate_dim=12,
                                             max_sequence_length=10)
    with pytest.raises(ConfigError, match="AlbertBackbone.*supported backbones are"):
        write_hf_model(albert, str(tmp_path))
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------------------
# Round trips without torch
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["sentence_transformers", "huggingface"])
@pytest.mark.parametrize("pooling", ["mean", "cls", "cls_before_pooler"])
def test_load_encoder_round_trip(tmp_path, encoder, fmt, pooling):
    """load_encoder on the exported directory embeds as the exported encoder did (the
    pooling is passed: load_encoder on this branch reads the transformer, not modules.json)."""
    path = formats.export(encoder, tmp_path / "out", format=fmt, pooling=pooling)
    loaded = load_encoder(path, pooling=pooling, max_seq_length=16)
    assert loaded.activation == "gelu_new"  # the approximate GELU, by its Hugging Face name
    ref = encoder.encode(SENTENCES, pooling=pooling, verbose=0)
    out = loaded.encode(SENTENCES, verbose=0)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_keras_hub_preset_round_trip(tmp_path, encoder):
    path = formats.export(encoder, tmp_path / "kh", format="keras_hub", pooling="mean",
                                     normalize=True)
    backbone = keras_hub.models.Backbone.from_preset(path)
    assert type(backbone) is keras_hub.models.BertBackbone
    for a, b in zip(backbone.weights, encoder.backbone.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    embedder = keras_hub.models.TextEmbedder.from_preset(path)
    assert type(embedder) is keras_hub.models.BertTextEmbedder
    ref = encoder.encode(SENTENCES, normalize=True, verbose=0)
    out = np.asarray(embedder.predict(SENTENCES, verbose=0))
    assert out.shape == ref.shape
    assert cosines(out, ref).min() >= 0.99999
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    loaded = load_encoder(path, pooling="mean", max_seq_length=16)
    np.testing.assert_allclose(loaded.encode(SENTENCES, verbose=0),
                               encoder.encode(SENTENCES, verbose=0), rtol=1e-5, atol=1e-5)


def test_keras_hub_preset_without_text_embedder_for_other_poolings(tmp_path, encoder):
    path = formats.export(encoder, tmp_path / "kh", format="keras_hub",
                                     pooling="first_last_avg")
    assert not os.path.exists(os.path.join(path, "task.json"))
    info = read_metadata(path)
    assert info["text_embedder"] is None and "first_last_avg" in info[
        "text_embedder_missing_because"]
    backbone = keras_hub.models.Backbone.from_preset(path)
    for a, b in zip(backbone.weights, encoder.backbone.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    tokenizer = keras_hub.models.Tokenizer.from_preset(path)
    assert tokenizer.get_vocabulary() == TINY_VOCAB


def test_keras_hub_warns_about_its_gelu(tmp_path, caplog):
    """keras-hub's BertBackbone runs the tanh GELU: exporting an exact-GELU encoder (every
    Hugging Face BERT) says so."""
    enc = tiny_encoder(TINY_VOCAB)
    assert enc.activation == "gelu"
    with caplog.at_level("WARNING"):
        formats.export(enc, tmp_path / "kh", format="keras_hub")
    assert "gelu_approximate" in caplog.text


# --------------------------------------------------------------------------------------
# sentence-transformers' module pipeline, transcribed in NumPy from its forward()s
# --------------------------------------------------------------------------------------

_NP_ACTIVATIONS = {
    "torch.nn.modules.linear.Identity": lambda x: x,
    "torch.nn.modules.activation.ReLU": lambda x: np.maximum(x, 0),
    "torch.nn.modules.activation.Tanh": np.tanh,
}


def st_pipeline_numpy(directory, hidden_states, mask):
    """What SentenceTransformer(directory) computes from the transformer's hidden states
    (index 0 = embedding output) and the attention mask, module by module."""
    from safetensors.numpy import load_file

    token_embeddings, sentence = hidden_states[-1], None
    for module in json.load(open(os.path.join(directory, "modules.json")))[1:]:
        kind = module["type"].rsplit(".", 1)[1]
        path = os.path.join(directory, module["path"])
        config = (json.load(open(os.path.join(path, "config.json")))
                  if os.path.exists(os.path.join(path, "config.json")) else {})
        if kind == "WeightedLayerPooling":
            w = load_file(os.path.join(path, "model.safetensors"))["layer_weights"]
            stacked = np.stack(hidden_states)[config["layer_start"]:]
            token_embeddings = (w[:, None, None, None] * stacked).sum(0) / w.sum()
        elif kind == "Pooling":
            if config["pooling_mode_cls_token"]:
                sentence = token_embeddings[:, 0]
            elif config.get("pooling_mode_lasttoken"):  # the last position the mask keeps
                last = mask.shape[1] - 1 - np.argmax(mask[:, ::-1], axis=1)
                sentence = token_embeddings[np.arange(len(mask)), last]
            else:
                m = mask[:, :, None].astype(np.float32)
                sentence = (token_embeddings * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        elif kind == "Dense":
            t = load_file(os.path.join(path, "model.safetensors"))
            sentence = sentence @ t["linear.weight"].T + t.get("linear.bias", 0.0)
            sentence = _NP_ACTIVATIONS[config["activation_function"]](sentence)
        elif kind == "Normalize":
            sentence = sentence / np.maximum(np.linalg.norm(sentence, axis=1, keepdims=True),
                                             1e-12)
        else:
            raise AssertionError(kind)
    return sentence


@pytest.mark.parametrize("pooling", list(ST_POOLINGS))
@pytest.mark.parametrize("num_layers", [1, 3])
def test_sentence_transformers_modules_compute_tfsent_pooling(tmp_path, pooling, num_layers):
    enc = tiny_encoder(TINY_VOCAB, num_layers=num_layers, hidden_dim=16, max_seq_length=16)
    randomize(enc.backbone, seed=num_layers)
    path = formats.export(enc, tmp_path / "st", format="sentence_transformers",
                                     pooling=pooling)
    features = enc.tokenize(SENTENCES)
    out = enc(features, pooling=pooling, output_hidden_states=True)
    hidden = [h.numpy() for h in out["hidden_states"]]
    got = st_pipeline_numpy(path, hidden, features["padding_mask"].numpy())
    np.testing.assert_allclose(got, out["embedding"].numpy(), rtol=1e-5, atol=1e-6)
    config = json.load(open(os.path.join(path, "config.json")))
    assert config.get("output_hidden_states", False) == (pooling in (
        "first_last_avg", "emb_last_avg", "last2_avg"))


def test_sentence_transformers_head_as_dense_modules(tmp_path, encoder, head):
    path = formats.export(encoder, tmp_path / "st", format="sentence_transformers",
                                     pooling="cls", head=head, normalize=True)
    modules = json.load(open(os.path.join(path, "modules.json")))
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == [
        "Transformer", "Pooling", "Dense", "Dense", "Dense", "Normalize"]
    activations = [json.load(open(os.path.join(path, m["path"], "config.json")))[
        "activation_function"].rsplit(".", 1)[1] for m in modules[2:5]]
    assert activations == ["Tanh", "ReLU", "Identity"]  # pooler, e's hidden, e's output
    features = encoder.tokenize(SENTENCES)
    out = encoder(features, pooling="cls", output_hidden_states=True)
    got = st_pipeline_numpy(path, [h.numpy() for h in out["hidden_states"]],
                            features["padding_mask"].numpy())
    ref = np.array(head(out["embedding"]))
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    info = read_metadata(path)
    assert info["embedding_dim"] == 12 and info["head"] == "MLPEncoder"


def test_sentence_bert_and_tokenizer_configs(tmp_path):
    enc = tiny_encoder(TINY_VOCAB, max_seq_length=16, lowercase=False)
    path = formats.export(enc, tmp_path / "st", format="sentence_transformers",
                                     max_seq_length=12)
    st = json.load(open(os.path.join(path, "sentence_bert_config.json")))
    assert st == {"max_seq_length": 12, "do_lower_case": False}
    tok = json.load(open(os.path.join(path, "tokenizer_config.json")))
    assert tok["do_lower_case"] is False and tok["strip_accents"] is False
    assert open(os.path.join(path, "vocab.txt")).read().splitlines() == TINY_VOCAB
    specials = json.load(open(os.path.join(path, "special_tokens_map.json")))
    assert specials["cls_token"] == "[CLS]" and specials["pad_token"] == "[PAD]"


# --------------------------------------------------------------------------------------
# tokenizer.json against the `tokenizers` library
# --------------------------------------------------------------------------------------

HARD_CASES = ["Café au lait, NAÏVE résumé!", "東京 is in 日本.", "tabs\tand\nnewlines  ",
              "control\x00chars\u200b here", "UPPER lower MiXeD", "don't stop-believing...",
              "", "   ", "emoji 🙂 ok", "x" * 120]
# Hugging Face's BertNormalizer lowercases without NFKC; tfsent's WordPiece tokenizer on this
# branch case-folds with NFKC (keras-hub's pretokenize), so "ﬁ" -> "fi" (the encoder-families
# work replaces that normalisation with BertNormalizer's).
NFKC_CASES = ["ﬁne ligatures and ½ fractions"]


def _wordpiece_tokenizer_json(tmp_path, lowercase):
    from tfsent.encoders import SentenceTokenizer, resolve_short_name

    vocab = os.path.join(resolve_short_name("minilm-l6"), "vocab.txt")
    tok = SentenceTokenizer(vocab, lowercase, lowercase, 512, pad_to_max_length=False)
    path = tmp_path / "tok"
    path.mkdir()
    write_tokenizer_files(tok, str(path), "bert", 512)
    return tok, str(path / "tokenizer.json")


def _corpus():
    from tfsent.data import readers

    return readers.read_sentences(readers.DEMO_SENTENCES)[:500] + HARD_CASES


def test_tokenizer_json_equals_the_checkpoints_own(tmp_path):
    """For all-MiniLM-L6-v2's settings, the tokenizer.json written from tfsent's tokenizer
    tokenizes as the checkpoint's own tokenizer.json (both run by `tokenizers`)."""
    minilm_or_skip()
    from tokenizers import Tokenizer

    from tfsent.encoders import resolve_short_name

    _, path = _wordpiece_tokenizer_json(tmp_path, True)
    mine = Tokenizer.from_file(path)
    theirs = Tokenizer.from_file(os.path.join(resolve_short_name("minilm-l6"),
                                              "tokenizer.json"))
    theirs.no_truncation()
    theirs.no_padding()
    sentences = _corpus() + NFKC_CASES
    assert [e.ids for e in mine.encode_batch(sentences)] == [
        e.ids for e in theirs.encode_batch(sentences)]


@pytest.mark.parametrize("lowercase", [True, False])
def test_tokenizer_json_matches_tfsent_tokenizer(tmp_path, lowercase):
    """tokenizer.json, run by Hugging Face's `tokenizers`, gives tfsent's token ids."""
    minilm_or_skip()
    from tokenizers import Tokenizer

    tok, path = _wordpiece_tokenizer_json(tmp_path, lowercase)
    hf = Tokenizer.from_file(path)
    sentences = _corpus()
    features = tok(sentences)
    ids, mask = features["token_ids"].numpy(), features["padding_mask"].numpy()
    mismatches = [s for s, row, m, enc in zip(sentences, ids, mask, hf.encode_batch(sentences))
                  if list(row[m.astype(bool)]) != enc.ids]
    assert not mismatches, mismatches[:5]


# --------------------------------------------------------------------------------------
# Refusals: a clear error naming the option, and nothing written
# --------------------------------------------------------------------------------------

def _nothing_written(parent, name):
    """Neither `name` nor a hidden staging sibling of it (`.NAME.*`) exists in `parent`."""
    return not os.path.exists(parent / name) and not [
        n for n in os.listdir(parent) if n.startswith(f".{name}.")]


def test_inexpressible_pooling_refused(tmp_path, encoder):
    with pytest.raises(ConfigError) as err:
        formats.export(encoder, tmp_path / "st", format="sentence_transformers",
                                  pooling="mean_no_cls")
    message = str(err.value)
    assert "--pooling=mean_no_cls" in message
    for name in ST_POOLINGS:
        assert name in message
    assert _nothing_written(tmp_path, "st")


def test_existing_directory_refused(tmp_path, encoder):
    target = tmp_path / "st"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="target=.*not an empty directory"):
        formats.export(encoder, target, format="huggingface")
    assert os.listdir(target) == ["keep.txt"]
    # A second export to the same directory refuses too; an empty directory is used.
    empty = tmp_path / "empty"
    empty.mkdir()
    formats.export(encoder, empty, format="huggingface")
    with pytest.raises(ConfigError):
        formats.export(encoder, empty, format="huggingface")
    assert os.path.exists(empty / "model.safetensors")


@pytest.mark.parametrize("layer, message", [
    (keras.layers.Dense(4, activation="softplus"), "activation 'softplus'"),
    (keras.layers.LayerNormalization(), "LayerNormalization"),
])
def test_inexpressible_head_refused(tmp_path, encoder, layer, message):
    layer.build((None, 16))
    with pytest.raises(ConfigError, match=message):
        formats.export(encoder, tmp_path / "st", format="sentence_transformers",
                                  head=layer)
    assert _nothing_written(tmp_path, "st")


@pytest.mark.parametrize("fmt", ["huggingface", "keras_hub"])
def test_head_refused_where_it_has_no_place(tmp_path, encoder, head, fmt):
    with pytest.raises(ConfigError, match=f"format {fmt} cannot carry the export head"):
        formats.export(encoder, tmp_path / "x", format=fmt, head=head)
    assert _nothing_written(tmp_path, "x")


def test_unknown_format_refused(tmp_path, encoder):
    with pytest.raises(ConfigError, match="format=bogus: unknown format"):
        formats.export(encoder, tmp_path / "x", format="bogus")
    with pytest.raises(ConfigError, match="normalize does not apply to format=onnx"):
        formats.export(encoder, tmp_path / "x", format="onnx", normalize=True)
    assert not os.path.exists(tmp_path / "x")


def test_failure_mid_write_leaves_nothing(tmp_path, encoder, monkeypatch):
    import safetensors.numpy

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors.numpy, "save_file", disk_full)
    with pytest.raises(OSError):
        formats.export(encoder, tmp_path / "st", format="sentence_transformers")
    assert _nothing_written(tmp_path, "st")


def test_run_exports_take_the_next_version(tmp_path, encoder):
    """The training CLI's exports: OUTPUT_DIR/export_<format>/<version>, a second run into
    the same directory adds a version (saved_model is the run's own, not written here)."""
    first = formats.export_run_formats(encoder, str(tmp_path), "saved_model,huggingface",
                                       pooling="mean", max_seq_length=16)
    second = formats.export_run_formats(encoder, str(tmp_path), "huggingface")
    assert first == {"huggingface": str(tmp_path / "export_huggingface" / "1")}
    assert second == {"huggingface": str(tmp_path / "export_huggingface" / "2")}
    assert sorted(os.listdir(tmp_path)) == ["export_huggingface"]


def test_config_field_checked_early():
    from tfsent.training.config import build_config

    config = build_config({}, overrides=["export_formats=saved_model,sentence_transformers"])
    assert formats.export_formats(config.export_formats) == ["saved_model",
                                                             "sentence_transformers"]
    with pytest.raises(ConfigError, match="export_formats=bogus: unknown format; valid: "
                                          "tf_saved_model, onnx, litert"):
        build_config({}, overrides=["export_formats=saved_model,bogus"])
    with pytest.raises(ConfigError, match="search_index: the format indexes a corpus"):
        formats.export_formats("saved_model,search_index")
    with pytest.raises(ConfigError, match="--pooling=mean_no_cls"):
        build_config({}, overrides=["export_formats=sentence_transformers",
                                    "export_pooling=mean_no_cls"])


# --------------------------------------------------------------------------------------
# CLIs
# --------------------------------------------------------------------------------------

def _export_cli(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", "tfsent.export", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def test_export_cli_formats(tmp_path, tiny_encoder_dir):
    out = tmp_path / "st"
    r = _export_cli(f"--model={tiny_encoder_dir}", "--format=sentence_transformers",
                    f"--export_dir={out}", "--normalize", "--max_seq_length=12")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == str(out)
    modules = json.load(open(out / "modules.json"))
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["Transformer", "Pooling",
                                                                 "Normalize"]
    assert json.load(open(out / "sentence_bert_config.json"))["max_seq_length"] == 12
    # Refusals before anything is loaded or written: exit 2, the option named.
    r = _export_cli(f"--model={tiny_encoder_dir}", "--format=sentence_transformers",
                    f"--export_dir={tmp_path / 'bad'}", "--pooling=last2_avg_typo")
    assert r.returncode == 2 and "error: --pooling=last2_avg_typo" in r.stderr
    assert not os.path.exists(tmp_path / "bad")
