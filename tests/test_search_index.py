"""tfsent.formats.search_index / python -m tfsent.index: the `search` signature served the TF
Serving way (a fresh process importing only tensorflow + tensorflow_text, a TF1 session
restoring through the saver_def) against faiss-cpu's exact search, k per request, the
int8 / binary indexes (recall, Hamming candidates against faiss IndexBinaryFlat),
truncate_dim, bad inputs, and minilm-l6 on climate-fever."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, TF_SERVING_LOADER, TINY_WORDS, shared_data_or_skip
from tfsent.formats import quantize
from tfsent.data import beir
from tfsent.encoders import load_encoder
from tfsent.errors import ConfigError, InputError
from tfsent.formats.metadata import list_versions
from tfsent.formats.search_index import export_search_index

faiss = pytest.importorskip("faiss")

K = 10
TOL = 2e-5

# Runs requests against SavedModels in a TF1 session (TF Serving's loader), in a fresh
# interpreter importing only tensorflow and tensorflow_text; a failed request gives its
# error message instead of outputs.
SEARCH_SCRIPT = TF_SERVING_LOADER + r"""
import json, sys
jobs = json.load(open(sys.argv[1]))
results = []
for job in jobs:
    graph = tf.Graph()
    with tf.compat.v1.Session(graph=graph) as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], job["path"])
        answers = []
        for request in job["requests"]:
            sig = meta.signature_def[request["signature"]]
            feed = {}
            for name, value in request["inputs"].items():
                dtype = tf.as_dtype(sig.inputs[name].dtype)
                feed[sig.inputs[name].name] = np.array(
                    value, dtype=object if dtype == tf.string else dtype.as_numpy_dtype)
            names = sorted(sig.outputs)
            try:
                values = sess.run([sig.outputs[n].name for n in names], feed)
            except tf.errors.InvalidArgumentError as e:
                answers.append({"error": e.message})
                continue
            answers.append({n: (np.array([b.decode("utf-8") for b in v.ravel()], object)
                                .reshape(v.shape).tolist() if v.dtype == object else v.tolist())
                            for n, v in zip(names, values)})
        results.append(answers)
mods = sorted({k.split(".")[0] for k in sys.modules if k.split(".")[0] in ("tfsent", "keras_hub")})
json.dump({"results": results, "modules": mods}, open(sys.argv[2], "w"))
"""


def serve_search(tmp_path, jobs):
    """[(path, [request, ...]), ...] -> per job, per request, the outputs as lists (or
    {"error": message}); run the TF Serving way in a fresh TF-only process."""
    jobs_file, out_file = tmp_path / "jobs.json", tmp_path / "answers.json"
    jobs_file.write_text(json.dumps([{"path": p, "requests": r} for p, r in jobs]))
    r = subprocess.run([sys.executable, "-c", SEARCH_SCRIPT, str(jobs_file), str(out_file)],
                       capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(out_file.read_text())
    assert out["modules"] == [], out["modules"]  # neither tfsent nor keras_hub was imported
    return out["results"]


def search_request(queries, k, signature="search"):
    key = "queries" if signature == "search" else "query_embeddings"
    return {"signature": signature, "inputs": {key: queries, "k": k}}


def read_index(version_dir, name):
    """A variable of the export's checkpoint whose path contains `name` (the index)."""
    reader = tf.train.load_checkpoint(os.path.join(version_dir, "variables", "variables"))
    (key,) = [k for k in reader.get_variable_to_shape_map() if k.startswith(f"{name}/")]
    value = reader.get_tensor(key)
    return [v.decode() for v in value] if value.dtype == object else value


def assert_same_top_k(ids, scores, exact, doc_ids, k=K, tol=TOL):
    """`ids`/`scores` (one query's results) are the top k of `exact` (its scores over all
    documents) up to ties: every document clearly above the k-th score is there, nothing
    clearly below it, and each score is the document's exact score, best first."""
    kth = np.sort(exact)[::-1][k - 1]
    must = {doc_ids[i] for i in np.flatnonzero(exact > kth + tol)}
    allowed = {doc_ids[i] for i in np.flatnonzero(exact >= kth - tol)}
    assert len(ids) == k and len(set(ids)) == k
    assert must <= set(ids) <= allowed, (must - set(ids), set(ids) - allowed)
    position = {d: i for i, d in enumerate(doc_ids)}
    np.testing.assert_allclose(scores, [exact[position[d]] for d in ids], atol=tol)
    assert all(a >= b - tol for a, b in zip(scores, scores[1:]))


