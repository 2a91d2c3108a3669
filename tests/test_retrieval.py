"""Retrieval evaluation: the BEIR reader on hand-written folders, the measures against
pytrec_eval (trec_eval) and a hand-computed case, the run files read back by pytrec_eval,
the chunked search against brute force and faiss, the `beir:` tasks of
`python -m tfsent.evaluate`, the `RetrievalDevEvaluation` callback in `fit`, and
minilm-l6 on Climate-FEVER against the reference figures."""

import json
import os
import subprocess
import sys
import time
import urllib.parse

import keras
import numpy as np
import pytest

from conftest import (EVALUATE_IMPORTS, REPO, TINY_VOCAB, cli_runs_in_one_process,
                      shared_data_or_skip)
from tfsent.data import beir, readers, sources
from tfsent.errors import ConfigError, InputError
from tfsent.evaluation import retrieval
from tfsent.formats.metadata import read_metadata
from tfsent.search.exact import top_k_cosine

pytrec_eval = pytest.importorskip("pytrec_eval")  # the test extra: pytrec-eval-terrier

TREC_MEASURES = {"ndcg_cut_10": "ndcg@10", "recall_10": "recall@10",
                 "recall_100": "recall@100", "map_cut_100": "map@100"}


# -- hand-written BEIR folders --------------------------------------------------------------
def write_beir(root, corpus, queries, qrels):
    """A BEIR folder: corpus [(id, title, text)], queries [(id, text)], qrels
    {split: [(qid, docid, score)]} (rows written as given, after the header)."""
    os.makedirs(os.path.join(root, "qrels"), exist_ok=True)
    with open(os.path.join(root, "corpus.jsonl"), "w") as f:
        for _id, title, text in corpus:
            f.write(json.dumps({"_id": _id, "title": title, "text": text}) + "\n")
    with open(os.path.join(root, "queries.jsonl"), "w") as f:
        for _id, text in queries:
            f.write(json.dumps({"_id": _id, "text": text}) + "\n")
    for split, rows in qrels.items():
        with open(os.path.join(root, "qrels", f"{split}.tsv"), "w") as f:
            f.write("query-id\tcorpus-id\tscore\n")
            f.writelines("\t".join(str(c) for c in row) + "\n" for row in rows)
    return str(root)


SMALL_CORPUS = [("d1", "Dogs", "a dog runs in the park"), ("d2", "", "a cat sleeps on the mat"),
                ("d3", "Music", "a man plays the guitar"), ("d4", "Cars", "a woman drives a car")]
SMALL_QUERIES = [("q1", "the dog runs"), ("q2", "who plays music"), ("q3", "a red car")]


def test_reader_graded_qrels_titles_and_dropped_queries(tmp_path, absl_messages):
    folder = write_beir(tmp_path / "b", SMALL_CORPUS, SMALL_QUERIES, {"test": [
        ("q1", "d1", 2), ("q1", "d2", 1), ("q1", "d3", 0), ("q2", "d3", 1),
        ("q3", "d4", 0)]})  # q3 has only a score-0 judgement: dropped
    split = beir.read_split(folder, "test")
    assert split.corpus.ids == ["d1", "d2", "d3", "d4"]
    assert split.corpus.texts[0] == "Dogs a dog runs in the park"
    assert split.corpus.texts[1] == "a cat sleeps on the mat"  # no title: no leading space
    assert split.query_ids == ["q1", "q2"] and split.query_texts == ["the dog runs",
                                                                     "who plays music"]
    assert split.qrels == {"q1": {"d1": 2, "d2": 1, "d3": 0}, "q2": {"d3": 1}}
    assert any("1 queries without a relevant document dropped" in m for m in absl_messages)


def test_reader_refuses_duplicate_ids_naming_file_and_line(tmp_path):
    folder = write_beir(tmp_path / "b", SMALL_CORPUS + [("d2", "", "again")], SMALL_QUERIES,
                        {"test": [("q1", "d1", 1)]})
    with pytest.raises(InputError, match=r"corpus.jsonl, line 5: duplicate document _id "
                                         r"'d2' \(first on line 2\)"):
        beir.read_split(folder, "test")


def test_reader_missing_files_and_splits(tmp_path):
    folder = write_beir(tmp_path / "b", SMALL_CORPUS, SMALL_QUERIES,
                        {"test": [("q1", "d1", 1)], "dev": [("q2", "d3", 1)]})
    with pytest.raises(InputError, match=r"qrels/train.tsv: missing BEIR file \(qrels "
                                         r"splits here: dev, test\)"):
        beir.check_folder(folder, "train")
    os.remove(os.path.join(folder, "queries.jsonl"))
    with pytest.raises(InputError, match=r"queries.jsonl: missing BEIR file"):
        beir.read_split(folder, "test")


