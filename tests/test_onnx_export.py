"""The onnx format (tfsent.formats.onnx, `python -m tfsent.export --format=onnx`): ONNX
Runtime in a fresh process, tokenizing as an ONNX Runtime user does (the exported Hugging Face
tokenizer files through `transformers.AutoTokenizer`, the tokenizer's dict fed as is), gives
`encode`'s vectors on hard cases (empty string, a text past the length limit, non-ASCII,
batches of 1 and 7): cosine >= 0.9999 fp32, >= 0.97 int8 (see INT8_MIN), for every family
tfsent runs (tiny random checkpoints; int8 also on minilm-l6, a real encoder). Bad input
is refused before any work, and a missing extra is named."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, minilm_or_skip

from tfsent.encoders import load_encoder
from tfsent.errors import ConfigError

pytest.importorskip("onnxruntime")
from tfsent.formats import onnx as onnx_format  # noqa: E402
from tfsent.formats.metadata import read_metadata  # noqa: E402

HARD = ["", "Café au lait, NAÏVE résumé!", "東京 is in 日本.", "word " * 600,
        "a short one", "The quick brown fox jumps over the lazy dog.", "x"]
BATCHES = [HARD[:1], HARD]  # batch 1 and batch 7
# int8 on these hard cases: minilm-l6's lowest is ~0.972 (the one-letter text; 0.977 the
# empty string; ordinary sentences >= 0.985): dynamic int8 loses most on the shortest
# inputs. The 0.98 holds for ordinary text (benchmarks/serve_latency.py's column).
FP32_MIN, INT8_MIN = 0.9999, 0.97

# An ONNX Runtime user: the exported tokenizer files and onnxruntime, nothing of tfsent.
ORT_CLIENT = r"""
import json, os, sys
import numpy as np
import onnxruntime as ort
from transformers import AutoTokenizer

cases, batches = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {}
for directory in cases:
    with open(os.path.join(directory, "tfsent_export.json"), encoding="utf-8") as f:
        info = json.load(f)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    for name in info["files"]:
        session = ort.InferenceSession(os.path.join(directory, name),
                                       providers=["CPUExecutionProvider"])
        vectors = []
        for texts in batches:
            feeds = dict(tokenizer(texts, padding=True, truncation=True,
                                   max_length=info["max_seq_length"], return_tensors="np"))
            vectors.append(session.run(["embedding"], feeds)[0].tolist())
        out[f"{directory}|{name}"] = vectors
