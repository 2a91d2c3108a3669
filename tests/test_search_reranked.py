"""The two-stage search SavedModel: `tfsent.index --reranker=CROSS_ENCODER_EXPORT` (or
`reranker=` in Python) stores a cross-encoder and the corpus texts beside the index, and
`search_reranked(queries, k, rerank_top)` retrieves, reranks and returns the k best in one
call. Checked against the two stages run separately, in a fresh process that loads the
export as TF Serving does."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, TINY_WORDS, WARMUP_REPLAY, warmup_request_shapes

# Runs `search` and `search_reranked` in a TF1 session restoring the variables through the
# saver_def (TF Serving's way), then replays the export's warm-up records, in a process that
# imports only tensorflow, tensorflow_text and tensorflow-serving-api.
SERVE_RERANKED = WARMUP_REPLAY + r"""
import json, sys
path, queries, k, top = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
graph = tf.Graph()
out = {}
with tf.compat.v1.Session(graph=graph) as sess:
    meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], path)
    for name, inputs in (("search", {"queries": queries, "k": top}),
                         ("search_reranked", {"queries": queries, "k": k, "rerank_top": top})):
        sig = meta.signature_def[name]
        feed = {sig.inputs[key].name: (np.array(value, dtype=object) if key == "queries"
                                       else np.int32(value)) for key, value in inputs.items()}
        names = sorted(sig.outputs)
        values = sess.run([sig.outputs[n].name for n in names], feed)
        out[name] = {n: (v.astype(str) if v.dtype == object else v).tolist()
                     for n, v in zip(names, values)}