def _recall(found, truth):
    return np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)])


# ---------------------------------------------------------------------------------------
# The tiny encoder on a tiny corpus
# ---------------------------------------------------------------------------------------

def _tiny_texts(rng, count, exclude=()):
    texts, seen = [], set(exclude)
    while len(texts) < count:
        text = " ".join(rng.choice(TINY_WORDS, rng.integers(3, 10)))
        if text not in seen:
            seen.add(text)
            texts.append(text)
    return texts


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
    """A corpus.jsonl of 300 distinct random sentences (every third with a title) and 12
    queries, in the tiny encoder's vocabulary."""
    rng = np.random.default_rng(7)
    texts = _tiny_texts(rng, 300)
    queries = _tiny_texts(rng, 12, exclude=texts)
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    with open(path, "w") as f:
        for i, text in enumerate(texts):
            row = {"_id": f"doc-{i}", "text": text}
            if i % 3 == 0:
                row["title"] = "the red car"
            f.write(json.dumps(row) + "\n")
    return str(path), queries


def _index_cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "tfsent.index", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))


@pytest.fixture(scope="module")
def tiny_float_export(tmp_path_factory, tiny_encoder_dir, tiny_corpus):
    """A float32 index of the tiny corpus written by the CLI, with query and document
    prompts."""
    export_dir = str(tmp_path_factory.mktemp("search") / "export")
    r = _index_cli(f"--model={tiny_encoder_dir}", f"--corpus={tiny_corpus[0]}",
                   f"--export_dir={export_dir}", "--query_prompt=the man ",
                   "--document_prompt=a ", "--batch_size=32")
    assert r.returncode == 0, r.stderr[-3000:]
    path = r.stdout.strip().splitlines()[-1]
    assert path == os.path.join(export_dir, "1") and list_versions(export_dir) == [1]
    assert f'  query:    tf.saved_model.load("{path}").signatures["search"]' in r.stderr
    assert sorted(os.listdir(export_dir)) == ["1"]  # no staging folder left
    return path


def test_the_documented_query_snippet_runs(tiny_float_export, tmp_path, capsys):
    """docs/search.md's Python block, executed as written on the tiny index (its path in
    place of exports/search/1)."""
    text = open(os.path.join(REPO, "docs", "search.md"), encoding="utf-8").read()
    start = text.index("```python\n", text.index("## A top-k search SavedModel"))
    code = text[start + len("```python\n"):text.index("```", start + 10)]
    assert '"exports/search/1"' in code
    code = code.replace('"exports/search/1"', repr(tiny_float_export))
    namespace = {}
    exec(compile(code, "docs/search.md", "exec"), namespace)  # noqa: S102
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 and printed[0].startswith("glaciers [('doc-")
    assert namespace["found"]["ids"].shape == (2, 5)


def _tiny_exports(encoder, corpus, root, **kwargs):
    return {kind: export_search_index(encoder, corpus, os.path.join(root, kind),
                                      quantize_index=None if kind == "float32" else kind,
                                      verbose=0, **kwargs)
            for kind in ("float32", "int8", "binary")}


