"""Qwen3ForSequenceClassification and Gemma3TextForSequenceClassification: the
sequence-classification head of decoder rerankers (a Qwen3-Reranker converted to it, a
cross-encoder fine-tuned from Qwen3-Embedding or EmbeddingGemma with sentence-transformers /
transformers), read as it is and published by tfsent.

Its head (`score`, a Dense(1) without bias) reads the rightmost token that is not
config.json's pad token (transformers' GenericForSequenceClassification); tfsent's
`pooling.last_non_pad` against an independent NumPy transcription and by hand; folders read
by `reranker_from_checkpoint` against transformers itself (the peer venv, both padding
sides; the converted reranker with the model card's prompt written out here; a Gemma3 one
written by transformers' own save_pretrained); qwen3 and gemma3 CrossEncoders published as
`cross_encoder_hf` scored by sentence-transformers' CrossEncoder and transformers (one peer
subprocess for the module); the refusals."""

import json
import os
import subprocess

import numpy as np
import pytest

from tfsent.errors import ConfigError, InputError

PAIRS = [("what is it", "a doc here"),
         ("where is the dog", "a dog is here and the dog stays " * 8),  # truncated at 32
         ("q", "y"),
         ("", "an empty query"),
         ("an empty passage", ""),
         ("Café crème à la française", "東京は日本の首都です。 emoji 😀")]
# The model card's prompt of the converted reranker, written out independently of
# tfsent.encoders.pair_prompts (the user formats it around each pair).
PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on "
          "the Query and the Instruct provided. Note that the answer can only be \"yes\" or "
          "\"no\".<|im_end|>\n<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"

PEER_SCRIPT = r"""
import json, os, shutil, sys
import torch
from sentence_transformers import CrossEncoder
from transformers import AutoModelForSequenceClassification, AutoTokenizer
torch.set_num_threads(1)
jobs, out = json.load(open(sys.argv[1], encoding="utf-8")), {}
for name, job in jobs.items():
    if "make_from" in job:  # a reranker as transformers writes one: base model + new head
        torch.manual_seed(0)
        hf = AutoModelForSequenceClassification.from_pretrained(job["make_from"],
                                                                num_labels=1).eval()
        torch.nn.init.normal_(hf.score.weight, std=0.5)  # far from its initial scale
        hf.save_pretrained(job["dir"])
        AutoTokenizer.from_pretrained(job["make_from"]).save_pretrained(job["dir"])
        # Gemma's tokenizer.model, which a hub checkpoint ships and this venv (no
        # sentencepiece) does not write back
        model_file = os.path.join(job["make_from"], "tokenizer.model")
        if os.path.exists(model_file):
            shutil.copy(model_file, job["dir"])
    hf = AutoModelForSequenceClassification.from_pretrained(job["dir"]).eval()
    tokenizer = AutoTokenizer.from_pretrained(job["dir"])
    result = {"architecture": type(hf).__name__, "pad": hf.config.pad_token_id}
    for side in ("left", "right"):
        tokenizer.padding_side = side
        if "texts" in job:  # the converted reranker: one formatted text a pair
            features = tokenizer(job["texts"], padding=True, return_tensors="pt")
        else:
            features = tokenizer([p[0] for p in job["pairs"]], [p[1] for p in job["pairs"]],
                                 padding=True, truncation="longest_first",
                                 max_length=job.get("max_length"), return_tensors="pt")
        with torch.no_grad():
            result["hf_" + side] = hf(**features).logits[:, 0].tolist()
    if job.get("st"):
        model = CrossEncoder(job["dir"])
        result["st"] = model.predict([tuple(p) for p in job["pairs"]], batch_size=4,
                                     convert_to_numpy=True).tolist()
        result["max_length"] = model.max_seq_length
    out[name] = result
json.dump(out, sys.stdout)
"""


def _hf_rule(hidden, ids, pad_id):
    """transformers' GenericForSequenceClassification position, transcribed: the argmax of
    position x (id != pad), over the ids alone."""
    non_pad = (ids != pad_id).astype(np.int64)
    position = (np.arange(ids.shape[1])[None, :] * non_pad).argmax(-1)
    return hidden[np.arange(len(ids)), position]


