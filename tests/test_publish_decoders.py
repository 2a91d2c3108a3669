"""The decoder families (qwen3: Qwen3-Embedding, gemma3: EmbeddingGemma) exported as
sentence-transformers and Hugging Face folders, checked by the real clients in ONE peer
process (PyTorch venv): `SentenceTransformer(folder)` gives tfsent's `encode` with and
without the folder's query prompt; `AutoModel` + `AutoTokenizer` on the huggingface folder
give the same pooled hidden states and the same token ids on hard cases (with truncation
too); a folder exported with a `truncate_dim` is cut to it by sentence-transformers. Without
the peer: the written tensors equal the source folder's (the inverse of keras-hub's
converters), config.json gives back the source's settings (Gemma's sliding window as
Hugging Face counts it), and `load_encoder` on the export equals the original."""

import json
import os
import subprocess

import numpy as np
import pytest
from safetensors.numpy import load_file

from hf_decoder_checkpoints import make_embeddinggemma_dir, make_qwen3_embedding_dir
from test_families_qwen3 import HARD
from test_publish_peer import peer_python

from tfsent import formats
from tfsent.encoders import load_encoder
from tfsent.errors import ConfigError

FAMILIES = {"qwen3": make_qwen3_embedding_dir, "gemma3": make_embeddinggemma_dir}
SENTENCES = HARD[1:9]
TRUNCATE = 5  # a length shorter than most hard cases: where the appended token goes
TRUNCATE_DIM = 8  # the qwen3 export's truncate_dim (its embedding: 32)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """{family: {"source", "encoder", "sentence_transformers", "huggingface"}}."""
    out = {}
    for family, make in FAMILIES.items():
        root = tmp_path_factory.mktemp(family)
        source = make(str(root / "source"))
        encoder = load_encoder(source)
        entry = {"source": source, "encoder": encoder}
        for name in ("sentence_transformers", "huggingface"):
            entry[name] = formats.export(encoder, str(root / name), format=name)
        out[family] = entry
    return out