mods = sorted({k.split(".")[0] for k in sys.modules if k.split(".")[0] in ("tfsent", "keras_hub")})
json.dump({"out": out, "warmup": replay_warmup(path), "modules": mods}, sys.stdout)
"""


def _texts(rng, count):
    texts = set()
    while len(texts) < count:
        texts.add(" ".join(rng.choice(TINY_WORDS, rng.integers(3, 9))))
    return sorted(texts)


@pytest.fixture(scope="module")
def two_stage(tmp_path_factory, tiny_encoder_dir):
    """A tiny cross-encoder's export and a two-stage index written by the CLI with it."""
    import keras

    from tfsent.methods import CrossEncoder
    from tfsent.testing import tiny_encoder
    from conftest import TINY_VOCAB

    root = tmp_path_factory.mktemp("two_stage")
    rng = np.random.default_rng(11)
    texts = _texts(rng, 40)
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n"
                              for i, t in enumerate(texts)))
    keras.utils.set_random_seed(5)
    reranker = CrossEncoder(tiny_encoder(TINY_VOCAB, max_seq_length=24, pooling="cls",
                                         seed=5), seed=0)
    reranker_export = reranker.export(str(root / "ce"))
    export_dir = str(root / "search")
    r = subprocess.run([sys.executable, "-m", "tfsent.index", f"--model={tiny_encoder_dir}",
                        f"--corpus={corpus}", f"--export_dir={export_dir}",
                        f"--reranker={root / 'ce'}", "--query_prompt=the "],
                       cwd=REPO, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    return {"path": r.stdout.strip().splitlines()[-1], "texts": texts, "reranker": reranker,
            "reranker_export": reranker_export, "root": root, "corpus": str(corpus)}


def test_search_reranked_equals_retrieval_then_the_cross_encoder(two_stage):
    queries = [" ".join(TINY_WORDS[i:i + 4]) for i in (0, 5, 9)]
    k, top = 4, 12
    r = subprocess.run([sys.executable, "-c", SERVE_RERANKED, two_stage["path"],
                        json.dumps(queries), str(k), str(top)],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    served = json.loads(r.stdout)
    assert served["modules"] == []  # neither tfsent nor keras_hub
    first, second = served["out"]["search"], served["out"]["search_reranked"]
    texts = {f"d{i}": t for i, t in enumerate(two_stage["texts"])}
    # the reranker changes the order (else this test could not tell the stages apart)
    assert any(second["ids"][row] != first["ids"][row][:k] for row in range(len(queries)))
    for row, query in enumerate(queries):
        candidates = first["ids"][row]  # the retriever's top 12 (query prompt applied)
        # The cross-encoder on the raw query and each candidate's text, in Python.
        scores = two_stage["reranker"].score([query] * top, [texts[d] for d in candidates])
        order = sorted(range(top), key=lambda i: (-scores[i], i))[:k]
        assert second["ids"][row] == [candidates[i] for i in order], query
        np.testing.assert_allclose(second["scores"][row], scores[order], atol=1e-5)
        np.testing.assert_allclose(second["retriever_scores"][row],
                                   np.asarray(first["scores"][row])[order], atol=1e-6)
        np.testing.assert_allclose(second["embeddings"][row], first["embeddings"][row])
    # TF Serving's warm-up: the encoder's requests, one search and one search_reranked
    # (k=1 of the retriever's top 10), which replays to the cross-encoder's own score.
    assert warmup_request_shapes(two_stage["path"]) == [
        ("serving_default", 1), ("serving_default", 8), ("search", 1), ("search_reranked", 1)]
    record = served["warmup"][-1]
    assert record["inputs"]["k"] == 1 and record["inputs"]["rerank_top"] == 10
    [[best]], [[score]] = record["outputs"]["ids"], record["outputs"]["scores"]  # (1, k=1)
    np.testing.assert_allclose(score, two_stage["reranker"].score(
        record["inputs"]["queries"], [texts[best]])[0], atol=1e-5)


def test_bad_requests_and_a_bi_encoder_as_reranker_are_refused(two_stage, tiny_encoder_dir):
    import tensorflow as tf

    from tfsent.errors import ConfigError
    from tfsent.formats import read_metadata

    assert read_metadata(two_stage["path"])["search_index"]["reranker"].endswith("ce")
    index = tf.saved_model.load(two_stage["path"])
    search = index.signatures["search_reranked"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="k=5 is out of range: k must be "
                       "between 1 and rerank_top=4"):
        search(queries=tf.constant(["a"]), k=tf.constant(5), rerank_top=tf.constant(4))
    with pytest.raises(tf.errors.InvalidArgumentError, match="k=41 is out of range: k must "
                       "be between 1 and the corpus size 40"):
        search(queries=tf.constant(["a"]), k=tf.constant(1), rerank_top=tf.constant(41))
    # A bi-encoder export given as the reranker: one error line, before any model loads.
    bi = os.path.join(two_stage["root"], "search")  # the search index itself
    r = subprocess.run([sys.executable, "-m", "tfsent.index", f"--model={tiny_encoder_dir}",
                        f"--corpus={two_stage['corpus']}",
                        f"--export_dir={two_stage['root'] / 'other'}", f"--reranker={bi}"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (
        f"error: --reranker={bi} is a search_index export (sentence embeddings, no score "
        "signature): give a cross-encoder export (CrossEncoder.export)")
    assert not os.path.exists(two_stage["root"] / "other")
    from tfsent.formats.cross_encoder import scoring_module
    with pytest.raises(ConfigError, match="expected a tfsent.methods.CrossEncoder"):
        scoring_module(object())


def test_a_qwen3_reranker_folder_is_stored_with_its_prompt_and_served(two_stage,
                                                                      tiny_encoder_dir):
    """`tfsent.index --reranker=QWEN3_RERANKER_FOLDER --reranker_prompt=qwen3_reranker`: the
    prompted CrossEncoder goes into the search SavedModel, and `search_reranked`, served
    the TF Serving way in a fresh process, orders the retriever's top N by that
    CrossEncoder's scores (the prompt built in the graph)."""
    from hf_decoder_checkpoints import make_qwen3_reranker_dir
    from tfsent.encoders import load_encoder
    from tfsent.methods import CrossEncoder

    qwen = make_qwen3_reranker_dir(str(two_stage["root"] / "qwen3_reranker"), seed=6)
    r = subprocess.run([sys.executable, "-m", "tfsent.index", f"--model={tiny_encoder_dir}",
                        f"--corpus={two_stage['corpus']}",
                        f"--export_dir={two_stage['root'] / 'search_qwen3'}",
                        f"--reranker={qwen}", "--reranker_prompt=qwen3_reranker",
                        "--reranker_instruction=Find it", "--reranker_max_seq_length=180"],
                       cwd=REPO, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    path = r.stdout.strip().splitlines()[-1]
    queries, k, top = [" ".join(TINY_WORDS[i:i + 4]) for i in (0, 7)], 3, 8
    r = subprocess.run([sys.executable, "-c", SERVE_RERANKED, path, json.dumps(queries),
                        str(k), str(top)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    served = json.loads(r.stdout)
    assert served["modules"] == []
    texts = {f"d{i}": t for i, t in enumerate(two_stage["texts"])}
    reranker = CrossEncoder(load_encoder(qwen, max_seq_length=180), prompt="qwen3_reranker",
                            instruction="Find it")
    for row, query in enumerate(queries):
        candidates = served["out"]["search"]["ids"][row]
        scores = reranker.score([query] * top, [texts[d] for d in candidates])
        order = sorted(range(top), key=lambda i: (-scores[i], i))[:k]
        assert served["out"]["search_reranked"]["ids"][row] == [candidates[i] for i in order]
        np.testing.assert_allclose(served["out"]["search_reranked"]["scores"][row],
                                   scores[order], atol=1e-5)
    assert any(served["out"]["search_reranked"]["ids"][row] !=
               served["out"]["search"]["ids"][row][:k] for row in range(len(queries)))
