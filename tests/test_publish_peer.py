"""The real clients: sentence-transformers and transformers (PyTorch) load tfsent's exports
and embed the STS-B test sentences (the demo corpus without ../shared/data) as tfsent does:
cosine >= 0.99999 for every sentence, the same dimension, the same normalisation.

The PyTorch side runs in the peer venv that benchmarks/peer_env.py builds (tfsent never
imports torch), driven by subprocess (benchmarks/peer_embed.py), once for all cases. Without
that venv these tests skip locally and fail in CI (CI=true), where .ci/run builds it.
Also here: a CLSR run of the training CLI with --config.export_formats (its head as Dense
modules), checked without torch against its SavedModel, then in sentence-transformers.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, SHARED_DATA, TINY_RUN_FLAGS, minilm_or_skip

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import export_fidelity  # noqa: E402  (benchmarks/: comparison and peer helpers)
from hf_decoder_checkpoints import make_qwen3_embedding_dir  # noqa: E402
import peer_env  # noqa: E402

from tfsent import formats  # noqa: E402
from tfsent.encoders.huggingface.writing import write_hf_model  # noqa: E402
from tfsent.formats.sentence_transformers import ST_POOLINGS  # noqa: E402
from tfsent.encoders import SentenceEncoder, load_encoder, resolve_short_name  # noqa: E402
from tfsent.layers.heads import MLPEncoder  # noqa: E402
from tfsent.formats.saved_model import export_encoder  # noqa: E402
from tfsent.serving import SavedModelEncoder  # noqa: E402
from tfsent.testing import tiny_encoder  # noqa: E402

MIN_COSINE = export_fidelity.MIN_COSINE
EXTRA = ["", "Café au lait, NAÏVE résumé!", "東京 is in 日本.", "word " * 300]
HF_POOLINGS = ("mean", "cls", "cls_before_pooler", "mean_no_cls", "first_last_avg",
               "emb_last_avg", "last2_avg")
# all-MiniLM-L6-v2 in CI: every 8th STS-B test sentence (TFSENT_PUBLISH_ALL=1: all of them;
# benchmarks/export_fidelity.py runs the full check).
MINILM_STRIDE = 1 if os.environ.get("TFSENT_PUBLISH_ALL") else 8


def peer_python():
    """The peer venv's python; skip (locally) or fail (CI=true) without it."""
    python = os.environ.get("TFSENT_PEER_PYTHON") or peer_env.ready_peer_python()
    if python and os.path.exists(python):
        return python
    message = ("needs the PyTorch peer venv (sentence-transformers, transformers): build it "
               "with `python benchmarks/peer_env.py --peer_profile=clients` (a few minutes, "
               "once) or point TFSENT_PEER_PYTHON at one")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + " -- in CI, .ci/run builds it, so its absence is a failure")
    pytest.skip(message)


def assert_same_embeddings(reference, got, what):
    stats = export_fidelity.compare(reference, got)
    assert np.shape(got) == np.shape(reference), f"{what}: {stats}"
    assert stats["min_cosine"] >= MIN_COSINE, f"{what}: {stats}"
    assert stats["norm_rel_diff"] < 1e-4, f"{what}: {stats}"  # same normalisation
    print(f"{what}: {stats['n']} sentences, dim {stats['dim']}, min cosine "
          f"{stats['min_cosine']:.7f}")
    return stats


def randomize(backbone, seed=0):
    rng = np.random.default_rng(seed)
    for v in backbone.weights:
        base = 1.0 if v.path.endswith("gamma") else 0.0
        v.assign((base + 0.2 * rng.standard_normal(tuple(v.shape))).astype("float32"))


@pytest.fixture(scope="module")
def sentences():
    return export_fidelity.check_sentences(SHARED_DATA)[1] + EXTRA


