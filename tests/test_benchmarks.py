"""benchmarks/: tfsent's side of train_throughput.py, train_profile.py, encode_throughput.py
and serve_latency.py with tiny settings and --skip_peer (CI builds no benchmark peer venv),
retrieval_scale.py at a tiny size, their JSON, flag errors, the FLOP count behind MFU and
the latency statistics."""

import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import REPO, minilm_or_skip, shared_data_or_skip

BENCH = os.path.join(REPO, "benchmarks")
sys.path.insert(0, BENCH)
import common  # noqa: E402  (benchmarks/common.py, standard library only)


def _run(script, *args, timeout=600):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, os.path.join(BENCH, script), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, env=env)


def _positive_finite(value):
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def test_train_throughput_tfsent_side(tmp_path):
    minilm_or_skip()
    out = tmp_path / "train.json"
    r = _run("train_throughput.py", "--skip_peer", "--steps=3", "--warmup_steps=1",
             "--batch_size=8", "--max_sentences=64", "--peak_runs=1", "--peak_repeats=2",
             "--matmul_size=512", f"--json={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(out.read_text())
    for key in ("tfsent_sent_per_s", "mfu", "peak_flops", "model_flops_per_step"):
        assert _positive_finite(result[key]), (key, result[key])
    assert result["peer_sent_per_s"] is None and result["ratio"] is None
    assert result["losses_finite"] is True
    assert result["settings"]["batch_size"] == 8
    assert result["model_flops_per_step"] == common.simcse_train_flops(6, 384, 1536, 32, 8)
    assert "ratio tfsent/peer" in r.stdout  # the table was printed
    # oneDNN and threads as the tfsent worker ran them (it chose them at `import tfsent`)
    machine = result["machine"]
    assert machine["runtime_source"] == "tfsent workers"
    worker = machine["tfsent_workers"][0]
    assert worker["cpu_settings"].startswith("cpu settings: oneDNN ")
    assert machine["onednn"] is worker["onednn"] and isinstance(worker["onednn"], bool)


def test_encode_throughput_tfsent_side(tmp_path):
    minilm_or_skip()
    out = tmp_path / "encode.json"
    # One batch of 16 (n = batch size): the XLA paths compile one shape, not one per batch.
    r = _run("encode_throughput.py", "--skip_peer", "--n=16", "--batch_size=16",
             "--max_seq_length=32", "--repeats=1", "--matmul_size=512", "--peak_repeats=2",
             f"--json={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(out.read_text())
    assert _positive_finite(result["tfsent_sent_per_s"])
    assert _positive_finite(result["encoder_encode_sent_per_s"])
    assert result["peer_sent_per_s"] is None and result["ratio"] is None
    # The SavedModel and SentenceEncoder.encode compute the same embeddings.
    assert result["min_cosine_savedmodel_vs_encoder"] > 0.9999
    assert result["settings"]["n"] == 16
    assert result["min_cosine_xla_vs_plain"] > 0.9999
    for key in ("mfu", "encoder_mfu", "xla_mfu", "encoder_xla_mfu", "peak_flops",
                "tfsent_flops_per_pass", "encoder_flops_per_pass",
                "savedmodel_xla_sent_per_s", "savedmodel_by_tokens_sent_per_s",
                "savedmodel_by_tokens_mfu"):
        assert _positive_finite(result[key]), (key, result[key])
    assert 2 <= result["tfsent_mean_padded_length"] <= 32
    # One batch: sorted by characters (the SavedModel's order) or by tokens (encode's), it
    # is as wide as its longest sentence.
    assert result["encoder_mean_padded_length"] == result["tfsent_mean_padded_length"]
    assert result["peer_mfu"] is None
    assert "SavedModel" in r.stdout


def test_train_profile_tfsent_step_parts(tmp_path):
    minilm_or_skip()
    out = tmp_path / "profile.json"
    # Without XLA: seven XLA compilations of minilm-l6 would make this one of the suite's
    # slowest tests (53 s); the XLA step itself runs in test_train_throughput_tfsent_side.
    r = _run("train_profile.py", "--batch_size=4", "--max_seq_length=8", "--repeats=1",
             "--max_sentences=64", "--matmul_size=512", "--tfsent_config=jit_compile=false",
             f"--json={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(out.read_text())
    profile = result["profile"]
    for name in common.TRAIN_PROFILE_PARTS:
        assert _positive_finite(profile["parts"][name]["best_ms"]), name
    # minilm-l6's trainable parameters, and its 30522 x 384 token embedding among them.
    assert profile["embedding_parameters"] == 30522 * 384
    assert 22_000_000 < profile["parameters"] < 23_000_000
    assert profile["jit_compile"] is False and profile["optimizer"] == "AdamW"
    assert result["forward_flops"] == common.transformer_forward_flops(6, 384, 1536, 8, 8)
    assert result["machine"]["cores"] == os.cpu_count()
    assert "rest of the step (derived)" in r.stdout


def test_train_profile_derived_rows_by_hand():
    parts = {name: {"best_ms": ms, "median_ms": ms} for name, ms in (
        ("forward", 10.0), ("forward_backward", 40.0),
        ("forward_backward_without_embedding", 36.0), ("optimizer_update", 8.0),
        ("optimizer_update_without_embedding", 3.0), ("train_step", 50.0),
        ("input_pipeline", 2.0))}
    d = common.derive_train_profile(parts, forward_flops=1e9, peak_flops=200e9)
    assert d["backward_ms"] == 30.0 and d["embedding_gradient_ms"] == 4.0
    assert d["embedding_update_ms"] == 5.0 and d["rest_of_step_ms"] == 2.0
    # forward: 1 GFLOP in 10 ms = 100 GFLOP/s = 50% of 200; backward 2 GFLOP in 30 ms.
    assert d["forward_mfu"] == pytest.approx(0.5)
    assert d["backward_mfu"] == pytest.approx(2e9 / 0.030 / 200e9)
    assert d["step_mfu"] == pytest.approx(3e9 / 0.050 / 200e9)
    assert d["share_of_step"]["backward"] == pytest.approx(0.6)


def test_gemm_shapes_tf_side(tmp_path):
    out = tmp_path / "gemm.json"
    r = _run("gemm_shapes.py", "--skip_peer", "--batch_size=2", "--max_seq_length=8",
             "--repeats=2", "--matmul_size=256", f"--json={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["settings"]["tokens"] == 32 and len(result["rows"]) == 6
    for row in result["rows"]:
        assert _positive_finite(row["tf_xla_flops"]) and _positive_finite(row["tf_graph_flops"])
        assert row["torch_flops"] is None
    assert "TF XLA" in r.stdout
    # 2 m k n with the transposes: [32,384]^T x [32,1536] is m=384, k=32, n=1536.
    assert common.gemm_flops((32, 384), (32, 1536), True, False) == 2 * 384 * 32 * 1536
    assert common.gemm_flops((32, 1536), (384, 1536), False, True) == 2 * 32 * 1536 * 384


def test_serve_latency_tfsent_side(tmp_path):
    minilm_or_skip()
    out = tmp_path / "serve.json"
    r = _run("serve_latency.py",
             "--paths=savedmodel,savedmodel_xla,savedmodel_tf1,litert_fp32,litert_int8",
             # 8 sentences (the cosine check's 8) at length 16: fewer request shapes for
             # the XLA export to compile
             "--n=8", "--calls=3", "--throughput_calls=2",
             "--throughput_batch=8", "--warmup_calls=1", "--max_seq_length=16",
             "--matmul_size=256", "--op_profile_calls=3", f"--json={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(out.read_text())
    scenarios = result["tfsent"]["scenarios"]
    assert set(scenarios) == {"savedmodel", "savedmodel_xla", "savedmodel_tf1",
                              "litert_fp32", "litert_int8"}
    for name in scenarios:
        assert set(scenarios[name]) == {"b1_c1", "b1_c4", "b8_c1", "b8_c4"}
        for key, m in scenarios[name].items():
            assert m["p50_ms"] <= m["p90_ms"] <= m["p99_ms"], (name, key, m)
            assert _positive_finite(m["sent_per_s"]) and m["calls"] in (2, 3)
    assert scenarios["savedmodel"]["b8_c4"]["concurrency"] == 4
    # The XLA export, and the export loaded as TF Serving loads it, compute the plain
    # export's embeddings (the correctness part).
    assert result["min_cosine_to_tfsent_savedmodel"]["savedmodel_xla"] > 0.9999
    assert result["min_cosine_to_tfsent_savedmodel"]["savedmodel_tf1"] > 0.99999
    # The LiteRT rows (tokenizer.json + ai-edge-litert's Interpreter) embed the same model.
    assert result["min_cosine_to_tfsent_savedmodel"]["litert_fp32"] > 0.9999
    assert result["min_cosine_to_tfsent_savedmodel"]["litert_int8"] > 0.98
    assert result["tfsent"]["litert"]["model_bytes"]["litert_int8"] < 0.3 * result[
        "tfsent"]["litert"]["model_bytes"]["litert_fp32"]
    ops = result["op_profile_b1"]
    assert ops["requests"] == 3 and 0 < ops["matmul_ms"] and 0 < ops["other_ms"]
    assert any("MatMul" in op or "Einsum" in op for op in ops["op_types"])
    assert ops["matmul_weight_bytes"] == 6 * 4 * (4 * 384 * 384 + 2 * 384 * 1536)
    assert "op profile, batch 1" in r.stdout
    assert set(result["tfsent"]["encode_ids"]) == {"b1_c1", "b8_c1"}
    # Request FLOPs: batch 8 pads every row to its longest, so >= 8x some batch-1 request's.
    flops = result["tfsent"]["request_flops"]
    one_token_pair = common.transformer_forward_flops(6, 384, 1536, 2, 1)  # [CLS] [SEP]
    assert flops["b1_c1"] >= one_token_pair and flops["b8_c1"] >= 8 * one_token_pair
    assert set(result["profile"]) == {"b1_c1", "b8_c1"}
    for cell in result["profile"].values():
        assert _positive_finite(cell["compute_bound_ms"])
    assert result["peers"] == {} and "tfsent_vs_onnx_fp32" not in result
    assert result["machine"]["cpu_model"] is not None or result["machine"]["cores"]
    assert "tfsent SavedModel, XLA" in r.stdout and "p50 / p90 / p99" in r.stdout
    assert "tfsent LiteRT int8" in r.stdout


def test_serve_latency_paths_pick_rows_and_student_rows(tmp_path, tiny_encoder_dir):
    """One run for two things (each run exports minilm-l6 again). --paths: only the named
    rows, here the TF1 session and (when onnxruntime is installed) tfsent's onnx export in
    ONNX Runtime, fp32 and int8; no plain `savedmodel` row, so no profile. --student=DIR:
    the student's rows run in their own process, their cosine is to the student's own
    SavedModel, and the JSON has student / teacher p50 per runtime where the teacher's row
    of that runtime ran (onnx; student_savedmodel's teacher row is not timed here)."""
    minilm_or_skip()
    onnx = importlib.util.find_spec("onnxruntime") is not None
    rows = ["savedmodel_tf1"] + (["onnx", "onnx_int8"] if onnx else [])
    student_rows = ["student_savedmodel"] + (["student_onnx"] if onnx else [])
    out = tmp_path / "serve.json"
    r = _run("serve_latency.py", f"--paths={','.join(rows + student_rows)}",
             f"--student={tiny_encoder_dir}", "--n=8", "--calls=2", "--throughput_calls=1",
             "--throughput_batch=8", "--warmup_calls=0", "--max_seq_length=16",
             "--matmul_size=64", "--op_profile_calls=0", f"--json={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(out.read_text())
    # Only the named teacher rows are timed; the plain export still gives the cosine
    # reference.
    assert set(result["tfsent"]["scenarios"]) == set(rows)
    cosines = result["min_cosine_to_tfsent_savedmodel"]
    assert cosines["savedmodel_tf1"] > 0.99999
    if onnx:
        assert cosines["onnx"] >= 0.9999 and cosines["onnx_int8"] >= 0.98, cosines
        assert "tfsent onnx int8" in r.stdout
    assert result["peers"] == {} and result["profile"] == {}
    assert "TF1 session" in r.stdout and "tfsent SavedModel, XLA" not in r.stdout
    # The student's rows.
    assert set(result["student"]["scenarios"]) == set(student_rows)
    assert result["student"]["student"]["num_layers"] == 2  # the tiny encoder's
    assert all(result["min_cosine_to_student_savedmodel"][p] >= 0.9999 for p in student_rows)
    ratios = result["student_vs_teacher_p50_ratio"]
    assert set(ratios) == {p for p in student_rows if p[len("student_"):] in rows}
    for name, by_batch in ratios.items():
        teacher = result["tfsent"]["scenarios"][name[len("student_"):]]
        student = result["student"]["scenarios"][name]
        assert by_batch["b1_c1"] == pytest.approx(
            student["b1_c1"]["p50_ms"] / teacher["b1_c1"]["p50_ms"])
    assert "student SavedModel (2 layers)" in r.stdout


def test_export_quality_keeps_fp32_and_reports_int8_retention(tmp_path, tiny_encoder_dir):
    """export_quality.py on a tiny encoder and STS-B test: the fp32 ONNX / LiteRT exports
    give `encode`'s embeddings (cosine) and so its Spearman, int8 a figure of its own, with
    its retention. (A random tiny model's cosines are all close together, so rounding
    noise moves its Spearman by a few hundredths; minilm-l6's fp32 rows match to 0.01.)"""
    sts_b = shared_data_or_skip("STS", "STSBenchmark")
    formats = [f for f, module in (("onnx", "onnxruntime"), ("onnx_int8", "onnxruntime"),
                                   ("litert_fp32", "ai_edge_litert"))
               if importlib.util.find_spec(module) is not None]
    if not formats:
        pytest.skip("needs onnxruntime or ai-edge-litert (tfsent[onnx] / tfsent[litert])")
    out = tmp_path / "quality.json"
    r = _run("export_quality.py", f"--model={tiny_encoder_dir}", f"--formats={','.join(formats)}",
             f"--data_dir={os.path.dirname(os.path.dirname(sts_b))}", "--tasks=STSBenchmark",
             "--max_seq_length=16", "--batch_size=64", f"--json={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(out.read_text())
    encode = result["spearman"]["encode"]["STSBenchmark"]
    for name in formats:
        retained = result["retention_percent"][name]["STSBenchmark"]
        assert retained == pytest.approx(
            100 * result["spearman"][name]["STSBenchmark"] / encode)
        if not name.endswith("int8"):
            assert result["spearman"][name]["STSBenchmark"] == pytest.approx(encode, abs=0.5)
            assert result["cosine_to_encode"][name]["min_cosine"] > 0.9999
    assert result["machine"]["cores"] >= 1 and "encode (TF)" in r.stdout


def test_op_profile_grouping_hand_case():
    assert common.op_type_of("x/MatMul = _MklNativeFusedMatMul(a, b, c)", "x/MatMul") == \
        "_MklNativeFusedMatMul"
    assert common.op_type_of("", "_SOURCE") == "_SOURCE"
    ops = {"_MklEinsum": {"ms": 2.0, "kernels": 36}, "BatchMatMulV2": {"ms": 0.5, "kernels": 6},
           "_MklNativeFusedMatMul": {"ms": 1.0, "kernels": 12},
           "AddV2": {"ms": 0.25, "kernels": 77}, "_MklSoftmax": {"ms": 0.25, "kernels": 6}}
    assert common.group_op_profile(ops) == {"matmul_ms": 3.5, "other_ms": 0.5,
                                            "kernels": 137}


def test_retrieval_scale_harness_at_a_tiny_size(tmp_path):
    pytest.importorskip("faiss")
    out = tmp_path / "retrieval.json"
    r = _run("retrieval_scale.py", "--sizes=300,1200", "--dim=64", "--repeats=2",
             "--large_repeats=1", f"--json={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(out.read_text())
    rows = {(row["documents"], row["kind"]): row for row in result["rows"]}
    assert set(rows) == {(m, kind) for m in (300, 1200) for kind in ("float32", "int8",
                                                                    "binary")}
    for row in rows.values():
        for key in ("p50_ms_b1", "p50_ms_b32", "faiss_p50_ms_b1", "faiss_p50_ms_b32",
                    "disk_bytes"):
            assert _positive_finite(row[key]), (key, row)
    for m in (300, 1200):
        # 4 bytes, 1 byte and 1 bit per dimension; exact search finds the exact top 10.
        assert rows[(m, "float32")]["index_bytes"] == 4 * rows[(m, "int8")]["index_bytes"] \
            == 32 * rows[(m, "binary")]["index_bytes"] == m * 64 * 4
        assert rows[(m, "float32")]["recall_at_k"] == 1.0
        assert rows[(m, "float32")]["faiss_recall_at_k"] == 1.0
        assert rows[(m, "int8")]["recall_at_k"] >= 0.9
        assert rows[(m, "binary")]["recall_at_k"] >= 0.5
    assert rows[(1200, "float32")]["disk_bytes"] > rows[(1200, "int8")]["disk_bytes"] \
        > rows[(1200, "binary")]["disk_bytes"]
    assert result["settings"]["dim"] == 64 and result["machine"]["cpu_model"] is not None
    assert "search_embeddings vs faiss-cpu" in r.stdout


def test_percentile_matches_numpy_and_a_hand_case():
    import numpy as np

    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 200):
        values = rng.exponential(size=n).tolist()
        for q in (0, 50, 90, 99, 100):
            assert common.percentile(values, q) == pytest.approx(np.percentile(values, q))
    # 1, 2, 3, 4: the 90th percentile sits 0.7 of the way from 3 to 4.
    assert common.percentile([4, 1, 3, 2], 90) == pytest.approx(3.7)
    with pytest.raises(ValueError):
        common.percentile([], 50)


def test_time_requests_sends_each_request_once_and_raises_client_errors():
    import threading

    seen, lock = [], threading.Lock()

    def call(batch):
        with lock:
            seen.append(tuple(batch))

    sentences = [f"s{i}" for i in range(5)]
    m = common.time_requests(call, sentences, batch_size=2, calls=6, concurrency=3, warmup=1)
    timed = common.request_batches(sentences, 2, 6)
    assert timed[2] == ["s4", "s0"]  # requests wrap around the sentence list
    assert sorted(seen[3:]) == sorted(map(tuple, timed))  # 3 warmup requests, then each once
    assert m["calls"] == 6 and m["concurrency"] == 3 and m["p50_ms"] >= 0

    def failing(batch):
        if batch[0] == "s2":
            raise RuntimeError("server error")

    with pytest.raises(RuntimeError, match="server error"):
        common.time_requests(failing, sentences, 1, calls=5, concurrency=2, warmup=0)


def test_peer_quantization_config_follows_the_isa():
    import peer_serve  # benchmarks/peer_serve.py imports nothing beyond the standard library

    assert peer_serve.quantization_config_name(["avx2", "avx512f", "avx512_vnni"]) == \
        "avx512_vnni"
    assert peer_serve.quantization_config_name(["avx2", "avx512f"]) == "avx512"
    assert peer_serve.quantization_config_name(["avx2", "fma"]) == "avx2"


@pytest.mark.parametrize("script,args,flag", [
    ("train_throughput.py", ["--steps=2", "--warmup_steps=2", "--json=JSON"], "--steps"),
    ("train_throughput.py", ["--steps=5"], "--json"),
    ("train_throughput.py", ["--data=/nonexistent.txt", "--json=JSON"], "--data"),
    ("encode_throughput.py", ["--n=0", "--json=JSON"], "--n"),
    ("memory_vs_batch.py", ["--batch_sizes=16,x", "--json=JSON"], "--batch_sizes"),
    ("memory_vs_batch.py", ["--grad_cache_chunk=-1", "--json=JSON"], "--grad_cache_chunk"),
    ("gemm_shapes.py", ["--repeats=0", "--json=JSON"], "--repeats"),
    ("train_throughput.py", ["--peer_bf16", "--peer_loop=manual", "--json=JSON"],
     "--peer_bf16 needs --peer_loop=trainer"),
    ("train_throughput.py", ["--peer_bf16", "--skip_peer", "--json=JSON"], "drop --skip_peer"),
    ("train_profile.py", ["--repeats=0", "--json=JSON"], "--repeats"),
    ("serve_latency.py", ["--calls=0", "--json=JSON"], "--calls"),
    ("serve_latency.py", ["--backends=torch,tensorrt", "--json=JSON"], "--backends"),
    ("serve_latency.py", ["--litert_threads=-1", "--json=JSON"], "--litert_threads"),
    ("serve_latency.py", ["--paths=savedmodel,tensorrt", "--json=JSON"], "st_onnx_int8"),
    ("serve_latency.py", ["--paths=savedmodel", "--backends=onnx", "--json=JSON"],
     "--backends"),
    ("serve_latency.py", ["--paths=st_onnx", "--skip_peer", "--json=JSON"], "--skip_peer"),
    ("serve_latency.py", ["--paths=student_onnx", "--json=JSON"], "--student"),
    ("serve_latency.py", ["--student=/nonexistent", "--json=JSON"], "--student"),
    ("serve_latency.py", ["--peer_student", "--json=JSON"], "--peer_student needs --student"),
    ("serve_latency.py", ["--random_qwen3=/tmp/x", "--student=/tmp", "--json=JSON"],
     "--random_qwen3"),
    ("serve_latency.py", ["--random_qwen3=/tmp/x", "--random_layers=0", "--json=JSON"],
     "--random_layers"),
    # a folder of the user's is never written into
    ("serve_latency.py", ["--random_qwen3=" + REPO, "--json=JSON"], "holds files that are not"),
    ("serve_latency.py", ["--student=" + REPO, "--peer_student", "--json=JSON"],
     "has no model.safetensors"),
    ("export_quality.py", ["--formats=onnx,tensorrt", "--json=JSON"], "--formats"),
    ("export_quality.py", ["--data_dir=/nonexistent", "--json=JSON"], "--data_dir"),
    ("retrieval_scale.py", ["--sizes=5", "--json=JSON"], "--sizes"),
    ("retrieval_scale.py", ["--kinds=float32,pq", "--json=JSON"], "--kinds"),
])
def test_bad_flags_name_the_flag(script, args, flag, tmp_path):
    out = tmp_path / "never.json"
    r = _run(script, *[a.replace("JSON", str(out)) for a in args], timeout=120)
    assert r.returncode != 0
    assert flag in r.stderr, r.stderr[-2000:]
    assert not out.exists()


def test_flop_count_and_throughput_window():
    # minilm-l6 (6 layers, H=384, I=1536), one sequence of 32 tokens, by hand:
    per_layer = 2 * 32 * (4 * 384 * 384 + 2 * 384 * 1536) + 4 * 32 * 32 * 384
    assert common.transformer_forward_flops(6, 384, 1536, 32, 1) == 6 * per_layer
    assert common.simcse_train_flops(6, 384, 1536, 32, 64) == 3 * 128 * 6 * per_layer
    # Encoding 5 sentences in batches of 2 padded to 7, 5, 3 tokens: forward FLOPs of
    # 2 x 7 + 2 x 5 + 1 x 3 sequences; the widths must match the batches.
    by_hand = sum(b * 6 * (2 * w * (4 * 384 * 384 + 2 * 384 * 1536) + 4 * w * w * 384)
                  for w, b in ((7, 2), (5, 2), (3, 1)))
    assert common.encode_flops(6, 384, 1536, [7, 5, 3], 5, 2) == by_hand
    with pytest.raises(ValueError, match="batch widths"):
        common.encode_flops(6, 384, 1536, [7, 5], 5, 2)
    # Steps end at t = 10 (compile), 11, 12, 13: one warmup step, 3 timed steps in 3 s.
    w = common.window_throughput([10.0, 11.0, 12.0, 13.0], warmup_steps=1, batch_size=4)
    assert w["sent_per_s"] == pytest.approx(4.0) and w["timed_steps"] == 3
    with pytest.raises(ValueError):
        common.window_throughput([1.0, 2.0], warmup_steps=2, batch_size=4)


def test_write_json_atomic(tmp_path):
    path = tmp_path / "sub" / "r.json"
    common.write_json_atomic(str(path), {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    assert os.listdir(path.parent) == ["r.json"]  # no temporary file left behind


def test_every_benchmark_result_carries_the_machine(tmp_path):
    """Each benchmark writes its JSON through common.write_result: the machine description
    (CPU model, cores, ISA flags, versions, oneDNN, date) goes with every figure."""
    import glob

    scripts = [p for p in glob.glob(os.path.join(common.BENCH_DIR, "*.py"))
               if "--json" in open(p, encoding="utf-8").read()]
    assert scripts
    for path in scripts:
        text = open(path, encoding="utf-8").read()
        assert "common.write_result(FLAGS.json" in text, path
        assert "write_json_atomic(FLAGS.json" not in text, path
    out = tmp_path / "r.json"
    common.write_result(str(out), {"ratio": 1.0})
    machine = json.loads(out.read_text())["machine"]
    assert machine["cores"] == os.cpu_count() and machine["tensorflow"]
    assert isinstance(machine["isa_flags"], list) and isinstance(machine["onednn"], bool)
    assert machine["date"].count("-") == 2


def test_the_machine_record_takes_onednn_and_threads_from_the_tfsent_workers():
    on = {"onednn": True, "intra_op_threads": 0, "inter_op_threads": 0, "worker": "a"}
    off = dict(on, onednn=False, worker="b")
    assert common.tfsent_workers_runtime([]) == {}
    one = common.tfsent_workers_runtime([on, on])
    assert (one["onednn"], one["intra_op_threads"], one["runtime_source"]) == (
        True, 0, "tfsent workers")
    assert one["tfsent_workers"] == [on, on]
    assert common.tfsent_workers_runtime([on, off])["onednn"] == "mixed"
    line = common.describe_machine(dict(
        cpu_model="X", cores=2, isa_flags=["avx2"], tensorflow="2.21", date="2026-11-27",
        onednn="mixed"))
    assert "oneDNN mixed" in line and "MAX_CPU_ISA" not in line
    capped = common.describe_machine(dict(
        cpu_model="X", cores=2, isa_flags=["avx512f"], tensorflow="2.21", date="2026-11-27",
        onednn=True, isa_caps={"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}))
    assert capped.endswith("oneDNN on, ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2; "
                           "2026-11-27)"), capped


def test_parse_cpuinfo_flags():
    text = ("processor\t: 0\nmodel name\t: AMD EPYC 9R14 96-Core Processor\n"
            "flags\t\t: fpu sse avx2 fma avx512f avx512_bf16 avx512_vnni\n\n"
            "processor\t: 1\nmodel name\t: AMD EPYC 9R14 96-Core Processor\n")
    model, flags = common.parse_cpuinfo(text)
    assert model == "AMD EPYC 9R14 96-Core Processor"
    assert flags == ["avx2", "avx512_bf16", "avx512_vnni", "avx512f", "fma"]
    assert common.parse_cpuinfo("model name : X\nflags : sse2 avx2\n")[1] == ["avx2"]


def test_the_machine_record_says_what_tensorflow_really_runs():
    """oneDNN on or off is TF's own answer, not a guess from the variable (TF 2.21 turns it
    on by default only on AVX512_VNNI / BF16 / AVX_VNNI / AMX CPUs), with the variable's
    value and the thread settings beside it."""
    script = ("import json, sys; sys.path.insert(0, %r); import common; "
              "print(json.dumps(common.tensorflow_runtime()))" % common.BENCH_DIR)
    clean = {k: v for k, v in os.environ.items() if k not in common.ISA_CAP_VARIABLES}
    for value, expected, caps in (("0", False, {}), ("1", True, {"ONEDNN_MAX_CPU_ISA": "AVX2"})):
        env = dict(clean, TF_ENABLE_ONEDNN_OPTS=value, **caps)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             env=env, check=True).stdout
        record = json.loads(out.strip().splitlines()[-1])
        assert record["onednn"] is expected and record["onednn_env"] == value
        assert record["intra_op_threads"] == 0 and record["inter_op_threads"] == 0
        assert record["isa_caps"] == caps  # an ISA cap is part of what ran


def test_large_model_memory_tiny(tmp_path):
    """benchmarks/large_model_memory.py --tiny: a row in its own process (one: each costs a
    TensorFlow import), its step time, peak RSS and parameter counts (LoRA: the adapters
    and the Dense head train, far fewer than all)."""
    out = tmp_path / "large.json"
    r = _run("large_model_memory.py", "--tiny", "--steps=1", "--length=16",
             "--models=embeddinggemma_300m", "--modes=lora16", f"--json={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert (row["model"], row["mode"], row["tiny"]) == ("embeddinggemma_300m", "lora16", True)
    assert row["losses_finite"]
    for key in ("step_s", "peak_rss_mb", "rss_after_build_mb"):
        assert _positive_finite(row[key]), (key, row)
    assert row["peak_rss_mb"] >= row["rss_after_build_mb"] * 0.99
    assert 0 < row["trainable_params"] < row["total_params"] / 2
    assert "| embeddinggemma_300m | lora16 |" in r.stdout
    bad = _run("large_model_memory.py", "--tiny", "--models=bert")
    assert bad.returncode != 0 and "unknown 'bert'" in bad.stderr
