"""A cross-encoder published as a Hugging Face sequence-classification folder
(`tfsent.formats.cross_encoder_hf`), one per family with a mapped head (bert, roberta,
xlm-roberta, distilbert): the real sentence-transformers `CrossEncoder.predict` and
transformers' `AutoModelForSequenceClassification` (PyTorch, the peer venv, one subprocess
for every family) give tfsent's scores on hard pairs; checks without torch: the head's
tensors under Hugging Face's names, Hugging Face's head formula in NumPy, the folder read
back as a cross-encoder start, the refusals."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO
from test_publish_peer import peer_python

PUBLISHED = ("bert", "roberta", "xlm-roberta", "distilbert")
# The peer venv has no `sentencepiece`, which transformers needs to build the XLM-R
# tokenizer from sentencepiece.bpe.model: the peer runs that model on tfsent's pair ids
# (equal to Hugging Face's: test_cross_encoder.py) and sentence-transformers skips it.
IDS_ONLY = ("xlm-roberta",)
HARD_PAIRS = [
    ("what is the capital of japan", "東京は日本の首都です。 Tokyo is Japan's capital."),
    ("an empty passage", ""),
    ("", "an empty query"),
    ("short query", "a very long passage, truncated " * 30),
    ("a long query that is longer " * 12, "a long passage that is longer still " * 12),
    ("Café crème à la française, NAÏVE résumé!", "emoji 😀 and    spaces"),
]

PEER_SCRIPT = r"""
import json, sys
import torch
from sentence_transformers import CrossEncoder
from transformers import AutoModelForSequenceClassification, AutoTokenizer
torch.set_num_threads(1)
jobs, out = json.load(open(sys.argv[1], encoding="utf-8")), {}
for name, job in jobs.items():
    pairs = [tuple(p) for p in job["pairs"]]
    if "make_from" in job:  # a reranker as transformers writes one: base model + new head
        torch.manual_seed(0)
        hf = AutoModelForSequenceClassification.from_pretrained(job["make_from"],
                                                                num_labels=1).eval()
        for param_name, param in hf.named_parameters():
            if "classifier" in param_name:  # a head far from its initial scale
                torch.nn.init.normal_(param, std=0.5)
        hf.save_pretrained(job["dir"])
        AutoTokenizer.from_pretrained(job["make_from"]).save_pretrained(job["dir"])
    hf = AutoModelForSequenceClassification.from_pretrained(job["dir"]).eval()
    result = {"num_labels": hf.config.num_labels, "architecture": type(hf).__name__}
    if "ids" in job:  # tfsent's pair ids (no tokenizer here)
        features = {k: torch.tensor(v) for k, v in job["ids"].items()}
    else:
        model = CrossEncoder(job["dir"])
        result["st"] = model.predict(pairs, batch_size=4, convert_to_numpy=True).tolist()
        result["activation"] = type(model.activation_fn).__name__
        result["max_length"] = model.max_seq_length
        tokenizer = AutoTokenizer.from_pretrained(job["dir"])
        features = tokenizer([p[0] for p in pairs], [p[1] for p in pairs], padding=True,
                             truncation="longest_first", max_length=job.get("max_length"),
                             return_tensors="pt")
    with torch.no_grad():
        result["hf"] = hf(**features).logits[:, 0].tolist()
    out[name] = result