@pytest.fixture(scope="module")
def clsr_run(tmp_path_factory, tiny_encoder_dir):
    """A short CLSR run (tiny encoder) with --config.export_formats=saved_model,
    sentence_transformers."""
    tmp = tmp_path_factory.mktemp("clsr")
    texts = ["a man plays the guitar .", "the dog runs in the park", "a red car",
             "the small child reads a book", "a woman rides a bike on the street"]
    pairs = tmp / "pairs.tsv"
    pairs.write_text("".join(f"{a}\t{b}\n" for a, b in zip(texts, texts[1:])) * 8,
                     encoding="utf-8")
    out = tmp / "run"
    r = subprocess.run(
        [sys.executable, "-m", "tfsent.train", "--method=clsr", f"--output_dir={out}",
         f"--config.encoder={tiny_encoder_dir}", f"--config.train_data={pairs}",
         "--config.batch_size=8", "--config.steps=10", "--config.eval_every=10",
         "--config.steps_per_execution=10", "--config.eval_max_seq_length=16",
         "--config.export_formats=saved_model,sentence_transformers", *TINY_RUN_FLAGS],
        cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True,
        text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def _served(run_dir, sentences):
    return SavedModelEncoder(os.path.join(run_dir, "export")).encode(sentences)


def test_clsr_run_export_without_torch(clsr_run):
    """The run's sentence-transformers directory holds Transformer, Pooling and CLSR's MLP
    as two Dense modules; sentence-transformers' pipeline transcribed in NumPy over the
    exported transformer gives what the run's SavedModel serves."""
    from test_publish import SENTENCES, st_pipeline_numpy

    st = clsr_run / "export_sentence_transformers" / "1"
    metrics = json.load(open(clsr_run / "metrics.json"))
    assert metrics["exports"] == {"sentence_transformers": str(st)}
    modules = json.load(open(st / "modules.json"))
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["Transformer", "Pooling",
                                                                 "Dense", "Dense"]
    # The exported transformer alone (load_encoder refuses a sentence-transformers directory
    # whose Dense head it cannot run): its Hugging Face files without modules.json.
    transformer = clsr_run / "transformer_only"
    if not transformer.exists():
        shutil.copytree(st, transformer, ignore=shutil.ignore_patterns("modules.json"))
    base = load_encoder(str(transformer), pooling="mean", max_seq_length=16)
    features = base.tokenize(SENTENCES)
    hidden = [h.numpy() for h in base(features, output_hidden_states=True)["hidden_states"]]
    got = st_pipeline_numpy(str(st), hidden, features["padding_mask"].numpy())
    np.testing.assert_allclose(got, _served(clsr_run, SENTENCES), rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def peer(request, tmp_path_factory, sentences):
    """Every export checked against the real clients, in one peer process:
    {case: (tfsent's embeddings, the client's, the client's loading report)}."""
    python = peer_python()  # skip / fail before building anything
    clsr_run = request.getfixturevalue("clsr_run")
    work = str(tmp_path_factory.mktemp("peer"))
    cases, jobs = {}, []

    def add(name, reference, job):
        job["out"] = os.path.join(work, f"{name}.npy")
        cases[name] = (reference, len(jobs))
        jobs.append(job)

    sentences_file = export_fidelity.write_sentences(sentences, work)
    # A tiny random BERT with all-MiniLM-L6-v2's vocabulary (real WordPiece on real text),
    # exact GELU as in every Hugging Face BERT, every weight random.
    minilm_or_skip()
    vocab = os.path.join(resolve_short_name("minilm-l6"), "vocab.txt")
    vocabulary = open(vocab, encoding="utf-8").read().splitlines()
    enc = tiny_encoder(vocabulary, num_layers=3, hidden_dim=32, num_heads=4,
                       intermediate_dim=64, max_seq_length=48)
    randomize(enc.backbone)
    head = MLPEncoder(40, 24)
    head.build((None, 32))
    randomize(head, seed=5)
    for pooling in ST_POOLINGS:
        normalize = pooling in ("mean", "cls")
        path = formats.export(enc, os.path.join(work, f"st_{pooling}"),
                              format="sentence_transformers", pooling=pooling,
                              normalize=normalize)
        add(f"st_{pooling}", enc.encode(sentences, pooling=pooling, normalize=normalize,
                                        verbose=0),
            {"kind": "sentence_transformers", "model_dir": path,
             "sentences": sentences_file})
    path = formats.export(enc, os.path.join(work, "st_head"), format="sentence_transformers",
                          pooling="cls", head=head, normalize=True)
    ref = np.array(head(enc.encode(sentences, pooling="cls", verbose=0)))
    add("st_head", ref / np.linalg.norm(ref, axis=1, keepdims=True),
        {"kind": "sentence_transformers", "model_dir": path, "sentences": sentences_file})
    # Query / document prompts: sentence-transformers' encode_query / encode_document on
    # the published folder against the SavedModel's encode_query / encode_document.
    prompts = {"query_prompt": "query: ", "document_prompt": "passage: "}
    served = SavedModelEncoder(export_encoder(enc, os.path.join(work, "sm_prompts"),
                                              pooling="mean", **prompts))
    path = formats.export(enc, os.path.join(work, "st_prompts"),
                          format="sentence_transformers", pooling="mean", **prompts)
    for side in ("query", "document"):
        add(f"st_prompts_{side}", getattr(served, f"encode_{side}")(sentences),
            {"kind": "sentence_transformers", "model_dir": path,
             "sentences": sentences_file, "encode": side})
    hf = formats.export(enc, os.path.join(work, "hf"), format="huggingface")
    for pooling in HF_POOLINGS:
        add(f"hf_{pooling}", enc.encode(sentences, pooling=pooling, verbose=0),
            {"kind": "transformers", "model_dir": hf, "sentences": sentences_file,
             "pooling": pooling, "max_seq_length": 48, "normalize": False})
    # all-MiniLM-L6-v2 itself, re-exported, against tfsent and against its own directory.
    minilm = load_encoder("minilm-l6", pooling="mean", max_seq_length=256)
    subset = sentences[::MINILM_STRIDE]
    subset_file = os.path.join(work, "subset.json")
    json.dump(subset, open(subset_file, "w", encoding="utf-8"), ensure_ascii=False)
    reference = minilm.encode(subset, normalize=True, verbose=0)
    st = formats.export(minilm, os.path.join(work, "minilm_st"),
                        format="sentence_transformers", normalize=True)
    add("minilm_st", reference, {"kind": "sentence_transformers", "model_dir": st,
                                 "sentences": subset_file})
    add("minilm_original", None, {"kind": "sentence_transformers",
                                  "model_dir": resolve_short_name("minilm-l6"),
                                  "sentences": subset_file})
    hf = formats.export(minilm, os.path.join(work, "minilm_hf"), format="huggingface")
    add("minilm_hf", reference, {"kind": "transformers", "model_dir": hf,
                                 "sentences": subset_file, "pooling": "mean",
                                 "max_seq_length": 256, "normalize": True})
    # The training CLI's CLSR export against the run's SavedModel.
    add("clsr_run", _served(clsr_run, sentences),
        {"kind": "sentence_transformers", "sentences": sentences_file,
         "model_dir": str(clsr_run / "export_sentence_transformers" / "1")})
    # Random keras-hub backbones of every family, written as Hugging Face checkpoints.
    families = _family_jobs(work)
    for name, (reference, job) in families.items():
        add(name, reference, job)
    # One torch thread, passive OpenMP waits: these models are small, and on a busy 2-core
    # machine spinning threads cost more than they bring.
    arrays, result = export_fidelity.run_peer(python, jobs, work, threads=1,
                                              env={"OMP_WAIT_POLICY": "PASSIVE"})
    reports = result["jobs"]
    return {name: (ref, arrays[i], reports[i]) for name, (ref, i) in cases.items()}


def _family_jobs(work):
    import keras_hub

    classes = {"bert": keras_hub.models.BertBackbone,
               "roberta": keras_hub.models.RobertaBackbone,
               "xlm-roberta": keras_hub.models.XLMRobertaBackbone,
               "distilbert": keras_hub.models.DistilBertBackbone}
    rng = np.random.default_rng(0)
    lengths = np.array([12, 7, 1, 3])
    mask = (np.arange(12)[None, :] < lengths[:, None]).astype("int32")
    out = {}
    for family, cls in classes.items():
        backbone = cls(vocabulary_size=60, num_layers=2, num_heads=2, hidden_dim=16,
                       intermediate_dim=24, max_sequence_length=20)
        randomize(backbone, seed=len(out) + 1)
        path = os.path.join(work, f"family_{family}")
        os.makedirs(path)
        write_hf_model(backbone, path)
        # Ids >= 3 (RoBERTa's padding_idx is 1), padding positions hold the pad id.
        ids = np.where(mask == 1, rng.integers(3, 60, mask.shape), 1 if "roberta" in family
                       else 0).astype("int32")
        inputs = {"token_ids": ids, "padding_mask": mask}
        if family == "bert":
            inputs["segment_ids"] = np.zeros_like(ids)
        outputs = backbone(inputs)  # BERT: a dict; the others: the sequence output
        hidden = np.asarray(outputs["sequence_output"] if isinstance(outputs, dict)
                            else outputs)
        np.savez(os.path.join(work, f"family_{family}.npz"), token_ids=ids, padding_mask=mask)
        out[f"family_{family}"] = (hidden, {"kind": "transformers_ids", "model_dir": path,
                                            "inputs": os.path.join(work,
                                                                   f"family_{family}.npz")})
    return out


@pytest.mark.parametrize("pooling", list(ST_POOLINGS) + ["head"])
def test_sentence_transformers_loads_the_export(peer, pooling):
    reference, got, report = peer[f"st_{pooling}"]
    assert_same_embeddings(reference, got, f"sentence-transformers, {pooling}")
    assert report["dimension"] == reference.shape[1] and report["max_seq_length"] == 48
    if pooling in ("mean", "cls", "head"):
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("pooling", HF_POOLINGS)
def test_transformers_automodel_loads_the_export(peer, pooling):
    reference, got, report = peer[f"hf_{pooling}"]
    assert report["model_class"] == "BertModel"
    assert report["missing_keys"] == [] and report["unexpected_keys"] == []
    assert report["mismatched_keys"] == []
    assert_same_embeddings(reference, got, f"transformers AutoModel + {pooling}")


def test_minilm_reexport_embeds_as_the_original(peer):
    """all-MiniLM-L6-v2 loaded by tfsent and re-exported: sentence-transformers embeds
    with it as with the original directory, and as tfsent does; AutoModel + mean pooling
    too."""
    reference, st, report = peer["minilm_st"]
    _, original, original_report = peer["minilm_original"]
    assert report["modules"] == original_report["modules"] == ["Transformer", "Pooling",
                                                               "Normalize"]
    assert report["max_seq_length"] == original_report["max_seq_length"] == 256
    assert_same_embeddings(original, st, "minilm: original dir vs re-export (ST)")
    np.testing.assert_allclose(st, original, atol=2e-6)
    assert_same_embeddings(reference, st, "minilm: tfsent vs re-export (ST)")
    reference, hf, _ = peer["minilm_hf"]
    assert_same_embeddings(reference, hf, "minilm: tfsent vs AutoModel + mean")


def test_clsr_run_export_in_sentence_transformers(peer):
    reference, got, report = peer["clsr_run"]
    assert report["modules"] == ["Transformer", "Pooling", "Dense", "Dense"]
    assert_same_embeddings(reference, got, "CLSR run: SavedModel vs sentence-transformers")


@pytest.mark.parametrize("family", ["bert", "roberta", "xlm-roberta", "distilbert"])
def test_family_weight_maps_in_transformers(peer, family):
    """Each family's weight map, checked by transformers itself: no missing, unexpected or
    mis-shaped weight (RoBERTa's pooler, which keras-hub has not, aside), and the same
    hidden states as the keras-hub backbone on every real token."""
    reference, got, report = peer[f"family_{family}"]
    expected_missing = ([] if family in ("bert", "distilbert")
                        else ["pooler.dense.bias", "pooler.dense.weight"])
    assert report["missing_keys"] == expected_missing
    assert report["unexpected_keys"] == [] and report["mismatched_keys"] == []
    mask = np.load(report["out"].replace(".npy", ".npz"))["padding_mask"].astype(bool)
    np.testing.assert_allclose(got[mask], reference[mask], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("side", ["query", "document"])
def test_sentence_transformers_applies_the_exported_prompts(peer, side):
    """SentenceTransformer(dir).encode_query / encode_document equal the SavedModel's
    encode_query / encode_document (cosine >= 0.99999), and differ from plain encode."""
    reference, got, _ = peer[f"st_prompts_{side}"]
    cosine = np.sum(reference * got, 1) / (np.linalg.norm(reference, axis=1)
                                           * np.linalg.norm(got, axis=1))
    assert cosine.min() >= 0.99999, cosine.min()
    plain, _, _ = peer["st_mean"]  # the same encoder, mean pooling, normalized, no prompt
    unit = reference / np.linalg.norm(reference, axis=1, keepdims=True)
    assert not np.allclose(unit, plain, atol=1e-3)


@pytest.fixture(scope="module")
def onnx_peer(tmp_path_factory):
    """minilm-l6 published for sentence-transformers with its ONNX files (--with_onnx),
    embedded by SentenceTransformer(dir, backend="onnx") with the fp32 and the int8 file in
    the `serving` peer venv (sentence-transformers 5.7 + optimum-onnx: optimum-onnx 0.1.0
    needs transformers < 4.58, which the `clients` profile's sentence-transformers 6.2
    cannot have). {file: (tfsent's encode, the peer's vectors, report)}."""
    pytest.importorskip("onnxruntime")
    minilm_or_skip()
    python = os.environ.get("TFSENT_PEER_SERVING_PYTHON") or peer_env.ready_peer_python(
        profiles=("serving",))
    if not python:
        message = ("needs the `serving` peer venv (sentence-transformers' ONNX backend): "
                   "python benchmarks/peer_env.py --peer_profile=serving")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + " -- in CI, .ci/run builds it, so its absence is a failure")
        pytest.skip(message)
    work = str(tmp_path_factory.mktemp("st_onnx"))
    encoder = load_encoder("minilm-l6", pooling="mean")
    model_dir = formats.export(encoder, os.path.join(work, "st"),
                               format="sentence_transformers", normalize=True, onnx=True)
    texts = ["A man is playing a guitar.", "Two dogs run across the snowy field.",
             "The stock market fell sharply on Monday."] + EXTRA
    sentences = export_fidelity.write_sentences(texts, work)
    files = [f"onnx/{name}" for name in ("model.onnx", "model_qint8_avx512_vnni.onnx")]
    # A Qwen3-Embedding-shaped folder too (tfsent.formats.onnx_decoders; lasttoken pooling,
    # left padding), in the same peer process.
    qwen3 = load_encoder(make_qwen3_embedding_dir(os.path.join(work, "qwen3_source")))
    qwen3_dir = formats.export(qwen3, os.path.join(work, "qwen3_st"),
                               format="sentence_transformers", onnx=True)
    folders = {"": (model_dir, encoder), "qwen3:": (qwen3_dir, qwen3)}
    cases = [(prefix + name, folder, enc) for prefix, (folder, enc) in folders.items()
             for name in files]
    jobs = [{"kind": "sentence_transformers", "model_dir": folder, "backend": "onnx",
             "model_kwargs": {"file_name": name.split(":")[-1]}, "sentences": sentences,
             "out": os.path.join(work, f"{i}.npy")} for i, (name, folder, _) in enumerate(cases)]
    outputs, result = export_fidelity.run_peer(python, jobs, work)
    reports = result["jobs"]
    references = {id(enc): enc.encode(texts) for _, enc in folders.values()}
    return {name: (references[id(enc)], got, report)
            for (name, _, enc), got, report in zip(cases, outputs, reports)}


@pytest.mark.parametrize("name,floor", [("onnx/model.onnx", 0.9999),
                                        ("onnx/model_qint8_avx512_vnni.onnx", 0.97),
                                        ("qwen3:onnx/model.onnx", 0.9999),
                                        ("qwen3:onnx/model_qint8_avx512_vnni.onnx", 0.97)])
def test_sentence_transformers_onnx_backend_loads_the_export(onnx_peer, name, floor):
    """int8's floor: its lowest on these texts is the empty string (tests/test_onnx_export.py
    INT8_MIN). qwen3: a tiny Qwen3-Embedding folder (gemma3's tiny tokenizer_config.json,
    written by transformers 5, does not load in this venv's transformers 4.57; its ONNX
    file is checked with transformers 5's tokenizer in tests/test_onnx_decoders.py)."""
    reference, got, report = onnx_peer[name]
    # tfsent's file, not one optimum exported
    assert report["model_path"].endswith(name.split(":")[-1])
    assert got.shape == reference.shape
    cosine = np.sum(reference * got, 1) / (np.linalg.norm(reference, axis=1)
                                           * np.linalg.norm(got, axis=1))
    assert cosine.min() >= floor, (name, cosine)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)