@pytest.fixture(scope="module")
def tiny_served(tmp_path_factory, tiny_float_export, tiny_encoder_dir, tiny_corpus):
    """The requests of the two tests below, served in one fresh TF-only process (each such
    process costs a TensorFlow import): the CLI's float index with its prompts (k per
    request, k out of range, serving_default on prompted documents and queries), and the
    float32 / int8 / binary indexes exported by the library on the same corpus."""
    corpus_path, queries = tiny_corpus
    corpus = beir.read_corpus(corpus_path)
    root = tmp_path_factory.mktemp("tiny_served")
    exports = _tiny_exports(load_encoder(tiny_encoder_dir), corpus, str(root / "exports"))
    prompted_requests = [
        search_request(queries, K), search_request(queries, 3),
        search_request(queries, 0), search_request(queries, len(corpus) + 1),
        search_request(queries, len(corpus)),
        {"signature": "serving_default", "inputs": {"sentences": ["a " + t for t in corpus.texts]}},
        {"signature": "serving_default", "inputs": {"sentences": ["the man " + q for q in queries]}},
    ]
    answers = serve_search(root, [(tiny_float_export, prompted_requests)] + [
        (exports[kind], [search_request(queries, K)]) for kind in ("float32", "int8", "binary")])
    return {"prompted": answers[0], "exports": exports,
            "by_kind": dict(zip(("float32", "int8", "binary"), answers[1:]))}


def test_search_served_the_tf_serving_way_equals_faiss_exact_search(
        tiny_float_export, tiny_corpus, tiny_served):
    corpus_path, queries = tiny_corpus
    corpus = beir.read_corpus(corpus_path)
    top10, top3, k_zero, k_over, k_all, documents, prompted = tiny_served["prompted"]
    matrix = read_index(tiny_float_export, "index_vectors")
    assert read_index(tiny_float_export, "index_ids") == corpus.ids
    # The index holds the model's normalised embeddings of document prompt + title + text,
    # and `search` embeds query prompt + query with the same graph as serving_default.
    np.testing.assert_allclose(matrix, documents["embedding_normalized"], atol=1e-5)
    embeddings = np.array(top10["embeddings"], np.float32)
    np.testing.assert_allclose(embeddings, prompted["embedding_normalized"], atol=1e-6)
    assert np.array(top10["ids"]).shape == (len(queries), K)
    # faiss's exact inner-product search over the same normalised vectors.
    index = faiss.IndexFlatIP(matrix.shape[1])
    index.add(matrix)
    _, faiss_top = index.search(embeddings, K)
    exact = embeddings @ matrix.T
    for q in range(len(queries)):
        assert_same_top_k(top10["ids"][q], top10["scores"][q], exact[q], corpus.ids)
        faiss_ids = [corpus.ids[i] for i in faiss_top[q]]
        kth = np.sort(exact[q])[::-1][K - 1]
        for differing in set(faiss_ids) ^ set(top10["ids"][q]):  # ties only
            assert abs(exact[q][corpus.ids.index(differing)] - kth) <= TOL
        # k chosen per request in the same session: k=3 is the head of k=10.
        assert_same_top_k(top3["ids"][q], top3["scores"][q], exact[q], corpus.ids, k=3)
        np.testing.assert_allclose(top3["scores"][q], top10["scores"][q][:3], atol=1e-6)
    assert sorted(k_all["ids"][0]) == sorted(corpus.ids)  # k = corpus size is allowed
    for answer, k in ((k_zero, 0), (k_over, len(corpus) + 1)):
        assert f"k={k} is out of range: k must be between 1 and the corpus size " \
               f"{len(corpus)}" in answer["error"]


