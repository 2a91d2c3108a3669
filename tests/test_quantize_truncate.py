"""Quantized (int8, binary) and truncated (Matryoshka) embeddings: the encodings against a
NumPy transcription and hand-computed cases, the SavedModel's extra outputs, and the
`tfsent.export` / `tfsent.evaluate` flags with their errors."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import SHARED_DATA, shared_data_or_skip
from tfsent.formats import quantize
from tfsent.encoders import load_encoder
from tfsent.errors import ConfigError, InputError
from tfsent.formats.metadata import read_metadata
from tfsent.formats.saved_model import export_encoder
from tfsent.serving import SavedModelEncoder

SENTENCES = ["a man plays the guitar .", "the dog runs in the park .", "",
             "a woman rides a red bike", "the cat sleeps on the mat", "the child reads a book"]


# -- independent transcriptions of the formulas ---------------------------------------------
def _int8_reference(emb, calib):
    """Per element, in plain Python: normalise rows, range from the calibration rows,
    255 steps, round half to even, shift by -128, saturate."""
    def normalize(rows):
        return [[v / max(sum(x * x for x in row) ** 0.5, 1e-12) for v in row] for row in rows]

    emb, calib = normalize(emb.tolist()), normalize(calib.tolist())
    dims = len(emb[0])
    lo = [min(r[d] for r in calib) for d in range(dims)]
    hi = [max(r[d] for r in calib) for d in range(dims)]
    out = []
    for row in emb:
        codes = []
        for d, v in enumerate(row):
            step = (hi[d] - lo[d]) / 255 if hi[d] > lo[d] else 1.0
            codes.append(min(127, max(-128, round((v - lo[d]) / step) - 128)))
        out.append(codes)
    return np.array(out)


def _binary_reference(emb):
    """Per row: the sign bits, first dimension most significant, zero-padded to a byte."""
    out = []
    for row in emb.tolist():
        bits = [1 if v > 0 else 0 for v in row] + [0] * (-len(row) % 8)
        out.append([int("".join(map(str, bits[i:i + 8])), 2) for i in range(0, len(bits), 8)])
    return np.array(out)


def test_int8_hand_computed_case():
    # Calibration rows (3, 4) and (0, -5) normalise to (0.6, 0.8) and (0, -1): ranges
    # [0, 0.6] and [-1, 0.8], steps 0.6/255 and 1.8/255. (1, 0): dim 0 is 425 steps above
    # its minimum -> 297, saturates at 127; dim 1 is 1/(1.8/255) = 141.67 -> 142 - 128 = 14.
    # (-3, 4) -> (-0.6, 0.8): dim 0 is 255 steps below its minimum -> -128; dim 1 -> 127.
    ranges = quantize.calibrate_int8(np.array([[3.0, 4.0], [0.0, -5.0]]))
    np.testing.assert_allclose(ranges[0], [0.0, -1.0])
    np.testing.assert_allclose(ranges[1], [0.6, 0.8], rtol=1e-6)
    codes = quantize.int8_codes(np.array([[3.0, 4.0], [0.0, -5.0], [1.0, 0.0], [-3.0, 4.0]]),
                                *ranges)
    assert codes.dtype == np.int8
    np.testing.assert_array_equal(codes, [[127, 127], [-128, -128], [127, 14], [-128, 127]])


def test_binary_hand_computed_case():
    # Signs of 9 values: 1 0 0 1 1 1 0 1 | 1 -> 0b10011101 = 157, 0b10000000 = 128
    # (zero counts as not positive).
    emb = np.array([[0.5, -1.0, 0.0, 2.0, 1.0, 1.0, -1.0, 1.0, 1.0]])
    np.testing.assert_array_equal(quantize.binary_codes(emb), [[157, 128]])
    np.testing.assert_array_equal(quantize.binary_codes_tf(tf.constant(emb)).numpy(),
                                  [[157, 128]])
    np.testing.assert_array_equal(quantize.binary_as_signs([[157, 128]], 9),
                                  [[1, -1, -1, 1, 1, 1, -1, 1, 1]])


@pytest.mark.parametrize("dims", [8, 13, 384])
def test_encodings_match_the_transcription_numpy_and_graph(dims):
    rng = np.random.default_rng(dims)
    calib = rng.normal(size=(40, dims))
    emb = np.concatenate([rng.normal(size=(20, dims)), 3 * rng.normal(size=(5, dims))])
    ranges = quantize.calibrate_int8(calib)
    want = _int8_reference(emb, calib)
    np.testing.assert_array_equal(quantize.int8_codes(emb, *ranges), want)
    normalized = tf.math.l2_normalize(tf.constant(emb, tf.float32), axis=-1)
    graph = quantize.int8_codes_tf(normalized, *ranges).numpy().astype(int)
    # float32 normalisation in TF and NumPy may differ in the last bit: at most one step
    assert np.abs(graph - want).max() <= 1 and (graph == want).mean() > 0.99
    np.testing.assert_array_equal(quantize.binary_codes(emb), _binary_reference(emb))
    np.testing.assert_array_equal(quantize.binary_codes_tf(tf.constant(emb)).numpy(),
                                  _binary_reference(emb))


def test_binary_cosine_is_the_hamming_similarity():
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(6, 21))
    signs = quantize.quantized_for_similarity(emb, "binary")
    bits = emb > 0
    for i in range(6):
        for j in range(6):
            hamming = int(np.sum(bits[i] != bits[j]))
            cos = signs[i] @ signs[j] / (np.linalg.norm(signs[i]) * np.linalg.norm(signs[j]))
            assert cos == pytest.approx(1 - 2 * hamming / 21)


def test_parse_and_calibration_errors(tmp_path):
    assert quantize.parse_quantize("binary,int8") == ("int8", "binary")
    assert quantize.parse_quantize("") == ()
    with pytest.raises(ConfigError, match="--quantize: unknown quantization 'int4'"):
        quantize.parse_quantize("int8,int4")
    empty = tmp_path / "calib.txt"
    empty.write_text("\n   \n")
    with pytest.raises(InputError, match="calib.txt: calibration file has no sentences"):
        quantize.read_calibration_sentences(str(empty))
    with pytest.raises(InputError, match="file not found"):
        quantize.read_calibration_sentences(str(tmp_path / "missing.txt"))


# -- the SavedModel's outputs ----------------------------------------------------------------
@pytest.fixture(scope="module")
def quantized_export(tmp_path_factory, tiny_encoder_dir):
    encoder = load_encoder(tiny_encoder_dir)
    path = export_encoder(encoder, str(tmp_path_factory.mktemp("q") / "E"),
                          quantize_outputs=("int8", "binary"),
                          calibration_sentences=SENTENCES[:4])
    return encoder, path


def test_export_serves_int8_and_binary_equal_to_numpy(quantized_export):
    encoder, path = quantized_export
    served = SavedModelEncoder(path)
    assert served.quantized_outputs == ("int8", "binary")
    meta = read_metadata(path)
    assert meta["quantize"] == ["int8", "binary"] and meta["int8_calibration_sentences"] == 4
    # The stored ranges are those of the export's own float embeddings of the calibration set.
    lo, hi = quantize.calibrate_int8(served.encode(SENTENCES[:4]))
    np.testing.assert_allclose(meta["int8_lo"], lo, atol=1e-6)
    np.testing.assert_allclose(meta["int8_hi"], hi, atol=1e-6)
    floats = served.encode(SENTENCES)
    np.testing.assert_allclose(floats, encoder.encode(SENTENCES), atol=1e-5)
    int8 = served.encode_quantized(SENTENCES, "int8").astype(int)
    want = quantize.int8_codes(floats, np.array(meta["int8_lo"]), np.array(meta["int8_hi"]))
    assert np.abs(int8 - want).max() <= 1 and (int8 == want).mean() > 0.95
    binary = served.encode_quantized(SENTENCES, "binary")
    assert binary.dtype == np.uint8 and binary.shape == (len(SENTENCES), 2)  # 16 dims
    np.testing.assert_array_equal(binary, _binary_reference(floats))


def test_quantized_export_serves_in_a_fresh_process(quantized_export):
    _, path = quantized_export
    script = ("import json, sys; import tensorflow as tf; import tensorflow_text; "
              "m = tf.saved_model.load(sys.argv[1]); "
              "o = m.signatures['serving_default'](sentences=tf.constant(['a dog runs'])); "
              "print(json.dumps({k: [str(v.dtype.name), v.shape.as_list()] "
              "for k, v in o.items()}))")
    r = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-2000:]
    outputs = json.loads(r.stdout)
    assert outputs["embedding_int8"] == ["int8", [1, 16]]
    assert outputs["embedding_binary"] == ["uint8", [1, 2]]
    assert outputs["embedding"] == ["float32", [1, 16]]


def test_truncated_export_and_encode(tmp_path, tiny_encoder_dir):
    encoder = load_encoder(tiny_encoder_dir)
    full = encoder.encode(SENTENCES)
    cut = encoder.encode(SENTENCES, truncate_dim=6, normalize=True)
    want = full[:, :6] / np.linalg.norm(full[:, :6], axis=1, keepdims=True)
    np.testing.assert_allclose(cut, want, atol=1e-6)  # truncated, then normalised
    path = export_encoder(encoder, str(tmp_path / "E"), truncate_dim=6,
                          quantize_outputs="binary")
    served = SavedModelEncoder(path)
    assert served.embedding_dim == 6
    np.testing.assert_allclose(served.encode(SENTENCES, normalize=True), want, atol=1e-5)
    np.testing.assert_array_equal(served.encode_quantized(SENTENCES, "binary"),
                                  _binary_reference(full[:, :6]))
    with pytest.raises(ConfigError, match="truncate_dim"):
        encoder.encode(SENTENCES, truncate_dim=17)
    with pytest.raises(ConfigError, match="truncate_dim"):
        export_encoder(encoder, str(tmp_path / "F"), truncate_dim=40)
    with pytest.raises(ConfigError, match="calibration"):
        export_encoder(encoder, str(tmp_path / "G"), quantize_outputs="int8")
    assert not os.path.exists(tmp_path / "F") or not os.listdir(tmp_path / "F")


# -- the CLIs --------------------------------------------------------------------------------
# Every `python -m tfsent.export` run of this file forked from one process, and every
# `python -m tfsent.evaluate` run from another (conftest.cli_runs_in_one_process: one
# TensorFlow import per command instead of one per run; each run a process of its own).
EXPORT_ERRORS = [
    (["--quantize=int8"], "--quantize=int8 needs --calibration_file"),
    (["--quantize=int8", "--calibration_file=EMPTY"], "calibration file has no sentences"),
    (["--truncate_dim=17"], "--truncate_dim"),
]
EVALUATE_ERRORS = [
    (["--dims=8,16"], "--dims"),  # before the model is loaded
    (["--dims=32,8"], "--dims"),  # larger than the embedding: once it is loaded
]


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory, tiny_encoder_dir):
    """The runs of both CLIs: {"export_errors": [(run, its export_dir)], "demo_export": run,
    "evaluate_errors": [run], "demo_evaluate": [run x 3], "root": the demo's folder}.
    The demo runs: export with both quantizations calibrated on the demo corpus, then
    evaluate the export with its stored int8 ranges, at two sizes, on STS-B, and int8 at
    a truncated size (refused); without the shared STS data only the export errors run."""
    from conftest import EVALUATE_IMPORTS, cli_runs_in_one_process
    from tfsent.data.readers import DEMO_SENTENCES

    root = tmp_path_factory.mktemp("cli")
    export_dirs = [root / f"errors{i}" for i in range(len(EXPORT_ERRORS))]
    empty = root / "empty.txt"
    empty.write_text("")
    export_args = [[f"--model={tiny_encoder_dir}", f"--export_dir={d}/E",
                    *[a.replace("EMPTY", str(empty)) for a in args]]
                   for d, (args, _) in zip(export_dirs, EXPORT_ERRORS)]
    with_sts = os.path.exists(os.path.join(SHARED_DATA, "STS", "STSBenchmark"))
    if with_sts:
        export_args.append([f"--model={tiny_encoder_dir}", f"--export_dir={root}/E",
                            "--quantize=int8,binary", f"--calibration_file={DEMO_SENTENCES}"])
    exports = cli_runs_in_one_process("tfsent.export", export_args,
                                      str(tmp_path_factory.mktemp("export-forks")))
    runs = {"export_errors": list(zip(exports, export_dirs)), "root": root}
    if not with_sts:
        return runs
    runs["demo_export"] = exports[-1]
    sts = [f"--data_dir={SHARED_DATA}", "--tasks=STSBenchmark"]
    out = root / "r.json"
    evaluate_args = [[f"--model={tiny_encoder_dir}", *sts, *args]
                     for args, _ in EVALUATE_ERRORS]
    evaluate_args += [
        [f"--model={root}/E", *sts, "--quantize=int8,binary", f"--output_json={out}"],
        [f"--model={root}/E", *sts, "--dims=16,8", "--quantize=binary",
         f"--output_json={root}/r2.json"],
        [f"--model={root}/E", *sts, "--dims=16,8", "--quantize=int8"]]
    evaluations = cli_runs_in_one_process("tfsent.evaluate", evaluate_args,
                                          str(tmp_path_factory.mktemp("evaluate-forks")),
                                          preload=EVALUATE_IMPORTS)
    runs["evaluate_errors"] = evaluations[:len(EVALUATE_ERRORS)]
    runs["demo_evaluate"] = evaluations[len(EVALUATE_ERRORS):]
    return runs


@pytest.mark.parametrize("case", range(len(EXPORT_ERRORS)),
                         ids=[m for _, m in EXPORT_ERRORS])
def test_export_cli_errors(cli_runs, case):
    r, export_dir = cli_runs["export_errors"][case]
    assert r.returncode == 2, r.stderr[-2000:]
    assert EXPORT_ERRORS[case][1] in r.stderr and "Traceback" not in r.stderr
    assert not os.path.exists(export_dir / "E" / "1")


def test_export_and_evaluate_clis_on_the_demo_corpus(cli_runs):
    """Export with both quantizations calibrated on the demo corpus, then evaluate the export
    with its stored int8 ranges, at two sizes, on STS-B."""
    shared_data_or_skip("STS", "STSBenchmark")
    r = cli_runs["demo_export"]
    assert r.returncode == 0, r.stderr[-2000:]
    r, r2, r3 = cli_runs["demo_evaluate"]
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.load(open(cli_runs["root"] / "r.json"))["STSBenchmark"]
    assert res["float"]["spearman"] == res["spearman"]
    for q in ("int8", "binary"):
        assert res[q]["retention"] == pytest.approx(
            100 * res[q]["spearman"] / res["spearman"])
    assert "int8" in r.stdout and "retention %" in r.stdout
    assert r2.returncode == 0, r2.stderr[-2000:]
    res2 = json.load(open(cli_runs["root"] / "r2.json"))["STSBenchmark"]
    assert res2["spearman"] == pytest.approx(res["spearman"])  # 16 = the full width
    assert res2["dim_16/binary"]["spearman"] == pytest.approx(res["binary"]["spearman"])
    assert set(res2) >= {"dim_16", "dim_8", "dim_8/binary"}
    # Stored int8 ranges are for the full width only.
    assert r3.returncode == 2 and "--calibration_file" in r3.stderr


@pytest.mark.parametrize("case", range(len(EVALUATE_ERRORS)),
                         ids=[a[0] for a, _ in EVALUATE_ERRORS])
def test_evaluate_cli_errors(cli_runs, case):
    shared_data_or_skip("STS", "STSBenchmark")
    r = cli_runs["evaluate_errors"][case]
    assert r.returncode == 2, r.stderr[-2000:]
    assert EVALUATE_ERRORS[case][1] in r.stderr and "Traceback" not in r.stderr