def test_reader_malformed_json_and_qrels_columns(tmp_path):
    folder = write_beir(tmp_path / "b", SMALL_CORPUS, SMALL_QUERIES, {"test": [
        ("q1", "d1", 1)]})
    with open(os.path.join(folder, "queries.jsonl"), "a") as f:
        f.write('{"_id": "q4", "text": "unfinished\n')
    with pytest.raises(InputError, match=r"queries.jsonl, line 4: not a JSON object"):
        beir.read_split(folder, "test")
    folder = write_beir(tmp_path / "c", SMALL_CORPUS, SMALL_QUERIES, {"test": [
        ("q1", "d1", 1), ("q2", "d3")]})
    with pytest.raises(InputError, match=r"test.tsv, line 3: expected 3 tab-separated "
                                         r"columns \(query-id, corpus-id, score\), found 2"):
        beir.read_split(folder, "test")
    folder = write_beir(tmp_path / "d", SMALL_CORPUS, SMALL_QUERIES, {"test": [
        ("q1", "d1", "high")]})
    with pytest.raises(InputError, match=r"test.tsv, line 2: score 'high' is not an integer"):
        beir.read_split(folder, "test")
    # A qrels file written without BEIR's header: its first judgement is kept
    with open(os.path.join(folder, "qrels", "test.tsv"), "w") as f:
        f.write("q1\td1\t1\nq2\td3\t1\n")
    assert beir.read_qrels(os.path.join(folder, "qrels", "test.tsv")) == {
        "q1": {"d1": 1}, "q2": {"d3": 1}}


def test_reader_counts_unknown_ids_and_refuses_when_none_matches(tmp_path, absl_messages):
    folder = write_beir(tmp_path / "b", SMALL_CORPUS, SMALL_QUERIES, {"test": [
        ("q1", "d1", 1), ("q9", "d1", 1), ("q9", "d2", 1), ("q2", "d99", 1),
        ("q2", "d3", 1)]})
    split = beir.read_split(folder, "test")
    assert split.qrels == {"q1": {"d1": 1}, "q2": {"d3": 1}}
    assert any("2 of 5 qrels name a query not in queries.jsonl, 1 a document not in "
               "corpus.jsonl" in m for m in absl_messages)
    folder = write_beir(tmp_path / "c", SMALL_CORPUS, SMALL_QUERIES, {"test": [
        ("x1", "d1", 1), ("q1", "y1", 1)]})
    with pytest.raises(InputError, match=r"no qrel names a known query and document.*"
                                         r"wrong folder or split"):
        beir.read_split(folder, "test")


def test_reader_non_beir_path_and_empty_corpus(tmp_path):
    other = tmp_path / "senteval"
    other.mkdir()
    (other / "STS.input.x.txt").write_text("a\tb\n")
    with pytest.raises(InputError, match=r"corpus.jsonl: missing BEIR file"):
        retrieval.RetrievalTask(f"beir:{other}").check()
    with pytest.raises(InputError, match=r"not a folder"):
        retrieval.RetrievalTask(f"beir:{other / 'STS.input.x.txt'}").check()
    with pytest.raises(ConfigError, match="not a retrieval source"):
        sources.parse_beir(str(other))
    folder = write_beir(tmp_path / "b", [], SMALL_QUERIES, {"test": [("q1", "d1", 1)]})
    with pytest.raises(InputError, match=r"corpus.jsonl: the corpus is empty"):
        beir.read_split(folder, "test")


def test_task_labels_and_run_file_names(tmp_path):
    folder = write_beir(tmp_path / "scifact", SMALL_CORPUS, SMALL_QUERIES,
                        {"test": [("q1", "d1", 1)], "dev": [("q2", "d3", 1)]})
    test = retrieval.RetrievalTask(f"beir:{folder}")
    dev = retrieval.RetrievalTask(f"beir:{folder}/:dev")
    assert (test.label, test.split, dev.label) == ("beir:scifact:test", "test",
                                                   "beir:scifact:dev")
    assert retrieval.run_file_paths("out/run.trec", [test]) == {test.label: "out/run.trec"}
    assert retrieval.run_file_paths("out/run.trec", [test, dev]) == {
        test.label: "out/run.scifact.test.trec", dev.label: "out/run.scifact.dev.trec"}
    with pytest.raises(ConfigError, match="both report as beir:scifact:test"):
        retrieval.check_tasks([f"beir:{folder}", f"beir:{folder}:test"])


# -- measures -------------------------------------------------------------------------------
def _random_case(seed, n_queries=40, n_docs=180):
    """Graded qrels (scores -1..3, at least one relevant per query) and a run of 150
    documents per query whose scores have one decimal (many ties)."""
    rng = np.random.default_rng(seed)
    docs = [f"d{i}" for i in range(n_docs)]
    qrels, run = {}, {}
    for q in range(n_queries):
        qid = f"q{q}"
        judged = rng.choice(n_docs, size=rng.integers(1, 25), replace=False)
        qrels[qid] = {docs[j]: int(rng.choice([-1, 0, 1, 1, 2, 3])) for j in judged}
        qrels[qid][docs[judged[0]]] = int(rng.integers(1, 4))
        retrieved = rng.choice(n_docs, size=150, replace=False)
        run[qid] = {docs[j]: float(np.round(rng.uniform(0, 2), 1)) for j in retrieved}
    return qrels, run