out["modules"] = sorted(m for m in sys.modules if m.split(".")[0] in ("tfsent", "tensorflow"))
json.dump(out, sys.stdout)
"""


def _cos(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def export_onnx_by_cli(model, target):
    """`python -m tfsent.export --format=onnx --quantize=int8` of `model` to `target`; checks
    its exit status, its stdout (the path) and its `run:` hint."""
    r = subprocess.run([sys.executable, "-m", "tfsent.export", f"--model={model}",
                        "--format=onnx", "--quantize=int8", f"--export_dir={target}"],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith(target)
    assert f'onnxruntime.InferenceSession("{target}/model.onnx")' in r.stderr


def run_ort_client(directories, workdir):
    """ORT_CLIENT in a fresh process on the export `directories` (BATCHES); its output."""
    r = subprocess.run([sys.executable, "-c", ORT_CLIENT, json.dumps(directories),
                        json.dumps(BATCHES)], cwd=str(workdir), capture_output=True,
                       text=True, timeout=600,
                       env=dict(os.environ, TOKENIZERS_PARALLELISM="false"))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def exports(hf_checkpoint_dirs, tmp_path_factory):
    """{case: (export dir, encode's vectors per batch)}: each family's tiny checkpoint (bert
    through the CLI with --quantize=int8, the others through export_onnx) and minilm-l6 with
    int8 when installed; then one ORT process embeds with every file."""
    root = tmp_path_factory.mktemp("onnx")
    cases = {}
    for family, checkpoint in hf_checkpoint_dirs.items():
        target = str(root / family)
        if family == "bert":
            export_onnx_by_cli(checkpoint, target)
        encoder = load_encoder(checkpoint, pooling="mean")
        if family != "bert":
            onnx_format.export_onnx(encoder, target, quantize=("int8",))
        cases[family] = (target, [encoder.encode(b, normalize=False) for b in BATCHES])
    try:
        minilm_or_skip()
    except pytest.skip.Exception:
        pass
    else:
        encoder = load_encoder("minilm-l6", pooling="mean")
        target = str(root / "minilm")
        onnx_format.export_onnx(encoder, target, quantize=("int8",))
        cases["minilm-l6"] = (target, [encoder.encode(b, normalize=False) for b in BATCHES])
    return cases, run_ort_client([d for d, _ in cases.values()], root)


@pytest.mark.parametrize("case", ["bert", "roberta", "xlm-roberta", "distilbert",
                                  "minilm-l6"])
def test_onnx_runtime_gives_encode_vectors(exports, case):
    cases, served = exports
    if case not in cases:
        pytest.skip("minilm-l6 is not installed")
    directory, refs = cases[case]
    files = read_metadata(directory)["files"]
    assert files == [onnx_format.ONNX_FILE, onnx_format.INT8_FILE]
    for name, floor in ((onnx_format.ONNX_FILE, FP32_MIN), (onnx_format.INT8_FILE, INT8_MIN)):
        for ref, got in zip(refs, served[f"{directory}|{name}"]):
            got = np.asarray(got)
            assert got.shape == ref.shape
            cosine = _cos(got, ref)
            assert cosine.min() >= floor, (case, name, cosine)
    assert served["modules"] == []  # the client imported neither tfsent nor tensorflow


def test_graph_inputs_follow_the_family(exports):
    import onnx

    cases, _ = exports
    for family, inputs in (("bert", ["input_ids", "attention_mask", "token_type_ids"]),
                           ("roberta", ["input_ids", "attention_mask"]),
                           ("distilbert", ["input_ids", "attention_mask"])):
        model = onnx.load(os.path.join(cases[family][0], onnx_format.ONNX_FILE))
        assert [i.name for i in model.graph.input] == inputs
        assert [o.name for o in model.graph.output] == [
            "embedding", "embedding_normalized", "last_hidden_state"]


def test_poolings_head_and_normalized_output(hf_checkpoint_dirs, tmp_path):
    """Every pooling on one family, in process: `embedding` equals the forward's pooled
    vector, `embedding_normalized` its unit vector; a Dense head (GELU, Tanh) carried."""
    import onnxruntime as ort

    encoder = load_encoder(hf_checkpoint_dirs["bert"], pooling="mean")
    tokenizer = encoder.tokenizer.with_options(max_seq_length=encoder.clamp_length(None),
                                               pad_to_max_length=False)
    features = tokenizer(np.array(HARD))
    feeds = {"input_ids": features["token_ids"].numpy().astype(np.int64),
             "attention_mask": features["padding_mask"].numpy().astype(np.int64)}
    feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
    for pooling in ("cls", "cls_before_pooler", "mean_no_cls", "first_last_avg",
                    "emb_last_avg", "last2_avg", "last_token"):
        path = onnx_format.write_onnx_model(encoder, str(tmp_path / f"{pooling}.onnx"),
                                            pooling=pooling)
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        emb, normalized = session.run(["embedding", "embedding_normalized"], feeds)
        ref = encoder({"token_ids": features["token_ids"],
                       "padding_mask": features["padding_mask"]}, pooling=pooling)
        ref = ref["embedding"].numpy()
        assert _cos(emb, ref).min() >= FP32_MIN, pooling
        np.testing.assert_allclose(normalized, ref / np.linalg.norm(ref, axis=1,
                                                                    keepdims=True), atol=1e-5)
        empty = {name: np.zeros((0, 0), np.int64) for name in feeds}  # an empty batch
        assert session.run(["embedding"], empty)[0].shape == (0, encoder.hidden_dim), pooling
    # A head (a method's export head: Dense layers) on the pooled embedding.
    import keras

    head = keras.Sequential([keras.layers.Dense(24, activation="gelu"),
                             keras.layers.Dense(8, activation="tanh")])
    pooled = encoder({"token_ids": features["token_ids"],
                      "padding_mask": features["padding_mask"]})["embedding"]
    ref = head(pooled).numpy()
    path = onnx_format.write_onnx_model(encoder, str(tmp_path / "head.onnx"), head=head)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    emb = session.run(["embedding"], feeds)[0]
    assert emb.shape == ref.shape == (len(HARD), 8)
    assert _cos(emb, ref).min() >= FP32_MIN


def test_bad_input_is_refused_before_any_work(hf_checkpoint_dirs, tmp_path):
    with pytest.raises(ConfigError, match="--quantize=binary.*int8"):
        onnx_format.check_quantize("binary")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("x")
    encoder = load_encoder(hf_checkpoint_dirs["distilbert"], pooling="mean")
    with pytest.raises(ConfigError, match="not empty|non-empty|exists"):
        onnx_format.export_onnx(encoder, str(taken))
    assert os.listdir(taken) == ["keep.txt"]
    with pytest.raises(ConfigError, match="int8"):
        onnx_format.export_onnx(encoder, str(tmp_path / "new"), quantize=("int4",))
    assert not (tmp_path / "new").exists()


def test_cli_without_the_extra_names_it(tmp_path):
    """onnxruntime missing (a sitecustomize sets its sys.modules entry to None): exit 2,
    the message names tfsent[onnx], before the (nonexistent) model is looked at."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\nsys.modules['onnxruntime'] = None  # as if not installed\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(
        [str(site), REPO, os.environ.get("PYTHONPATH", "")]))
    target = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "tfsent.export", "--model=/nonexistent/model",
                        "--format=onnx", f"--export_dir={target}"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "tfsent[onnx]" in r.stderr and "/nonexistent" not in r.stderr
    assert not target.exists()