_PEER = r"""
import json, sys
import torch
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoTokenizer

jobs, sentences, hard, truncate, truncated = json.loads(sys.argv[1])
out = {}
for name, path in truncated.items():  # folders declaring truncate_dim
    st = SentenceTransformer(path, device="cpu")
    out[name] = {"truncate_dim": st.truncate_dim, "dimension": st.get_embedding_dimension(),
                 "default": st.encode(sentences, batch_size=4).tolist(),
                 "normalized": st.encode(sentences, batch_size=4,
                                         normalize_embeddings=True).tolist()}
for family, job in jobs.items():
    st = SentenceTransformer(job["sentence_transformers"], device="cpu")
    result = {"modules": [type(m).__name__ for m in st],
              "prompts": st.prompts, "padding_side": st.tokenizer.padding_side,
              "documents": st.encode(sentences, batch_size=4).tolist(),
              "queries": st.encode(sentences, prompt_name="query", batch_size=4).tolist()}
    tokenizer = AutoTokenizer.from_pretrained(job["huggingface"])
    model = AutoModel.from_pretrained(job["huggingface"]).eval()
    result["ids"] = tokenizer(hard)["input_ids"]
    result["ids_truncated"] = tokenizer(hard, truncation=True, max_length=truncate)["input_ids"]
    pooled = []
    with torch.no_grad():
        for text in sentences:  # one at a time: no padding to account for
            states = model(**tokenizer([text], return_tensors="pt")).last_hidden_state[0]
            pooled.append((states[-1] if job["pooling"] == "last_token"
                           else states.mean(0)).tolist())
    result["pooled"] = pooled
    out[family] = result
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def peer(exports, tmp_path_factory):
    python = peer_python()
    jobs = {family: {"sentence_transformers": e["sentence_transformers"],
                     "huggingface": e["huggingface"], "pooling": e["encoder"].pooling}
            for family, e in exports.items()}
    # qwen3 published with a truncate_dim (tests/test_truncate_dim.py: the encoder's own)
    truncated = {"qwen3_truncated": formats.export(
        exports["qwen3"]["encoder"], str(tmp_path_factory.mktemp("truncated") / "st"),
        format="sentence_transformers", truncate_dim=TRUNCATE_DIM)}
    args = json.dumps([jobs, SENTENCES, HARD, TRUNCATE, truncated])
    run = subprocess.run([python, "-c", _PEER, args],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _ids(tokenizer, texts, max_length):
    tok = tokenizer.with_options(max_seq_length=max_length, pad_to_max_length=False)
    features = tok(texts)
    return [[int(t) for t, m in zip(row, mask) if m] for row, mask in
            zip(features["token_ids"].numpy(), features["padding_mask"].numpy())]


@pytest.mark.parametrize("family", FAMILIES)
def test_sentence_transformers_encodes_as_tfsent(exports, peer, family):
    encoder, got = exports[family]["encoder"], peer[family]
    expected_modules = {"qwen3": ["Transformer", "Pooling", "Normalize"],
                        "gemma3": ["Transformer", "Pooling", "Dense", "Dense", "Normalize"]}
    assert got["modules"] == expected_modules[family]
    query = encoder.prompts["query_prompt"]
    assert got["prompts"]["query"] == query
    assert got["padding_side"] == ("left" if family == "qwen3" else "right")
    # one call (one trace): the texts, then prompt + text; L2-normalised, as the folder's
    both = encoder.encode(SENTENCES + [query + s for s in SENTENCES], batch_size=4)
    documents, queries = both[:len(SENTENCES)], both[len(SENTENCES):]
    np.testing.assert_allclose(got["documents"], documents, atol=1e-5)
    np.testing.assert_allclose(got["queries"], queries, atol=1e-5)
    assert np.abs(np.asarray(got["queries"]) - documents).max() > 1e-2  # the prompt counts


def test_sentence_transformers_keeps_the_exported_truncate_dim(exports, peer):
    """SentenceTransformer(folder) takes the export's truncate_dim as its default. It
    cuts its Normalize module's unit vector (norm < 1); tfsent cuts, then normalises: the
    same direction, and `normalize_embeddings=True` gives tfsent's vectors
    (docs/export.md, "A model's own truncate_dim")."""
    encoder, got = exports["qwen3"]["encoder"], peer["qwen3_truncated"]
    assert got["truncate_dim"] == got["dimension"] == TRUNCATE_DIM
    whole = encoder.encode(SENTENCES, batch_size=4, truncate_dim=0)  # unit vectors
    ours = encoder.encode(SENTENCES, batch_size=4, truncate_dim=TRUNCATE_DIM)
    assert ours.shape == (len(SENTENCES), TRUNCATE_DIM)
    np.testing.assert_allclose(got["default"], whole[:, :TRUNCATE_DIM], atol=1e-5)
    norms = np.linalg.norm(got["default"], axis=1)
    assert norms.max() < 0.99
    # renormalising the cut divides the differences by its norm too
    np.testing.assert_allclose(got["normalized"], ours, atol=1e-5 / norms.min())
    print("truncate_dim %d: max abs %.1e (normalized), %.1e (default); cut norms %.2f-%.2f"
          % (TRUNCATE_DIM, np.abs(np.asarray(got["normalized"]) - ours).max(),
             np.abs(np.asarray(got["default"]) - whole[:, :TRUNCATE_DIM]).max(), norms.min(),
             norms.max()))


@pytest.mark.parametrize("family", FAMILIES)
def test_transformers_automodel_pools_as_tfsent(exports, peer, family):
    """The bare transformer (no Dense head, no normalisation): the pooled last hidden
    state of each sentence (the peer's unpadded; tfsent's right-padded, pooled over the
    mask in numpy)."""
    encoder = exports[family]["encoder"]
    features = encoder.tokenizer.with_options(pad_to_max_length=False)(SENTENCES)
    states = encoder(features)["sequence_output"].numpy()
    mask = features["padding_mask"].numpy().astype(np.float32)
    if encoder.pooling == "last_token":
        pooled = states[np.arange(len(mask)), mask.sum(1).astype(int) - 1]
    else:
        pooled = (states * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
    scale = np.abs(pooled).max()  # raw states: measured 9e-6 (qwen3), 1e-6 (gemma3)
    np.testing.assert_allclose(np.asarray(peer[family]["pooled"]) / scale, pooled / scale,
                               atol=5e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_token_ids_equal_the_exported_tokenizer(exports, peer, family):
    tokenizer = exports[family]["encoder"].tokenizer
    assert peer[family]["ids"] == _ids(tokenizer, HARD, 256)
    assert peer[family]["ids_truncated"] == _ids(tokenizer, HARD, TRUNCATE)


@pytest.mark.parametrize("family", FAMILIES)
def test_written_weights_and_config_are_the_source_folders(exports, family):
    """The inverse maps give back the source's tensors bit for bit, and its config.json
    settings (EmbeddingGemma's sliding window as Hugging Face counts it, not keras-hub's
    2 * (w // 2) + 1)."""
    e = exports[family]
    for name in ("sentence_transformers", "huggingface"):
        source = load_file(os.path.join(e["source"], "model.safetensors"))
        written = load_file(os.path.join(e[name], "model.safetensors"))
        assert sorted(written) == sorted(source)
        for key, value in source.items():
            np.testing.assert_array_equal(written[key], value, err_msg=key)
    with open(os.path.join(e["source"], "config.json")) as f:
        source = json.load(f)
    with open(os.path.join(e["huggingface"], "config.json")) as f:
        written = json.load(f)
    keys = ["model_type", "architectures", "vocab_size", "hidden_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
            "rms_norm_eps", "tie_word_embeddings", "eos_token_id", "bos_token_id"]
    if family == "gemma3":
        keys += ["sliding_window", "use_bidirectional_attention", "layer_types",
                 "rope_parameters", "query_pre_attn_scalar", "hidden_activation",
                 "pad_token_id"]
    else:
        keys += ["rope_theta", "hidden_act", "use_sliding_window"]
    assert {k: written[k] for k in keys} == {k: source[k] for k in keys}


@pytest.mark.parametrize("family", FAMILIES)
def test_tfsent_loads_its_export_back(exports, family):
    e = exports[family]
    again = load_encoder(e["sentence_transformers"])
    original = e["encoder"]
    assert (again.family, again.pooling, again.normalize, again.prompts) == (
        original.family, original.pooling, original.normalize, original.prompts)
    features = original.tokenize(SENTENCES)  # the forward itself (encode is traced above)
    np.testing.assert_allclose(again(features)["embedding"].numpy(),
                               original(features)["embedding"].numpy(), atol=1e-6)


def test_prompts_and_normalize_can_be_overridden(exports, tmp_path):
    encoder = exports["qwen3"]["encoder"]
    path = formats.export(encoder, str(tmp_path / "st"), format="sentence_transformers",
                          query_prompt="", document_prompt="passage: ", normalize=False)
    with open(os.path.join(path, "config_sentence_transformers.json")) as f:
        assert json.load(f)["prompts"] == {"document": "passage: "}
    with open(os.path.join(path, "modules.json")) as f:
        assert [m["type"].rsplit(".", 1)[1] for m in json.load(f)] == ["Transformer",
                                                                        "Pooling"]


def test_a_tokenizer_without_its_source_files_is_refused(exports, tmp_path):
    """An encoder whose tokenizer kept no tokenizer.json (saved before tfsent kept it)."""
    encoder = exports["gemma3"]["encoder"]
    kept = encoder.tokenizer.hf_files
    encoder.tokenizer.hf_files = {}
    try:
        with pytest.raises(ConfigError, match="keeps no tokenizer.json"):
            formats.export(encoder, str(tmp_path / "hf"), format="huggingface")
    finally:
        encoder.tokenizer.hf_files = kept


def test_onnx_files_go_with_the_decoder_families(exports, tmp_path):
    """--with_onnx writes onnx/ beside the modules (the graph: tfsent.formats.onnx_decoders;
    sentence-transformers' ONNX backend on the qwen3 folder: tests/test_publish_peer.py)."""
    from tfsent.formats import onnx as onnx_format

    for family, e in exports.items():
        path = formats.export(e["encoder"], str(tmp_path / family),
                              format="sentence_transformers", onnx=True)
        assert sorted(os.listdir(os.path.join(path, "onnx"))) == [onnx_format.ONNX_FILE,
                                                                  onnx_format.INT8_FILE]
    # the graph's own refusals reach the sentence_transformers export; nothing is left
    with pytest.raises(ConfigError, match="cls_before_pooler.*left padding"):
        formats.export(exports["qwen3"]["encoder"], str(tmp_path / "cls"),
                       format="sentence_transformers", pooling="cls_before_pooler", onnx=True)
    assert not os.path.exists(tmp_path / "cls")


def test_a_training_runs_encoder_directory_publishes(exports, tmp_path):
    """What a run's `publish:` line does: a tfsent encoder directory (which keeps the
    source's tokenizer files) exported again gives the same folder contents."""
    from tfsent.encoders.encoder_dir import save_encoder_dir

    e = exports["gemma3"]
    save_encoder_dir(e["encoder"], str(tmp_path / "encoder"))
    again = load_encoder(str(tmp_path / "encoder"))
    path = formats.export(again, str(tmp_path / "hf"), format="huggingface")
    for name in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "config.json"):
        with open(os.path.join(path, name), "rb") as f, \
                open(os.path.join(e["huggingface"], name), "rb") as g:
            assert f.read() == g.read(), name
    written = load_file(os.path.join(path, "model.safetensors"))
    for key, value in load_file(os.path.join(e["huggingface"], "model.safetensors")).items():
        np.testing.assert_array_equal(written[key], value, err_msg=key)
