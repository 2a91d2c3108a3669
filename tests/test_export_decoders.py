"""LiteRT (fp32, int8) and keras-hub preset exports of the decoder families (qwen3:
Qwen3-Embedding, gemma3: EmbeddingGemma), on the tiny random folders of
`hf_decoder_checkpoints`.

LiteRT: each family converted once per precision (module fixture), then run as a LiteRT
user runs it: ids and mask from the tokenizer files written beside the model
(transformers' AutoTokenizer, with the padding side those files set: left for
Qwen3-Embedding), one padded batch through ai-edge-litert's Interpreter
(`litert.run_litert`), against `encode` (last-token pooling, Gemma's Dense head and
normalisation included). keras-hub: the preset loads in keras-hub (this process) as its
own `Qwen3TextEmbedder` / `Gemma3TextEmbedder` and gives `encode`'s vectors."""

import os

import keras_hub
import numpy as np
import pytest

import tfsent.encoders.keras_hub_adapter as kh
from hf_decoder_checkpoints import make_embeddinggemma_dir, make_qwen3_embedding_dir
from test_families_qwen3 import HARD

from tfsent import formats
from tfsent.encoders import load_encoder
from tfsent.errors import ConfigError
from tfsent.formats import litert
from tfsent.formats.metadata import read_metadata

FAMILIES = {"qwen3": make_qwen3_embedding_dir, "gemma3": make_embeddinggemma_dir}
SENTENCES = HARD[1:9]


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    """{family: the encoder of its tiny sentence-transformers folder}."""
    return {family: load_encoder(make(str(tmp_path_factory.mktemp(family) / "source")))
            for family, make in FAMILIES.items()}


@pytest.fixture(scope="module")
def expected(encoders):
    """{family: (encode's raw, encode's normalised) embeddings of SENTENCES}: one trace."""
    out = {}
    for family, encoder in encoders.items():
        raw = encoder.encode(SENTENCES, normalize=False, verbose=0)
        out[family] = (raw, raw / np.linalg.norm(raw, axis=1, keepdims=True))
    return out


@pytest.fixture(scope="module")
def litert_exports(encoders, tmp_path_factory):
    """{(family, quantize): export directory}: each family fp32 and int8."""
    pytest.importorskip("ai_edge_litert", reason="needs the tfsent[litert] extra")
    root = tmp_path_factory.mktemp("litert")
    return {(family, quantize): formats.export(encoder, str(root / f"{family}{quantize}"),
                                               format="litert", quantize=quantize)
            for family, encoder in encoders.items() for quantize in ("", "int8")}


