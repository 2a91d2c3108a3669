"""Retrieval training data and `--method=retrieval`: the readers of BEIR train splits, pairs
files and NLI sources against hand-written files; duplicate-free pair batches with the
query / document prompts on their sides; the loss on pairs without hard negatives against
a NumPy transcription of sentence-transformers' MultipleNegativesRankingLoss; `fit` on a
tf.data.Dataset of string rows; the harness; and the CLI: train on beir:DIR:train with
dev selection on beir:DIR:dev, then `tfsent.evaluate --tasks=beir:DIR` with no other flag,
and bad input refused before any model is loaded."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, TINY_RUN_FLAGS, TINY_VOCAB, tiny_method_encoder
from method_harness import MethodHarness, string_dataset
from test_retrieval import write_beir
from tfsent.data import pairs, pipelines, preprocessing
from tfsent.errors import InputError
from tfsent.methods import RetrievalSimCSE, get_method

CORPUS = [("d1", "Dogs", "a dog runs in the park"), ("d2", "", "a cat sleeps on the mat"),
          ("d3", "Music", "a man plays the guitar"), ("d4", "Cars", "a woman drives a car"),
          ("d5", "", "a child reads a book")]
QUERIES = [("q1", "the dog runs"), ("q2", "who plays music"), ("q3", "a red car"),
           ("q4", "the child reads")]


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return str(path)


# -- readers --------------------------------------------------------------------------------
def test_beir_train_split_one_row_per_relevant_qrel(tmp_path):
    folder = write_beir(tmp_path / "b", CORPUS, QUERIES, {"train": [
        ("q1", "d1", 2), ("q1", "d2", 1), ("q1", "d3", 0), ("q2", "d3", 1), ("q3", "d4", 0),
        ("q4", "d5", 1)]})
    rows = pairs.read_training_pairs(f"beir:{folder}:train")
    assert rows == [("the dog runs", "Dogs a dog runs in the park"),
                    ("the dog runs", "a cat sleeps on the mat"),  # no title: no space
                    ("who plays music", "Music a man plays the guitar"),
                    ("the child reads", "a child reads a book")]
    assert pairs.read_training_pairs(f"beir:{folder}") == rows  # the default split: train


def test_beir_train_qrels_naming_unknown_ids_are_refused_with_file_and_line(tmp_path):
    folder = write_beir(tmp_path / "b", CORPUS, QUERIES, {"train": [
        ("q1", "d1", 1), ("q1", "d9", 1), ("q7", "d2", 1), ("q2", "d3", 0)]})
    with pytest.raises(InputError, match=r"qrels/train\.tsv, line 3: document 'd9' is not in "
                                         r"corpus\.jsonl \(2 of 4 qrels name an unknown"):
        pairs.read_training_pairs(f"beir:{folder}:train")
    folder = write_beir(tmp_path / "c", CORPUS, QUERIES, {"train": [("q3", "d4", 0)]})
    with pytest.raises(InputError, match="no qrel with score > 0"):
        pairs.read_training_pairs(f"beir:{folder}:train")
    with pytest.raises(InputError, match=r"missing BEIR file \(qrels splits here: train\)"):
        pairs.read_training_pairs(f"beir:{folder}:dev")


def test_pairs_tsv_with_and_without_negatives_and_header(tmp_path):
    plain = _write(tmp_path / "p.tsv", "anchor\tpositive\nq one\td  one\n\nq two\td two\n")
    assert pairs.read_training_pairs(plain) == [("q one", "d one"), ("q two", "d two")]
    mined = _write(tmp_path / "m.tsv", "anchor\tpositive\tnegative_1\tnegative_2\n"
                   "q1\tp1\tn1\tn2\nq2\tp2\tn3\tn4\n")
    assert pairs.read_training_pairs(mined) == [("q1", "p1", "n1", "n2"),
                                                ("q2", "p2", "n3", "n4")]
    assert pairs.read_training_pairs(mined, hard_negatives=False) == [("q1", "p1"),
                                                                      ("q2", "p2")]
    no_header = _write(tmp_path / "n.tsv", "q1\tp1\tn1\n")
    assert pairs.read_training_pairs(no_header) == [("q1", "p1", "n1")]


def test_pairs_jsonl_with_and_without_negatives(tmp_path):
    rows = [{"anchor": "q1", "positive": "p1", "negative_1": "n1", "negative_2": "n2"},
            {"negative_2": "n4", "positive": "p2", "anchor": "q2", "negative_1": "n3"}]
    path = _write(tmp_path / "m.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    assert pairs.read_training_pairs(path) == [("q1", "p1", "n1", "n2"),
                                               ("q2", "p2", "n3", "n4")]
    path = _write(tmp_path / "p.jsonl", '{"anchor": "q1", "positive": "p1"}\n')
    assert pairs.read_training_pairs(path) == [("q1", "p1")]
    # sentence-transformers' triplet columns: (anchor, positive, negative)
    path = _write(tmp_path / "t.jsonl", '{"anchor": "q1", "positive": "p1", "negative": '
                                        '"n1"}\n')
    assert pairs.read_training_pairs(path) == [("q1", "p1", "n1")]


@pytest.mark.parametrize("name, text, message", [
    ("a.tsv", "q1\tp1\tn1\nq2\tp2\n", r"a\.tsv, line 2: expected 3 tab-separated columns "
                                      r"\(anchor, positive and 1 negative\(s\)"),
    ("b.tsv", "anchor\tpositive\nq1\t \n", r"b\.tsv, line 2: empty positive"),
    ("c.tsv", "only one column\n", r"c\.tsv, line 1: .*found 1 column"),
    ("d.tsv", "\n\n", r"d\.tsv: no \(anchor, positive\) rows"),
    ("e.jsonl", '{"anchor": "q", "positive": "p"}\n{"anchor": "", "positive": "p"}\n',
     r"e\.jsonl, line 2: empty anchor"),
    ("f.jsonl", '{"anchor": "q", "positive": "p"}\n{"anchor": "q", "positive": "p", '
                '"negative_1": "n"}\n', r"f\.jsonl, line 2: 1 negatives, but the first row "
                                        r"has 0"),
    ("g.jsonl", '{"anchor": "q", "negative_1": "n"}\n', r"g\.jsonl, line 1: field "
                                                        r"'positive' missing"),
    ("h.jsonl", '{"anchor": "q", "positive": 3}\n', r"h\.jsonl, line 1: field 'positive' "
                                                    r"missing or not a string"),
    ("j.jsonl", '{"anchor": "q", "positive": "p", "negative_2": "n"}\n',
     r"j\.jsonl, line 1: field 'negative_1' missing"),
    ("i.jsonl", '{"anchor": "q", "positive": "p"}\nnot json\n', r"i\.jsonl, line 2: not a "
                                                                r"JSON object"),
    ("k.jsonl", '{"anchor": "q", "positive": "p", "negatives": ["n"]}\n',
     r"k\.jsonl, line 1: a 'negatives' list is not read"),
    ("l.jsonl", '{"anchor": "q", "positive": "p", "negative": "n", "negative_1": "m"}\n',
     r"l\.jsonl, line 1: both 'negative' and negative_N"),
])
def test_bad_pairs_files_name_file_and_line(tmp_path, name, text, message):
    with pytest.raises(InputError, match=message):
        pairs.read_training_pairs(_write(tmp_path / name, text))


def test_nli_sources_as_pairs_with_and_without_contradictions(tmp_path):
    triplets = pairs.read_training_pairs("demo_nli")
    assert len(triplets[0]) == 3  # premise, entailment, contradiction (SimCSE's rows)
    assert pairs.read_training_pairs("demo_nli", hard_negatives=False) == [
        t[:2] for t in triplets]
    nli = [{"sentence1": "a man plays", "sentence2": "a man plays music",
            "gold_label": "entailment"},
           {"sentence1": "a man plays", "sentence2": "a man sleeps",
            "gold_label": "contradiction"},
           {"sentence1": "a dog runs", "sentence2": "a dog is out", "gold_label": "entailment"},
           {"sentence1": "a dog runs", "sentence2": "a cat", "gold_label": "neutral"}]
    path = _write(tmp_path / "snli.jsonl", "".join(json.dumps(r) + "\n" for r in nli))
    assert pairs.read_training_pairs(path, hard_negatives=False) == [
        ("a man plays", "a man plays music"), ("a dog runs", "a dog is out")]
    assert pairs.read_training_pairs(path) == [("a man plays", "a man plays music",
                                                "a man sleeps")]
    # '-' (no consensus) is skipped; any other label is an error naming the line
    with open(path, "a") as f:
        f.write(json.dumps(dict(nli[0], gold_label="-")) + "\n")
    assert len(pairs.read_training_pairs(path, hard_negatives=False)) == 2
    with open(path, "a") as f:
        f.write(json.dumps(dict(nli[0], gold_label="Entailment")) + "\n")
    with pytest.raises(InputError, match=r"snli\.jsonl, line 6: gold_label 'Entailment' is "
                                         r"none of entailment"):
        pairs.read_training_pairs(path)


# -- batches --------------------------------------------------------------------------------
def _identity(strings):
    """A stand-in tokenizer that returns the strings, so a test reads the batch's texts."""
    return strings


