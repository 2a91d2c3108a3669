"""`python -m tfsent.train --method=cross_encoder`: a tiny cross-encoder trained by the
command on mined rows, selected by the reranked dev nDCG@10 of a retriever's top N (checked
against an independent NumPy nDCG of the export's own reranking), the export's scores equal
to the Keras model's with the selected weights, the first stage searched once per run, and
the bad inputs refused before any model loads."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from test_retrieval import write_beir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP = 3

WORDS = ["dog", "cat", "car", "guitar", "river", "bread", "train", "snow", "music", "tree",
         "phone", "horse"]


def _folder(root):
    """A BEIR folder: 12 documents, 12 queries (each relevant to one document), train
    qrels on queries 0-7, dev on 8-11, test on 8-11."""
    corpus = [(f"d{i}", "", f"a {w} is here and the {w} stays") for i, w in enumerate(WORDS)]
    queries = [(f"q{i}", f"where is the {w}") for i, w in enumerate(WORDS)]
    qrels = {"train": [(f"q{i}", f"d{i}", 1) for i in range(8)],
             "dev": [(f"q{i}", f"d{i}", 1) for i in range(8, 12)],
             "test": [(f"q{i}", f"d{i}", 1) for i in range(8, 12)]}
    return write_beir(root, corpus, queries, qrels)


def _mined(path):
    """Rows as `python -m tfsent.mine --beir=DIR:train --out=X.jsonl` writes them."""
    with open(path, "w") as f:
        for i, w in enumerate(WORDS[:8]):
            row = {"anchor": f"where is the {w}", "positive": f"a {w} is here and the {w} stays"}
            for k in (1, 2):
                other = WORDS[(i + k) % 8]
                row[f"negative_{k}"] = f"a {other} is here and the {other} stays"
            f.write(json.dumps(row) + "\n")
    return str(path)


def _overrides(case, tiny_encoder_dir, bert_dir, **extra):
    fields = {"encoder": bert_dir, "retriever": tiny_encoder_dir,
              "train_data": case["mined"], "eval_data": f"beir:{case['beir']}:dev",
              "rerank_top": TOP, "steps": 6, "eval_every": 2, "batch_size": 4,
              "max_seq_length": 32, "eval_max_seq_length": 40, "learning_rate": 1e-3,
              "jit_compile": "false", "projector_every": 0}
    fields.update(extra)
    return [f"{k}={v}" for k, v in fields.items()]


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    """A tiny random BERT checkpoint in Hugging Face's layout (the cross-encoder's start)."""
    from hf_checkpoints import make_tiny_checkpoint

    return make_tiny_checkpoint("bert", str(tmp_path_factory.mktemp("hf") / "bert"))


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    root = tmp_path_factory.mktemp("cetrain")
    return {"root": root, "beir": _folder(root / "beir"), "mined": _mined(root / "mined.jsonl")}


@pytest.fixture(scope="module")
def trained(case, tiny_encoder_dir, bert_dir):
    """The command's run: 6 steps, dev evaluations at steps 2, 4 and 6."""
    out = str(case["root"] / "run")
    r = subprocess.run([sys.executable, "-m", "tfsent.train", "--method=cross_encoder",
                        f"--output_dir={out}",
                        *[f"--config.{o}" for o in _overrides(case, tiny_encoder_dir,
                                                              bert_dir)]],
                       capture_output=True, text=True, cwd=REPO, timeout=600,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-4000:]
    with open(os.path.join(out, "metrics.json")) as f:
        return out, json.load(f), r


def _ndcg10(ranked, relevant):
    """Binary nDCG@10 (x100), written from the definition."""
    gains = [1.0 / np.log2(rank + 2) for rank, d in enumerate(ranked[:10]) if d in relevant]
    ideal = sum(1.0 / np.log2(rank + 2) for rank in range(min(len(relevant), 10)))
    return 100.0 * sum(gains) / ideal