def _user_batch(directory, texts):
    """What a LiteRT user feeds: AutoTokenizer on the export's tokenizer files, one batch
    padded to its longest row on the files' padding side."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory)
    ids = tokenizer(texts, truncation=True, padding=True, return_tensors="np")
    return tokenizer.padding_side, ids["input_ids"], ids["attention_mask"]


def _run(directory, ids, mask):
    return litert.run_litert(os.path.join(directory, litert.MODEL_FILE), ids, mask)


def _cosines(a, b):
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _rows(token_ids, padding_mask):
    """The unpadded token-id rows of a batch."""
    return [[int(t) for t, m in zip(row, keep) if m]
            for row, keep in zip(np.asarray(token_ids), np.asarray(padding_mask))]


def _pad(rows, side):
    """(ids, mask) of token-id rows padded with 0 to the longest on `side`."""
    width = max(len(row) for row in rows)
    ids = np.zeros((len(rows), width), np.int32)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
        span = slice(width - len(row), width) if side == "left" else slice(0, len(row))
        ids[i, span], mask[i, span] = row, 1
    return ids, mask


@pytest.mark.parametrize("family", FAMILIES)
def test_exported_tokenizer_files_tokenize_special_strings_as_text(encoders, family,
                                                                   tmp_path):
    """The decoder families' tokenizer files, as every export writes them (the source's,
    with split_special_tokens set): transformers, given no option, tokenizes a special
    token's string inside a text as text, the ids of tfsent's tokenizer (the files as the
    source folder had them, without the setting, map it to the special id)."""
    from transformers import AutoTokenizer

    from tfsent.encoders.huggingface.writing import write_tokenizer_files

    tokenizer = encoders[family].tokenizer
    texts = ["a <|endoftext|> b", "x <bos> y <eos> z <pad>", "plain text"]
    write_tokenizer_files(tokenizer, str(tmp_path), family, 64)
    exported = AutoTokenizer.from_pretrained(str(tmp_path))
    out = tokenizer.with_options(max_seq_length=64, pad_to_max_length=False)(texts)
    ours = _rows(out["token_ids"], out["padding_mask"])
    assert [exported(t)["input_ids"] for t in texts] == ours
    unset = AutoTokenizer.from_pretrained(str(tmp_path), split_special_tokens=False)
    special = 0 if family == "qwen3" else 1  # a text holding one of the family's specials
    assert unset(texts[special])["input_ids"] != ours[special]
    assert unset(texts[2])["input_ids"] == ours[2]


@pytest.mark.parametrize("family", FAMILIES)
def test_litert_fp32_equals_encode(litert_exports, expected, family):
    directory = litert_exports[(family, "")]
    side, ids, mask = _user_batch(directory, SENTENCES)
    assert side == ("left" if family == "qwen3" else "right")
    padded = mask[:, 0] if side == "left" else mask[:, -1]
    assert padded.min() == 0  # some rows are padded, on that side
    out = _run(directory, ids, mask)
    raw, normalized = expected[family]
    scale = np.abs(raw).max()
    assert np.abs(out["embedding"] - raw).max() / scale < 1e-5
    np.testing.assert_allclose(out["embedding_normalized"], normalized, atol=1e-5)
    # The other side gives the same vectors (rotary positions: only distances count).
    other = _pad(_rows(ids, mask), "right" if side == "left" else "left")
    again = _run(directory, *other)["embedding_normalized"]
    np.testing.assert_allclose(again, normalized, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_litert_int8_is_close_and_smaller(litert_exports, expected, family):
    fp32, int8 = litert_exports[(family, "")], litert_exports[(family, "int8")]
    _, ids, mask = _user_batch(int8, SENTENCES)
    got = _run(int8, ids, mask)["embedding_normalized"]
    assert _cosines(got, expected[family][1]).min() >= litert.INT8_PROBE_MIN_COSINE
    assert os.path.getsize(os.path.join(int8, litert.MODEL_FILE)) < 0.6 * os.path.getsize(
        os.path.join(fp32, litert.MODEL_FILE))


@pytest.mark.parametrize("family", FAMILIES)
def test_litert_metadata_records_pooling_padding_and_prompts(encoders, litert_exports,
                                                             family):
    encoder = encoders[family]
    info = read_metadata(litert_exports[(family, "int8")])
    assert (info["format"], info["family"], info["pooling"], info["quantize"]) == (
        "litert", family, encoder.pooling, "int8")
    assert info["padding_side"] == ("left" if family == "qwen3" else "right")
    assert info["query_prompt"] == encoder.prompts["query_prompt"] != ""
    assert info["document_prompt"] == encoder.prompts["document_prompt"]
    assert info["embedding_dim"] == encoder.hidden_dim
    assert info["probe_min_cosine"] >= litert.INT8_PROBE_MIN_COSINE


@pytest.fixture(scope="module")
def presets(encoders, tmp_path_factory):
    """{family: keras_hub export directory} with the encoders' own pooling."""
    root = tmp_path_factory.mktemp("keras_hub")
    return {family: formats.export(encoder, str(root / family), format="keras_hub")
            for family, encoder in encoders.items()}


def test_qwen3_preset_is_keras_hubs_qwen3_text_embedder(encoders, expected, presets):
    """Qwen3TextEmbedder.from_preset: last-token pooling and L2 norm as tfsent's, on the
    ids of tfsent's tokenizer (Qwen3-Embedding's). keras-hub's own preprocessor appends
    <|im_end|> (Qwen3Tokenizer's end token), not the <|endoftext|> Qwen3-Embedding's
    tokenizer appends, so its ids differ in that last token; swapping it back gives
    tfsent's vectors from strings (the workaround docs/families.md gives)."""
    encoder = encoders["qwen3"]
    embedder = keras_hub.models.TextEmbedder.from_preset(presets["qwen3"])
    assert type(embedder) is keras_hub.models.Qwen3TextEmbedder
    assert type(embedder.backbone) is keras_hub.models.Qwen3Backbone
    features = encoder.tokenizer.with_options(pad_to_max_length=False)(SENTENCES)
    got = np.asarray(embedder({"token_ids": features["token_ids"],
                               "padding_mask": features["padding_mask"]}))
    np.testing.assert_allclose(got, expected["qwen3"][1], atol=1e-5)
    info = read_metadata(presets["qwen3"])
    assert info["text_embedder"] == "Qwen3TextEmbedder" and info["normalize"]
    assert info["prompts"]["query"] == encoder.prompts["query_prompt"]
    ours = _rows(features["token_ids"], features["padding_mask"])
    packed = {key: np.asarray(value).astype(np.int32)
              for key, value in embedder.preprocessor(SENTENCES).items()}
    theirs = _rows(packed["token_ids"], packed["padding_mask"])
    vocab = encoder.tokenizer.vocabulary
    end, im_end = vocab["<|endoftext|>"], vocab["<|im_end|>"]
    assert {row[-1] for row in ours} == {end} and {row[-1] for row in theirs} == {im_end}
    assert [row[:-1] for row in theirs] == [row[:-1] for row in ours]
    assert _cosines(np.asarray(embedder(packed)), got).min() < 0.99  # another token pooled
    packed["token_ids"] = np.where(packed["token_ids"] == im_end, end, packed["token_ids"])
    np.testing.assert_allclose(np.asarray(embedder(packed)), got, atol=1e-5)