def _trec_figures(qrels, run, ranked):
    """pytrec_eval's figures x100 per query; recip_rank on the run cut to its top 10
    (trec_eval has no cut for it)."""
    full = pytrec_eval.RelevanceEvaluator(qrels, set(TREC_MEASURES)).evaluate(run)
    cut = {q: {d: run[q][d] for d in ranked[q][:10]} for q in run}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut)
    return {q: {**{ours: 100 * full[q][m] for m, ours in TREC_MEASURES.items()},
                "mrr@10": 100 * rr[q]["recip_rank"]} for q in run}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_measures_equal_pytrec_eval_with_graded_qrels_and_ties(seed):
    qrels, run = _random_case(seed)
    ranked = retrieval.rank_run(run)
    ours = retrieval.evaluate_ranking(ranked, qrels)
    reference = _trec_figures(qrels, run, ranked)
    for qid in run:
        for m in retrieval.MEASURES:
            assert ours["per_query"][qid][m] == pytest.approx(reference[qid][m], abs=1e-4), \
                (qid, m)  # x100 figures: 1e-6 on trec_eval's fractions
    for m in retrieval.MEASURES:
        assert ours[m] == pytest.approx(np.mean([reference[q][m] for q in run]), abs=1e-4)
    assert ours["queries"] == len(run)


def test_trec_eval_breaks_ties_by_document_id_descending():
    qrels = {"q": {"d1": 1}}
    run = {"q": {"a": 1.0, "d10": 1.0, "d1": 1.0, "d2": 1.0, "z": 0.5}}
    assert retrieval.rank_run(run)["q"] == ["d2", "d10", "d1", "a", "z"]
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run)
    assert rr["q"]["recip_rank"] == pytest.approx(1 / 3)  # d1 third, as ranked above


def test_measures_hand_computed():
    qrels = {"q1": {"a": 2, "b": 1, "c": 0}, "q2": {"x": 1}}
    # q1: a and z tie at 0.7; trec_eval puts the larger id first: c, z, a, b.
    # q2: ten documents score above x, which is 11th (no hit in the top 10).
    run = {"q1": {"c": 0.9, "a": 0.7, "z": 0.7, "b": 0.5},
           "q2": {**{f"n{i}": 0.9 - 0.01 * i for i in range(10)}, "x": 0.1}}
    res = retrieval.evaluate_ranking(retrieval.rank_run(run), qrels)
    q1, q2 = res["per_query"]["q1"], res["per_query"]["q2"]
    # q1 nDCG@10: DCG = 2/log2(3+1) + 1/log2(4+1) = 1 + 0.4306766 = 1.4306766 (a at 3,
    # b at 4); ideal = 2/log2(2) + 1/log2(3) = 2 + 0.6309298 = 2.6309298; 0.5437912.
    assert q1["ndcg@10"] == pytest.approx(54.37912, abs=1e-4)
    assert q1["mrr@10"] == pytest.approx(100 / 3)  # first relevant (a) at rank 3
    assert q1["recall@10"] == q1["recall@100"] == 100.0  # a and b (c has score 0)
    # MAP: precision at a (rank 3) = 1/3, at b (rank 4) = 2/4; (1/3 + 1/2) / 2 = 0.4166667.
    assert q1["map@100"] == pytest.approx(41.66667, abs=1e-4)
    # q2: nothing relevant in the top 10; x at rank 11: recall@100 = 1, MAP = (1/11) / 1.
    assert (q2["ndcg@10"], q2["mrr@10"], q2["recall@10"]) == (0.0, 0.0, 0.0)
    assert q2["recall@100"] == 100.0
    assert q2["map@100"] == pytest.approx(9.090909, abs=1e-5)
    # Means over the two queries.
    assert res["ndcg@10"] == pytest.approx(27.18956, abs=1e-4)  # 54.37912 / 2
    assert res["mrr@10"] == pytest.approx(16.66667, abs=1e-4)  # (33.33333 + 0) / 2
    assert (res["recall@10"], res["recall@100"]) == (50.0, 100.0)
    assert res["map@100"] == pytest.approx(25.37879, abs=1e-4)  # (41.66667 + 9.09091) / 2


# -- search ---------------------------------------------------------------------------------
@pytest.mark.parametrize("query_chunk,corpus_chunk", [(5, 7), (13, 57), (1, 100), (4, 3)])
def test_chunked_search_equals_brute_force_with_ties(query_chunk, corpus_chunk):
    """+-1 vectors (what binary codes become): exact arithmetic and many equal scores,
    ranked by score then by the trec_eval tie order of the ids."""
    rng = np.random.default_rng(query_chunk * 1000 + corpus_chunk)
    docs = rng.choice([-1.0, 1.0], size=(57, 16)).astype(np.float32)
    docs[40:45] = docs[3]  # exact duplicates
    queries = rng.choice([-1.0, 1.0], size=(13, 16)).astype(np.float32)
    ids = [f"doc-{rng.integers(10**6)}-{i}" for i in range(len(docs))]
    ties = retrieval.trec_tie_order(ids)
    k = 20
    scores, indices = top_k_cosine(queries, docs, k, query_chunk=query_chunk,
                                   candidate_chunk=corpus_chunk, tie_order=ties)
    dots = queries.astype(np.int64) @ docs.astype(np.int64).T  # exact
    for q in range(len(queries)):
        want = sorted(range(len(docs)), key=lambda j: ids[j], reverse=True)
        want = sorted(want, key=lambda j: -dots[q, j])[:k]  # stable: ties by id, desc
        assert list(indices[q]) == want, q
        np.testing.assert_allclose(scores[q], dots[q, want] / 16.0, atol=1e-6)