def test_last_non_pad_by_hand_and_against_the_transcription():
    """Rows (pad id 9; mask 0 marks padding): `1 2 9 3 9 | 9` reads the 3 (position 3:
    neither the closing 9 nor the padding); `9 9 | 5 6 9 | 7` reads the 6 (position 3: a
    masked position never counts, whatever its id); a row of pad ids reads position 0 (as
    Hugging Face's argmax of zeros). Random rows, padded with the pad id as tokenizers
    pad, equal the transcription."""
    import tensorflow as tf

    from tfsent.encoders.pooling import last_non_pad

    hidden = np.arange(2 * 3 * 6, dtype=np.float32).reshape(3, 6, 2)
    ids = np.array([[1, 2, 9, 3, 9, 9], [9, 9, 5, 6, 9, 7], [9, 9, 9, 9, 9, 9]], np.int32)
    mask = np.array([[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]], np.int32)
    got = last_non_pad(tf.constant(hidden), tf.constant(ids), tf.constant(mask), 9).numpy()
    np.testing.assert_array_equal(got, hidden[[0, 1, 2], [3, 3, 0]])
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 4, (16, 12)).astype(np.int32)  # pad id 0: a quarter of the ids
    lengths = rng.integers(1, 13, 16)
    mask = (np.arange(12)[None, :] < lengths[:, None]).astype(np.int32)
    ids = np.where(mask == 1, ids, 0)  # padding carries the pad id, as a tokenizer's
    hidden = rng.standard_normal((16, 12, 5)).astype(np.float32)
    np.testing.assert_array_equal(
        last_non_pad(tf.constant(hidden), tf.constant(ids), tf.constant(mask), 0).numpy(),
        _hf_rule(hidden, ids, 0))
    empty = last_non_pad(tf.zeros([0, 0, 5]), tf.zeros([0, 0], tf.int32),
                         tf.zeros([0, 0], tf.int32), 0)
    assert empty.shape == (0, 5)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Qwen3ForSequenceClassification folders: "converted" (a Qwen3-Reranker's tokenizer),
    "finetuned" (a Qwen3-Embedding's, appending <|endoftext|>); the embedding folders to
    publish cross-encoders of: "qwen3" (Qwen3-Embedding), "gemma3" (EmbeddingGemma: its
    attention bidirectional); "made_gemma3", where the peer writes its reranker."""
    from hf_decoder_checkpoints import (make_embeddinggemma_dir, make_qwen3_embedding_dir,
                                        make_qwen3_seq_cls_dir)

    root = tmp_path_factory.mktemp("decoder_seq_cls")
    return {"converted": make_qwen3_seq_cls_dir(str(root / "converted"), seed=3),
            "finetuned": make_qwen3_seq_cls_dir(str(root / "finetuned"), seed=4,
                                                reranker=False),
            "qwen3": make_qwen3_embedding_dir(str(root / "qwen3"), seed=5),
            "gemma3": make_embeddinggemma_dir(str(root / "gemma3"), seed=6),
            "made_gemma3": str(root / "made_gemma3")}


@pytest.fixture(scope="module")
def published(folders, tmp_path_factory):
    """{family: (the CrossEncoder, its `cross_encoder_hf` folder)}: a cross-encoder on the
    family's embedding folder (pairs cut at 32 tokens), its backbone and head drawn at
    random around their scale (test_publish_peer.randomize)."""
    from test_publish_cross_encoder import _has_onnx
    from test_publish_peer import randomize

    from tfsent.encoders import load_encoder
    from tfsent.methods import CrossEncoder

    out = {}
    for seed, family in enumerate(("qwen3", "gemma3")):
        model = CrossEncoder(load_encoder(folders[family], max_seq_length=32), seed=0)
        randomize(model.encoder.backbone, seed=seed + 1)
        randomize(model.score_head, seed=seed + 11)
        out[family] = model, model.export(str(tmp_path_factory.mktemp("published") / family),
                                          format="cross_encoder_hf", onnx=_has_onnx())
    return out


@pytest.fixture(scope="module")
def peer_out(folders, published, tmp_path_factory):
    """transformers' (both padding sides) and sentence-transformers' scores, one peer
    subprocess: {"converted", "finetuned", "published": {...}}."""
    from test_publish_peer import peer_python

    texts = [f"{PREFIX}<Instruct>: {INSTRUCTION}\n<Query>: {q}\n<Document>: {d}{SUFFIX}"
             for q, d in PAIRS]
    jobs = {"converted": {"dir": folders["converted"], "texts": texts},
            "finetuned": {"dir": folders["finetuned"], "pairs": PAIRS},
            "made_gemma3": {"make_from": folders["gemma3"], "dir": folders["made_gemma3"],
                            "pairs": PAIRS}}
    for family, (_, path) in published.items():
        jobs[f"published:{family}"] = {"dir": path, "pairs": PAIRS, "max_length": 32,
                                       "st": True}
    jobs_file = tmp_path_factory.mktemp("peer") / "jobs.json"
    jobs_file.write_text(json.dumps(jobs, ensure_ascii=False), encoding="utf-8")
    r = subprocess.run([peer_python(), "-c", PEER_SCRIPT, str(jobs_file)],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="1",
                                TOKENIZERS_PARALLELISM="false"))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def _queries_passages():
    return [p[0] for p in PAIRS], [p[1] for p in PAIRS]


def test_folders_read_as_they_are_score_as_transformers(folders, peer_out):
    """`reranker_from_checkpoint`: the converted reranker with `prompt="qwen3_reranker"`
    (its `score` read into the prompted head; nothing appended), the fine-tuned one as it
    is (its pair template `a <|endoftext|> b <|endoftext|>`, the head on the passage's last
    token), the Gemma3 one transformers wrote (`<bos> a <eos> <bos> b <eos>`, the head on
    the closing `<eos>`): transformers' logits, left and right padding alike."""
    from tfsent.evaluation.rerank import checkpoint_reranker
    from tfsent.methods.cross_encoder import reranker_from_checkpoint

    queries, passages = _queries_passages()
    for name, prompt, head in (("converted", "qwen3_reranker", "linear"),
                               ("finetuned", None, "score"), ("made_gemma3", None, "score")):
        assert checkpoint_reranker(folders[name], prompt or "")
        model = reranker_from_checkpoint(folders[name], prompt=prompt)
        assert model.head_kind == head and model.score_head.bias is None
        assert model.read_hf_head(folders[name]) == ["score"]
        got = model.score(queries, passages, batch_size=4)
        assert peer_out[name]["architecture"] == {"made_gemma3": "Gemma3TextFor"}.get(
            name, "Qwen3For") + "SequenceClassification"
        for side in ("left", "right"):
            np.testing.assert_allclose(got, peer_out[name][f"hf_{side}"], atol=5e-5,
                                       err_msg=(name, side))
        assert np.ptp(got) > 0.01


@pytest.mark.parametrize("family", ["qwen3", "gemma3"])
def test_published_folder_is_the_familys_sequence_classifier(family, published, peer_out):
    """config.json: Qwen3ForSequenceClassification / Gemma3TextForSequenceClassification,
    one label, pad_token_id the tokenizer's pad; model.safetensors: the backbone under
    `model.`, `score.weight` (no bias); no chat template; sentence-transformers'
    CrossEncoder.predict and transformers give tfsent's scores (truncation at 32
    included), and tfsent reads the folder back to the same."""
    from safetensors.numpy import load_file

    from tfsent.encoders import families
    from tfsent.formats import read_metadata
    from tfsent.methods.cross_encoder import reranker_from_checkpoint

    model, path = published[family]
    config = json.load(open(os.path.join(path, "config.json"), encoding="utf-8"))
    assert config["architectures"] == [families.TABLE[family].hf_sequence_classification[0]]
    assert len(config["id2label"]) == 1
    assert config["pad_token_id"] == model.encoder.tokenizer.pad_id
    tensors = load_file(os.path.join(path, "model.safetensors"))
    np.testing.assert_array_equal(tensors["score.weight"], model.score_head.kernel.numpy().T)
    assert "score.bias" not in tensors and "model.embed_tokens.weight" in tensors
    settings = json.load(open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8"))
    assert "chat_template" not in settings
    assert not os.path.exists(os.path.join(path, "chat_template.jinja"))
    assert (read_metadata(path)["head_kind"], read_metadata(path)["score_token"]) == (
        "score", "last_non_pad")
    queries, passages = _queries_passages()
    want = model.score(queries, passages)
    out = peer_out[f"published:{family}"]
    assert out["pad"] == model.encoder.tokenizer.pad_id and out["max_length"] == 32
    for key in ("st", "hf_left", "hf_right"):
        np.testing.assert_allclose(out[key], want, atol=5e-5, err_msg=key)
    again = reranker_from_checkpoint(path)
    assert again.encoder.tokenizer.max_seq_length == 32  # the recorded length
    np.testing.assert_allclose(again.score(queries, passages), want, atol=1e-5)
    assert np.ptp(want) > 0.1


# int8's bound on these scores (random weights: spread ~1; measured 2026-12-02: see
# docs/families.md)
INT8_ATOL = 0.1


@pytest.mark.parametrize("family", ["qwen3", "gemma3"])
def test_onnx_logits_are_tfsent_scores(family, published):
    """onnxruntime on the folder's onnx/model.onnx (and the int8 file), fed what
    transformers' AutoTokenizer of the folder makes of the pairs (cut at 32), on either
    padding side: tfsent's scores. The graph finds the token from `input_ids` as Hugging
    Face's head does (the rightmost that is not the pad id)."""
    from test_publish_cross_encoder import _has_onnx

    if not _has_onnx():
        pytest.skip("needs the tfsent[onnx] extra (onnx, onnxruntime)")
    import onnxruntime
    from transformers import AutoTokenizer

    from tfsent.formats import read_metadata

    model, path = published[family]
    assert read_metadata(path)["onnx_files"] == ["onnx/model.onnx",
                                                 "onnx/model_qint8_avx512_vnni.onnx"]
    queries, passages = _queries_passages()
    want = model.score(queries, passages)
    tokenizer = AutoTokenizer.from_pretrained(path)
    for side in ("left", "right"):
        tokenizer.padding_side = side
        feed = dict(tokenizer(queries, passages, padding=True, truncation="longest_first",
                              max_length=32, return_tensors="np"))
        for name, atol in (("model.onnx", 1e-4), ("model_qint8_avx512_vnni.onnx", INT8_ATOL)):
            session = onnxruntime.InferenceSession(os.path.join(path, "onnx", name),
                                                   providers=["CPUExecutionProvider"])
            assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask"]
            logits = session.run(["logits"], feed)[0]
            assert logits.shape == (len(PAIRS), 1)
            np.testing.assert_allclose(logits[:, 0], want, atol=atol,
                                       err_msg=(family, side, name))


def test_sentence_transformers_onnx_backend_scores_the_qwen3_folder(published, tmp_path):
    """CrossEncoder(DIR, backend="onnx") (sentence-transformers 5.7 + optimum-onnx, the
    `serving` peer venv) on the qwen3 folder's onnx/model.onnx: tfsent's scores. (The
    gemma3 folder's tokenizer_config.json, written by transformers 5, does not load in
    that venv's transformers 4.57: checked above with transformers 5's tokenizer.)"""
    from test_publish_cross_encoder import ONNX_PEER_SCRIPT, _has_onnx, serving_peer_python

    if not _has_onnx():
        pytest.skip("needs the tfsent[onnx] extra (onnx, onnxruntime)")
    python = serving_peer_python()
    model, path = published["qwen3"]
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps({"qwen3": {"dir": path, "pairs": PAIRS}},
                                    ensure_ascii=False), encoding="utf-8")
    r = subprocess.run([python, "-c", ONNX_PEER_SCRIPT, str(jobs_file)], capture_output=True,
                       text=True, timeout=600,
                       env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="1",
                                TOKENIZERS_PARALLELISM="false"))
    assert r.returncode == 0, r.stderr[-3000:]
    np.testing.assert_allclose(json.loads(r.stdout)["qwen3"], model.score(*_queries_passages()),
                               atol=1e-4)


def test_refusals(folders, published, hf_checkpoint_dirs, tmp_path):
    """Reading: a pad_token_id other than the tokenizer's pad (the head would read another
    token), or none; a tokenizer appending nothing (the converted reranker) without its
    prompt; a `score.bias`. Building: the "score" head on another family, another token
    than its own (bidirectional EmbeddingGemma: `last_token`). Publishing: a qwen3
    cross-encoder with the "linear" head (on the closing token; with a bias) as
    Qwen3ForSequenceClassification. Nothing is written."""
    import shutil

    from tfsent.encoders import load_encoder
    from tfsent.methods import CrossEncoder
    from tfsent.methods.cross_encoder import reranker_from_checkpoint

    bad = str(tmp_path / "bad")
    shutil.copytree(folders["finetuned"], bad)
    config_path = os.path.join(bad, "config.json")
    config = json.load(open(config_path, encoding="utf-8"))
    pad = config["pad_token_id"]
    for value in (pad + 1, None):
        config["pad_token_id"] = value
        json.dump(config, open(config_path, "w", encoding="utf-8"))
        with pytest.raises(InputError, match=rf"config.json.*pad_token_id {value} is not "
                                             rf"the tokenizer's pad token \(id {pad}\)"):
            reranker_from_checkpoint(bad)
    with pytest.raises(InputError, match=r"tokenizer.json.*appends no token to a text.*"
                                         r"prompt='qwen3_reranker'"):
        reranker_from_checkpoint(folders["converted"])
    from safetensors.numpy import load_file, save_file

    config["pad_token_id"] = pad
    json.dump(config, open(config_path, "w", encoding="utf-8"))
    weights = load_file(os.path.join(bad, "model.safetensors"))
    weights["score.bias"] = np.zeros([1], np.float32)
    save_file(weights, os.path.join(bad, "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(InputError, match="score.bias: a qwen3 .* head has no bias"):
        reranker_from_checkpoint(bad)
    model, _ = published["qwen3"]
    linear = CrossEncoder(model.encoder, head="linear", seed=0)  # its bias starts at 0
    with pytest.raises(ConfigError, match="head reads the last_token token; "
                                          "Qwen3ForSequenceClassification reads the last "
                                          "token that is not the pad token"):
        linear.export(str(tmp_path / "linear"), format="cross_encoder_hf")
    linear.score_head.bias.assign([0.5])
    with pytest.raises(ConfigError, match=r"the score head is Dense\(1, linear\), "
                                          r"Qwen3ForSequenceClassification computes "
                                          r"Dense\(1, linear, no bias\) on the last token "
                                          r"that is not padding"):
        linear.export(str(tmp_path / "linear"), format="cross_encoder_hf")
    with pytest.raises(ConfigError, match=r"pooling='last_token': head 'score' reads the "
                                          r"last token that is not the pad token "
                                          r"\(last_non_pad\); leave pooling unset or cls"):
        CrossEncoder(published["gemma3"][0].encoder, train_pooling="last_token")
    bert = load_encoder(hf_checkpoint_dirs["bert"], pooling="cls", max_seq_length=16)
    with pytest.raises(ConfigError, match=r"head='score' is the Hugging Face head of the "
                                          r"qwen3, gemma3 families \(on the last "
                                          r"non-padding token\); a cross-encoder on bert "
                                          r"takes head pooler or linear"):
        CrossEncoder(bert, head="score")
    assert not os.path.exists(tmp_path / "linear")
