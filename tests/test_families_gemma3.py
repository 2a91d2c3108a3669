"""The gemma3 family (EmbeddingGemma): loading a sentence-transformers folder in the real
release's layout (Gemma3TextModel, bidirectional attention, mean pooling, two Dense
modules, Normalize, prompts), the in-graph SentencePiece tokenizer against the fast
tokenizer transformers converts from the same model, embeddings equal to
sentence-transformers' (peer venv), training and the SavedModel export."""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from hf_decoder_checkpoints import GEMMA_DENSE, GEMMA_PROMPTS, make_embeddinggemma_dir
from test_families_qwen3 import HARD
from test_publish_peer import peer_python

from tfsent.encoders import load_encoder
from tfsent.errors import ConfigError, InputError

HARD_GEMMA = HARD + ["   ", " a", "x\u200b y", "\x00z", "tab\there", "日本 🎉 12"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_embeddinggemma_dir(str(tmp_path_factory.mktemp("gemma3")))


@pytest.fixture(scope="module")
def encoder(folder):
    return load_encoder(folder)


def _ids(features):
    return [[int(t) for t, m in zip(row, mask) if m] for row, mask in
            zip(features["token_ids"].numpy(), features["padding_mask"].numpy())]


def _copy(folder, tmp_path):
    return shutil.copytree(folder, str(tmp_path / "copy"))


def _edit_json(path, **changes):
    with open(path) as f:
        data = json.load(f)
    data.update(changes)
    with open(path, "w") as f:
        json.dump(data, f)


def test_folder_settings(encoder):
    assert encoder.family == "gemma3"
    assert encoder.pooling == "mean" and encoder.normalize
    assert encoder.backbone.use_bidirectional_attention
    assert not encoder.backbone.is_embedding_model  # the head is tfsent's DenseHead
    assert encoder.tokenizer.max_seq_length == 64
    assert encoder.prompts == {"query_prompt": GEMMA_PROMPTS["query"],
                               "document_prompt": GEMMA_PROMPTS["document"]}
    assert [m["units"] for m in encoder.dense_head.modules] == [GEMMA_DENSE, 32]
    head = {v.path for v in encoder.dense_head.trainable_variables}
    assert head <= {v.path for v in encoder.trainable_variables} and len(head) == 2


@pytest.mark.parametrize("max_length", [None, 5])
def test_tokenizer_equals_fast_tokenizer(folder, encoder, max_length):
    """transformers' GemmaTokenizer (tokenizer.json converted from the same model), with
    truncation as sentence-transformers calls it: <eos> kept at the end of a cut text."""
    from transformers import AutoTokenizer
    reference = AutoTokenizer.from_pretrained(folder)
    kwargs = {"truncation": True, "max_length": max_length} if max_length else {}
    expected = [reference(text, **kwargs)["input_ids"] for text in HARD_GEMMA]
    tokenizer = encoder.tokenizer.with_options(max_seq_length=max_length or 256,
                                               pad_to_max_length=False)
    got = _ids(tokenizer(HARD_GEMMA))
    assert all(row[0] == 2 and row[-1] == 1 for row in got)  # <bos> ... <eos>
    assert got[0] == [2, 1]  # the empty string
    if max_length:
        assert max(len(row) for row in got) == max_length
    assert got == expected


def test_dense_head_hand_case():
    """DenseHead against a hand-computed two-module case (no bias, identity; then bias
    and tanh)."""
    from tfsent.encoders.dense_head import DenseHead

    head = DenseHead([{"units": 2, "use_bias": False, "activation": None},
                      {"units": 1, "use_bias": True, "activation": "tanh"}])
    head.build((None, 2))
    head.set_weights([np.array([[1.0, 2.0], [0.0, -1.0]], np.float32),
                      np.array([[0.5], [1.0]], np.float32), np.array([0.25], np.float32)])
    # x = [1, 3]: first [1*1 + 3*0, 1*2 + 3*-1] = [1, -1]; then tanh(0.5 - 1 + 0.25)
    got = head(np.array([[1.0, 3.0]], np.float32)).numpy()
    np.testing.assert_allclose(got, [[np.tanh(-0.25)]], rtol=1e-6)
    again = DenseHead.from_config(head.get_config())
    assert again.modules == head.modules


_PEER = """
import json, sys
from sentence_transformers import SentenceTransformer
folder, sentences = sys.argv[1], json.loads(sys.argv[2])
model = SentenceTransformer(folder, device="cpu")
print(json.dumps({"documents": model.encode(sentences, batch_size=4).tolist(),
                  "queries": model.encode(sentences, prompt_name="query").tolist(),
                  "named": model.encode(sentences, prompt_name="STS").tolist()}))
"""


def test_embeddings_equal_sentence_transformers(folder, encoder):
    """Without prompts, with the query prompt, with another of the folder's prompts;
    batches mixing lengths (mean over the real tokens, <bos> and <eos> included)."""
    python = peer_python()
    sentences = HARD[:8]
    out = subprocess.run([python, "-c", _PEER, folder, json.dumps(sentences)],
                         capture_output=True, text=True, check=True)
    reference = json.loads(out.stdout.strip().splitlines()[-1])
    documents = encoder.encode(sentences, batch_size=4)
    queries = encoder.encode([encoder.prompts["query_prompt"] + s for s in sentences])
    named = encoder.encode([GEMMA_PROMPTS["STS"] + s for s in sentences])
    np.testing.assert_allclose(documents, reference["documents"], atol=1e-5)
    np.testing.assert_allclose(queries, reference["queries"], atol=1e-5)
    np.testing.assert_allclose(named, reference["named"], atol=1e-5)


def test_method_trains_and_export_serves_strings(folder, tmp_path):
    """A SimCSE-unsup step on the tiny EmbeddingGemma folder (the backbone and the Dense
    head move: `train_and_export` checks that most variables changed), then the
    SavedModel, served from raw strings in a process that imports neither tfsent nor
    keras-hub, equal to `encode`; its encode_query / encode_document prepend the folder's
    prompts."""
    import tensorflow as tf

    from conftest import serve_in_fresh_process
    from test_families_methods import SENTENCES, train_and_export

    path, expected, logs = train_and_export("simcse_unsup", "gemma3", folder, str(tmp_path))
    assert logs["loss"] > 0
    served = serve_in_fresh_process(path, SENTENCES)
    assert served["modules"] == []
    np.testing.assert_allclose(np.array(served["embedding"]), expected, atol=1e-5)
    loaded = tf.saved_model.load(path)
    plain = loaded.signatures["serving_default"]
    for signature, prompt in (("encode_query", GEMMA_PROMPTS["query"]),
                              ("encode_document", GEMMA_PROMPTS["document"])):
        got = loaded.signatures[signature](sentences=tf.constant(SENTENCES))
        want = plain(sentences=tf.constant([prompt + s for s in SENTENCES]))
        assert set(got) == set(want)
        for key in got:
            np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), atol=1e-5)
        assert not np.allclose(got["embedding"].numpy(), served["embedding"], atol=1e-3)