def test_pair_batches_are_duplicate_free_and_prompts_reach_their_side():
    # Every query has three relevant documents, and documents are shared between queries
    # (as in climate-fever's train split): plain batches of 4 would repeat them.
    rows = [(f"query {q}", f"doc {(q + k) % 12}") for q in range(12) for k in range(3)]
    ds = pipelines.pair_dataset(rows, _identity, 4, seed=1, query_prompt="Q: ",
                                document_prompt="D: ")
    for batch in ds.take(30):
        anchors = [t.decode() for t in batch["anchor"].numpy()]
        positives = [t.decode() for t in batch["positive"].numpy()]
        assert "negative" not in batch
        assert len(set(anchors)) == 4 and len(set(positives)) == 4
        assert all(a.startswith("Q: query ") for a in anchors)
        assert all(p.startswith("D: doc ") for p in positives)
        assert all((a[3:], p[3:]) in rows for a, p in zip(anchors, positives))
    mined = [(f"q{i}", f"p{i}", f"n{i}a", f"n{i}b") for i in range(8)]
    batch = next(iter(pipelines.pair_dataset(mined, _identity, 4, shuffle=False,
                                             query_prompt="Q: ", document_prompt="D: ")))
    assert [t.decode() for t in batch["negative"].numpy()] == [
        f"D: n{i}{s}" for i in range(4) for s in "ab"]  # anchor-major


