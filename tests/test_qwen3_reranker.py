"""Qwen3-Reranker as a tfsent cross-encoder (`prompt="qwen3_reranker"`): the prompted pair
ids against Hugging Face's tokenizer driven as the model card drives it, the scores against
the model card's own computation in transformers (the peer venv; tied and untied LM head),
the keras-hub backbone's LM logits, a training run of the command with its export served
the TF Serving way, and the refusals."""

import json
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from tfsent.errors import ConfigError

# The model card's prompt, written out here independently of tfsent.encoders.pair_prompts.
PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on "
          "the Query and the Instruct provided. Note that the answer can only be \"yes\" or "
          "\"no\".<|im_end|>\n<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
DEFAULT_INSTRUCTION = ("Given a web search query, retrieve relevant passages that answer "
                       "the query")
INSTRUCTION = "Find the passage"

PAIRS = [("what is it", "a doc here"),
         ("where is the dog", "a dog is here and the dog stays " * 12),  # cut at its end
         ("q", "y"),
         ("Café crème à la française", "東京は日本の首都です。 emoji 😀"),
         ("a much longer query with many words " * 3, "another document")]


def _middle(query, document, instruction):
    return f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from hf_decoder_checkpoints import make_qwen3_reranker_dir

    root = tmp_path_factory.mktemp("qwen3_reranker")
    return {"untied": make_qwen3_reranker_dir(str(root / "untied"), seed=1),
            "tied": make_qwen3_reranker_dir(str(root / "tied"), seed=2, tied=True)}


def _reranker(folder, max_seq_length=200, instruction=None):
    from tfsent.encoders import load_encoder
    from tfsent.methods import CrossEncoder

    return CrossEncoder(load_encoder(folder, max_seq_length=max_seq_length), seed=0,
                        prompt="qwen3_reranker", instruction=instruction)


def test_prompted_pair_ids_equal_the_model_cards(folders):
    """prefix ids + the formatted middle tokenized and cut at its end to what the prefix
    and suffix leave + suffix ids, nothing appended (the release's tokenizer.json has no
    template), as `tokenizers` gives them; the tokenizer's config keeps the prompt."""
    from tokenizers import Tokenizer

    reference = Tokenizer.from_file(os.path.join(folders["untied"], "tokenizer.json"))
    prefix = reference.encode(PREFIX, add_special_tokens=False).ids
    suffix = reference.encode(SUFFIX, add_special_tokens=False).ids
    for max_len, instruction in ((200, None), (130, INSTRUCTION)):
        model = _reranker(folders["untied"], max_len, instruction)
        tokenizer = model.encoder.tokenizer
        again = type(tokenizer).from_config(tokenizer.get_config())
        for tok in (tokenizer, again):
            out = tok.tokenize_pairs(tf.constant([p[0] for p in PAIRS]),
                                     tf.constant([p[1] for p in PAIRS]))
            ids, mask = out["token_ids"].numpy(), out["padding_mask"].numpy()
            budget = max_len - len(prefix) - len(suffix)
            for row, (q, d) in enumerate(PAIRS):
                middle = reference.encode(_middle(q, d, instruction or DEFAULT_INSTRUCTION),
                                          add_special_tokens=False).ids[:budget]
                assert ids[row][mask[row] == 1].tolist() == prefix + middle + suffix
            assert (mask.sum(1) == max_len).sum() >= 1  # truncation exercised


def test_score_is_the_lm_answer_log_odds_of_keras_hub(folders):
    """The score is log P(yes) - log P(no) of the LM at the last position, computed here
    with keras-hub's own Qwen3 backbone and its reverse embedding (the LM head) on the
    model card's ids, tied and untied."""
    import keras
    import keras_hub
    from tokenizers import Tokenizer

    for name, folder in folders.items():
        model = _reranker(folder)
        backbone = keras_hub.models.Qwen3Backbone.from_preset(folder)
        reference = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        vocab = reference.get_vocab()
        queries, documents = zip(*PAIRS[:3])
        got = model.score(list(queries), list(documents), batch_size=2)
        prefix = reference.encode(PREFIX, add_special_tokens=False).ids
        suffix = reference.encode(SUFFIX, add_special_tokens=False).ids
        for q, d, score in zip(queries, documents, got):
            middle = reference.encode(_middle(q, d, DEFAULT_INSTRUCTION),
                                      add_special_tokens=False).ids
            ids = prefix + middle[:200 - len(prefix) - len(suffix)] + suffix
            x = {"token_ids": np.array([ids]), "padding_mask": np.ones((1, len(ids)), "int32")}
            logits = keras.ops.convert_to_numpy(
                backbone.token_embedding(backbone(x), reverse=True))[0, -1]
            np.testing.assert_allclose(score, logits[vocab["yes"]] - logits[vocab["no"]],
                                       rtol=1e-4, atol=1e-4, err_msg=name)