json.dump(out, sys.stdout)
"""


def _pair_features(model, pairs=HARD_PAIRS):
    import tensorflow as tf

    return model.encoder.tokenizer.with_options(pad_to_max_length=False).tokenize_pairs(
        tf.constant([p[0] for p in pairs]), tf.constant([p[1] for p in pairs]))


def _hf_inputs(model, features):
    """{Hugging Face input name: int64 array} of tfsent pair features."""
    feed = {"input_ids": features["token_ids"], "attention_mask": features["padding_mask"]}
    if "segment_ids" in features:
        feed["token_type_ids"] = features["segment_ids"]
    return {k: np.asarray(v, np.int64) for k, v in feed.items()}


@pytest.fixture(scope="module")
def trained(hf_checkpoint_dirs):
    """{family: CrossEncoder} (each with its family's head) on the tiny checkpoints with
    every weight (backbone, pooler, score head) drawn at random around its scale (test_publish_peer.randomize): scores that
    differ by units between pairs, without the minute a training run's tracing costs on a
    loaded 2-core machine (training's own tests: test_cross_encoder.py)."""
    from test_publish_peer import randomize

    from tfsent.encoders import load_encoder
    from tfsent.methods import CrossEncoder

    out = {}
    for seed, family in enumerate(PUBLISHED):
        encoder = load_encoder(hf_checkpoint_dirs[family], pooling="cls", max_seq_length=32)
        model = CrossEncoder(encoder, seed=0)
        randomize(encoder.backbone, seed=seed + 1)
        randomize(model.score_head, seed=seed + 11)
        out[family] = model
    return out


@pytest.fixture(scope="module")
def published(trained, tmp_path_factory):
    """{family: folder} written by `CrossEncoder.export(DIR, format="cross_encoder_hf")`
    and, for roberta, by `python -m tfsent.export --model=FILE.keras` on the model's
    `.keras` file, with the ONNX files where the tfsent[onnx] extra is installed."""
    root = tmp_path_factory.mktemp("ce_hf")
    keras_file = str(root / "roberta.keras")
    trained["roberta"].save(keras_file)
    roberta = str(root / "roberta")
    r = subprocess.run([sys.executable, "-m", "tfsent.export", f"--model={keras_file}",
                        "--format=cross_encoder_hf", f"--export_dir={roberta}",
                        f"--with_onnx={_has_onnx()}"], cwd=REPO, capture_output=True,
                       text=True, timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines() == [roberta]
    assert f'sentence_transformers.CrossEncoder("{roberta}")' in r.stderr  # next steps
    out = {family: model.export(str(root / family), format="cross_encoder_hf",
                                onnx=_has_onnx())
           for family, model in trained.items() if family != "roberta"}
    return {**out, "roberta": roberta}


def _has_onnx():
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def test_folder_layout_and_head_without_torch(trained, published):
    """config.json names the family's *ForSequenceClassification with one label; the
    score head's Dense layers are the checkpoint's head modules (kernels transposed)."""
    from safetensors.numpy import load_file

    from tfsent.encoders import families
    from tfsent.formats import read_metadata

    modules = {"bert": ["classifier"], "roberta": ["classifier.dense", "classifier.out_proj"],
               "xlm-roberta": ["classifier.dense", "classifier.out_proj"],
               "distilbert": ["pre_classifier", "classifier"]}
    for family, path in published.items():
        config = json.load(open(os.path.join(path, "config.json")))
        assert config["architectures"] == [
            families.TABLE[family].hf_sequence_classification[0]]
        assert len(config["id2label"]) == 1
        assert config["sentence_transformers"]["activation_fn"].endswith("Identity")
        assert read_metadata(path)["format"] == "cross_encoder_hf"
        tensors = load_file(os.path.join(path, "model.safetensors"))
        layers = getattr(trained[family].score_head, "layers", [trained[family].score_head])
        assert len(layers) == len(modules[family])
        for module, layer in zip(modules[family], layers):
            np.testing.assert_array_equal(tensors[f"{module}.weight"], layer.kernel.numpy().T)
            np.testing.assert_array_equal(tensors[f"{module}.bias"], layer.bias.numpy())
        assert ("bert.pooler.dense.weight" in tensors) == (family == "bert")
    assert os.path.exists(os.path.join(published["xlm-roberta"], "sentencepiece.bpe.model"))


def _hf_head_numpy(family, tensors, first, pooled):
    """Hugging Face's sequence-classification head (its modeling code's formula, written
    out in NumPy) on the first token's final state `first` (BERT: the pooler's output
    `pooled`), from the published tensors; dropout off."""
    def dense(x, name):
        return x @ tensors[f"{name}.weight"].T.astype(np.float64) + tensors[f"{name}.bias"]
    if family == "bert":
        return dense(pooled, "classifier")[:, 0]
    if family == "distilbert":
        return dense(np.maximum(dense(first, "pre_classifier"), 0.0), "classifier")[:, 0]
    return dense(np.tanh(dense(first, "classifier.dense")), "classifier.out_proj")[:, 0]


def test_published_head_in_numpy_gives_tfsent_scores(trained, published):
    from safetensors.numpy import load_file

    for family, model in trained.items():
        features = _pair_features(model)
        states = model.encoder(features, pooling="cls_before_pooler")["embedding"]
        pooled = model.encoder(features, pooling="cls")["embedding"]
        tensors = load_file(os.path.join(published[family], "model.safetensors"))
        got = _hf_head_numpy(family, tensors, np.float64(states), np.float64(pooled))
        np.testing.assert_allclose(got, model(features).numpy(), rtol=1e-5, atol=1e-5,
                                   err_msg=family)


def test_hand_computed_heads():
    """Each head kind on a 2-d state, by hand: bert 0.5*1 - 1*2 + 0.25 = -1.25; roberta
    tanh([1, 2] @ I + [0, -2]) = tanh([1, 0]) -> 2 * 0.761594 + 0.1 = 1.623188; distilbert
    relu([1, -2]) = [1, 0] -> 3 * 1 - 1 = 2."""
    eye = np.eye(2, dtype=np.float32)
    x = np.array([[1.0, 2.0]])
    np.testing.assert_allclose(_hf_head_numpy("bert", {
        "classifier.weight": np.array([[0.5, -1.0]]), "classifier.bias": np.array([0.25])},
        None, x), [-1.25])
    np.testing.assert_allclose(_hf_head_numpy("roberta", {
        "classifier.dense.weight": eye, "classifier.dense.bias": np.array([0.0, -2.0]),
        "classifier.out_proj.weight": np.array([[2.0, 5.0]]),
        "classifier.out_proj.bias": np.array([0.1])}, x, None), [1.623188], rtol=1e-6)
    np.testing.assert_allclose(_hf_head_numpy("distilbert", {
        "pre_classifier.weight": np.diag([1.0, -1.0]), "pre_classifier.bias": np.zeros(2),
        "classifier.weight": np.array([[3.0, 7.0]]), "classifier.bias": np.array([-1.0])},
        x, None), [2.0])


def test_published_folder_starts_a_cross_encoder_with_its_head(trained, published,
                                                               hf_checkpoint_dirs):
    """A *ForSequenceClassification folder read back (`load_encoder` + `read_hf_head`, as
    a cross_encoder run starting from it does) scores as the model that wrote it; a base
    checkpoint leaves the head as initialised."""
    from tfsent.encoders import load_encoder
    from tfsent.methods import CrossEncoder

    for family in ("roberta", "distilbert"):
        model = CrossEncoder(load_encoder(published[family], pooling="cls",
                                          max_seq_length=32))
        read = model.read_hf_head(published[family])
        assert read == {"roberta": ["classifier.dense", "classifier.out_proj"],
                        "distilbert": ["pre_classifier", "classifier"]}[family]
        features = _pair_features(trained[family])  # eager calls: no tracing
        np.testing.assert_allclose(model(features).numpy(),
                                   trained[family](features).numpy(), atol=1e-5)
    base = CrossEncoder(load_encoder(hf_checkpoint_dirs["roberta"], pooling="cls",
                                     max_seq_length=32))
    before = [w.numpy() for w in base.score_head.weights]
    assert base.read_hf_head(hf_checkpoint_dirs["roberta"]) == []  # an MLM checkpoint
    for old, new in zip(before, base.score_head.weights):
        np.testing.assert_array_equal(old, new.numpy())


def test_onnx_logits_are_tfsent_scores(trained, published):
    """onnxruntime on onnx/model.onnx, fed the pair ids tfsent's tokenizer makes (the ids
    Hugging Face's make: test_cross_encoder.py), gives tfsent's scores; int8 is close."""
    import tensorflow as tf

    if not _has_onnx():
        pytest.skip("needs the tfsent[onnx] extra (onnx, onnxruntime)")
    import onnxruntime

    for family, model in trained.items():
        features = _pair_features(model)
        feed = _hf_inputs(model, features)
        want = model(features).numpy()
        for name, atol in (("model.onnx", 1e-4), ("model_qint8_avx512_vnni.onnx", 0.1)):
            session = onnxruntime.InferenceSession(
                os.path.join(published[family], "onnx", name),
                providers=["CPUExecutionProvider"])
            assert [o.name for o in session.get_outputs()] == ["logits"]
            logits = session.run(None, feed)[0]
            assert logits.shape == (len(HARD_PAIRS), 1)
            np.testing.assert_allclose(logits[:, 0], want, atol=atol, err_msg=(family, name))


ONNX_PEER_SCRIPT = r"""
import json, sys
from sentence_transformers import CrossEncoder
jobs, out = json.load(open(sys.argv[1], encoding="utf-8")), {}
for name, job in jobs.items():
    model = CrossEncoder(job["dir"], backend="onnx")
    out[name] = model.predict([tuple(p) for p in job["pairs"]], convert_to_numpy=True).tolist()
json.dump(out, sys.stdout)
"""


def serving_peer_python():
    """The `serving` peer venv's python (sentence-transformers' ONNX backend); the test
    skips without it (fails under CI=true)."""
    from test_publish_peer import peer_env

    python = os.environ.get("TFSENT_PEER_SERVING_PYTHON") or peer_env.ready_peer_python(
        profiles=("serving",))
    if not python:
        message = ("needs the `serving` peer venv (sentence-transformers' ONNX backend): "
                   "python benchmarks/peer_env.py --peer_profile=serving")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return python


def test_sentence_transformers_onnx_backend_gives_tfsent_scores(trained, published, tmp_path):
    """CrossEncoder(DIR, backend="onnx") (sentence-transformers 5.7 + optimum, the
    `serving` peer venv) on tfsent's onnx/model.onnx."""
    if not _has_onnx():
        pytest.skip("needs the tfsent[onnx] extra (onnx, onnxruntime)")
    python = serving_peer_python()
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps({f: {"dir": d, "pairs": HARD_PAIRS}
                                     for f, d in published.items() if f not in IDS_ONLY},
                                    ensure_ascii=False),
                         encoding="utf-8")
    r = subprocess.run([python, "-c", ONNX_PEER_SCRIPT, str(jobs_file)], capture_output=True,
                       text=True, timeout=600,
                       env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="1",
                                TOKENIZERS_PARALLELISM="false"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert set(out) == set(PUBLISHED) - set(IDS_ONLY)
    for family in out:
        want = trained[family].score([p[0] for p in HARD_PAIRS], [p[1] for p in HARD_PAIRS])
        np.testing.assert_allclose(out[family], want, atol=1e-4, err_msg=family)


# Rerankers transformers itself writes (a base checkpoint + a one-label head, saved with
# save_pretrained), for the reverse direction: tfsent starting a cross-encoder from them.
MADE_BY_TRANSFORMERS = ("roberta", "distilbert")


@pytest.fixture(scope="module")
def peer_out(trained, published, hf_checkpoint_dirs, tmp_path_factory):
    """The peer's answers (one subprocess for the module): {family: sentence-transformers'
    and transformers' scores of tfsent's folder}, {"made:" + family: transformers' scores
    of the reranker it wrote to "dir"}."""
    python = peer_python()
    root = tmp_path_factory.mktemp("peer")
    jobs = {family: {"dir": path, "pairs": HARD_PAIRS} for family, path in published.items()}
    for family in IDS_ONLY:
        jobs[family]["ids"] = {k: v.tolist() for k, v in _hf_inputs(
            trained[family], _pair_features(trained[family])).items()}
    for family in MADE_BY_TRANSFORMERS:
        jobs[f"made:{family}"] = {"make_from": hf_checkpoint_dirs[family], "max_length": 32,
                                  "dir": str(root / f"made_{family}"), "pairs": HARD_PAIRS}
    jobs_file = root / "jobs.json"
    jobs_file.write_text(json.dumps(jobs, ensure_ascii=False), encoding="utf-8")
    r = subprocess.run([python, "-c", PEER_SCRIPT, str(jobs_file)], capture_output=True,
                       text=True, timeout=600,
                       env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="1",
                                TOKENIZERS_PARALLELISM="false"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    for name, job in jobs.items():
        out[name]["dir"] = job["dir"]
    return out


def test_sentence_transformers_cross_encoder_gives_tfsent_scores(trained, peer_out):
    from tfsent.encoders import families

    out = {name: result for name, result in peer_out.items() if ":" not in name}
    assert set(out) == set(PUBLISHED)
    for family, model in trained.items():
        want = model.score([p[0] for p in HARD_PAIRS], [p[1] for p in HARD_PAIRS])
        got = out[family]
        assert got["num_labels"] == 1
        assert got["architecture"] == families.TABLE[family].hf_sequence_classification[0]
        np.testing.assert_allclose(got["hf"], want, atol=1e-5, err_msg=family)
        if family not in IDS_ONLY:
            assert got["activation"] == "Identity" and got["max_length"] == 32
            np.testing.assert_allclose(got["st"], want, atol=1e-5, err_msg=family)
        assert np.ptp(want) > 0.1  # the pairs are told apart
        print(f"{family}: scores {np.round(want, 3).tolist()}, max |hf - tfsent| "
              f"{np.max(np.abs(np.array(got['hf']) - want)):.2e}")


def test_a_reranker_saved_by_transformers_starts_a_cross_encoder(peer_out):
    """A *ForSequenceClassification folder written by transformers' save_pretrained (its
    tokenizer.json, its own head names) loads as a cross-encoder start whose scores are
    transformers' own (pairs truncated at 32 tokens on both sides)."""
    from tfsent.encoders import load_encoder
    from tfsent.methods import CrossEncoder

    for family in MADE_BY_TRANSFORMERS:
        made = peer_out[f"made:{family}"]
        model = CrossEncoder(load_encoder(made["dir"], pooling="cls", max_seq_length=32))
        assert model.read_hf_head(made["dir"]) == {
            "roberta": ["classifier.dense", "classifier.out_proj"],
            "distilbert": ["pre_classifier", "classifier"]}[family]
        got = model(_pair_features(model)).numpy()  # eager: no tracing
        np.testing.assert_allclose(got, made["hf"], atol=1e-5, err_msg=family)
        assert np.ptp(got) > 0.01  # the pairs are told apart


def test_refusals(trained, hf_checkpoint_dirs, tmp_path):
    from tfsent import formats
    from tfsent.encoders import load_encoder
    from tfsent.errors import ConfigError, InputError
    from tfsent.methods import CrossEncoder

    bert = trained["bert"]
    with pytest.raises(ConfigError, match="needs the score head"):
        formats.export(bert.encoder, str(tmp_path / "a"), format="cross_encoder_hf")
    with pytest.raises(ConfigError, match="no sentence embeddings"):
        formats.export(bert, str(tmp_path / "b"), format="huggingface")
    encoder = load_encoder(hf_checkpoint_dirs["roberta"], pooling="cls", max_seq_length=16)
    with pytest.raises(ConfigError, match=r"the score head is Dense\(1, linear\), "
                       r"RobertaForSequenceClassification computes Dense\(32, tanh\) -> "
                       r"Dense\(1, linear\).*cannot be published exactly"):
        CrossEncoder(encoder, head="linear").export(str(tmp_path / "c"),
                                                    format="cross_encoder_hf")
    with pytest.raises(ConfigError, match="head='pooler' reads the pooler, which the "
                                          "roberta family has not"):
        CrossEncoder(encoder, head="pooler")
    with pytest.raises(InputError, match="no such .keras file"):
        formats.export(str(tmp_path / "missing.keras"), str(tmp_path / "d"),
                       format="cross_encoder_hf")
    with pytest.raises(InputError, match="republished from its .keras file"):
        formats.export(str(tmp_path), str(tmp_path / "d"), format="cross_encoder_hf")
    assert not any((tmp_path / n).exists() for n in "abcd")


def test_old_cross_encoder_files_load_with_their_linear_head(trained, tmp_path):
    """A CrossEncoder .keras file saved before the heads followed the family's (config
    without "head", a Dense(1) `score_head`) loads with the "linear" head and its scores
    (a file written by the code before this change was checked the same way once; their
    cross_encoder SavedModels hold their own graph and serve unchanged)."""
    import zipfile

    import keras

    from tfsent.methods import CrossEncoder

    model = CrossEncoder(trained["distilbert"].encoder, head="linear", seed=0)
    path, old = str(tmp_path / "new.keras"), str(tmp_path / "old.keras")
    model.save(path)
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(old, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                assert config["config"].pop("head") == "linear"
                data = json.dumps(config).encode("utf-8")
            dst.writestr(item, data)
    loaded = keras.saving.load_model(old)
    assert loaded.head_kind == "linear"
    features = _pair_features(model)
    np.testing.assert_allclose(loaded(features).numpy(), model(features).numpy(), atol=1e-6)