def test_chunked_search_equals_numpy_and_faiss():
    faiss = pytest.importorskip("faiss")  # the test extra: faiss-cpu
    rng = np.random.default_rng(7)
    docs = (rng.normal(size=(1003, 24)) * rng.uniform(0.2, 4, (1003, 1))).astype(np.float32)
    queries = rng.normal(size=(37, 24)).astype(np.float32)
    scores, indices = top_k_cosine(queries, docs, 100, query_chunk=8, candidate_chunk=97)
    unit_docs = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    unit_queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    sims = unit_queries.astype(np.float64) @ unit_docs.astype(np.float64).T
    np.testing.assert_array_equal(indices, np.argsort(-sims, axis=1)[:, :100])
    index = faiss.IndexFlatIP(24)
    index.add(unit_docs)
    faiss_scores, faiss_indices = index.search(unit_queries, 100)
    np.testing.assert_array_equal(indices, faiss_indices)
    np.testing.assert_allclose(scores, faiss_scores, atol=1e-5)


# -- encoding, evaluation, run files --------------------------------------------------------
class BagOfWordsEncoder:
    """A deterministic stand-in for a model (counts of the tiny vocabulary's words): the
    retrieval code under test is ours, the encoder is not what these tests check."""

    def __init__(self):
        self.calls = []

    def encode(self, sentences, batch_size=64, normalize=False, max_seq_length=None):
        self.calls.append(len(sentences))
        index = {w: i for i, w in enumerate(TINY_VOCAB)}
        out = np.zeros((len(sentences), len(TINY_VOCAB)), np.float32)
        for row, s in enumerate(sentences):
            for w in s.lower().split():
                out[row, index.get(w, 1)] += 1.0
        return out + 0.01


def tiny_beir(root, n_docs=60, seed=0):
    """A BEIR folder of tiny-vocabulary sentences (ids with a space in some), dev and test
    qrels with graded scores."""
    rng = np.random.default_rng(seed)
    words = TINY_VOCAB[7:]
    corpus = [(f"doc {i}" if i % 7 == 0 else f"d{i}", "",
               " ".join(rng.choice(words, size=rng.integers(3, 8)))) for i in range(n_docs)]
    queries = [(f"q{i}", " ".join(rng.choice(words, size=3))) for i in range(12)]
    qrels = {"test": [], "dev": []}
    for i, (qid, _) in enumerate(queries):
        for j in rng.choice(n_docs, size=3, replace=False):
            qrels["test" if i % 2 else "dev"].append((qid, corpus[j][0], int(rng.integers(1, 3))))
    return write_beir(root, corpus, queries, qrels)


def test_evaluate_retrieval_and_run_files_read_back_by_pytrec_eval(tmp_path):
    folder = tiny_beir(tmp_path / "tiny")
    split = beir.read_split(folder, "test")
    encoder = BagOfWordsEncoder()
    trec, js = str(tmp_path / "run.trec"), str(tmp_path / "run.json")
    res = retrieval.evaluate_retrieval(encoder, split, batch_size=4, run_file=trec,
                                       verbose=0)
    again = retrieval.evaluate_retrieval(encoder, split, batch_size=4, run_file=js,
                                         verbose=0)
    assert {m: res[m] for m in retrieval.MEASURES} == {m: again[m]
                                                       for m in retrieval.MEASURES}
    assert max(encoder.calls) <= 4 * 8  # the corpus goes in slices of 8 batches
    assert res["queries"] == 6 and res["documents"] == 60
    with open(trec) as f:
        lines = [line.split() for line in f]
    assert len(lines) == 6 * 60 and all(len(p) == 6 and p[1] == "Q0" for p in lines)
    assert [int(p[3]) for p in lines[:60]] == list(range(1, 61))
    assert any(p[2] == "doc%200" for p in lines)  # the space of "doc 0" percent-encoded
    with open(trec) as f:
        run = pytrec_eval.parse_run(f)
    run = {q: {urllib.parse.unquote(d): s for d, s in docs.items()} for q, docs in run.items()}
    with open(js) as f:
        json_run = json.load(f)
    assert json_run == run  # same ids, the same scores (shortest float32 text)
    for source in (run, json_run):
        reference = _trec_figures(split.qrels, source, retrieval.rank_run(source))
        for m in retrieval.MEASURES:
            np.testing.assert_allclose(
                [res["per_query"][q][m] for q in split.query_ids],
                [reference[q][m] for q in split.query_ids], atol=1e-4, err_msg=m)


def test_prompts_are_put_before_queries_and_documents(tmp_path):
    split = beir.read_split(tiny_beir(tmp_path / "tiny"), "dev")

    class Recording(BagOfWordsEncoder):
        seen = []

        def encode(self, sentences, batch_size=64, normalize=False, max_seq_length=None):
            self.seen += sentences
            return super().encode(sentences, batch_size, normalize, max_seq_length)

    enc = Recording()
    retrieval.evaluate_retrieval(enc, split, query_prompt="query: ",
                                 document_prompt="passage: ", verbose=0)
    assert {"query: " + q for q in split.query_texts} <= set(enc.seen)
    assert {"passage: " + t for t in split.corpus.texts} <= set(enc.seen)
    assert len(enc.seen) == len(split.query_texts) + len(split.corpus)