MODEL_CARD = r"""
import json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

folders, pairs, max_length, instruction, prefix, suffix = sys.argv[1:]
pairs, max_length = json.loads(pairs), int(max_length)
answers = {}
for name, folder in json.loads(folders).items():
    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    yes, no = tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no")
    prefix_ids = tokenizer.encode(prefix, add_special_tokens=False)
    suffix_ids = tokenizer.encode(suffix, add_special_tokens=False)
    texts = [f"<Instruct>: {instruction}\n<Query>: {q}\n<Document>: {d}" for q, d in pairs]
    inputs = tokenizer(texts, padding=False, truncation="longest_first",
                       return_attention_mask=False,
                       max_length=max_length - len(prefix_ids) - len(suffix_ids))
    inputs["input_ids"] = [prefix_ids + ids + suffix_ids for ids in inputs["input_ids"]]
    batch = tokenizer.pad(inputs, padding=True, return_tensors="pt", max_length=max_length)
    with torch.no_grad():
        last = model(**batch).logits[:, -1, :]
    two = torch.nn.functional.log_softmax(torch.stack([last[:, no], last[:, yes]], dim=1),
                                          dim=1)
    answers[name] = {"p_yes": two[:, 1].exp().tolist(), "ids": inputs["input_ids"],
                     "log_odds": (last[:, yes] - last[:, no]).tolist()}
print(json.dumps(answers))
"""


