"""LiteRT export (tfsent.formats.litert, `tfsent.export --format=litert`): every family's
tiny checkpoint exported fp32 and int8, then run as a LiteRT user runs it -- a fresh process
that imports only ai-edge-litert, numpy and transformers, makes the ids with the tokenizer
files written beside the model, and runs the Interpreter (XNNPACK) -- against `encode` on
hard cases; and the errors before any work."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO
from tfsent.encoders import load_encoder
from tfsent.errors import ConfigError, InputError
from tfsent.formats import litert
from tfsent.formats.metadata import read_metadata

pytest.importorskip("ai_edge_litert", reason="needs the tfsent[litert] extra")

LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 70)  # 600+ tokens
HARD = ["", LONG, "Größe, café, naïve: 日本語のテキスト 🙂", "A man is playing a guitar.",
        "a", "Two dogs run through the snow.", "¿Dónde está la biblioteca?"]
FAMILIES = ("bert", "roberta", "xlm-roberta", "distilbert")

# The LiteRT user's side: no tfsent, no tensorflow. Batch 7 in one call (padded to its
# longest row) and each sentence alone at batch 1.
CLIENT_SCRIPT = r"""
import json, sys
import numpy as np
from ai_edge_litert.interpreter import Interpreter
from transformers import AutoTokenizer
directories, sentences = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {}
for directory in directories:
    tokenizer = AutoTokenizer.from_pretrained(directory)
    runner = Interpreter(model_path=directory + "/model.tflite",
                         num_threads=1).get_signature_runner()
    def embed(texts):
        ids = tokenizer(texts, truncation=True, padding=True, return_tensors="np")
        return runner(input_ids=ids["input_ids"].astype(np.int32),
                      attention_mask=ids["attention_mask"].astype(np.int32))
    batch = embed(sentences)
    ones = [embed([s])["embedding_normalized"][0].tolist() for s in sentences]
    out[directory] = {"batch": batch["embedding_normalized"].tolist(),
                      "raw": batch["embedding"].tolist(), "ones": ones,
                      "lengths": [len(tokenizer(s, truncation=True)["input_ids"])
                                  for s in sentences]}