# -- the CLI --------------------------------------------------------------------------------
def test_cli_beir_tasks_with_truncation_binary_and_run_files(tmp_path, tiny_encoder_dir):
    folder = tiny_beir(tmp_path / "tiny")
    out, run, plain = tmp_path / "r.json", tmp_path / "run.trec", tmp_path / "plain.json"
    # The second run: the same float figures without variants (the memo does not change
    # them). Both CLI runs fork from one process that imported TensorFlow once.
    r, r_plain = cli_runs_in_one_process("tfsent.evaluate", [
        [f"--model={tiny_encoder_dir}", f"--tasks=beir:{folder}:dev,beir:{folder}",
         "--quantize=binary", "--truncate_dim=8", f"--output_json={out}",
         f"--run_file={run}", f"--data_dir={tmp_path / 'none'}"],
        [f"--model={tiny_encoder_dir}", f"--tasks=beir:{folder}", "--truncate_dim=8",
         f"--output_json={plain}"]], str(tmp_path), preload=EVALUATE_IMPORTS)
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.load(open(out))
    assert set(results) == {"beir:tiny:dev", "beir:tiny:test"}
    test = results["beir:tiny:test"]
    for m in retrieval.MEASURES:
        assert test[m] == test["dim_8"][m]  # the main figures: the first variant
        assert 0.0 <= test["dim_8/binary"][m] <= 100.0
    assert test["dim_8/binary"]["retention"] == pytest.approx(
        100 * test["dim_8/binary"]["ndcg@10"] / test["ndcg@10"])
    assert set(test["per_query"]) == {f"q{i}" for i in range(1, 12, 2)}
    assert "recall@100" in r.stdout and "retention %" in r.stdout
    assert "beir:tiny:test dim_8/binary" in r.stdout
    assert not run.exists()  # two tasks: one run file each
    for task in ("dev", "test"):
        path = tmp_path / f"run.tiny.{task}.trec"
        with open(path) as f:
            parsed = pytrec_eval.parse_run(f)
        parsed = {q: {urllib.parse.unquote(d): s for d, s in docs.items()}
                  for q, docs in parsed.items()}
        split = beir.read_split(folder, task)
        reference = _trec_figures(split.qrels, parsed, retrieval.rank_run(parsed))
        want = results[f"beir:tiny:{task}"]["dim_8"]  # --run_file: the first variant's run
        assert np.mean([reference[q]["ndcg@10"] for q in parsed]) == pytest.approx(
            want["ndcg@10"], abs=1e-4)
    # The same float figures without variants (the memo does not change them).
    assert r_plain.returncode == 0, r_plain.stderr[-3000:]
    assert json.load(open(plain))["beir:tiny:test"]["ndcg@10"] == test["ndcg@10"]


BAD_INPUT = [
    (["--tasks=beir:MISSING"], "not a folder"),
    (["--tasks=beir:FOLDER:train"], "missing BEIR file (qrels splits here: dev, test)"),
    (["--tasks=beir:FOLDER,beir:FOLDER/:test"], "both report as beir:tiny:test"),
    (["--tasks=beir:FOLDER", "--run_file=NOWHERE/run.trec"], "does not exist"),
    (["--tasks=STS12", "--run_file=RUN"], "--run_file writes a retrieval run"),
    (["--tasks=beir:FOLDER", "--run_file=FOLDER/corpus.jsonl"], "is also an input"),
    (["--tasks=beir:FOLDER", "--run_file=OUT", "--output_json=OUT"], "both name"),
    (["--tasks=beir:FOLDER,STS12", "--data_dir=MISSING"], "is not a folder"),
    # Outputs never replace what the evaluation reads, nor (without --overwrite) anything.
    (["--tasks=beir:FOLDER", "--output_json=FOLDER/qrels/test.tsv", "--overwrite"],
     "is also an input (a file of the folder"),
    (["--tasks=STS12", "--data_dir=FOLDER", "--output_json=FOLDER/corpus.jsonl",
      "--overwrite"], "is also an input (a file of the folder"),
    (["--tasks=beir:FOLDER", "--quantize=int8", "--calibration_file=CAL", "--run_file=CAL",
      "--overwrite"], "is also an input"),
    (["--tasks=beir:FOLDER", "--output_json=CAL"], "already exists; choose a new file or "
     "pass --overwrite"),
    (["--tasks=beir:FOLDER", "--run_file=FOLDER"], "names a folder"),
    (["--tasks=beir:FOLDER", "--output_json=NEWDIR/"], "names a folder"),
    (["--tasks=beir:FOLDER", "--plots_dir=CAL"], "exists and is not a folder"),
]


@pytest.fixture(scope="module")
def bad_input_runs(tmp_path_factory, tiny_encoder_dir):
    """`python -m tfsent.evaluate --model=/no/such/model` with each of BAD_INPUT's
    arguments, then the tiny encoder on a folder whose corpus.jsonl has a malformed last
    line (test_cli_malformed_corpus_is_a_clear_error), each a process of its own forked
    from one that imported TensorFlow once (conftest.cli_runs_in_one_process): nine
    separate runs would pay nine imports."""
    root = tmp_path_factory.mktemp("bad_input")
    folder = tiny_beir(root / "tiny")
    subs = {"MISSING": str(root / "missing"), "FOLDER": folder,
            "NOWHERE": str(root / "nowhere"), "RUN": str(root / "run.trec"),
            "OUT": str(root / "out.json"), "CAL": str(root / "calibration.txt"),
            "NEWDIR": str(root / "newdir")}
    (root / "calibration.txt").write_text("a sentence\nanother one\n")
    cases = []
    for args, _ in BAD_INPUT:
        for key, value in subs.items():
            args = [a.replace(key, value) for a in args]
        cases.append(["--model=/no/such/model", *args])
    malformed = tiny_beir(root / "malformed" / "tiny")
    with open(os.path.join(malformed, "corpus.jsonl"), "a") as f:
        f.write('{"_id": 5}\n')
    cases.append([f"--model={tiny_encoder_dir}", f"--tasks=beir:{malformed}"])
    return cli_runs_in_one_process("tfsent.evaluate", cases, str(root),
                                   preload=EVALUATE_IMPORTS)