def test_fit_pipeline_puts_the_methods_prompts_before_the_right_side():
    model = RetrievalSimCSE(tiny_method_encoder(), query_prompt="red ",
                            document_prompt="blue ")
    rows = [("dog", "cat"), ("man", "woman"), ("ball", "park"), ("food", "music")]
    batch = next(iter(preprocessing.dataset_for(model, rows, 4, shuffle=False)))
    vocab = {w: i for i, w in enumerate(TINY_VOCAB)}
    anchor, positive = batch["anchor"]["token_ids"].numpy(), \
        batch["positive"]["token_ids"].numpy()
    assert anchor[0, :3].tolist() == [vocab["[CLS]"], vocab["red"], vocab["dog"]]
    assert positive[0, :3].tolist() == [vocab["[CLS]"], vocab["blue"], vocab["cat"]]
    with pytest.raises(InputError, match=r"x\[1\]: positive is empty"):
        preprocessing.dataset_for(model, [("dog", "cat"), ("man", " ")], 2)


# -- the loss -------------------------------------------------------------------------------
def np_multiple_negatives_ranking_loss(anchors, positives, scale=20.0):
    """sentence-transformers' MultipleNegativesRankingLoss, written from its definition:
    scores[i, j] = scale * cos(anchor_i, positive_j); loss = mean_i CE(scores[i], i)."""
    a = np.asarray(anchors, np.float64)
    p = np.asarray(positives, np.float64)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    scores = scale * a @ p.T
    top = scores.max(axis=1)
    log_norm = top + np.log(np.exp(scores - top[:, None]).sum(axis=1))
    return float(np.mean(log_norm - np.diag(scores)))