def test_sentence_transformers_onnx_files_refusals(hf_checkpoint_dirs, tmp_path):
    """The ONNX files go only into a sentence_transformers export whose pooling needs just
    the last hidden state (sentence-transformers' ONNX backend returns nothing else);
    refused before anything is written. (The round trip through sentence-transformers'
    ONNX backend: tests/test_publish_peer.py.)"""
    from tfsent import formats

    encoder = load_encoder(hf_checkpoint_dirs["roberta"], pooling="mean")
    with pytest.raises(ConfigError, match="onnx does not apply to format=huggingface"):
        formats.export(encoder, str(tmp_path / "hf"), format="huggingface", onnx=True)
    with pytest.raises(ConfigError, match="--pooling=last2_avg.*mean"):
        formats.export(encoder, str(tmp_path / "st"), format="sentence_transformers",
                       pooling="last2_avg", onnx=True)
    assert os.listdir(tmp_path) == []
    path = formats.export(encoder, str(tmp_path / "ok"), format="sentence_transformers",
                          onnx=True)
    assert sorted(os.listdir(os.path.join(path, "onnx"))) == [onnx_format.ONNX_FILE,
                                                              onnx_format.INT8_FILE]


def test_a_training_run_can_ask_for_onnx(hf_checkpoint_dirs, tmp_path):
    """`--config.export_formats=onnx`: OUTPUT_DIR/export_onnx/<next version>; the run's
    prompts, which an ids model cannot apply, are recorded in the metadata."""
    from tfsent import formats

    encoder = load_encoder(hf_checkpoint_dirs["bert"], pooling="mean")
    paths = formats.export_run_formats(encoder, str(tmp_path), "saved_model,onnx",
                                       query_prompt="query: ", metadata={"step": 3})
    assert paths == {"onnx": str(tmp_path / "export_onnx" / "1")}
    meta = read_metadata(paths["onnx"])
    assert (meta["format"], meta["query_prompt"], meta["step"]) == ("onnx", "query: ", 3)
    assert meta["files"] == [onnx_format.ONNX_FILE]