def test_scores_equal_the_model_card_in_transformers(folders):
    """transformers' Qwen3ForCausalLM and Qwen2Tokenizer (left padding), driven by the model
    card's code (the peer venv, one process for both heads): the same ids, the score its
    yes - no logit, and its P(yes) = sigmoid(score), with an untied and a tied LM head."""
    from test_publish_peer import peer_python

    max_len = 160
    r = subprocess.run([peer_python(), "-c", MODEL_CARD, json.dumps(folders),
                        json.dumps(PAIRS), str(max_len), INSTRUCTION, PREFIX, SUFFIX],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    answers = json.loads(r.stdout.strip().splitlines()[-1])
    assert sorted(answers) == ["tied", "untied"]
    for head, want in answers.items():
        model = _reranker(folders[head], max_len, INSTRUCTION)
        out = model.encoder.tokenizer.tokenize_pairs(tf.constant([p[0] for p in PAIRS]),
                                                     tf.constant([p[1] for p in PAIRS]))
        mask = out["padding_mask"].numpy()
        assert [row[m == 1].tolist() for row, m in zip(out["token_ids"].numpy(), mask)] == \
            want["ids"], head
        scores = model.score([p[0] for p in PAIRS], [p[1] for p in PAIRS], batch_size=2)
        np.testing.assert_allclose(scores, want["log_odds"], rtol=1e-4, atol=1e-4,
                                   err_msg=head)
        np.testing.assert_allclose(1 / (1 + np.exp(-scores)), want["p_yes"], atol=1e-5,
                                   err_msg=head)
        assert len(set(np.round(want["log_odds"], 2))) == len(PAIRS)  # the pairs differ


QUERIES = ["where is the dog", "snow", "where is the dog", "a much longer query " * 4]
PASSAGES = ["a dog is here", "a tree is here " * 20, "a cat is here", "short"]


@pytest.fixture(scope="module")
def trained(folders, tiny_encoder_dir, tmp_path_factory):
    """`--method=cross_encoder --config.prompt=qwen3_reranker` on the untied folder (4
    steps), and the CrossEncoder with the run's best weights."""
    from test_cross_encoder_train import _folder, _mined, _overrides
    from tfsent import training
    tmp_path = tmp_path_factory.mktemp("qwen3_reranker_run")
    case = {"beir": _folder(tmp_path / "beir"), "mined": _mined(tmp_path / "mined.jsonl")}
    overrides = _overrides(case, tiny_encoder_dir, folders["untied"], steps=4, eval_every=2,
                           max_seq_length=140, eval_max_seq_length=140,
                           prompt="qwen3_reranker", instruction=INSTRUCTION)
    config = training.resolve_config("cross_encoder", overrides=overrides)
    assert config.pooling == "last_token"  # read from the folder
    out = str(tmp_path / "run")
    metrics = training.run("cross_encoder", config, out)
    assert metrics["steps"] == 4 and metrics["export"]

    model = _reranker(folders["untied"], 140, INSTRUCTION)
    start = model.score_head.kernel.numpy().copy()
    # The head starts as the file's lm_head rows of "yes" minus "no" (read here directly).
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(os.path.join(folders["untied"], "tokenizer.json")).get_vocab()
    lm_head = load_file(os.path.join(folders["untied"], "model.safetensors"))["lm_head.weight"]
    np.testing.assert_allclose(start[:, 0], lm_head[vocab["yes"]] - lm_head[vocab["no"]],
                               atol=1e-6)
    model.encoder.load_weights(os.path.join(out, "best", "encoder.weights.h5"))
    with np.load(os.path.join(out, "best", "head.npz")) as stored:
        assert len(stored.files) == len(model.score_head.weights) == 1  # no bias
        for i, variable in enumerate(model.score_head.weights):
            variable.assign(stored[f"arr_{i}"])
    assert np.abs(model.score_head.kernel.numpy() - start).max() > 0
    return model, metrics


def test_run_trains_and_its_export_serves_the_tf_serving_way(trained, tmp_path):
    """The run read the last token without being told and moved the head off the LM's
    answer; its SavedModel (prompt in the graph) scores as the Keras model with the best
    weights, loaded the TF Serving way in a fresh process; the .keras file keeps it."""
    import keras

    from test_cross_encoder import _check_served_the_tf_serving_way

    from tfsent.formats.metadata import read_metadata

    model, metrics = trained
    queries, passages = QUERIES[:3], PASSAGES[:3]
    _check_served_the_tf_serving_way(model, metrics["export"], queries, passages)
    meta = read_metadata(metrics["export"])
    assert (meta["prompt"], meta["instruction"]) == ("qwen3_reranker", INSTRUCTION)

    model.save(str(tmp_path / "reranker.keras"))
    again = keras.saving.load_model(str(tmp_path / "reranker.keras"))
    assert (again.prompt, again.instruction) == ("qwen3_reranker", INSTRUCTION)
    np.testing.assert_allclose(again.score(queries, passages), model.score(queries, passages),
                               atol=1e-6)


PUBLISHED = r"""
import json, sys
from sentence_transformers import CrossEncoder
folder, queries, passages = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
model = CrossEncoder(folder, device="cpu")
print(json.dumps({"scores": model.predict(list(zip(queries, passages)), batch_size=2).tolist(),
                  "module": type(model[-1]).__name__}))
"""


def test_published_as_a_causal_lm_sentence_transformers_scores_it(trained, tmp_path):
    """format cross_encoder_hf of a prompted reranker: the Qwen3ForCausalLM folder (the
    LM head's yes row = no row + the trained kernel, the prompt as chat_template.jinja)
    that sentence-transformers' CrossEncoder scores with logit(yes) - logit(no): tfsent's
    scores (the pair cut to the length at its middle too); tfsent reads it back."""
    from test_publish_peer import peer_python
    from tfsent.encoders import load_encoder
    from tfsent.methods import CrossEncoder

    model, _ = trained
    folder = model.export(str(tmp_path / "published"), format="cross_encoder_hf",
                          max_seq_length=140)
    config = json.load(open(os.path.join(folder, "config.json")))
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert not json.load(open(os.path.join(folder, "tokenizer_config.json")))[
        "split_special_tokens"]
    exported = json.load(open(os.path.join(folder, "tfsent_export.json")))
    assert (exported["prompt"], exported["instruction"]) == ("qwen3_reranker", INSTRUCTION)
    # The prompt appends nothing: the published tokenizer.json has no template again.
    from tokenizers import Tokenizer

    published = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    assert published.encode("a b").ids == published.encode("a b",
                                                           add_special_tokens=False).ids
    want = model.score(QUERIES, PASSAGES)
    r = subprocess.run([peer_python(), "-c", PUBLISHED, folder, json.dumps(QUERIES),
                        json.dumps(PASSAGES)], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["module"] == "LogitScore"
    np.testing.assert_allclose(out["scores"], want, rtol=1e-4, atol=1e-4)
    again = CrossEncoder(load_encoder(folder, max_seq_length=140), prompt="qwen3_reranker",
                         instruction=INSTRUCTION)
    np.testing.assert_allclose(again.score(QUERIES, PASSAGES), want, atol=1e-4)
    # as `evaluate --rerank=FOLDER` reads it: the prompt, instruction and length recorded
    from tfsent.evaluation.rerank import load_reranker

    np.testing.assert_allclose(load_reranker(folder).score(QUERIES, PASSAGES), want,
                               atol=1e-4)
    with pytest.raises(ConfigError, match="published as a causal LM, without ONNX"):
        model.export(str(tmp_path / "onnx"), format="cross_encoder_hf", onnx=True)


def test_bad_prompts_are_clear_errors(folders, tmp_path):
    from hf_decoder_checkpoints import make_qwen3_embedding_dir

    from tfsent import training
    from tfsent.encoders import load_encoder
    from tfsent.methods import CrossEncoder

    with pytest.raises(ConfigError, match="prompt='qwen3': no such reranker prompt; "
                                          "prompts: qwen3_reranker"):
        CrossEncoder(load_encoder(folders["tied"], max_seq_length=200), prompt="qwen3")
    with pytest.raises(ConfigError, match="instruction goes with prompt"):
        training.resolve_config("cross_encoder", overrides=[
            f"encoder={folders['tied']}", "instruction=find it"])
    with pytest.raises(ConfigError, match="max_seq_length 64 leaves no room for the pair"):
        _reranker(folders["tied"], 64)
    # The instruction is cut with the pair: a length it fills is refused, not every pair
    # scored alike (the fixed ids take 92 of these 110).
    with pytest.raises(ConfigError, match="max_seq_length 110 leaves no room for the pair: "
                                          "the prompt and its instruction take"):
        _reranker(folders["tied"], 110)
    with pytest.raises(ConfigError, match="prompt=qwen3_reranker: set retriever"):
        training.resolve_config("cross_encoder", overrides=[
            f"encoder={folders['tied']}", "prompt=qwen3_reranker"])
    # The tiny Qwen3-Embedding vocabulary has no <think> (the real ones have): refused.
    embedding = make_qwen3_embedding_dir(str(tmp_path / "embedding"))
    with pytest.raises(ConfigError, match="the tokenizer has no token '<think>'"):
        CrossEncoder(load_encoder(embedding, max_seq_length=200), prompt="qwen3_reranker")


def test_a_template_less_tokenizer_json_loads_and_its_exports_append_as_tfsent(folders):
    """The reranker's tokenizer.json appends nothing; as a bi-encoder tfsent appends
    <|endoftext|> (Qwen3-Embedding's template), and so does the tokenizer.json its exports
    keep (Hugging Face's tokenizer on it gives tfsent's ids). A plain cross-encoder on an
    encoder a prompted one was built on gets the family's pair template back."""
    from tokenizers import Tokenizer

    from tfsent.encoders import load_encoder
    from tfsent.methods import CrossEncoder

    original = Tokenizer.from_file(os.path.join(folders["untied"], "tokenizer.json"))
    assert original.encode("a doc").ids == original.encode("a doc",
                                                           add_special_tokens=False).ids
    encoder = load_encoder(folders["untied"], max_seq_length=200)
    kept = Tokenizer.from_str(encoder.tokenizer.hf_files["tokenizer.json"])
    out = encoder.tokenizer(tf.constant([p[1] for p in PAIRS]))
    for row, mask, (_, text) in zip(out["token_ids"].numpy(), out["padding_mask"].numpy(),
                                    PAIRS):
        assert row[mask == 1].tolist() == kept.encode(text).ids
        assert row[mask == 1][-1] == encoder.tokenizer.sep_id
    plain_pairs = encoder.tokenizer.tokenize_pairs(tf.constant(["q"]), tf.constant(["d"]))
    CrossEncoder(encoder, prompt="qwen3_reranker")
    assert encoder.tokenizer.pair_prompt is not None
    CrossEncoder(encoder)
    assert encoder.tokenizer.pair_prompt is None
    again = encoder.tokenizer.tokenize_pairs(tf.constant(["q"]), tf.constant(["d"]))
    np.testing.assert_array_equal(again["token_ids"], plain_pairs["token_ids"])