def test_gemma3_preset_is_embeddinggemma_in_keras_hub(encoders, expected, presets):
    """Gemma3TextEmbedder.from_preset with keras-hub's embedding-model backbone holding
    tfsent's Dense head, strings in through keras-hub's own preprocessor (<bos> ... <eos>,
    padded to the export's length): tfsent's vectors."""
    encoder = encoders["gemma3"]
    embedder = keras_hub.models.TextEmbedder.from_preset(presets["gemma3"])
    assert type(embedder) is keras_hub.models.Gemma3TextEmbedder
    assert embedder.backbone.is_embedding_model
    for kernel, dense in zip(kh.embedding_head_kernels(embedder.backbone),
                             encoder.dense_head.dense):
        np.testing.assert_array_equal(kernel, dense.kernel.numpy())
    got = np.asarray(embedder(embedder.preprocessor(SENTENCES)))  # no predict() trace
    np.testing.assert_allclose(got, expected["gemma3"][1], atol=1e-5)
    info = read_metadata(presets["gemma3"])
    assert info["text_embedder"] == "Gemma3TextEmbedder" and info["embedding_head_in_backbone"]
    with pytest.raises(ConfigError, match="sentence-transformers folder only"):
        load_encoder(presets["gemma3"])  # the round trip is the sentence_transformers export


def test_gemma3_preset_without_a_task_when_keras_hub_cannot_hold_the_head(encoders,
                                                                         tmp_path):
    """last_token pooling before the Dense head: keras-hub's embedding head follows mean
    pooling, so the backbone and tokenizer are written and the metadata says why."""
    path = formats.export(encoders["gemma3"], str(tmp_path / "kh"), format="keras_hub",
                          pooling="last_token")
    assert not os.path.exists(os.path.join(path, "task.json"))
    info = read_metadata(path)
    assert info["text_embedder"] is None
    assert "follows mean pooling" in info["text_embedder_missing_because"]
    backbone = keras_hub.models.Backbone.from_preset(path)
    assert type(backbone) is keras_hub.models.Gemma3Backbone
    assert not backbone.is_embedding_model
    tokenizer = keras_hub.models.Tokenizer.from_preset(path)
    assert tokenizer.token_to_id("<eos>") == 1


def test_new_axis_indexing_is_traced_as_expand_dims():
    """The converter's tracing aid: keys that only add axes become expand_dims at the
    right positions (hand-worked), same values as TensorFlow's own indexing; other keys,
    other threads and the indexing outside the context are TensorFlow's."""
    import threading

    import tensorflow as tf

    full = slice(None)
    assert litert._new_axes((full, None, full, full), 3) == [1]
    assert litert._new_axes((full, None, None, full, full), 3) == [1, 2]
    assert litert._new_axes((Ellipsis, None), 4) == [4]
    assert litert._new_axes((None, Ellipsis, None, full), 2) == [0, 2]
    assert litert._new_axes(None, 2) == [0]
    for other in ((full, 0), (slice(1, None), None), (full, full), (Ellipsis, None, Ellipsis)):
        assert litert._new_axes(other, 3) is None
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    keys = [(slice(None), None, slice(None), slice(None)), (Ellipsis, None),
            (None, Ellipsis, None, slice(None)), (slice(None), 1)]

    @tf.function(input_signature=[tf.TensorSpec([None, None, None], tf.float32)])
    def index(t):
        return [t[key] for key in keys]

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32)])
    def elsewhere(t):
        return t[:, None]

    other_thread_ops = []
    with litert.new_axes_as_expand_dims():
        graph = index.get_concrete_function().graph
        got = index(x)
        # another thread, while the context lasts, indexes as TensorFlow does
        thread = threading.Thread(target=lambda: other_thread_ops.extend(
            op.type for op in elsewhere.get_concrete_function().graph.get_operations()))
        thread.start()
        thread.join()
    assert "StridedSlice" in other_thread_ops and "ExpandDims" not in other_thread_ops
    ops = {op.type for op in graph.get_operations()}
    assert "ExpandDims" in ops and "StridedSlice" in ops  # the last key is TF's own
    for key, value in zip(keys, got):
        np.testing.assert_array_equal(value.numpy(), x[key])
    assert tf.Tensor.__getitem__ is litert._GETITEM