@pytest.mark.parametrize("case", range(len(BAD_INPUT)),
                         ids=[" ".join(args) for args, _ in BAD_INPUT])
def test_cli_bad_input_exits_2_before_loading_a_model(bad_input_runs, case):
    r, message = bad_input_runs[case], BAD_INPUT[case][1]
    assert r.returncode == 2, r.stderr[-2000:]
    assert message in r.stderr and "Traceback" not in r.stderr
    assert "/no/such/model" not in r.stderr  # refused before the model was looked at


def test_cli_malformed_corpus_is_a_clear_error(bad_input_runs):
    r = bad_input_runs[len(BAD_INPUT)]  # the tiny encoder, corpus.jsonl's line 61 malformed
    assert r.returncode == 2, r.stderr[-2000:]
    assert "corpus.jsonl, line 61: field '_id' missing or not a string" in r.stderr
    assert "Traceback" not in r.stderr


# -- the callback ---------------------------------------------------------------------------
def test_callback_drives_model_checkpoint_on_val_ndcg(tmp_path):
    from tfsent.training.callbacks import RetrievalDevEvaluation
    from tfsent.methods import SimCSE
    from tfsent.testing import tiny_encoder

    folder = tiny_beir(tmp_path / "tiny")
    dev = RetrievalDevEvaluation(folder, batch_size=16)
    assert dev.split.split == "dev" and len(dev.split.query_ids) == 6
    config = dev.get_config()
    assert RetrievalDevEvaluation(**config).split.qrels == dev.split.qrels
    model = SimCSE(tiny_encoder(TINY_VOCAB, num_layers=3, max_seq_length=12, seed=3))
    model.compile(optimizer=keras.optimizers.AdamW(3e-3))
    path = str(tmp_path / "best.keras")
    checkpoint = keras.callbacks.ModelCheckpoint(path, monitor="val_ndcg@10", mode="max",
                                                 save_best_only=True)
    stop = keras.callbacks.EarlyStopping(monitor="val_mrr@10", mode="max", patience=10)
    sentences = readers.read_sentences(readers.DEMO_SENTENCES)[:48]
    history = model.fit(sentences, batch_size=8, epochs=3, steps_per_epoch=2, verbose=0,
                        callbacks=[dev, checkpoint, stop])
    scores = history.history["val_ndcg@10"]
    assert len(scores) == 3 and all(0 <= s <= 100 for s in scores)
    for key in ("val_mrr@10", "val_recall@10", "val_recall@100", "val_map@100"):
        assert len(history.history[key]) == 3
    best = keras.saving.load_model(path)
    assert dev.evaluate(best)["ndcg@10"] == pytest.approx(max(scores), abs=1e-4)


def test_callback_refuses_a_missing_split(tmp_path):
    from tfsent.training.callbacks import RetrievalDevEvaluation

    folder = tiny_beir(tmp_path / "tiny")
    with pytest.raises(InputError, match="train.tsv: missing BEIR file"):
        RetrievalDevEvaluation(folder, split="train")
    assert RetrievalDevEvaluation(f"beir:{folder}:test").split.split == "test"


# -- real data ------------------------------------------------------------------------------
# ../shared/data/README.md: all-MiniLM-L6-v2 through sentence-transformers (mean pooling,
# cosine, exact search, title + " " + text), trec_eval definitions, x100.
CLIMATE_FEVER = {"dev": {"ndcg@10": 39.27, "mrr@10": 44.64, "recall@100": 81.31},
                 "test": {"ndcg@10": 36.02, "mrr@10": 43.67, "recall@100": 82.54}}
# The tolerance of the comparison with the reference (x100 points); see the report.
TOLERANCE = 0.05


@pytest.fixture(scope="module")
def climate_fever_results(climate_fever_minilm_corpus):
    """minilm-l6 on Climate-FEVER dev and test, the corpus encoded once for both (and for
    test_search_index.py: conftest's `climate_fever_minilm_corpus`)."""
    folder = shared_data_or_skip("retrieval", "climate-fever")
    from tfsent.evaluation.runner import MemoEncoder
    from tfsent.serving import load_any

    start = time.perf_counter()
    encoder = MemoEncoder(load_any("minilm-l6", "mean", 256), batch_size=64,
                          max_seq_length=256)
    corpus, embeddings = climate_fever_minilm_corpus
    encoder.memo.update(zip(corpus.texts, embeddings))  # only the queries are encoded here
    dev = beir.read_split(folder, "dev")
    test = beir.read_split(folder, "test", corpus=dev.corpus)
    results = {name: retrieval.evaluate_retrieval(encoder, split, batch_size=64,
                                                  max_seq_length=256, verbose=0)
               for name, split in (("dev", dev), ("test", test))}
    print(f"climate-fever with minilm-l6: {time.perf_counter() - start:.1f} s; "
          + "; ".join(f"{n}: " + ", ".join(f"{m} {r[m]:.2f}" for m in retrieval.MEASURES)
                      for n, r in results.items()))
    return results