mods = sorted({m.split(".")[0] for m in sys.modules} & {"tfsent", "tensorflow", "keras"})
json.dump({"out": out, "modules": mods}, sys.stdout)
"""


@pytest.fixture(scope="module")
def exports(hf_checkpoint_dirs, tmp_path_factory):
    """{(family, quantize): (directory, encode's normalised and raw embeddings of HARD)}:
    fp32 through the library for every family, int8 through the CLI for BERT and the
    library for the others."""
    root = tmp_path_factory.mktemp("litert")
    found = {}
    for family in FAMILIES:
        encoder = load_encoder(hf_checkpoint_dirs[family], pooling="mean")
        reference = (encoder.encode(HARD, normalize=True, verbose=0),
                     encoder.encode(HARD, normalize=False, verbose=0))
        for quantize in ("", "int8"):
            target = str(root / f"{family}{quantize}")
            if family == "bert" and quantize == "int8":
                r = subprocess.run(
                    [sys.executable, "-m", "tfsent.export",
                     f"--model={hf_checkpoint_dirs[family]}", "--pooling=mean",
                     "--format=litert", "--quantize=int8", f"--export_dir={target}"],
                    cwd=REPO, capture_output=True, text=True, timeout=300,
                    env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
                assert r.returncode == 0, r.stderr[-3000:]
                assert r.stdout.strip().splitlines()[-1] == target
            else:
                litert.export_litert(encoder, target, quantize=quantize)
            found[(family, quantize)] = (target, *reference)
    return found


@pytest.fixture(scope="module")
def client_output(exports):
    """The fresh LiteRT client process's embeddings of HARD for every export."""
    directories = [d for d, _, _ in exports.values()]
    r = subprocess.run([sys.executable, "-c", CLIENT_SCRIPT, json.dumps(directories),
                        json.dumps(HARD)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def _cosines(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.sum(a * b, axis=-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("quantize", ["", "int8"])
def test_litert_client_matches_encode_on_hard_cases(exports, client_output, family,
                                                    quantize):
    directory, normalized, raw = exports[(family, quantize)]
    got = client_output["out"][directory]
    bound = 0.9999 if quantize == "" else 0.98
    assert _cosines(got["batch"], normalized).min() >= bound      # batch 7, padded
    assert _cosines(got["ones"], normalized).min() >= bound       # batch 1 each
    assert _cosines(got["raw"], raw).min() >= bound               # the unnormalised output
    info = read_metadata(directory)
    # The long sentence was cut at the export's max length by the tokenizer files alone.
    assert got["lengths"][1] == info["max_seq_length"] < 600
    assert info["quantize"] == (quantize or "none") and info["family"] == family
    if quantize == "":
        np.testing.assert_allclose(got["raw"], raw, atol=1e-4)


def test_litert_client_imports_neither_tensorflow_nor_tfsent(client_output):
    assert client_output["modules"] == []


def test_litert_export_files_and_int8_size(exports):
    fp32, int8 = exports[("bert", "")][0], exports[("bert", "int8")][0]
    assert sorted(os.listdir(fp32)) == ["model.tflite", "special_tokens_map.json",
                                        "tfsent_export.json", "tokenizer.json",
                                        "tokenizer_config.json", "vocab.txt"]
    assert os.path.getsize(os.path.join(int8, "model.tflite")) < 0.6 * os.path.getsize(
        os.path.join(fp32, "model.tflite"))
    assert not [n for n in os.listdir(os.path.dirname(fp32)) if "staging" in n]


def test_litert_export_refuses_bad_input_before_any_work(hf_checkpoint_dirs, tmp_path,
                                                         monkeypatch):
    encoder = load_encoder(hf_checkpoint_dirs["bert"], pooling="mean")
    with pytest.raises(ConfigError, match="--quantize='int4' is not a LiteRT mode"):
        litert.export_litert(encoder, tmp_path / "a", quantize="int4")
    with pytest.raises(ConfigError, match="pooling"):
        litert.export_litert(encoder, tmp_path / "b", pooling="median")
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not an empty directory"):
        litert.export_litert(encoder, full)
    assert os.listdir(full) == ["keep.txt"]
    # Without the extra: an error naming it (simulated: the import fails as when absent).
    monkeypatch.setitem(sys.modules, "ai_edge_litert", None)
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", None)
    with pytest.raises(ConfigError, match=r'pip install "tfsent\[litert\]"'):
        litert.export_litert(encoder, tmp_path / "c")
    assert sorted(os.listdir(tmp_path)) == ["full"]


def test_litert_cli_refuses_a_quantize_mode_it_cannot_do_before_loading(tmp_path):
    """--quantize=binary (a SavedModel output code, not a LiteRT precision): exit 2 with
    `error:` naming the flag, before the (missing) model is loaded; nothing written."""
    r = subprocess.run([sys.executable, "-m", "tfsent.export", "--model=/no/such/model",
                        "--format=litert", f"--export_dir={tmp_path / 'x'}",
                        "--quantize=binary"],
                       cwd=REPO, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 2, r.stderr[-2000:]
    assert "error: --quantize=binary: --format=litert cannot write 'binary'" in r.stderr, \
        r.stderr[-2000:]
    assert not os.listdir(tmp_path)


def test_run_litert_names_the_bad_input(exports):
    directory = exports[("bert", "")][0]
    model = os.path.join(directory, "model.tflite")
    ids = np.full((2, 5), 5, np.int32)
    with pytest.raises(InputError, match="must have the same shape"):
        litert.run_litert(model, ids, np.ones((2, 4), np.int32))
    with pytest.raises(InputError, match="input_ids must be an integer array"):
        litert.run_litert(model, ids.astype(np.float32), np.ones((2, 5), np.int32))
    with pytest.raises(InputError, match="attention_mask must be an integer array"):
        litert.run_litert(model, ids, np.ones((5,), np.int32))
    out = litert.run_litert(model, ids, np.ones((2, 5), np.int32))
    assert out["embedding_normalized"].shape == out["embedding"].shape
