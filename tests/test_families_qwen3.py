"""The qwen3 family (Qwen3-Embedding): loading a sentence-transformers folder in the real
releases' layout, the in-graph tokenizer against Hugging Face's tokenizer.json, last-token
pooling with either padding side, prompts, and embeddings equal to sentence-transformers'
(peer venv)."""

import json
import os
import subprocess

import numpy as np
import pytest

from hf_decoder_checkpoints import QWEN_PROMPTS, make_qwen3_embedding_dir
from test_publish_peer import peer_python

from tfsent.encoders import load_encoder
from tfsent.encoders.pooling import last_token
from tfsent.errors import ConfigError, InputError

HARD = ["", "Hello world", "  leading spaces", "trailing  ",
        "a  \n\n b\tc\r\nd", "Title\n\nBody", "end!\n\nnext", "one\r\n\r\ntwo",
        "I'M here, you'LL see: they've 12345 apples!", "Café crème, naïve Ångström",
        "東京は日本の首都です。", "The party 🎉😀👍 (really) [ok] {x}", "e\u0301 vs é",
        "(hello) --world-- ...ok", "\u00a0non-breaking\u3000ideographic"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_qwen3_embedding_dir(str(tmp_path_factory.mktemp("qwen3")))


@pytest.fixture(scope="module")
def encoder(folder):
    return load_encoder(folder)


def _ids(features):
    return [[int(t) for t, m in zip(row, mask) if m] for row, mask in
            zip(features["token_ids"].numpy(), features["padding_mask"].numpy())]


def test_folder_settings(encoder):
    assert encoder.family == "qwen3"
    assert encoder.pooling == "last_token" and encoder.normalize
    assert encoder.tokenizer.max_seq_length == 64
    assert encoder.prompts == {"query_prompt": QWEN_PROMPTS["query"], "document_prompt": ""}


@pytest.mark.parametrize("max_length", [None, 5])
def test_tokenizer_equals_tokenizer_json(folder, encoder, max_length):
    from tokenizers import Tokenizer
    reference = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    if max_length:
        reference.enable_truncation(max_length)
    expected = [e.ids for e in reference.encode_batch(HARD)]
    tokenizer = encoder.tokenizer.with_options(max_seq_length=max_length or 256,
                                               pad_to_max_length=False)
    got = _ids(tokenizer(HARD))
    eos = reference.token_to_id("<|endoftext|>")
    assert all(row[-1] == eos for row in got)  # kept when the text is cut
    assert got == expected


def test_pre_tokenization_equals_the_split_pattern(encoder):
    """Word pieces equal `tokenizers`' Split on Qwen's pattern (NFC first, as the folder's
    normalizer) over 3,000 seeded strings of whitespace runs, line breaks, contractions,
    punctuation and Unicode spaces. A run ending in a line break before a word stays whole
    ("\\n\\n" then "Body"): Qwen's `\\s*[\\r\\n]+` comes before `\\s+(?!\\S)`."""
    import random

    from tokenizers import Regex, normalizers, pre_tokenizers

    from hf_decoder_checkpoints import QWEN_PATTERN

    split = pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False)
    nfc = normalizers.NFC()
    pieces = ["a", "Z", "1", "23", "ß", "日", "é", "'s", "'LL", " ", "  ", "\t", "\n", "\r",
              "\r\n", "\n\n", "  \n", "\x0b", "\x0c", "\x85", "\u2028", "\u00a0",
              "\u3000", ".", "!", "?", "(", "-"]
    rng = random.Random(0)
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
             for _ in range(3000)]
    mismatches = []
    for text, words in zip(texts, encoder.tokenizer.pre_tokenize(np.array(texts)).to_list()):
        got = [w.decode("utf-8") for w in words]
        want = [piece for piece, _ in split.pre_tokenize_str(nfc.normalize_str(text))]
        if got != want:
            mismatches.append((text, got, want))
    assert not mismatches, (len(mismatches), mismatches[:3])
    title = encoder.tokenizer.pre_tokenize(np.array(["Title\n\nBody"])).to_list()[0]
    assert [w.decode("utf-8") for w in title] == ["Title", "\n\n", "Body"]


