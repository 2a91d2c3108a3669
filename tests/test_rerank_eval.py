"""`python -m tfsent.evaluate --rerank`: a retriever's top N reranked by a cross-encoder
export, against a brute-force rerank through the export's own `score` signature and an
independent nDCG@10 / MRR@10; the command end to end; bad input refused before any model
loads."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, TINY_VOCAB
from test_retrieval import tiny_beir
from tfsent.data import beir
from tfsent.errors import ConfigError, InputError
from tfsent.evaluation import RETRIEVAL_MEASURES, rerank as rerank_eval
from tfsent.evaluation.retrieval import check_tasks, evaluate_ranking, search_split
from tfsent.evaluation.runner import MemoEncoder
from tfsent.serving import SavedModelEncoder, ServedCrossEncoder, load_any

TOP = 10


@pytest.fixture(scope="module")
def case(tmp_path_factory, tiny_encoder_dir):
    """A tiny BEIR folder (60 documents, 6 test queries), a tiny random cross-encoder and its
    export folder, a tiny bi-encoder export, and the library's reranked evaluation of
    `tiny_encoder_dir` (loaded as the command loads --model)."""
    import keras

    from tfsent.formats.saved_model import export_encoder
    from tfsent.methods import CrossEncoder
    from tfsent.testing import tiny_encoder

    root = tmp_path_factory.mktemp("rerank")
    folder = tiny_beir(root / "tiny")
    keras.utils.set_random_seed(0)
    model = CrossEncoder(tiny_encoder(TINY_VOCAB, max_seq_length=32, pooling="cls"), seed=0)
    version = model.export(str(root / "ce"))
    bi_export = export_encoder(load_any(tiny_encoder_dir, None, None), str(root / "bi"))
    split = beir.read_split(folder, "test")
    memo = MemoEncoder(load_any(tiny_encoder_dir, None, None), 64)
    result = rerank_eval.evaluate_reranked(memo, split, ServedCrossEncoder(version), TOP,
                                           verbose=0)
    return dict(root=root, folder=folder, model=model, version=version,
                ce_dir=str(root / "ce"), bi_export=bi_export, split=split, memo=memo,
                result=result)


def _ndcg10(ranked, judged):
    """trec_eval's ndcg_cut.10 of one query, written out here (not the library's)."""
    dcg = sum(max(judged.get(d, 0), 0) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
    ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:10]
    return dcg / sum(g / math.log2(i + 2) for i, g in enumerate(ideal))


def _mrr10(ranked, judged):
    return next((1 / (i + 1) for i, d in enumerate(ranked[:10]) if judged.get(d, 0) >= 1), 0)


def test_reranked_measures_equal_a_brute_force_rerank(case):
    split, result = case["split"], case["result"]
    first = search_split(case["memo"], split, verbose=0)
    before = evaluate_ranking(first.as_dict(), split.qrels, split.query_ids)
    for m in RETRIEVAL_MEASURES:
        assert result[m] == before[m]
    # Each (query, top-10 document) pair scored alone through the export's signature.
    signature = tf.saved_model.load(case["version"]).signatures["score"]
    texts = dict(zip(split.corpus.ids, split.corpus.texts))
    brute, changed = {}, 0
    for qid, query, docs in zip(first.query_ids, split.query_texts, first.doc_ids):
        scores = {d: float(signature(queries=tf.constant([query]),
                                     passages=tf.constant([texts[d]]))["score"][0])
                  for d in docs[:TOP]}
        head = sorted(scores, key=lambda d: (scores[d], d), reverse=True)
        brute[qid] = head + docs[TOP:]
        changed += head != docs[:TOP]
    assert changed >= 3  # the reranker did reorder: the comparison below is not vacuous
    reranked = result[rerank_eval.RERANKED]
    ndcg = 100 * np.mean([_ndcg10(brute[q], split.qrels[q]) for q in split.query_ids])
    mrr = 100 * np.mean([_mrr10(brute[q], split.qrels[q]) for q in split.query_ids])
    assert reranked["ndcg@10"] == pytest.approx(ndcg, abs=1e-9)
    assert reranked["mrr@10"] == pytest.approx(mrr, abs=1e-9)
    assert reranked["ndcg@10"] != pytest.approx(result["ndcg@10"])  # before != after
    for q in split.query_ids:
        assert reranked["per_query"][q]["ndcg@10"] == pytest.approx(
            100 * _ndcg10(brute[q], split.qrels[q]), abs=1e-9)
    assert reranked["recall@100"] == result["recall@100"]  # only the top 10 moved
    assert reranked["rerank_top"] == TOP and reranked["queries"] == 6


def test_served_scores_equal_the_keras_model_in_input_order(case):
    queries = ["tiny query words", "a", "dog " * 30, ""]
    passages = ["x", "a much longer passage " * 8, "cat", "empty query"]
    served = ServedCrossEncoder(case["ce_dir"])  # the folder of versions: its newest
    np.testing.assert_allclose(served.score(queries, passages, batch_size=2),
                               case["model"].score(queries, passages), atol=1e-4)


def test_cli_end_to_end(case, tiny_encoder_dir):
    out, run = case["root"] / "r.json", case["root"] / "run.trec"
    r = subprocess.run(
        [sys.executable, "-m", "tfsent.evaluate", f"--model={tiny_encoder_dir}",
         f"--tasks=beir:{case['folder']}", f"--rerank={case['ce_dir']}",
         f"--rerank_top={TOP}", f"--output_json={out}", f"--run_file={run}",
         f"--data_dir={case['root'] / 'none'}"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.load(open(out))["beir:tiny:test"]
    want = case["result"]
    for m in RETRIEVAL_MEASURES:
        assert got[m] == pytest.approx(want[m], abs=1e-6)
        assert got["reranked"][m] == pytest.approx(want["reranked"][m], abs=1e-6)
    lines = r.stdout.splitlines()
    row = next(line for line in lines if line.startswith("beir:tiny:test reranked@10"))
    assert f"{want['reranked']['ndcg@10']:.2f}" in row
    assert any(line.startswith("beir:tiny:test ") and "reranked" not in line
               for line in lines)
    assert "reranked the top 10 of 6 queries (60 pairs)" in r.stderr
    with open(run) as f:  # the run file is the reranked run
        rows = [line.split() for line in f]
    assert len(rows) == 6 * 60
    by_query = {}
    for qid, _, doc, rank, score, _ in rows:
        by_query.setdefault(qid, []).append((int(rank), float(score)))
    scores = [s for _, s in sorted(by_query["q1"])][:TOP]
    assert scores == sorted(scores, reverse=True)


def test_cli_bad_input_is_one_error_line(case):
    r = subprocess.run(
        [sys.executable, "-m", "tfsent.evaluate", "--model=/no/such/model", "--tasks=STS12",
         f"--rerank={case['ce_dir']}"], cwd=REPO, capture_output=True, text=True,
        timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 2, r.stderr[-2000:]
    assert "--rerank reorders retrieval results: --tasks has STS12" in r.stderr
    assert "Traceback" not in r.stderr and "/no/such/model" not in r.stderr


@pytest.mark.parametrize("rerank, top, tasks, message", [
    ("CE", 0, "beir:FOLDER", "--rerank_top must be >= 1, got 0"),
    ("CE", 61, "beir:FOLDER", "--rerank_top=61 is above the corpus size of beir:FOLDER "
                              "(60 documents)"),
    ("CE", 10, "beir:FOLDER,STSBenchmark", "--tasks has STSBenchmark, not beir"),
    ("BI", 10, "beir:FOLDER", "is a tf_saved_model export (sentence embeddings, no score "
                              "signature)"),
    ("FOLDER", 10, "beir:FOLDER", "is neither a SavedModel export"),
])
def test_bad_rerank_settings_are_refused_before_loading(case, rerank, top, tasks, message):
    subs = {"CE": case["ce_dir"], "BI": case["bi_export"], "FOLDER": case["folder"]}
    rerank = subs[rerank]
    tasks = [t.replace("FOLDER", case["folder"]) for t in tasks.split(",")]
    message = message.replace("FOLDER", case["folder"])
    with pytest.raises(ConfigError) as error:
        rerank_eval.check_rerank(rerank, top, tasks, check_tasks(tasks))
    assert message in str(error.value)
    with pytest.raises(ConfigError, match="does not combine with --truncate_dim"):
        rerank_eval.check_rerank(case["ce_dir"], 10, [f"beir:{case['folder']}"], [], True)


def test_a_cross_encoder_is_refused_where_a_bi_encoder_is_expected(case):
    with pytest.raises(ConfigError, match="--model=.* is a cross_encoder export, a "
                                          "cross-encoder .* goes to --rerank"):
        rerank_eval.check_retriever(case["ce_dir"])
    rerank_eval.check_retriever(case["bi_export"])  # a bi-encoder passes
    # Without metadata to read, loading says what each export is.
    with pytest.raises(InputError, match="not a sentence-embedding export: its "
                                         "serving_default returns score .*cross-encoder"):
        SavedModelEncoder(case["version"])
    with pytest.raises(InputError, match="not a cross-encoder export: it has no score "
                                         "signature"):
        ServedCrossEncoder(case["bi_export"])


def test_a_cross_encoder_keras_file_reranks_as_its_export(case):
    import keras

    path = str(case["root"] / "ce.keras")
    case["model"].save(path)
    tasks = [f"beir:{case['folder']}"]
    rerank_eval.check_rerank(path, TOP, tasks, check_tasks(tasks))
    loaded = rerank_eval.load_reranker(path)
    queries, passages = ["tiny query words", "dog"], ["x", "a cat " * 5]
    np.testing.assert_allclose(loaded.score(queries, passages),
                               ServedCrossEncoder(case["version"]).score(queries, passages),
                               atol=1e-4)
    other = str(case["root"] / "dense.keras")
    keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]).save(other)
    with pytest.raises(ConfigError, match="dense.keras holds a Sequential model, not a "
                                          "CrossEncoder"):
        rerank_eval.check_rerank(other, TOP, tasks, check_tasks(tasks))


def test_hugging_face_checkpoint_folders_rerank_as_they_score(case, hf_checkpoint_dirs):
    """--rerank=FOLDER: a one-label BertForSequenceClassification folder (the tiny
    cross-encoder published as cross_encoder_hf) scores as the cross-encoder it came from;
    a Qwen3-Reranker folder reads through --rerank_prompt, scoring as the prompted
    CrossEncoder (whose scores tests/test_qwen3_reranker.py checks against the model
    card); checkpoints with no score are refused before they load, naming what to do."""
    from hf_decoder_checkpoints import make_qwen3_embedding_dir, make_qwen3_reranker_dir
    from tfsent.encoders import load_encoder
    from tfsent.methods import CrossEncoder

    tasks = [f"beir:{case['folder']}"]
    retrieval = check_tasks(tasks)
    queries, passages = ["tiny query words", "dog", "a man plays"], ["x", "a cat " * 5, "y"]
    published = case["model"].export(str(case["root"] / "published"),
                                     format="cross_encoder_hf")
    rerank_eval.check_rerank(published, TOP, tasks, retrieval)
    np.testing.assert_allclose(rerank_eval.load_reranker(published).score(queries, passages),
                               case["model"].score(queries, passages), atol=1e-4)
    # what `tfsent.index --reranker` stores: an export's path as it is, else a CrossEncoder
    assert rerank_eval.reranker_for_export(case["ce_dir"]) == case["ce_dir"]
    stored = rerank_eval.reranker_for_export(published)
    assert type(stored).__name__ == "CrossEncoder"
    np.testing.assert_allclose(stored.score(queries, passages),
                               case["model"].score(queries, passages), atol=1e-4)
    qwen = make_qwen3_reranker_dir(str(case["root"] / "qwen3_reranker"), seed=3)
    with pytest.raises(ConfigError, match=r"Qwen3ForCausalLM\) without a one-label "
                                          r"sequence-classification head.*needs "
                                          r"--rerank_prompt \(qwen3_reranker\)"):
        rerank_eval.check_rerank(qwen, TOP, tasks, retrieval)
    rerank_eval.check_rerank(qwen, TOP, tasks, retrieval, prompt="qwen3_reranker",
                             instruction="Find it")
    loaded = rerank_eval.load_reranker(qwen, "qwen3_reranker", "Find it", 150)
    want = CrossEncoder(load_encoder(qwen, max_seq_length=150), prompt="qwen3_reranker",
                        instruction="Find it").score(queries, passages)
    np.testing.assert_allclose(loaded.score(queries, passages), want, atol=1e-5)
    assert len(set(np.round(want, 3))) == 3  # the pairs score apart
    # no score to give: a base BERT; a Qwen3-Embedding folder (without a prompt) is a
    # sentence-transformers bi-encoder
    base = hf_checkpoint_dirs["bert"]
    with pytest.raises(ConfigError, match=r"is a bert checkpoint \(BertForMaskedLM\) "
                                          "without a one-label") as error:
        rerank_eval.check_rerank(base, TOP, tasks, retrieval)
    assert f"--method=cross_encoder --config.encoder={base}" in str(error.value)
    embedding = make_qwen3_embedding_dir(str(case["root"] / "qwen3_embedding"))
    with pytest.raises(ConfigError, match="is a sentence encoder's folder, a bi-encoder"):
        rerank_eval.check_rerank(embedding, TOP, tasks, retrieval)
    import json
    import shutil

    three_labels = str(case["root"] / "nli_head")  # config.json only: refused unread
    shutil.copytree(published, three_labels)
    config = json.load(open(os.path.join(three_labels, "config.json")))
    config["id2label"] = {"0": "contradiction", "1": "entailment", "2": "neutral"}
    json.dump(config, open(os.path.join(three_labels, "config.json"), "w"))
    # a family tfsent does not run (config.json only: refused unread)
    other_head = str(case["root"] / "modernbert_head")
    shutil.copytree(qwen, other_head)
    config = json.load(open(os.path.join(other_head, "config.json")))
    config.update(model_type="modernbert", num_labels=1,
                  architectures=["ModernBertForSequenceClassification"])
    json.dump(config, open(os.path.join(other_head, "config.json"), "w"))
    bad = [(published, "", "Find it", 0, "--rerank_instruction: --rerank=.* reads no prompt"),
           (case["ce_dir"], "qwen3_reranker", "", 0, "--rerank_prompt: --rerank=.* is no "
                                                     "Hugging Face checkpoint folder"),
           (case["ce_dir"], "", "", 64, "--rerank_max_seq_length: --rerank=.* is no Hugging "
                                        "Face checkpoint folder"),
           ("", "qwen3_reranker", "", 0, "--rerank_prompt goes with --rerank"),
           ("", "", "", 64, "--rerank_max_seq_length goes with --rerank"),
           (published, "qwen3_reranker", "", 0, r"--rerank_prompt=qwen3_reranker: --rerank="
                                                r".* is a bert checkpoint "
                                                r"\(BertForSequenceClassification\); the "
                                                r"prompt reads a qwen3 causal LM"),
           (three_labels, "", "", 0, "BertForSequenceClassification\\) with 3 labels; a "
                                     "reranker scores with one"),
           (other_head, "", "", 0, r"ModernBertForSequenceClassification\): tfsent reads "
                                   r"no sequence-classification head of model type "
                                   r"modernbert \(it reads BertForSequenceClassification, "
                                   r".*Gemma3TextForSequenceClassification\)")]
    for rerank, prompt, instruction, length, message in bad:
        with pytest.raises(ConfigError, match=message):
            rerank_eval.check_rerank(rerank, TOP, tasks, retrieval, prompt=prompt,
                                     instruction=instruction, max_seq_length=length)


def test_cli_reranks_with_a_qwen3_reranker_folder(case, tiny_encoder_dir):
    """`python -m tfsent.evaluate --rerank=QWEN3_RERANKER_FOLDER --rerank_prompt=...`: the
    reranked measures of the library's evaluation with that prompted CrossEncoder."""
    from hf_decoder_checkpoints import make_qwen3_reranker_dir
    from tfsent.encoders import load_encoder
    from tfsent.methods import CrossEncoder

    qwen = make_qwen3_reranker_dir(str(case["root"] / "qwen3_cli"), seed=4)
    out = case["root"] / "qwen3.json"
    r = subprocess.run(
        [sys.executable, "-m", "tfsent.evaluate", f"--model={tiny_encoder_dir}",
         f"--tasks=beir:{case['folder']}", f"--rerank={qwen}", f"--rerank_top={TOP}",
         "--rerank_prompt=qwen3_reranker", "--rerank_instruction=Find it",
         "--rerank_max_seq_length=140", f"--output_json={out}"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "a qwen3 reranker (prompt qwen3_reranker), pairs cut at 140 tokens" in r.stderr
    got = json.load(open(out))["beir:tiny:test"]["reranked"]
    reranker = CrossEncoder(load_encoder(qwen, max_seq_length=140), prompt="qwen3_reranker",
                            instruction="Find it")
    want = rerank_eval.evaluate_reranked(case["memo"], case["split"], reranker, TOP,
                                         verbose=0)["reranked"]
    for m in RETRIEVAL_MEASURES:
        assert got[m] == pytest.approx(want[m], abs=1e-6)
    assert want["ndcg@10"] != case["result"]["reranked"]["ndcg@10"]  # another reranker