def test_selection_by_reranked_ndcg_and_the_export(trained, case):
    from tfsent.data import beir
    from tfsent.serving import ServedCrossEncoder

    out, metrics, r = trained
    history = metrics["dev_history"]
    assert [h["step"] for h in history] == [2, 4, 6]
    first = metrics["dev_before"]["retriever_ndcg@10"]
    for h in history:  # both figures logged at each evaluation, the retriever's fixed
        assert h["retriever_ndcg@10"] == pytest.approx(first) and 0 <= h["ndcg@10"] <= 100
    assert "reranked dev" in r.stderr and "(retriever" in r.stderr
    # Selection: the first evaluation with the highest reranked nDCG@10.
    best = max(history, key=lambda h: (h["ndcg@10"], -h["step"]))
    assert metrics["exported"]["step"] == best["step"]
    assert metrics["exported"]["score"] == pytest.approx(best["ndcg@10"])
    # The export reranks the stored first stage to that figure (an independent nDCG).
    with open(os.path.join(out, "dev_first_stage.json")) as f:
        stage = json.load(f)
    split = beir.read_split(case["beir"], "dev")
    texts = dict(zip(split.corpus.ids, split.corpus.texts))
    served = ServedCrossEncoder(metrics["export"])
    values = []
    for qid, text, docs in zip(stage["query_ids"], split.query_texts, stage["doc_ids"]):
        assert qid in split.query_ids
        scores = served.score([text] * TOP, [texts[d] for d in docs[:TOP]])
        head = [docs[i] for i in np.argsort(-scores, kind="stable")]
        values.append(_ndcg10(head + docs[TOP:], set(split.qrels[qid])))
    assert np.mean(values) == pytest.approx(metrics["exported"]["score"], abs=1e-3)
    # The retriever's recall@TOP (the ceiling of any reranking), from the stored ranking.
    reached = [len(set(docs[:TOP]) & set(split.qrels[qid])) / len(split.qrels[qid])
               for qid, docs in zip(stage["query_ids"], stage["doc_ids"])]
    assert metrics["dev_before"][f"retriever_recall@{TOP}"] == pytest.approx(
        100 * np.mean(reached))
    # The closing lines name the evaluation with this reranker and the two-stage index.
    assert f"--rerank={out} --rerank_top={TOP}" in r.stdout
    assert f"--reranker={metrics['export']}" in r.stdout
    assert f"--tasks=beir:{case['beir']}:test" in r.stdout


def test_export_scores_equal_the_keras_model_with_the_best_weights(trained,
                                                                    bert_dir):
    from tfsent.encoders import load_encoder
    from tfsent.methods import CrossEncoder
    from tfsent.serving import ServedCrossEncoder

    out, metrics, _ = trained
    model = CrossEncoder(load_encoder(bert_dir, pooling="cls",
                                      max_seq_length=40))  # the export's length
    model.encoder.load_weights(os.path.join(out, "best", "encoder.weights.h5"))
    with np.load(os.path.join(out, "best", "head.npz")) as stored:
        for i, variable in enumerate(model.score_head.weights):
            variable.assign(stored[f"arr_{i}"])
    queries = ["where is the dog", "a query " * 30, "snow"]
    passages = ["a dog is here", "tree", "a long passage " * 30]
    np.testing.assert_allclose(ServedCrossEncoder(metrics["export"]).score(queries, passages),
                               model.score(queries, passages), atol=1e-4)


def test_resume_reads_the_first_stage_back_and_exports_the_same(
        trained, case, tiny_encoder_dir, bert_dir, monkeypatch, tmp_path):
    """The run folder as an interruption after the last checkpoint leaves it (no export
    yet): the same config resumes at step 6, the retriever is not loaded again (its dev
    ranking is read from the folder), and the same checkpoint is exported."""
    import shutil

    from tfsent import training
    from tfsent.serving import ServedCrossEncoder
    from tfsent.training import rerank_dev

    out, metrics, _ = trained
    copy = str(tmp_path / "run")
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("export"))
    with open(os.path.join(copy, "metrics.json"), "w") as f:
        json.dump({k: v for k, v in metrics.items() if k not in ("export", "exported")}, f)

    def no_loading(*args, **kwargs):
        raise AssertionError("the retriever was loaded again")

    monkeypatch.setattr(rerank_dev, "load_any", no_loading)
    config = training.resolve_config("cross_encoder", overrides=_overrides(
        case, tiny_encoder_dir, bert_dir))
    again = training.run("cross_encoder", config, copy)
    assert again["steps"] == 6 and again["exported"] == metrics["exported"]
    pairs = (["where is the dog", "snow"], ["a dog is here", "a tree is here"])
    np.testing.assert_allclose(ServedCrossEncoder(again["export"]).score(*pairs),
                               ServedCrossEncoder(metrics["export"]).score(*pairs), atol=1e-5)


