"""The onnx format for the decoder families (qwen3: Qwen3-Embedding, gemma3: EmbeddingGemma;
`tfsent.formats.onnx_decoders`): ONNX Runtime in a fresh process, tokenizing with the
exported Hugging Face files through `transformers.AutoTokenizer` (Qwen's left padding,
Gemma's right), gives `encode`'s vectors on hard cases (fp32 cosine >= 0.9999, int8 >= 0.97);
in process, `last_hidden_state` is the backbone's sequence output at every real position,
each pooling the family allows is the forward's, a Gemma3 with causal attention and its
sliding window shorter than the text converts too, an empty batch gives (0, dim), and
inner-layer poolings are refused. sentence-transformers' ONNX backend on a --with_onnx
folder: tests/test_publish_peer.py."""

import json
import os

import numpy as np
import pytest

from hf_decoder_checkpoints import make_embeddinggemma_dir, make_qwen3_embedding_dir
from test_families_qwen3 import HARD
from test_onnx_export import (BATCHES, FP32_MIN, INT8_MIN, _cos, export_onnx_by_cli,
                              run_ort_client)

from tfsent import formats
from tfsent.encoders import load_encoder
from tfsent.encoders.huggingface import decoders
from tfsent.errors import ConfigError

ort = pytest.importorskip("onnxruntime")
from tfsent.formats import onnx as onnx_format  # noqa: E402

FAMILIES = {"qwen3": make_qwen3_embedding_dir, "gemma3": make_embeddinggemma_dir}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """{family: (source folder, encoder)}."""
    root = tmp_path_factory.mktemp("decoder_sources")
    out = {}
    for family, make in FAMILIES.items():
        source = make(str(root / family))
        out[family] = (source, load_encoder(source))
    return out


@pytest.fixture(scope="module")
def served(sources, tmp_path_factory):
    """{family: (export dir, encode's vectors per batch)} and the ORT client's output: qwen3
    exported through the command line, gemma3 through formats.export, both with int8."""
    root = tmp_path_factory.mktemp("decoder_onnx")
    cases = {}
    for family, (source, encoder) in sources.items():
        target = str(root / family)
        if family == "qwen3":
            export_onnx_by_cli(source, target)
        else:
            formats.export(encoder, target, format="onnx", quantize=("int8",))
        cases[family] = (target, [encoder.encode(b, normalize=False) for b in BATCHES])
    return cases, run_ort_client([d for d, _ in cases.values()], root)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_onnx_runtime_gives_encode_vectors(served, family):
    cases, out = served
    directory, refs = cases[family]
    with open(os.path.join(directory, "tfsent_export.json"), encoding="utf-8") as f:
        info = json.load(f)
    assert info["files"] == [onnx_format.ONNX_FILE, onnx_format.INT8_FILE]
    assert info["inputs"] == ["input_ids", "attention_mask"]
    with open(os.path.join(directory, "tokenizer_config.json"), encoding="utf-8") as f:
        side = json.load(f)["padding_side"]  # what the client's AutoTokenizer pads with
    assert side == {"qwen3": "left", "gemma3": "right"}[family]
    for name, floor in ((onnx_format.ONNX_FILE, FP32_MIN), (onnx_format.INT8_FILE, INT8_MIN)):
        for ref, got in zip(refs, out[f"{directory}|{name}"]):
            got = np.asarray(got)
            assert got.shape == ref.shape
            assert _cos(got, ref).min() >= floor, (family, name, _cos(got, ref))
            if name == onnx_format.ONNX_FILE:
                np.testing.assert_allclose(got, ref, atol=1e-4)
    assert out["modules"] == []  # the client imported neither tfsent nor tensorflow


def _feeds(encoder, texts):
    tokenizer = encoder.tokenizer.with_options(max_seq_length=encoder.clamp_length(None),
                                               pad_to_max_length=False)
    features = tokenizer(np.array(texts))
    feeds = {"input_ids": features["token_ids"].numpy().astype(np.int64),
             "attention_mask": features["padding_mask"].numpy().astype(np.int64)}
    return features, feeds


