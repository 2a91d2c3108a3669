"""Hard-negative mining from a BEIR folder (tfsent.mine --beir): a hand-written tiny BEIR
dir (graded qrels with score-0 rows, a query with two positives, two documents with the
same text) mined with the tiny encoder in-process, per-row margin filters on hand-computed
cosines, the .jsonl pairs-file output, the command's refusals before the model loads (in
process, `mine_to_file`), the model's own prompts, and one CLI run."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO
from tfsent.search import mined_files, mining
from tfsent.errors import ConfigError, InputError
from tfsent.serving import load_any

# 20 documents (d19 repeats d02's title and text), 5 queries.
DOCS = {
    "d00": ("", "a man plays the guitar ."), "d01": ("", "the man plays music ."),
    "d02": ("dog", "a dog runs in the park ."), "d03": ("", "the dog runs with a ball ."),
    "d04": ("", "a woman reads a book ."), "d05": ("book", "the woman reads ."),
    "d06": ("", "a child rides a bike ."), "d07": ("", "the child rides on the street ."),
    "d08": ("", "a cat sleeps on the mat ."), "d09": ("cat", "the cat sleeps ."),
    "d10": ("", "a red car drives on the street ."), "d11": ("", "the tree is big ."),
    "d12": ("", "a small house with a blue car ."), "d13": ("", "the dog swims in the water ."),
    "d14": ("", "a happy child eats food ."), "d15": ("", "the cat is small and happy ."),
    "d16": ("", "a man rides a red bike ."), "d17": ("", "the woman plays with a ball ."),
    "d18": ("", "a big tree and a small house ."), "d19": ("dog", "a dog runs in the park ."),
}
QUERIES = {"q1": "a man plays music", "q2": "the dog runs in the park",
           "q3": "a woman reads a book", "q4": "a cat sleeps", "q5": "the red car"}
# q1: one positive (grade 2) and a judged non-relevant d16; q2: two positives (d02 with
# grades 1 and d03 with 2; d19 has d02's text) and judged non-relevant d13; q3: one
# positive; q4: judged, nothing relevant (not an anchor); q5: no qrels.
QRELS = [("q1", "d01", 2), ("q1", "d16", 0), ("q2", "d02", 1), ("q2", "d13", 0),
         ("q2", "d03", 2), ("q3", "d04", 1), ("q4", "d08", 0)]


def _text(doc_id):
    title, text = DOCS[doc_id]
    return f"{title} {text}".strip()


def write_beir(root, docs=DOCS, queries=QUERIES, qrels=QRELS, split="train"):
    """Writes a BEIR folder under `root` and returns its path."""
    root = str(root)
    os.makedirs(os.path.join(root, "qrels"), exist_ok=True)
    with open(os.path.join(root, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for key, (title, text) in docs.items():
            f.write(json.dumps({"_id": key, "title": title, "text": text}) + "\n")
    with open(os.path.join(root, "queries.jsonl"), "w", encoding="utf-8") as f:
        for key, text in queries.items():
            f.write(json.dumps({"_id": key, "text": text}) + "\n")
    with open(os.path.join(root, "qrels", f"{split}.tsv"), "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        f.writelines(f"{q}\t{d}\t{s}\n" for q, d, s in qrels)
    return root


class _Recording:
    """The real tiny encoder, remembering every text it was asked to embed."""

    def __init__(self, encoder):
        self.encoder, self.seen = encoder, []

    def encode(self, sentences, **kwargs):
        self.seen += list(sentences)
        return self.encoder.encode(sentences, **kwargs)


@pytest.fixture(scope="module")
def beir_dir(tmp_path_factory):
    return write_beir(tmp_path_factory.mktemp("beir") / "tiny")


@pytest.fixture(scope="module")
def tiny(tiny_encoder_dir):
    return load_any(tiny_encoder_dir)


@pytest.fixture(scope="module")
def full_run(beir_dir, tiny):
    """Every allowed candidate of q2 (17 of the 19 distinct document texts), with prompts."""
    encoder = _Recording(tiny)
    pairs, negatives, report = mining.mine_beir(
        encoder, beir_dir, num_negatives=17, query_prompt="query: ",
        document_prompt="passage: ", verbose=0, candidate_chunk=7)
    return pairs, negatives, report, encoder.seen


def test_rows_are_the_positive_qrels_and_positives_are_never_negatives(full_run):
    pairs, negatives, report, _ = full_run
    q, d = QUERIES, _text
    assert pairs == [(q["q1"], d("d01")), (q["q2"], d("d02")), (q["q2"], d("d03")),
                     (q["q3"], d("d04"))]
    positives = {q["q1"]: {d("d01")}, q["q2"]: {d("d02"), d("d03")}, q["q3"]: {d("d04")}}
    distinct_docs = {d(k) for k in DOCS}
    assert len(distinct_docs) == 19
    for (anchor, _), negs in zip(pairs, negatives):
        assert len(set(negs)) == len(negs) == 17
        assert not set(negs) & positives[anchor]  # d19 (d02's text) is not q2's negative
        assert set(negs) <= distinct_docs
    # q2 can take exactly the 17 texts that are not its positives: its judged
    # non-relevant d13 among them; both of its rows share the ranked candidates.
    assert set(negatives[1]) == distinct_docs - positives[q["q2"]]
    assert d("d13") in negatives[1] and negatives[1] == negatives[2]
    assert report["short"] == 0


def test_prompts_are_embedded_but_not_written(full_run):
    pairs, negatives, _, seen = full_run
    anchors = {a for a, _ in pairs}
    assert sorted(seen) == sorted(["query: " + a for a in anchors]
                                  + ["passage: " + _text(k) for k in DOCS if k != "d19"])
    assert not any("query:" in t or "passage:" in t for row in negatives for t in row)


def test_rank_window_takes_the_same_ranking(beir_dir, tiny, full_run):
    _, full, _, _ = full_run
    pairs, negatives, _ = mining.mine_beir(
        tiny, beir_dir, num_negatives=3, range_min=2, range_max=7, query_prompt="query: ",
        document_prompt="passage: ", verbose=0)
    assert negatives == [row[2:5] for row in full]
    with pytest.raises(ConfigError, match=r"--num_negatives=19 .* 19 distinct candidates "
                                          r"\(the documents of .*corpus.jsonl\), minus 1"):
        mining.mine_beir(tiny, beir_dir, num_negatives=19, verbose=0)


class _TableEncoder:
    """Each text a fixed 2-d vector (cosines hand-computable); the prompts must be there."""

    def __init__(self, table):
        self.table = table

    def encode(self, sentences, batch_size=64, normalize=False, verbose=0):
        del batch_size, normalize, verbose
        return np.array([self.table[s] for s in sentences], np.float32)


def _unit(cosine):
    return [cosine, float(np.sqrt(1 - cosine ** 2))]


def test_margin_filters_use_each_rows_own_positive(tmp_path):
    # query "q" at (1, 0); positives p90 (grade 1) and p60 (grade 2); cos(q, x) as named.
    docs = {k: ("", k) for k in ("n95", "p90", "n80", "n70", "p60", "n50", "n30", "z75")}
    cosines = {"n95": 0.95, "p90": 0.9, "n80": 0.8, "n70": 0.7, "p60": 0.6, "n50": 0.5,
               "n30": 0.3, "z75": 0.75}
    table = {f"d: {k}": _unit(c) for k, c in cosines.items()}
    table["q: q"] = [1.0, 0.0]
    root = write_beir(tmp_path / "hand", docs, {"q": "q"},
                      [("q", "p90", 1), ("q", "z75", 0), ("q", "p60", 2)])
    options = dict(num_negatives=3, query_prompt="q: ", document_prompt="d: ", verbose=0)
    run = lambda **extra: mining.mine_beir(_TableEncoder(table), root, **options, **extra)[1]  # noqa: E731
    # z75 is judged non-relevant: a negative like any other.
    assert run() == [["n95", "n80", "z75"], ["n95", "n80", "z75"]]
    assert run(margin=0.0) == [["n80", "z75", "n70"], ["n50", "n30"]]
    assert run(margin=0.12) == [["z75", "n70", "n50"], ["n30"]]     # < 0.78 / < 0.48
    assert run(relative_margin=0.1) == [["n80", "z75", "n70"], ["n50", "n30"]]  # < .81/.54
    assert run(max_score=0.78, range_min=1) == [["z75", "n70", "n50"]] * 2


def test_jsonl_rows_are_the_pairs_file_format(tmp_path):
    rows = [("a q", "a doc", "n1", "n\t2"), ("b q", "b doc", "n3", "n4")]
    path = tmp_path / "rows.jsonl"
    mined_files.write_rows(str(path), rows)
    objects = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert objects == [{"anchor": "a q", "positive": "a doc", "negative_1": "n1",
                        "negative_2": "n\t2"},
                       {"anchor": "b q", "positive": "b doc", "negative_1": "n3",
                        "negative_2": "n4"}]
    mined_files.write_rows(str(tmp_path / "t.jsonl"), [("a", "p", "n")])
    assert json.loads((tmp_path / "t.jsonl").read_text()) == {
        "anchor": "a", "positive": "p", "negative_1": "n"}


def _run(**options):
    """The command's checks and run (`mine_to_file`), in this process; the encoder is
    /nonexistent/no-model, so an error naming it came after every check."""
    return mined_files.mine_to_file(
        load_encoder=lambda: load_any("/nonexistent/no-model", None, None), **options)


def test_cli_refuses_bad_input_before_the_model_loads(tmp_path, beir_dir, absl_messages):
    out = str(tmp_path / "out.jsonl")
    existing = tmp_path / "existing.jsonl"
    existing.write_text("keep\n")
    cases = [
        ({"out": out}, ConfigError, r"--pairs .* or --beir .* is required"),
        ({"pairs": str(tmp_path / "p.tsv"), "beir": beir_dir, "out": out}, ConfigError,
         "--pairs and --beir both"),
        ({"beir": beir_dir, "corpus": str(tmp_path / "c.txt"), "out": out}, ConfigError,
         "--corpus goes with --pairs"),
        ({"beir": f"{beir_dir}:dev", "out": out}, InputError,
         r"qrels/dev.tsv: missing BEIR file \(qrels splits here: train\)"),
        ({"beir": str(tmp_path / "nowhere"), "out": out}, InputError, "not a folder"),
        ({"beir": f"beir:{beir_dir}", "out": f"{beir_dir}/qrels/train.tsv",
          "overwrite": True}, ConfigError, "is also an input"),
        ({"beir": beir_dir, "num_negatives": 19, "out": out}, ConfigError,
         "more than any anchor can get"),
        ({"beir": beir_dir, "out": str(existing)}, ConfigError,
         "already exists; choose a new file or pass --overwrite"),
        ({"beir": beir_dir, "out": out, "query_chunk": 0}, ConfigError,
         "--query_chunk must be >= 1"),
        ({"beir": beir_dir, "out": str(tmp_path), "overwrite": True}, ConfigError,
         "names a folder"),
        ({"beir": beir_dir, "out": str(tmp_path / "newdir") + "/"}, ConfigError,
         "names a folder"),
        ({"beir": beir_dir, "out": f"{beir_dir}/notes.tsv", "overwrite": True},
         ConfigError, r"is also an input \(a file of the folder"),
    ]
    open(os.path.join(beir_dir, "notes.tsv"), "w").close()  # the user's, in the folder
    for options, error, message in cases:
        with pytest.raises(error, match=message):
            _run(**options)
    os.remove(os.path.join(beir_dir, "notes.tsv"))
    # qrels naming unknown ids: ignored with a warning (as the retrieval evaluation reads
    # them) when some rows are usable, refused when none is; a split with no positive.
    bad = write_beir(tmp_path / "bad", qrels=QRELS + [("q9", "d01", 1), ("q1", "d99", 1)])
    with pytest.raises(InputError, match="no-model: encoder directory not found"):
        _run(beir=bad, out=out)
    assert any("1 of 9 qrels name a query not in queries.jsonl, 1 a document" in m
               for m in absl_messages)
    for qrels in ([("q9", "d01", 1), ("q1", "d99", 1)], [("q1", "d01", 0)]):
        root = write_beir(tmp_path / f"none{len(qrels)}", qrels=qrels)
        with pytest.raises(InputError, match="no qrel names a known query and document "
                                             "with score > 0"):
            _run(beir=root, out=out)
    missing = write_beir(tmp_path / "noqueries")
    os.remove(os.path.join(missing, "queries.jsonl"))
    with pytest.raises(InputError, match="queries.jsonl: missing BEIR file"):
        _run(beir=missing, out=out)
    # A tab in a document: a .tsv cannot hold it, a .jsonl can.
    tab = write_beir(tmp_path / "tab", docs={**DOCS, "d20": ("", "a\tb")})
    with pytest.raises(InputError, match=r"tab or a line break, and 1 of the texts do .*"
                                         r"\(--out=....jsonl\)"):
        _run(beir=tab, out=str(tmp_path / "out.tsv"))
    with pytest.raises(InputError, match="no-model: encoder directory not found"):
        _run(beir=tab, out=out)
    assert not os.path.exists(tmp_path / "out.jsonl")
    assert existing.read_text() == "keep\n"


class _Prompted:
    """An encoder saved with prompts (as an export is): `prompts` only."""
    prompts = {"query_prompt": "q: ", "document_prompt": "d: "}


def test_prompts_default_to_the_models_own():
    assert mined_files.resolve_prompts(_Prompted()) == ("q: ", "d: ")
    assert mined_files.resolve_prompts(_Prompted(), "", None) == ("", "d: ")
    assert mined_files.resolve_prompts(object()) == ("", "")
    assert mined_files.resolve_prompts(object(), "query: ", "") == ("query: ", "")


def test_cli_writes_jsonl_n_tuples(tmp_path, beir_dir, tiny_encoder_dir):
    out = tmp_path / "mined.jsonl"
    r = subprocess.run(
        [sys.executable, "-m", "tfsent.mine", f"--model={tiny_encoder_dir}",
         f"--beir={beir_dir}", f"--out={out}", "--num_negatives=2", "--range_min=1",
         "--output_format=n-tuple", "--query_prompt=query: ", "--noprogress"],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"wrote 4 n-tuple rows to {out}" in r.stdout
    assert "cosine to the anchor: positives mean" in r.stderr
    # the next step, on stderr: training on the rows, selected on the folder's dev split
    assert (f"--config.train_data={out} --config.eval_data=beir:{beir_dir}:dev "
            "--output_dir=runs/search") in r.stderr
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(row["anchor"], row["positive"]) for row in rows] == [
        (QUERIES["q1"], _text("d01")), (QUERIES["q2"], _text("d02")),
        (QUERIES["q2"], _text("d03")), (QUERIES["q3"], _text("d04"))]
    for row in rows:
        assert set(row) == {"anchor", "positive", "negative_1", "negative_2"}
        assert all(isinstance(v, str) and v.strip() for v in row.values())


def test_pairs_with_prompts_embed_anchors_apart_and_still_exclude_their_own_text():
    pairs = [("a", "p1"), ("p1", "p2"), ("a", "p3")]
    plain = mining.MiningProblem(pairs, corpus=["p1", "p2", "p3", "a", "x"])
    assert plain.embed_texts == plain.texts == ["p1", "p2", "p3", "a", "x"]
    prompted = mining.MiningProblem(pairs, corpus=["p1", "p2", "p3", "a", "x"],
                                  query_prompt="q: ", document_prompt="d: ")
    assert prompted.texts == ["p1", "p2", "p3", "a", "x", "a", "p1"]
    assert prompted.embed_texts == ["d: p1", "d: p2", "d: p3", "d: a", "d: x", "q: a", "q: p1"]
    assert plain.with_prompts("", "") is plain  # an encoder's own prompts, known late
    assert plain.with_prompts("q: ", "d: ").embed_texts == prompted.embed_texts
    for problem in (plain, prompted):
        excluded = {problem.texts[problem.unique_anchors[r]]: sorted(
            problem.texts[i] for i in problem.exclude[r] if i >= 0) for r in range(2)}
        assert excluded == {"a": ["a", "p1", "p3"], "p1": ["p1", "p2"]}
        assert [problem.texts[i] for i in problem.anchor_ids] == ["a", "p1", "a"]