def test_loss_on_pairs_is_multiple_negatives_ranking_loss():
    model = RetrievalSimCSE(tiny_method_encoder(), encoder_dropout=0.0)
    assert model.temperature == 0.05  # scale 20
    rows = [("a man plays", "a man plays music"), ("a dog runs", "the dog is in the park"),
            ("a child reads", "a book"), ("a woman drives", "a red car"),
            ("the cat sleeps", "on the mat"), ("a big tree", "a green street")]
    batch = next(iter(preprocessing.dataset_for(model, rows, 6, shuffle=False)))
    loss, _ = model.compute_losses(batch, training=False)
    anchors = model.embed(batch["anchor"], False).numpy()
    positives = model.embed(batch["positive"], False).numpy()
    expected = np_multiple_negatives_ranking_loss(anchors, positives)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-4)


def test_fit_on_a_dataset_of_string_rows():
    keras.utils.set_random_seed(0)
    model = RetrievalSimCSE(tiny_method_encoder())
    model.compile(optimizer=keras.optimizers.AdamW(1e-3), jit_compile=False)
    rows = [(f"a man plays {w}", f"the {w} is red") for w in TINY_VOCAB[7:31]]
    before = model.encode(["a man plays music"])
    history = model.fit(string_dataset(rows, 8), epochs=1, verbose=0).history
    assert len(history["loss"]) == 1 and np.isfinite(history["loss"]).all()
    assert not np.allclose(before, model.encode(["a man plays music"]))
    # Dict rows with negative_1..N keys become (anchor, positive, negatives) rows, the
    # negatives in numeric order.
    dicts = [{"negative_10": f"x {w}", "anchor": a, "positive": p, "negative_2": f"y {w}",
              **{f"negative_{i}": f"n{i} {w}" for i in (1, *range(3, 10))}}
             for (a, p), w in zip(rows, TINY_VOCAB[7:31])]
    ds = tf.data.Dataset.from_tensor_slices({k: [r[k] for r in dicts] for k in dicts[0]})
    first = preprocessing._materialize(ds, "pairs")[0]
    assert first[2:] == ("n1 a", "y a", *(f"n{i} a" for i in range(3, 10)), "x a")
    batch = next(iter(preprocessing.dataset_for(model, ds, 8, shuffle=False)))
    assert batch["negative"]["token_ids"].shape[0] == 8 * 10


class TestRetrievalHarness(MethodHarness):
    def build(self, encoder):
        return RetrievalSimCSE(encoder, query_prompt="query: ", document_prompt="passage: ")


def test_spec_reads_pairs_with_the_run_prompts():
    spec = get_method("retrieval")
    assert spec.data_kind == "pairs" and spec.defaults["train_data"] == "demo_nli"
    assert spec.constructor_args(dict(spec.defaults, pooling="mean", export_pooling=None,
                                      query_prompt="q: ", document_prompt="d: "))[
        "query_prompt"] == "q: "