def _check_graph(encoder, path, texts, pooling=None):
    """The ONNX file at `path` against the encoder's forward on `texts`."""
    features, feeds = _feeds(encoder, texts)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    emb, normalized, states = session.run(
        ["embedding", "embedding_normalized", "last_hidden_state"], feeds)
    ref = encoder({"token_ids": features["token_ids"],
                   "padding_mask": features["padding_mask"]}, pooling=pooling)
    real = feeds["attention_mask"].astype(bool)
    np.testing.assert_allclose(states[real], ref["sequence_output"].numpy()[real], atol=1e-4)
    pooled = ref["embedding"].numpy()
    np.testing.assert_allclose(emb, pooled, atol=1e-4)
    assert _cos(emb, pooled).min() >= FP32_MIN
    np.testing.assert_allclose(normalized, pooled / np.linalg.norm(pooled, axis=1,
                                                                   keepdims=True), atol=1e-5)
    empty = {name: np.zeros((0, 0), np.int64) for name in feeds}
    assert session.run(["embedding"], empty)[0].shape == (0, pooled.shape[1])
    return feeds


@pytest.mark.parametrize("family", list(FAMILIES))
def test_token_states_and_poolings(sources, family, tmp_path):
    """Poolings of the last states; qwen3 (left-padded by its tokenizer files) refuses those
    reading position 0, every family those over inner layers."""
    _, encoder = sources[family]
    allowed = ("last_token", "mean") + (("cls_before_pooler",) if family == "gemma3" else ())
    for pooling in allowed:
        path = onnx_format.write_onnx_model(encoder, str(tmp_path / f"{pooling}.onnx"),
                                            pooling=pooling)
        _check_graph(encoder, path, HARD, pooling)
    refused = {"first_last_avg": "inner layers", "last2_avg": "inner layers"}
    if family == "qwen3":
        refused.update(cls_before_pooler="left padding", mean_no_cls="left padding")
    for pooling, why in refused.items():
        with pytest.raises(ConfigError, match=f"{pooling}.*{why}"):
            onnx_format.write_onnx_model(encoder, str(tmp_path / "refused.onnx"),
                                         pooling=pooling)
    assert not (tmp_path / "refused.onnx").exists()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_last_non_pad_reads_the_rightmost_real_non_pad_token(sources, family, tmp_path):
    """The cross-encoders' pooling as ONNX nodes: each row's state at the rightmost position
    that is unmasked and not the pad id (NumPy below, independent of tfsent's pooling; qwen3
    closes each text with its pad token, so the token before it), and a (0, 0) batch in."""
    _, encoder = sources[family]
    path = onnx_format.write_onnx_model(encoder, str(tmp_path / "last_non_pad.onnx"),
                                        pooling=onnx_format.LAST_NON_PAD)
    _, feeds = _feeds(encoder, HARD)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    emb, states = session.run(["embedding", "last_hidden_state"], feeds)
    pad_id = encoder.tokenizer.pad_id
    expected = []
    for row, (ids, mask) in enumerate(zip(feeds["input_ids"], feeds["attention_mask"])):
        real = [i for i in range(len(ids)) if mask[i] and ids[i] != pad_id]
        expected.append(states[row, real[-1] if real else 0])
    np.testing.assert_allclose(emb, np.stack(expected), atol=1e-6)
    empty = {name: np.zeros((0, 0), np.int64) for name in feeds}
    assert session.run(["embedding"], empty)[0].shape == (0, emb.shape[1])