def test_evaluate_takes_the_run_folder(trained, case):
    from tfsent.errors import ConfigError
    from tfsent.evaluation import rerank as rerank_lib
    from tfsent.evaluation.retrieval import check_tasks

    out = trained[0]
    assert rerank_lib.reranker_export(out) == os.path.join(out, "export")
    tasks = [f"beir:{case['beir']}:test"]
    rerank_lib.check_rerank(out, TOP, tasks, check_tasks(tasks))  # accepted
    with pytest.raises(ConfigError, match="neither a SavedModel export"):
        rerank_lib.check_rerank(str(case["root"]), TOP, tasks, check_tasks(tasks))


@pytest.mark.parametrize("extra, error", [
    ({"eval_data": "demo"}, "reranked nDCG@10 of a BEIR dev split"),
    ({"rerank_top": 0}, "rerank_top"),
    ({"rerank_top": 13}, "above the corpus size"),
    ({"train_data": "beir:{beir}:train"}, "python -m tfsent.mine"),
    ({"retriever": "{export}"}, "retriever=.* is a cross_encoder export, a cross-encoder"),
    ({"retriever": "no/such/folder"}, "no such file or folder"),
    ({"test_tasks": "STSBenchmark"}, "no sentence embeddings"),
])
def test_bad_input_is_refused_before_any_model_loads(extra, error, case, trained,
                                                     tiny_encoder_dir, bert_dir,
                                                     tmp_path):
    from tfsent import training
    from tfsent.errors import ConfigError

    names = {"beir": case["beir"], "export": trained[1]["export"]}
    extra = {k: str(v).format(**names) for k, v in extra.items()}
    out = str(tmp_path / "run")
    with pytest.raises(ConfigError, match=error):
        config = training.resolve_config(
            "cross_encoder", overrides=_overrides(case, tiny_encoder_dir, bert_dir,
                                                  **extra))
        training.run("cross_encoder", config, out)
    assert not os.path.exists(out)  # refused before the run wrote (or loaded) anything



def test_the_run_folder_publishes_for_sentence_transformers(trained, tmp_path):
    """`python -m tfsent.export --model=RUN --format=cross_encoder_hf` (the closing lines
    name it): the run's exported weights rebuilt from its folder
    (`training.load_run_cross_encoder`: pairs cut at the export's 40 tokens, not the
    training's 32) and published; read back as a reranker folder, it scores as the run's
    SavedModel. A run of another method is refused before anything loads."""
    from tfsent import training
    from tfsent.errors import ConfigError
    from tfsent.formats import read_metadata
    from tfsent.methods.cross_encoder import reranker_from_checkpoint
    from tfsent.serving import ServedCrossEncoder

    out, metrics, r = trained
    assert (f"publish:  python -m tfsent.export --model={out} --format=cross_encoder_hf "
            f"--export_dir={out}_hf") in r.stdout
    target = str(tmp_path / "hf")
    p = subprocess.run([sys.executable, "-m", "tfsent.export", f"--model={out}",
                        "--format=cross_encoder_hf", f"--export_dir={target}"],
                       capture_output=True, text=True, cwd=REPO, timeout=600,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.splitlines()[0] == target
    assert (f"the cross_encoder run's best checkpoint (step {metrics['exported']['step']}), "
            "pairs cut at 40 tokens" in p.stderr)
    assert read_metadata(target)["max_seq_length"] == 40
    queries = ["where is the dog", "snow", "a query " * 30]
    passages = ["a dog is here", "a tree is here", "a long passage " * 30]
    np.testing.assert_allclose(reranker_from_checkpoint(target).score(queries, passages),
                               ServedCrossEncoder(metrics["export"]).score(queries, passages),
                               atol=1e-4)
    other = tmp_path / "simcse_run"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"method": "simcse_unsup",
                                                   "train_data": "demo"}))
    with pytest.raises(ConfigError, match="is a simcse_unsup run: its encoder folder"):
        training.load_run_cross_encoder(str(other))