@pytest.mark.parametrize("split", ["dev", "test"])
def test_minilm_on_climate_fever_matches_the_reference(climate_fever_results, split):
    got = climate_fever_results[split]
    assert got["queries"] == {"dev": 208, "test": 336}[split]
    for measure, want in CLIMATE_FEVER[split].items():
        assert abs(got[measure] - want) <= TOLERANCE, (split, measure, got[measure], want)


def test_the_cli_selects_by_retrieval_and_exports_the_prompts(tmp_path, tiny_encoder_dir):
    """--config.eval_data=beir:DIR:dev: the starting encoder and every checkpoint are scored
    by dev nDCG@10 (the corpus re-encoded each time), selection and the log use it, and the
    export serves the run's prompts."""
    from conftest import TINY_RUN_FLAGS
    from tfsent import training

    folder = tiny_beir(tmp_path / "beir")
    flags = [f.replace("--config.", "") for f in TINY_RUN_FLAGS]
    config = training.resolve_config("simcse_unsup", overrides=[
        f"encoder={tiny_encoder_dir}", "max_seq_length=16", "batch_size=8", "steps=4",
        "eval_every=2", "jit_compile=false", f"eval_data=beir:{folder}:dev",
        "query_prompt=query: ", "document_prompt=passage: ", *flags])
    out = str(tmp_path / "run")
    metrics = training.run("simcse_unsup", config, out)
    assert 0.0 <= metrics["dev_before"]["ndcg@10"] <= 100.0
    assert "per_query" not in metrics["dev_before"]
    assert [h["step"] for h in metrics["dev_history"]] == [2, 4]
    assert all("ndcg@10" in h and "mrr@10" in h for h in metrics["dev_history"])
    assert "ndcg@10" in metrics["dev_best"]
    meta = read_metadata(metrics["export"])
    assert (meta["query_prompt"], meta["document_prompt"]) == ("query: ", "passage: ")
    # The dev figures are the callback's own on the exported weights' model.
    from tfsent.serving import SavedModelEncoder

    exported = SavedModelEncoder(metrics["export"])
    split = retrieval.read_task_split(f"beir:{folder}:dev")
    again = retrieval.evaluate_retrieval(exported, split, query_prompt="query: ",
                               document_prompt="passage: ", verbose=0)
    assert again["ndcg@10"] == pytest.approx(metrics["exported"]["score"], abs=1e-3)
    assert exported.prompts == {"query_prompt": "query: ", "document_prompt": "passage: "}
    # tfsent.evaluate on the export: its own prompts without a flag; explicit empty flags
    # evaluate without them.
    plain = retrieval.evaluate_retrieval(exported, split, verbose=0)
    variants = (([], again), (["--query_prompt=", "--document_prompt="], plain))
    runs = cli_runs_in_one_process("tfsent.evaluate", [
        [f"--model={metrics['export']}", f"--tasks=beir:{folder}:dev",
         f"--output_json={tmp_path / f'eval{len(extra)}.json'}", *extra]
        for extra, _ in variants], str(tmp_path), preload=EVALUATE_IMPORTS)
    for (extra, want), r in zip(variants, runs):
        out = tmp_path / f"eval{len(extra)}.json"
        assert r.returncode == 0, r.stderr[-3000:]
        (got,) = [v for v in json.loads(out.read_text()).values() if isinstance(v, dict)]
        assert got["ndcg@10"] == pytest.approx(want["ndcg@10"], abs=1e-6), extra
        assert ("using the prompts it was exported with" in r.stderr) == (not extra)


# -- the fixed dev candidate pool (`dev_pool`) -----------------------------------------------
def test_candidate_pool_hand_case_and_subset_split(tmp_path):
    """Judged documents (any score, 0 included) plus each query's first `top` ranked ones."""
    folder = write_beir(tmp_path / "b", [(f"d{i}", "", f"text {i}") for i in range(8)],
                        [("q1", "a"), ("q2", "b")],
                        {"dev": [("q1", "d5", 1), ("q2", "d6", 0), ("q2", "d7", 2)]})
    split = beir.read_split(folder, "dev")
    ranking = retrieval.Ranking(["q1", "q2"], [["d0", "d1", "d2"], ["d1", "d3", "d4"]],
                                [np.zeros(3)] * 2)
    assert retrieval.candidate_pool(ranking, split, 2) == ["d0", "d1", "d3", "d5", "d6", "d7"]
    assert retrieval.candidate_pool(ranking, split, 1) == ["d0", "d1", "d5", "d6", "d7"]
    pooled = split.with_corpus_subset(["d7", "d0", "d5"])
    assert pooled.corpus.ids == ["d0", "d5", "d7"]  # corpus order
    assert pooled.corpus.texts == ["text 0", "text 5", "text 7"]
    assert pooled.qrels == split.qrels and pooled.query_ids == split.query_ids
    with pytest.raises(InputError, match="not in the corpus, e.g. 'nope'"):
        split.with_corpus_subset(["d1", "nope"])
    with pytest.raises(ConfigError, match="depth 0"):
        retrieval.candidate_pool(ranking, split, 0)