def test_int8_and_binary_indexes_recall_and_hamming_candidates(tiny_corpus, tiny_served):
    corpus_path, queries = tiny_corpus
    corpus = beir.read_corpus(corpus_path)
    exports = tiny_served["exports"]
    (floats,), (int8,), (binary,) = (tiny_served["by_kind"][kind]
                                     for kind in ("float32", "int8", "binary"))
    matrix = read_index(exports["float32"], "index_vectors")
    q = np.array(floats["embeddings"], np.float32)
    np.testing.assert_allclose(int8["embeddings"], q, atol=1e-6)
    exact = q @ matrix.T
    truth = [[corpus.ids[i] for i in np.argsort(-row, kind="stable")[:K]] for row in exact]
    # int8: min/max per dimension over the corpus; the scores are the query against the
    # dequantized codes.
    codes = read_index(exports["int8"], "index_int8")
    lo, hi = quantize.calibrate_int8(matrix)
    np.testing.assert_array_equal(codes, quantize.int8_codes(matrix, lo, hi))
    step = np.where(hi > lo, (hi - lo) / 255.0, 1.0)
    dequantized = lo + step * (codes.astype(np.float64) + 128.0)
    for row, ids, scores in zip(q, int8["ids"], int8["scores"]):
        assert_same_top_k(ids, scores, dequantized @ row, corpus.ids, tol=1e-4)
    int8_recall, binary_recall = _recall(int8["ids"], truth), _recall(binary["ids"], truth)
    print(f"tiny encoder (16 dims), 300 documents: recall@10 int8 {int8_recall:.3f}, "
          f"binary {binary_recall:.3f}")
    # Floors measured on this corpus; 16 sign bits per document make binary weak here
    # (the minilm-l6 test below and the benchmark's harness test measure 384 dimensions).
    assert int8_recall >= 0.9  # measured 0.99
    assert binary_recall >= 0.1  # measured 0.16
    # binary: the Hamming candidates are faiss IndexBinaryFlat's (up to ties at the last
    # distance), then rescored with the float query against the candidates' +-1 signs.
    bits = read_index(exports["binary"], "index_binary")
    np.testing.assert_array_equal(bits, quantize.binary_codes(matrix))
    index = faiss.IndexBinaryFlat(8 * bits.shape[1])
    index.add(bits)
    candidates = 4 * K
    distances, faiss_top = index.search(np.packbits(q > 0, axis=1), candidates)
    signs = quantize.binary_as_signs(bits, matrix.shape[1])
    for n in range(len(queries)):
        ours, hamming = binary["candidate_ids"][n], binary["candidate_hamming"][n]
        np.testing.assert_array_equal(hamming, distances[n])
        last = distances[n][-1]
        assert ({d for d, h in zip(ours, hamming) if h < last}
                == {corpus.ids[i] for i, h in zip(faiss_top[n], distances[n]) if h < last})
        rows = [corpus.ids.index(d) for d in ours]
        rescored = np.full(len(corpus), -np.inf)
        rescored[rows] = signs[rows] @ q[n] / np.sqrt(matrix.shape[1])
        assert_same_top_k(binary["ids"][n], binary["scores"][n], rescored, corpus.ids)


def test_truncate_dim_keeps_the_first_dimensions(tiny_encoder_dir, tiny_corpus, tmp_path):
    corpus = beir.read_corpus(tiny_corpus[0])
    encoder = load_encoder(tiny_encoder_dir)
    path = export_search_index(encoder, corpus, str(tmp_path / "export"), truncate_dim=8,
                               verbose=0)
    full = encoder.encode(corpus.texts, verbose=0)
    matrix = read_index(path, "index_vectors")
    assert matrix.shape == (len(corpus), 8)
    np.testing.assert_allclose(matrix, quantize.l2_normalize(full[:, :8]), atol=1e-5)
    loaded = tf.saved_model.load(path)
    out = loaded.signatures["search"](queries=tf.constant(tiny_corpus[1]), k=tf.constant(5))
    q = out["embeddings"].numpy()
    assert q.shape == (len(tiny_corpus[1]), 8)
    np.testing.assert_allclose(q, quantize.l2_normalize(
        encoder.encode(tiny_corpus[1], verbose=0)[:, :8]), atol=1e-5)
    for row, ids, scores in zip(q, out["ids"].numpy().astype(str), out["scores"].numpy()):
        assert_same_top_k(list(ids), scores, matrix @ row, corpus.ids, k=5)
    with pytest.raises(ConfigError, match="truncate_dim"):
        export_search_index(encoder, corpus, str(tmp_path / "too_wide"), truncate_dim=17)
    assert not os.path.exists(tmp_path / "too_wide")