# -- the CLI --------------------------------------------------------------------------------
def _run(module, *args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def tiny_beir_with_train(root, seed=0):
    """A BEIR folder of tiny-vocabulary texts with train, dev and test qrels."""
    rng = np.random.default_rng(seed)
    words = TINY_VOCAB[7:]
    corpus = [(f"d{i}", "", " ".join(rng.choice(words, size=5))) for i in range(40)]
    queries = [(f"q{i}", " ".join(rng.choice(words, size=3))) for i in range(30)]
    qrels = {"train": [], "dev": [], "test": []}
    for i, (qid, _) in enumerate(queries):
        split = ("train", "train", "train", "dev", "test")[i % 5]
        for j in rng.choice(len(corpus), size=2, replace=False):
            qrels[split].append((qid, corpus[j][0], int(rng.integers(0, 3))))
    return write_beir(root, corpus, queries, qrels)


def test_cli_trains_on_beir_train_selects_on_dev_and_evaluates(tmp_path, tiny_encoder_dir):
    """Acceptance 3 of issue 31 on a tiny BEIR folder and the tiny encoder."""
    folder = tiny_beir_with_train(tmp_path / "tiny")
    out = str(tmp_path / "run")
    r = _run("tfsent.train", "--method=retrieval", f"--config.train_data=beir:{folder}:train",
             f"--config.eval_data=beir:{folder}:dev", f"--output_dir={out}",
             f"--config.encoder={tiny_encoder_dir}", "--config.batch_size=4",
             "--config.steps=4", "--config.eval_every=2", "--config.max_seq_length=12",
             "--config.learning_rate=1e-3", *TINY_RUN_FLAGS)
    assert r.returncode == 0, r.stderr[-3000:]
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["steps"] == 4
    assert [h["step"] for h in metrics["dev_history"]] == [2, 4]
    assert "ndcg@10" in metrics["dev_before"] and "ndcg@10" in metrics["dev_final"]
    r = _run("tfsent.evaluate", f"--model={metrics['export']}", f"--tasks=beir:{folder}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "beir:tiny:test" in r.stdout and "ndcg@10" in r.stdout.lower()


BAD_TRAINING_DATA = ("unknown_ids", "empty_side")


@pytest.fixture(scope="module")
def bad_training_data_runs(tmp_path_factory):
    """{case: (the `python -m tfsent.train` run on it, its output_dir, the message it must
    print)}; both runs forked from one process (conftest.cli_runs_in_one_process)."""
    from conftest import TRAIN_IMPORTS, cli_runs_in_one_process

    cases = {}
    for case in BAD_TRAINING_DATA:
        tmp_path = tmp_path_factory.mktemp(case)
        if case == "unknown_ids":
            folder = write_beir(tmp_path / "b", CORPUS, QUERIES,
                                {"train": [("q1", "d1", 1), ("q5", "d2", 1)]})
            source, message = f"beir:{folder}:train", "train.tsv, line 3: query 'q5' is not in"
        else:
            source = _write(tmp_path / "p.tsv", "q1\tp1\n\t p2\n")
            message = "p.tsv, line 2: empty anchor"
        cases[case] = source, tmp_path / "run", message
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    runs = cli_runs_in_one_process(
        "tfsent.train", [["--method=retrieval", f"--config.train_data={source}",
                          "--config.encoder=no-such-encoder", f"--output_dir={out}"]
                         for source, out, _ in cases.values()],
        str(tmp_path_factory.mktemp("cli-forks")), preload=TRAIN_IMPORTS, env=env)
    return {case: (r, out, message) for r, (case, (_, out, message)) in zip(runs, cases.items())}


@pytest.mark.parametrize("case", BAD_TRAINING_DATA)
def test_cli_bad_training_data_is_refused_before_any_model_loads(bad_training_data_runs,
                                                                  case):
    r, out, message = bad_training_data_runs[case]
    assert r.returncode == 2, r.stderr[-2000:]
    assert message in r.stderr and "Traceback" not in r.stderr
    assert "no-such-encoder" not in r.stderr  # refused before the encoder was looked at
    assert not os.path.exists(out)