def test_encoder_dir_round_trip(encoder, tmp_path):
    """tfsent's own encoder directory keeps the family, the tokenizer, the Dense head and
    the folder's prompts."""
    from tfsent.encoders.encoder_dir import save_encoder_dir

    save_encoder_dir(encoder, str(tmp_path / "enc"))
    again = load_encoder(str(tmp_path / "enc"))
    assert (again.family, again.pooling, again.prompts) == ("gemma3", "mean",
                                                            encoder.prompts)
    assert again.dense_head.modules == encoder.dense_head.modules
    np.testing.assert_allclose(again.encode(HARD), encoder.encode(HARD), atol=1e-6)


def test_keras_file_round_trip(encoder, tmp_path):
    """`.keras` archives (`Model.save`, Keras' ModelCheckpoint) keep the Dense head and the
    prompts, of the encoder alone and inside a method: the same embeddings back."""
    import keras

    from tfsent.methods import SimCSE

    want = encoder.encode(HARD, normalize=False)
    for model in (encoder, SimCSE(encoder)):
        path = str(tmp_path / f"{model.name}.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
        again = getattr(loaded, "encoder", loaded)
        assert again.prompts == encoder.prompts
        assert again.dense_head.modules == encoder.dense_head.modules
        np.testing.assert_allclose(again.encode(HARD, normalize=False), want, atol=1e-6)


def test_unknown_model_type_is_refused(folder, tmp_path):
    """Gemma3's multimodal model_type (`gemma3`) and an unknown one: errors naming the
    file and the model types tfsent runs."""
    copy = _copy(folder, tmp_path)
    for model_type in ("gemma3", "gemma4_text"):
        _edit_json(os.path.join(copy, "config.json"), model_type=model_type)
        with pytest.raises(ConfigError, match=f"config.json: model_type '{model_type}' is "
                           "not supported; .*gemma3 \\(model_type gemma3_text\\)"):
            load_encoder(copy)


def test_pooling_tfsent_lacks_is_refused(folder, tmp_path):
    copy = _copy(folder, tmp_path)
    _edit_json(os.path.join(copy, "1_Pooling", "config.json"), pooling_mode_mean_tokens=False,
               pooling_mode_max_tokens=True)
    with pytest.raises(InputError, match="1_Pooling.config.json.*pooling_mode_max_tokens is "
                                         "not supported"):
        load_encoder(copy)


def test_settings_keras_hub_fixes_are_refused(folder, tmp_path):
    """A layer layout or rotary base keras-hub's Gemma3Backbone cannot build would load
    and compute something else: refused before any weight loads."""
    copy = _copy(folder, tmp_path)
    path = os.path.join(copy, "config.json")
    with open(path) as f:
        config = json.load(f)
    _edit_json(path, layer_types=["full_attention"] * 6)
    with pytest.raises(ConfigError, match="layer_types .* differ from keras-hub's gemma3"):
        load_encoder(copy)
    rope = json.loads(json.dumps(config["rope_parameters"]))
    rope["sliding_attention"]["rope_theta"] = 50000.0
    _edit_json(path, layer_types=config["layer_types"], rope_parameters=rope)
    with pytest.raises(ConfigError, match="rope_theta 50000.0 of sliding_attention"):
        load_encoder(copy)
    rope = json.loads(json.dumps(config["rope_parameters"]))
    rope["full_attention"].update(rope_type="yarn", factor=4.0)
    _edit_json(path, rope_parameters=rope)
    with pytest.raises(ConfigError, match="config.json: rotary scaling yarn .*gemma3 "
                                          "backbone applies linear scaling"):
        load_encoder(copy)
    _edit_json(path, rope_parameters=config["rope_parameters"], attention_bias=True)
    with pytest.raises(ConfigError, match="config.json: attention_bias True; .* do not "
                                          "read attention_bias"):
        load_encoder(copy)
    _edit_json(path, attention_bias=False, hidden_activation="gelu")
    with pytest.raises(ConfigError, match="config.json: hidden_activation 'gelu'; .* do "
                                          "not read"):
        load_encoder(copy)
    # Queries scaled by 1 / sqrt(query_pre_attn_scalar): keras-hub's blocks apply head_dim
    # only, also where its converter reads hidden_size / num_attention_heads (Gemma 3 27B's
    # 168; here 8 against head_dim 16).
    per_head = config["hidden_size"] // config["num_attention_heads"]
    assert per_head != config["head_dim"]
    for scalar in (per_head, config["head_dim"] + 1):
        _edit_json(path, hidden_activation=config["hidden_activation"],
                   query_pre_attn_scalar=scalar)
        with pytest.raises(ConfigError, match=f"config.json: query_pre_attn_scalar {scalar}; "
                                              r".* 1 / sqrt\(head_dim\) \(16\) only"):
            load_encoder(copy)
    # keras-hub gives rms_norm_eps to the final norm only (its blocks keep 1e-6).
    _edit_json(path, query_pre_attn_scalar=config["head_dim"], rms_norm_eps=1e-5)
    with pytest.raises(ConfigError, match="config.json: rms_norm_eps 1e-05; .* runs only "
                                          "1e-06 .its blocks do not read rms_norm_eps"):
        load_encoder(copy)


def test_linear_rope_scaling_applies(folder, encoder, tmp_path):
    """Linear rotary scaling on the full-attention layers (Gemma 3's larger releases'
    `rope_scaling`), which keras-hub applies: it loads, and the positions change."""
    copy = _copy(folder, tmp_path)
    _edit_json(os.path.join(copy, "config.json"),
               rope_scaling={"rope_type": "linear", "factor": 8.0})
    scaled = load_encoder(copy)
    assert not np.allclose(scaled.encode(HARD[1:4]), encoder.encode(HARD[1:4]), atol=1e-4)


def test_bad_dense_module_is_refused(folder, tmp_path):
    copy = _copy(folder, tmp_path)
    _edit_json(os.path.join(copy, "2_Dense", "config.json"),
               activation_function="torch.nn.modules.activation.Softsign")
    with pytest.raises(InputError, match="2_Dense.config.json.*Softsign.* is not supported"):
        load_encoder(copy)


def test_model_export_writes_onnx(encoder, tmp_path):
    """`model.export(DIR, format="onnx")` (the graph's checks: tests/test_onnx_decoders.py;
    LiteRT and keras-hub exports: tests/test_export_decoders.py)."""
    pytest.importorskip("onnxruntime")
    path = encoder.export(str(tmp_path / "onnx"), format="onnx")
    assert os.path.isfile(os.path.join(path, "model.onnx"))


def test_dense_head_refused_for_a_family_with_its_own_forward(folder, tmp_path):
    """A BERT sentence-transformers folder with a Dense module after mean pooling: tfsent's
    own forward has no Dense head, so the load stops with an error naming the module."""
    from hf_checkpoints import make_sentence_transformers_dir

    path = make_sentence_transformers_dir("bert", str(tmp_path / "st"), pooling="mean")
    shutil.copytree(os.path.join(folder, "2_Dense"), os.path.join(path, "2_Dense"))
    modules_path = os.path.join(path, "modules.json")
    with open(modules_path) as f:
        modules = json.load(f)
    modules = [m for m in modules if not m["type"].endswith("Normalize")]
    modules.append({"idx": len(modules), "name": str(len(modules)), "path": "2_Dense",
                    "type": "sentence_transformers.models.Dense"})
    with open(modules_path, "w") as f:
        json.dump(modules, f)
    with pytest.raises(InputError, match="Dense module .*2_Dense is not supported for the "
                                         "bert family"):
        load_encoder(path)


def test_distill_student_cut_is_refused(folder, tmp_path):
    """distill with `student_layers` (a student cut from the folder, its own teacher):
    keras-hub's forward has no layer cut, so a ConfigError names the family (the folder's
    layer count is read from its config.json, not tfsent's weight map)."""
    from test_families_methods import train_and_export

    with pytest.raises(ConfigError, match="student cut from some of the layers .* gemma3 "
                                          "family does not run"):
        train_and_export("distill", "gemma3", folder, str(tmp_path), export=False)


def test_tokenizers_survive_set_random_seed(encoder, tmp_path):
    """keras.utils.set_random_seed clears TF's eager kernels; the SentencePiece model's
    resource is named, so a tokenizer made before (and its traced encode) still runs:
    Gemma's and XLM-R's."""
    import keras

    from hf_checkpoints import make_tiny_checkpoint

    xlmr = load_encoder(make_tiny_checkpoint("xlm-roberta", str(tmp_path / "xlmr")))
    before = [e.encode(HARD[:3]) for e in (encoder, xlmr)]
    keras.utils.set_random_seed(3)
    for e, b in zip((encoder, xlmr), before):
        np.testing.assert_array_equal(e.encode(HARD[:3]), b)