def test_chunked_scan_equals_one_chunk(tiny_encoder_dir):
    """The corpus scanned 64 rows at a time (a running top-k over 8 chunks, the last one
    short) gives what one chunk gives, for every index kind, with ties (equal rows in
    different chunks) in corpus order."""
    from tfsent.formats.search_index import SearchModule

    encoder = load_encoder(tiny_encoder_dir)
    rng = np.random.default_rng(3)
    vectors = quantize.l2_normalize(rng.standard_normal((500, 16)))
    vectors[[10, 200, 450]] = vectors[300]  # exact ties in four different chunks
    ids = [f"d{i}" for i in range(500)]
    queries = tf.constant(np.concatenate([vectors[300:301], rng.standard_normal((7, 16))]),
                          tf.float32)
    for kind in ("float32", "int8", "binary"):
        modules = [SearchModule(encoder, "mean", ids, vectors, kind, chunk_rows=rows)
                   for rows in (64, 1000)]
        out = [m.search_embeddings(queries, tf.constant(K)) for m in modules]
        np.testing.assert_array_equal(out[0]["ids"].numpy(), out[1]["ids"].numpy())
        np.testing.assert_allclose(out[0]["scores"].numpy(), out[1]["scores"].numpy(),
                                   atol=1e-6)
        if kind != "binary":  # the four equal rows come first, lowest row first
            assert list(out[0]["ids"].numpy()[0, :4].astype(str)) == ["d10", "d200", "d300",
                                                                      "d450"]


# ---------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------

BAD_INPUT = [
    ("missing", "corpus.jsonl: file not found"),
    ("duplicate", "duplicate document _id 'x'"),
    ("quantize", "--quantize: 'int4' is not an index quantization"),
    ("truncate", "--truncate_dim must be >= 0, got -1"),
    # TF Serving serves a folder's newest version: an index never lands among embeddings.
    ("other_kind", "holds version 1 of a tf_saved_model export; a search_index export "
                   "goes in a folder of its own"),
]


@pytest.fixture(scope="module")
def bad_input_runs(tmp_path_factory, tiny_corpus):
    """{case: (the CLI's CompletedProcess, its export dir)}: `python -m tfsent.index` with
    a model that does not exist and each bad input, each a process of its own forked from
    one that imported TensorFlow once (conftest.cli_runs_in_one_process)."""
    from conftest import cli_runs_in_one_process

    root = tmp_path_factory.mktemp("bad_input")
    cases, exports = [], []
    for case, _ in BAD_INPUT:
        folder = root / case
        folder.mkdir()
        corpus, extra = tiny_corpus[0], []
        if case == "missing":
            corpus = str(folder / "nowhere" / "corpus.jsonl")
        elif case == "duplicate":
            corpus = str(folder / "corpus.jsonl")
            with open(corpus, "w") as f:
                f.write('{"_id": "x", "text": "a"}\n{"_id": "x", "text": "b"}\n')
        elif case == "other_kind":
            meta = folder / "export" / "1" / "assets.extra"
            meta.mkdir(parents=True)
            (meta / "tfsent_export.json").write_text('{"format": "tf_saved_model"}')
            (folder / "export" / "1" / "saved_model.pb").write_bytes(b"an embedding model")
        else:
            extra = {"quantize": ["--quantize=int4"], "truncate": ["--truncate_dim=-1"]}[case]
        exports.append(folder / "export")
        # A model that does not exist: the error must come before any attempt to load it.
        cases.append(["--model=/nonexistent/model", f"--corpus={corpus}",
                      f"--export_dir={exports[-1]}", *extra])
    runs = cli_runs_in_one_process(
        "tfsent.index", cases, str(root),
        preload=("tfsent.cli", "tfsent.formats", "tfsent.encoders"), timeout=300)
    return {case: (r, export) for (case, _), r, export in zip(BAD_INPUT, runs, exports)}


@pytest.mark.parametrize("case,expected", BAD_INPUT)
def test_cli_refuses_bad_input_before_loading_the_model(case, expected, bad_input_runs):
    r, export_dir = bad_input_runs[case]
    assert r.returncode == 2, r.stderr[-2000:]
    assert expected in r.stderr, r.stderr[-2000:]
    if case == "other_kind":  # nothing written beside the version there
        assert sorted(os.listdir(export_dir)) == ["1"]
        assert sorted(os.listdir(export_dir / "1")) == ["assets.extra", "saved_model.pb"]
    else:
        assert not export_dir.exists()  # nothing written