def test_run_with_dev_pool_searches_the_starting_encoders_pool(tmp_path, tiny_encoder_dir):
    """`dev_pool=N`: the pool (judged documents + the starting encoder's top N of each dev
    query, computed here with numpy) is written to dev_pool.json and every dev figure,
    the starting encoder's included, is the search of that pool; a run folder that holds a
    dev_pool.json for the same split and depth searches the pool written there."""
    from conftest import TINY_RUN_FLAGS
    from tfsent import training
    from tfsent.encoders import load_encoder

    folder = tiny_beir(tmp_path / "beir")
    flags = [f.replace("--config.", "") for f in TINY_RUN_FLAGS]

    def config(**extra):
        return training.resolve_config("simcse_unsup", overrides=[
            f"encoder={tiny_encoder_dir}", "max_seq_length=16", "batch_size=8", "steps=2",
            "eval_every=2", "jit_compile=false", f"eval_data=beir:{folder}:dev",
            "pooling=mean", *flags, *[f"{k}={v}" for k, v in extra.items()]])

    out = tmp_path / "run"
    metrics = training.run("simcse_unsup", config(dev_pool=3), str(out))
    saved = json.loads((out / "dev_pool.json").read_text())
    split = beir.read_split(folder, "dev")
    start = load_encoder(tiny_encoder_dir)
    docs = start.encode(split.corpus.texts, normalize=True, pooling="mean")
    queries = start.encode(split.query_texts, normalize=True, pooling="mean")
    top = np.argsort(-(queries @ docs.T), axis=1)[:, :3]
    want = {split.corpus.ids[j] for row in top for j in row}
    want |= {d for judged in split.qrels.values() for d in judged}
    assert sorted(saved["documents"]) == sorted(want)
    assert saved["top"] == 3 and saved["corpus_documents"] == 60 > len(want)
    pooled = split.with_corpus_subset(saved["documents"])
    before = retrieval.evaluate_retrieval(start, pooled, verbose=0)
    assert metrics["dev_before"]["ndcg@10"] == pytest.approx(before["ndcg@10"], abs=1e-3)
    assert metrics["dev_before"]["documents"] == len(want)
    # A folder whose dev_pool.json names another pool (an interrupted run's): that pool.
    other = sorted(split.corpus.ids)[::2]
    again = tmp_path / "again"
    again.mkdir()
    (again / "config.json").write_text((out / "config.json").read_text())
    (again / "dev_pool.json").write_text(json.dumps(dict(saved, documents=other)))
    metrics = training.run("simcse_unsup", config(dev_pool=3), str(again))
    before = retrieval.evaluate_retrieval(start, split.with_corpus_subset(other), verbose=0)
    assert metrics["dev_before"]["ndcg@10"] == pytest.approx(before["ndcg@10"], abs=1e-3)
    assert metrics["dev_before"]["documents"] == len(other)
    # --overwrite removes the pool with the run's other files (it is the run's own)
    metrics = training.run("simcse_unsup", config(dev_pool=3), str(again), overwrite=True)
    assert sorted(json.loads((again / "dev_pool.json").read_text())["documents"]) == sorted(want)
    # unset: the whole corpus up to 20,000 documents, then depth 100
    from tfsent.training.loop import dev_pool_depth

    assert [dev_pool_depth(None, n) for n in (60, 20_000, 20_001)] == [0, 0, 100]
    assert dev_pool_depth(0, 10**6) == 0 and dev_pool_depth(7, 10) == 7
    with pytest.raises(ConfigError, match="dev_pool=3: a candidate pool narrows"):
        training.run("simcse_unsup", training.resolve_config(
            "simcse_unsup", overrides=[f"encoder={tiny_encoder_dir}", "dev_pool=3"]),
            str(tmp_path / "sts"))


def test_dev_pool_agreement_benchmark_on_a_tiny_folder(tmp_path, tiny_encoder_dir):
    """benchmarks/dev_pool_agreement.py: the pool's own encoder keeps its whole-corpus
    nDCG@10 on a pool of depth >= 10 (its top 10 are all in it), and a pool holding the whole
    corpus changes no figure."""
    folder = tiny_beir(tmp_path / "beir")
    out = tmp_path / "agreement.json"
    r = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "dev_pool_agreement.py"),
                        f"--beir={folder}", "--tops=2,10,60", f"--pool_from={tiny_encoder_dir}",
                        f"--models={tiny_encoder_dir}", "--poolings=mean,cls",
                        "--max_seq_length=16", f"--json={out}"],
                       capture_output=True, text=True, cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["pool_sizes"]["60"] == 60 and result["pool_sizes"]["2"] < 60
    mean, cls = result["rows"]
    assert mean["model"].endswith("(mean)") and cls["model"].endswith("(cls)")
    assert mean["pools"]["10"]["ndcg@10"] == pytest.approx(mean["full"]["ndcg@10"], abs=1e-9)
    for row in (mean, cls):
        assert row["pools"]["60"] == pytest.approx(row["full"], abs=1e-9)
    assert result["same_order"]["60"] is True
    assert "models in the same nDCG@10 order" in r.stdout