def test_a_model_past_the_protobuf_limit_keeps_its_weights_beside_it(sources, tmp_path,
                                                                     monkeypatch):
    """Weights past EXTERNAL_DATA_BYTES (set to 0 here; 1.8 GB in use: Qwen3-Embedding-0.6B
    is 2.4 GB in fp32) go to model.onnx_data (the int8 file's to the quantizer's own file);
    onnxruntime reads both from the folder."""
    monkeypatch.setattr(onnx_format, "EXTERNAL_DATA_BYTES", 0)
    _, encoder = sources["qwen3"]
    path = formats.export(encoder, str(tmp_path / "big"), format="onnx", quantize=("int8",))
    files = json.load(open(os.path.join(path, "tfsent_export.json"), encoding="utf-8"))["files"]
    assert files[:3] == [onnx_format.ONNX_FILE, onnx_format.INT8_FILE, "model.onnx_data"]
    assert len(files) == 4 and files[3].startswith(onnx_format.INT8_FILE)
    assert sorted(files) == sorted(n for n in os.listdir(path) if n.startswith("model"))
    assert os.path.getsize(os.path.join(path, onnx_format.ONNX_FILE)) < 100_000
    _check_graph(encoder, os.path.join(path, onnx_format.ONNX_FILE), HARD)
    features, feeds = _feeds(encoder, HARD)
    session = ort.InferenceSession(os.path.join(path, onnx_format.INT8_FILE),
                                   providers=["CPUExecutionProvider"])
    ref = encoder({"token_ids": features["token_ids"],
                   "padding_mask": features["padding_mask"]})["embedding"].numpy()
    assert _cos(session.run(["embedding"], feeds)[0], ref).min() >= INT8_MIN


def test_settings_the_graph_would_get_wrong_are_refused(sources, tmp_path):
    """A Gemma3 backbone with soft-capping: refused before any file is written."""
    _, encoder = sources["gemma3"]
    backbone = encoder.backbone
    kept = backbone.attention_logit_soft_cap
    backbone.attention_logit_soft_cap = 50.0
    try:
        with pytest.raises(ConfigError, match="soft-capping"):
            formats.export(encoder, str(tmp_path / "capped"), format="onnx")
    finally:
        backbone.attention_logit_soft_cap = kept
    assert not (tmp_path / "capped").exists()


def test_the_query_scale_is_the_blocks_own(sources):
    """keras-hub's Gemma3 blocks scale queries by 1 / sqrt(head_dim) whatever the
    backbone's `query_head_dim_normalize` says: the written config.json (which the graph
    reads) says head_dim either way. A backbone whose final norm's epsilon is not its
    blocks' has no config.json: refused."""
    _, encoder = sources["gemma3"]
    backbone = encoder.backbone
    ids = decoders.special_ids(encoder.tokenizer)
    assert backbone.head_dim != backbone.hidden_dim // backbone.num_query_heads
    kept = backbone.query_head_dim_normalize
    try:
        for flag in (True, False):
            backbone.query_head_dim_normalize = flag
            config, _ = decoders.decoder_checkpoint(backbone, ids)
            assert config["query_pre_attn_scalar"] == backbone.head_dim
    finally:
        backbone.query_head_dim_normalize = kept
    # One rms_norm_eps in config.json; keras-hub's blocks keep 1e-6 whatever the backbone's.
    kept = backbone.layer_norm_epsilon
    backbone.layer_norm_epsilon = 1e-5
    try:
        with pytest.raises(ConfigError, match=r"final norm's epsilon \(1e-05\) differs from "
                                              r"its blocks' \(1e-06"):
            decoders.decoder_checkpoint(backbone, ids)
    finally:
        backbone.layer_norm_epsilon = kept


def test_gemma3_causal_attention_and_a_short_window(tmp_path):
    """A Gemma3 (not EmbeddingGemma) config: causal attention, Hugging Face's sliding window
    of 8 on the sliding layers, texts of up to ~30 tokens (so the window cuts)."""
    source = make_embeddinggemma_dir(str(tmp_path / "gemma3"), seed=3)
    path = os.path.join(source, "config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    assert config["sliding_window"] == 8 and "sliding_attention" in config["layer_types"]
    config["use_bidirectional_attention"] = False
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    encoder = load_encoder(source)
    assert not encoder.backbone.use_bidirectional_attention
    model = onnx_format.write_onnx_model(encoder, str(tmp_path / "causal.onnx"))
    feeds = _check_graph(encoder, model, HARD)
    assert feeds["attention_mask"].sum(1).max() > 16  # longer than the window both ways