def test_library_refuses_an_existing_version_and_bad_embeddings(
        tiny_encoder_dir, tiny_corpus, tmp_path):
    corpus = beir.read_corpus(tiny_corpus[0])
    encoder = load_encoder(tiny_encoder_dir)
    export_dir = tmp_path / "export"
    (export_dir / "1").mkdir(parents=True)
    (export_dir / "1" / "saved_model.pb").write_bytes(b"someone else's model")
    with pytest.raises(ConfigError, match="export version 1 already exists"):
        export_search_index(encoder, corpus, str(export_dir), version=1, verbose=0)
    assert sorted(os.listdir(export_dir)) == ["1"]
    assert (export_dir / "1" / "saved_model.pb").read_bytes() == b"someone else's model"
    with pytest.raises(InputError, match=r"embeddings have shape \(3, 16\)"):
        export_search_index(encoder, corpus, str(tmp_path / "other"),
                            embeddings=np.zeros((3, 16)))
    assert not (tmp_path / "other").exists()
    with pytest.raises(ConfigError, match="not an index quantization"):
        export_search_index(encoder, corpus, str(tmp_path / "other"), quantize_index="pq")
    with pytest.raises(InputError, match="duplicate ids"):
        export_search_index(encoder, beir.Corpus(["a", "a"], ["x", "y"]),
                            str(tmp_path / "other"))


# ---------------------------------------------------------------------------------------
# minilm-l6 on climate-fever (acceptance 3 of the issue)
# ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def climate_fever_export(tmp_path_factory, climate_fever_minilm_corpus):
    """A float32 minilm-l6 index of climate-fever's 5,240 sentences, its stored matrix, the
    test split and the encoder. The corpus embeddings are conftest's, computed once per
    test run for this file and test_retrieval.py (the export's own encoding of documents
    is tested on the tiny corpus above)."""
    directory = shared_data_or_skip("retrieval", "climate-fever")
    corpus, embeddings = climate_fever_minilm_corpus
    split = beir.read_split(directory, "test", corpus=corpus)
    encoder = load_encoder("minilm-l6")
    path = export_search_index(encoder, split.corpus,
                               str(tmp_path_factory.mktemp("climate_fever")),
                               embeddings=embeddings, verbose=0)
    return split, path, read_index(path, "index_vectors"), encoder


def test_minilm_climate_fever_top10_equals_exact_float_search(climate_fever_export,
                                                              tmp_path):
    from tfsent.formats.search_index import SearchModule

    split, path, matrix, encoder = climate_fever_export
    claims = split.query_texts
    batches = [claims[i:i + 64] for i in range(0, len(claims), 64)]
    (served,) = serve_search(tmp_path, [(path, [search_request(b, K) for b in batches])])
    ids = [row for answer in served for row in answer["ids"]]
    scores = [row for answer in served for row in answer["scores"]]
    q = np.array([row for answer in served for row in answer["embeddings"]], np.float32)
    # The served query embeddings are the model's.
    np.testing.assert_allclose(q, encoder.encode(claims, normalize=True, verbose=0),
                               atol=1e-4)
    exact = q @ matrix.T  # exact float32 search in NumPy
    for n in range(len(claims)):
        assert_same_top_k(ids[n], scores[n], exact[n], split.corpus.ids)
    # int8 / binary recall@10 against exact float32 on the same vectors (the search
    # module in this process: its graph is the exports', tested served above).
    truth = [[split.corpus.ids[i] for i in np.argsort(-row, kind="stable")[:K]]
             for row in exact]
    recall = {}
    for kind in ("int8", "binary"):
        module = SearchModule(encoder, "mean", split.corpus.ids, matrix, kind)
        found = module.search_embeddings(tf.constant(q), tf.constant(K))["ids"].numpy()
        recall[kind] = _recall([[b.decode() for b in row] for row in found], truth)
    print(f"climate-fever test claims ({len(claims)}), minilm-l6: recall@10 vs float32 "
          f"{recall}")
    assert recall["int8"] >= 0.97  # measured 0.994
    assert recall["binary"] >= 0.6  # measured 0.677 (384 sign bits, 4x candidates)