def _edited_copy(folder, tmp_path, **changes):
    import shutil
    copy = shutil.copytree(folder, str(tmp_path / f"copy{len(os.listdir(tmp_path))}"))
    with open(os.path.join(copy, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(copy, "config.json"), "w") as f:
        json.dump({**config, **changes}, f)
    return copy


@pytest.mark.parametrize("changes, message", [
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rotary scaling yarn"),
    ({"rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e6, "factor": 2.0}},
     "rotary scaling dynamic"),
    ({"attention_bias": True}, "attention_bias True"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu'")])
def test_settings_keras_hub_does_not_read_are_refused(folder, tmp_path, changes, message):
    """Rotary scaling (YaRN, Qwen's way past 32k tokens) or attention biases, which
    keras-hub's Qwen3 converter never reads: such a folder would load and compute
    something else, so it is refused before any weight loads, naming config.json."""
    with pytest.raises(ConfigError, match=f"config.json: {message}"):
        load_encoder(_edited_copy(folder, tmp_path, **changes))


def test_untied_base_model_loads(folder, encoder, tmp_path):
    """`tie_word_embeddings: false` in a Qwen3Model file without `lm_head.weight` (a base
    model's safetensors): keras-hub's converter would ask for the LM head, which an
    embedding model never runs; it loads tied, the same embeddings."""
    untied = load_encoder(_edited_copy(folder, tmp_path, tie_word_embeddings=False))
    np.testing.assert_allclose(untied.encode(HARD), encoder.encode(HARD), atol=1e-6)


def test_last_token_pooling_hand_case():
    x = np.arange(2 * 4 * 1, dtype=np.float32).reshape(2, 4, 1)
    right = np.array([[1, 1, 0, 0], [1, 1, 1, 1]])
    left = np.array([[0, 0, 1, 1], [0, 1, 1, 1]])
    np.testing.assert_array_equal(last_token(x, right).numpy()[:, 0], [1.0, 7.0])
    np.testing.assert_array_equal(last_token(x, left).numpy()[:, 0], [3.0, 7.0])


def test_left_and_right_padding_agree(encoder):
    """A causal model with rotary positions: shifting the text right by left padding
    leaves the last token's state unchanged (attention sees relative positions only)."""
    tokenizer = encoder.tokenizer.with_options(pad_to_max_length=False)
    right = tokenizer(["a short one", "a rather longer sentence to pad the other"])
    ids, mask = right["token_ids"].numpy(), right["padding_mask"].numpy()
    n = mask.sum(1)
    left_ids, left_mask = np.full_like(ids, encoder.tokenizer.pad_id), np.zeros_like(mask)
    for i, k in enumerate(n):
        left_ids[i, ids.shape[1] - k:] = ids[i, :k]
        left_mask[i, ids.shape[1] - k:] = 1
    a = encoder({"token_ids": ids, "padding_mask": mask})["embedding"].numpy()
    b = encoder({"token_ids": left_ids, "padding_mask": left_mask})["embedding"].numpy()
    alone = encoder({"token_ids": ids[:1, :n[0]], "padding_mask": mask[:1, :n[0]]})
    np.testing.assert_allclose(a, b, atol=1e-5)
    np.testing.assert_allclose(a[:1], alone["embedding"].numpy(), atol=1e-5)


def test_tfsent_forward_options_refused(encoder):
    """What SCD (per-site dropout), ConSERT (embedding hook, position ids), layer-wise
    poolings, distill's cut students and CMLM-CSE's extractor need: clear errors."""
    from tfsent.encoders.layer_drop import keep_layers
    from tfsent.methods import CMLMCSE

    features = encoder.tokenize(["x", "y z"])
    for kwargs in ({"dropout": 0.1}, {"output_hidden_states": True},
                   {"pooling": "last2_avg"}, {"embedding_fn": lambda x, mask: x},
                   {"position_ids": features["token_ids"] * 0}):
        with pytest.raises(ConfigError, match="keras-hub's forward"):
            encoder(features, **kwargs)
    with pytest.raises(ConfigError, match="student cut .* qwen3 family does not run"):
        keep_layers(encoder, "0")
    with pytest.raises(ConfigError, match="CMLM-CSE's lexical extractor"):
        CMLMCSE(encoder, extractor_layers=1, fusion_layers=1)


def test_pooling_tfsent_lacks_is_refused(tmp_path):
    folder = make_qwen3_embedding_dir(str(tmp_path / "q"))
    path = os.path.join(folder, "1_Pooling", "config.json")
    with open(path) as f:
        config = json.load(f)
    config.update(pooling_mode_lasttoken=False, pooling_mode_max_tokens=True)
    with open(path, "w") as f:
        json.dump(config, f)
    with pytest.raises(InputError, match="pooling_mode_max_tokens is not supported"):
        load_encoder(folder)


_PEER = """
import json, sys
from sentence_transformers import SentenceTransformer
folder, sentences = sys.argv[1], json.loads(sys.argv[2])
model = SentenceTransformer(folder, device="cpu")
assert model.tokenizer.padding_side == "left"
print(json.dumps({"documents": model.encode(sentences, batch_size=4).tolist(),
                  "queries": model.encode(sentences, prompt_name="query").tolist()}))
"""


def test_embeddings_equal_sentence_transformers(folder, encoder):
    """Batches mixing lengths (left padding in sentence-transformers, right in tfsent)."""
    python = peer_python()
    sentences = HARD[:8]
    out = subprocess.run([python, "-c", _PEER, folder, json.dumps(sentences)],
                         capture_output=True, text=True, check=True)
    reference = json.loads(out.stdout.strip().splitlines()[-1])
    documents = encoder.encode(sentences, batch_size=4)
    queries = encoder.encode([encoder.prompts["query_prompt"] + s for s in sentences])
    np.testing.assert_allclose(documents, reference["documents"], atol=1e-4)
    np.testing.assert_allclose(queries, reference["queries"], atol=1e-4)


@pytest.mark.parametrize("method", ["simcse_unsup", "retrieval"])
def test_method_trains_and_export_serves_strings(method, folder, tmp_path):
    """A training step of the method on the tiny Qwen3-Embedding folder (the grid's cell of
    tests/test_families_methods.py), then the SavedModel, served from raw strings in a
    process that imports neither tfsent nor keras-hub, equal to `encode`."""
    from conftest import serve_in_fresh_process
    from test_families_methods import SENTENCES, train_and_export

    path, expected, logs = train_and_export(method, "qwen3", folder, str(tmp_path))
    assert logs["loss"] > 0
    served = serve_in_fresh_process(path, SENTENCES)
    assert served["modules"] == []
    np.testing.assert_allclose(np.array(served["embedding"]), expected, atol=1e-5)


def test_encoder_dir_round_trip(encoder, tmp_path):
    """tfsent's own encoder directory (what training writes) keeps the family, the
    tokenizer, the pooling and the folder's prompts."""
    from tfsent.encoders.encoder_dir import save_encoder_dir

    save_encoder_dir(encoder, str(tmp_path / "enc"))
    again = load_encoder(str(tmp_path / "enc"))
    assert (again.family, again.pooling, again.prompts) == ("qwen3", "last_token",
                                                            encoder.prompts)
    np.testing.assert_allclose(again.encode(HARD), encoder.encode(HARD), atol=1e-6)


def test_saved_model_serves_the_folders_prompts(encoder, tmp_path):
    """The SavedModel takes raw strings; its encode_query prepends the folder's query
    prompt (Qwen3-Embedding's instruction)."""
    import tensorflow as tf

    from tfsent.formats.saved_model import export_encoder

    path = export_encoder(encoder, str(tmp_path / "export"), max_seq_length=64)
    loaded = tf.saved_model.load(path)
    sentences = HARD[:4]
    query = loaded.signatures["encode_query"](sentences=tf.constant(sentences))
    got = next(iter(query.values())).numpy()
    want = encoder.encode([QWEN_PROMPTS["query"] + s for s in sentences], normalize=False)
    np.testing.assert_allclose(got / np.linalg.norm(got, axis=1, keepdims=True),
                               want / np.linalg.norm(want, axis=1, keepdims=True), atol=1e-5)


def test_model_export_writes_onnx(encoder, tmp_path):
    """`model.export(DIR, format="onnx")` (the graph's checks: tests/test_onnx_decoders.py;
    LiteRT and keras-hub exports: tests/test_export_decoders.py)."""
    pytest.importorskip("onnxruntime")
    path = encoder.export(str(tmp_path / "onnx"), format="onnx")
    assert os.path.isfile(os.path.join(path, "model.onnx"))


def test_default_prompt_name_is_read(folder, tmp_path, absl_messages):
    """config_sentence_transformers.json's default_prompt_name (the prompt
    sentence-transformers' encode() prepends when given none): loading says tfsent's
    encode() does not; a name that is not among the prompts is an error naming the file."""
    import shutil

    copy = shutil.copytree(folder, str(tmp_path / "copy"))
    path = os.path.join(copy, "config_sentence_transformers.json")
    with open(path) as f:
        config = json.load(f)
    with open(path, "w") as f:
        json.dump(dict(config, default_prompt_name="query"), f)
    load_encoder(copy)
    said = "\n".join(absl_messages)
    assert "names default_prompt_name 'query'" in said
    assert repr(QWEN_PROMPTS["query"]) in said
    with open(path, "w") as f:
        json.dump(dict(config, default_prompt_name="classification"), f)
    with pytest.raises(InputError, match="config_sentence_transformers.json.*"
                                         "default_prompt_name 'classification' is not one"):
        load_encoder(copy)
