"""A cross-encoder published as a Hugging Face sequence-classification folder
(`tfsent.formats.cross_encoder_hf`): the real sentence-transformers `CrossEncoder.predict`
and transformers' `AutoModelForSequenceClassification` (PyTorch, the peer venv, one
subprocess for every case) give tfsent's scores on hard pairs; checks without torch: the
head's tensors, the refusals."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO
from test_publish_peer import peer_python

PUBLISHED = ("bert", "roberta")
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
    model = CrossEncoder(job["dir"])
    st = model.predict(pairs, batch_size=4, convert_to_numpy=True).tolist()
    tokenizer = AutoTokenizer.from_pretrained(job["dir"])
    hf = AutoModelForSequenceClassification.from_pretrained(job["dir"]).eval()
    features = tokenizer([p[0] for p in pairs], [p[1] for p in pairs], padding=True,
                         truncation="longest_first", return_tensors="pt")
    with torch.no_grad():
        logits = hf(**features).logits
    out[name] = {"st": st, "hf": logits[:, 0].tolist(), "num_labels": hf.config.num_labels,
                 "architecture": type(hf).__name__,
                 "activation": type(model.activation_fn).__name__,
                 "max_length": model.max_seq_length}
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def trained(hf_checkpoint_dirs):
    """{family: CrossEncoder} on the tiny checkpoints with every weight (backbone, pooler,
    score head) drawn at random around its scale (test_publish_peer.randomize): scores that
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
    (bert) and by `python -m tfsent.export --model=FILE.keras` on the model's `.keras` file
    (roberta), with the ONNX files where the tfsent[onnx] extra is installed."""
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
    return {"bert": trained["bert"].export(str(root / "bert"), format="cross_encoder_hf",
                                           onnx=_has_onnx()),
            "roberta": roberta}


def _has_onnx():
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def test_folder_layout_and_head_without_torch(trained, published):
    from safetensors.numpy import load_file

    from tfsent.formats import read_metadata

    for family, path in published.items():
        config = json.load(open(os.path.join(path, "config.json")))
        assert len(config["id2label"]) == 1
        assert config["sentence_transformers"]["activation_fn"].endswith("Identity")
        assert read_metadata(path)["format"] == "cross_encoder_hf"
        tensors = load_file(os.path.join(path, "model.safetensors"))
        kernel = trained[family].score_head.kernel.numpy()[:, 0]
        if family == "bert":
            assert config["architectures"] == ["BertForSequenceClassification"]
            np.testing.assert_array_equal(tensors["classifier.weight"][0], kernel)
            assert "bert.pooler.dense.weight" in tensors
        else:
            assert config["architectures"] == ["RobertaForSequenceClassification"]
            eps = np.diag(tensors["classifier.dense.weight"])
            np.testing.assert_allclose(tensors["classifier.out_proj.weight"][0] * eps, kernel,
                                       rtol=1e-6, atol=1e-7)
            assert np.all(eps > 0) and not np.any(tensors["classifier.dense.bias"])


def test_linear_tanh_head_matches_the_linear_head_in_numpy(trained):
    """The roberta head's tanh(eps x) / eps on the model's own first-token states equals
    the linear head to 1e-6 relative (the bound of cross_encoder_hf's docstring)."""
    import tensorflow as tf

    from tfsent.formats.cross_encoder_hf import head_tensors

    model = trained["roberta"]
    features = model.encoder.tokenizer.tokenize_pairs(
        tf.constant([p[0] for p in HARD_PAIRS]), tf.constant([p[1] for p in HARD_PAIRS]))
    states = model.encoder(features, pooling="cls")["embedding"].numpy().astype(np.float64)
    tensors = head_tensors(model.encoder, model.score_head, "dense_tanh")
    hidden = np.tanh(states @ tensors["classifier.dense.weight"].T.astype(np.float64))
    got = hidden @ tensors["classifier.out_proj.weight"][0] + tensors["classifier.out_proj.bias"]
    np.testing.assert_allclose(got, model(features).numpy(), rtol=1e-5, atol=1e-5)


def test_onnx_logits_are_tfsent_scores(trained, published):
    """onnxruntime on onnx/model.onnx, fed the pair ids tfsent's tokenizer makes (the ids
    Hugging Face's make: test_cross_encoder.py), gives tfsent's scores; int8 is close."""
    import tensorflow as tf

    if not _has_onnx():
        pytest.skip("needs the tfsent[onnx] extra (onnx, onnxruntime)")
    import onnxruntime

    for family, model in trained.items():
        features = model.encoder.tokenizer.with_options(pad_to_max_length=False).tokenize_pairs(
            tf.constant([p[0] for p in HARD_PAIRS]), tf.constant([p[1] for p in HARD_PAIRS]))
        feed = {"input_ids": features["token_ids"], "attention_mask": features["padding_mask"]}
        if family == "bert":
            feed["token_type_ids"] = features["segment_ids"]
        feed = {k: np.asarray(v, np.int64) for k, v in feed.items()}
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


def test_sentence_transformers_onnx_backend_gives_tfsent_scores(trained, published, tmp_path):
    """CrossEncoder(DIR, backend="onnx") (sentence-transformers 5.7 + optimum, the
    `serving` peer venv) on tfsent's onnx/model.onnx."""
    from test_publish_peer import peer_env

    if not _has_onnx():
        pytest.skip("needs the tfsent[onnx] extra (onnx, onnxruntime)")
    python = os.environ.get("TFSENT_PEER_SERVING_PYTHON") or peer_env.ready_peer_python(
        profiles=("serving",))
    if not python:
        message = ("needs the `serving` peer venv (sentence-transformers' ONNX backend): "
                   "python benchmarks/peer_env.py --peer_profile=serving")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps({f: {"dir": d, "pairs": HARD_PAIRS}
                                     for f, d in published.items()}, ensure_ascii=False),
                         encoding="utf-8")
    r = subprocess.run([python, "-c", ONNX_PEER_SCRIPT, str(jobs_file)], capture_output=True,
                       text=True, timeout=600,
                       env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="1",
                                TOKENIZERS_PARALLELISM="false"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    for family, model in trained.items():
        want = model.score([p[0] for p in HARD_PAIRS], [p[1] for p in HARD_PAIRS])
        np.testing.assert_allclose(out[family], want, atol=1e-4, err_msg=family)


def test_sentence_transformers_cross_encoder_gives_tfsent_scores(trained, published,
                                                                  tmp_path):
    python = peer_python()
    jobs = {family: {"dir": path, "pairs": HARD_PAIRS} for family, path in published.items()}
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps(jobs, ensure_ascii=False), encoding="utf-8")
    r = subprocess.run([python, "-c", PEER_SCRIPT, str(jobs_file)], capture_output=True,
                       text=True, timeout=600,
                       env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="1",
                                TOKENIZERS_PARALLELISM="false"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    for family, model in trained.items():
        want = model.score([p[0] for p in HARD_PAIRS], [p[1] for p in HARD_PAIRS])
        got = out[family]
        assert got["num_labels"] == 1 and got["activation"] == "Identity"
        assert got["architecture"].endswith("ForSequenceClassification")
        assert got["max_length"] == 32
        np.testing.assert_allclose(got["st"], want, atol=1e-4, err_msg=family)
        np.testing.assert_allclose(got["hf"], want, atol=1e-4, err_msg=family)
        assert np.ptp(want) > 0.1  # the pairs are told apart
        print(f"{family}: scores {np.round(want, 3).tolist()}, max |st - tfsent| "
              f"{np.max(np.abs(np.array(got['st']) - want)):.2e}, max |hf - tfsent| "
              f"{np.max(np.abs(np.array(got['hf']) - want)):.2e}")


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
    encoder = load_encoder(hf_checkpoint_dirs["distilbert"], pooling="cls",
                           max_seq_length=16)
    with pytest.raises(ConfigError, match="distilbert.*not mapped yet.*bert, roberta"):
        CrossEncoder(encoder).export(str(tmp_path / "c"), format="cross_encoder_hf")
    with pytest.raises(InputError, match="no such .keras file"):
        formats.export(str(tmp_path / "missing.keras"), str(tmp_path / "d"),
                       format="cross_encoder_hf")
    with pytest.raises(InputError, match="republished from its .keras file"):
        formats.export(str(tmp_path), str(tmp_path / "d"), format="cross_encoder_hf")
    assert not any((tmp_path / n).exists() for n in "abcd")


def test_xlm_roberta_publishes_robertas_head(hf_checkpoint_dirs, tmp_path):
    """XLM-R shares RoBERTa's head (its sentencepiece tokenizer keeps it out of the peer
    test: transformers would need `sentencepiece` there)."""
    from safetensors.numpy import load_file

    from tfsent.encoders import load_encoder
    from tfsent.methods import CrossEncoder

    model = CrossEncoder(load_encoder(hf_checkpoint_dirs["xlm-roberta"], pooling="cls",
                                      max_seq_length=16))
    path = model.export(str(tmp_path / "xlmr"), format="cross_encoder_hf")
    config = json.load(open(os.path.join(path, "config.json")))
    assert config["architectures"] == ["XLMRobertaForSequenceClassification"]
    tensors = load_file(os.path.join(path, "model.safetensors"))
    assert {"classifier.dense.weight", "classifier.out_proj.weight",
            "roberta.embeddings.word_embeddings.weight"} <= set(tensors)
    assert os.path.exists(os.path.join(path, "sentencepiece.bpe.model"))
