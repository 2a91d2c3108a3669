"""Serving latency on the CPU: tfsent's exported SavedModel against sentence-transformers'
PyTorch, ONNX (fp32) and ONNX int8 backends.

    python benchmarks/serve_latency.py --json=serve.json [--n=1000 --max_seq_length=256
        --calls=200 --throughput_calls=32 --backends=torch,onnx,onnx_int8 --skip_peer
        --data=../shared/data/wiki/wiki1m_prefix.txt --paths=savedmodel,st_onnx,...]

`--paths` picks rows by name (`--help` lists them): tfsent's `savedmodel`, `savedmodel_xla`,
`savedmodel_tf1`, `onnx`, `onnx_int8`, the peers' `st_torch`, `st_onnx`, `st_onnx_int8`, and
with `--student=DIR` the rows `student_savedmodel`, `student_onnx`, `student_onnx_int8`.
Without it, every tfsent row (XLA unless --noserve_xla; the onnx rows when onnxruntime is
installed), the --backends peers (unless --skip_peer) and, with --student, its rows run.
The plain SavedModel is exported in every run: its embeddings are the cosine reference.

The same checkpoint (all-MiniLM-L6-v2, mean pooling, truncation at 256 tokens, float32
unless int8) and the same requests: consecutive sentences of the wiki prefix (tfsent's demo
corpus when ../shared/data is absent), in file order (a server does not get to sort its
requests by length). Paths:

  tfsent SavedModel       minilm-l6 exported by tfsent.export.export_encoder (strings in,
                          tokenization inside the graph, per-batch padding), loaded with
                          tf.saved_model.load; each request is one `serving_default` call.
  tfsent SavedModel, XLA  the same exported with jit_compile=True (bucketed shapes; every
                          shape the timed requests hit is compiled first, untimed).
  tfsent SavedModel, TF1 session
                          the plain export loaded as TF Serving's C++ loader loads it
                          (MetaGraph into a TF1 session, variables restored through the
                          saver_def); each request is one session.run.
  (op profile)            --op_profile_calls batch-1 requests traced kernel by kernel in
                          that session: time per op type, matmul kernels against the rest,
                          and the rate at which the matmuls stream the weights (bytes of
                          the matmul weights / matmul time): at batch 1 every weight is
                          read once per request for a few FLOPs per byte.
  (profile)               the plain export's `encode_ids` signature on pre-tokenized
                          requests, one caller: what the in-graph tokenizer costs; and
                          each request's model FLOPs at the TF matmul peak measured in
                          the run: the time a perfectly efficient kernel set would need.
  tfsent onnx fp32 / int8 tfsent's onnx export (tfsent.formats.onnx: onnxruntime's fused
                          Attention / SkipLayerNormalization / BiasGelu ops; int8: dynamic,
                          per-channel weights) in ONNX Runtime, each request tokenized by
                          the exported tokenizer.json (Hugging Face `tokenizers`), then one
                          session.run.
  tfsent LiteRT fp32 / int8
                          minilm-l6 exported by tfsent.formats.litert (fp32; dynamic-range
                          int8 weights), each request tokenized with the tokenizer.json
                          written beside the model (the `tokenizers` library) and run by
                          ai-edge-litert's Interpreter with XNNPACK, --litert_threads
                          threads (default: one per core), one Interpreter per caller
                          (rows litert_fp32, litert_int8; need tfsent[litert]).
  student SavedModel / onnx fp32 / onnx int8
                          --student (an encoder folder, e.g. a `--method=distill` run's
                          export, such as a 3-layer student of minilm-l6) exported and
                          timed as the teacher's SavedModel and onnx rows, in its own
                          process; its cosine column is to its own SavedModel, and the
                          JSON has its p50 over the teacher's, runtime by runtime.
  st torch / onnx / onnx int8
                          sentence-transformers in the `serving` peer venv (peer_env.py, its
                          packages pinned), one process per backend (peer_serve.py); with
                          --peer_student they serve the --student folder instead, so the
                          student rows and theirs time one model (a decoder family's, e.g.
                          --random_qwen3=DIR: a random Qwen3-Embedding-0.6B-shaped folder,
                          --random_layers of its 28 layers; benchmarks/README.md, "Decoder
                          serving").

Scenarios (common.serving_scenarios): batch 1 and batch 8 from one caller and from 4
concurrent callers (closed loop: each sends its next request when the last returns), p50 /
p90 / p99 latency over `--calls` requests; and throughput at batch 64. Each path runs in
its own process, one after another; the JSON keeps every number, the machine description
(common.machine_description) and the lowest cosine of each path's embeddings to tfsent's
plain export on the first 8 sentences (the check that every path computes the same model).
"""

import importlib.util
import json
import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import peer_env  # noqa: E402  (defines --peer_venv, --peer_python, --peer_env)

FLAGS = flags.FLAGS
PEER_BACKENDS = ("torch", "onnx", "onnx_int8")
PEER_LABELS = {"torch": "st torch", "onnx": "st onnx fp32", "onnx_int8": "st onnx int8"}
TFSENT_LABELS = {"savedmodel": "tfsent SavedModel", "savedmodel_xla": "tfsent SavedModel, XLA",
                 "savedmodel_tf1": "tfsent SavedModel, TF1 session",
                 "onnx": "tfsent onnx fp32", "onnx_int8": "tfsent onnx int8",
                 "litert_fp32": "tfsent LiteRT fp32", "litert_int8": "tfsent LiteRT int8"}
# --student's rows: the student encoder through the same runtimes as the teacher's rows.
STUDENT_LABELS = {"student_savedmodel": "student SavedModel",
                  "student_onnx": "student onnx fp32", "student_onnx_int8": "student onnx int8"}
HAS_ONNXRUNTIME = importlib.util.find_spec("onnxruntime") is not None
HAS_LITERT = importlib.util.find_spec("ai_edge_litert") is not None
# --paths names: tfsent's rows by their worker name, the peers' as st_<backend>.
PATH_NAMES = (list(TFSENT_LABELS) + [f"st_{b}" for b in PEER_BACKENDS]
              + list(STUDENT_LABELS))

flags.DEFINE_string("json", None, "Where to write the results (JSON).")
flags.DEFINE_integer("n", 1000, "Sentences the requests are drawn from (the first n of --data).")
flags.DEFINE_string("data", common.DEFAULT_WIKI, "Sentence file, one a line (default: the "
                    "wiki prefix; the demo corpus when ../shared/data is absent).")
flags.DEFINE_integer("max_seq_length", 256, "Truncation length of every path.")
flags.DEFINE_integer("calls", 200, "Timed requests per batch-1 / batch-8 scenario.")
flags.DEFINE_integer("throughput_calls", 32, "Timed requests in the batch-64 scenario.")
flags.DEFINE_integer("throughput_batch", 64, "Batch size of the throughput scenario.")
flags.DEFINE_integer("warmup_calls", 5, "Untimed requests per caller before each scenario.")
flags.DEFINE_list("paths", None, "Rows to measure, by name: " + ", ".join(PATH_NAMES)
                  + " (default: every tfsent row, savedmodel_xla unless --noserve_xla, and "
                  "st_<b> for each of --backends unless --skip_peer).")
flags.DEFINE_list("backends", ["torch", "onnx", "onnx_int8"], "sentence-transformers "
                  "backends to measure (torch, onnx, onnx_int8).")
flags.DEFINE_bool("serve_xla", True, "Also measure tfsent's jit_compile=True export.")
flags.DEFINE_bool("serve_litert", True, "Also measure tfsent's LiteRT exports (fp32, int8).")
flags.DEFINE_integer("litert_threads", 0, "Threads of each LiteRT Interpreter (0: one per "
                     "CPU core).")
flags.DEFINE_string("student", None, "An encoder folder (e.g. a `--method=distill` run's "
                    "export) timed beside minilm-l6 as rows student_savedmodel, student_onnx, "
                    "student_onnx_int8, with the student / teacher p50 ratios.")
flags.DEFINE_bool("peer_student", False, "The sentence-transformers rows serve --student's "
                  "folder (a sentence-transformers folder, e.g. a Qwen3-Embedding-shaped one "
                  "from --random_qwen3) instead of all-MiniLM-L6-v2; their cosines are to the "
                  "student's SavedModel.")
flags.DEFINE_string("random_qwen3", None, "Write a random Qwen3-Embedding-0.6B-shaped "
                    "sentence-transformers folder here (its layer widths, --random_layers of "
                    "its 28 layers, a 600-piece byte-level BPE; tests/hf_decoder_checkpoints) "
                    "and use it as --student (the folder is kept).")
flags.DEFINE_integer("random_layers", 4, "Layers of the --random_qwen3 folder.")
flags.DEFINE_bool("skip_peer", False, "Measure tfsent only (no peer venv).")
flags.DEFINE_integer("op_profile_calls", 50, "Batch-1 requests traced op by op in the TF1 "
                     "session (0: no op profile).")
flags.DEFINE_integer("matmul_size", 2048, "n of the n x n x n matmul that measures the TF "
                     "peak (the profile's compute-bound times).")



def validate_flags():
    """Raises app.UsageError naming the offending flag."""
    if not FLAGS.json:
        raise app.UsageError("--json is required (where to write the results)")
    if FLAGS.op_profile_calls < 0:
        raise app.UsageError(f"--op_profile_calls must be >= 0, got {FLAGS.op_profile_calls}")
    for name in ("n", "calls", "throughput_calls", "throughput_batch", "matmul_size"):
        if getattr(FLAGS, name) < 1:
            raise app.UsageError(f"--{name} must be >= 1, got {getattr(FLAGS, name)}")
    if FLAGS.litert_threads < 0:
        raise app.UsageError(f"--litert_threads must be >= 0, got {FLAGS.litert_threads}")
    if FLAGS.warmup_calls < 0:
        raise app.UsageError(f"--warmup_calls must be >= 0, got {FLAGS.warmup_calls}")
    if FLAGS.max_seq_length < 2:
        raise app.UsageError(f"--max_seq_length must be >= 2, got {FLAGS.max_seq_length}")
    unknown = [b for b in FLAGS.backends if b not in PEER_BACKENDS]
    if unknown:
        raise app.UsageError(f"--backends: unknown {unknown}; choose from {PEER_BACKENDS}")
    if FLAGS.paths is not None:
        unknown = [p for p in FLAGS.paths if p not in PATH_NAMES]
        if unknown or not FLAGS.paths:
            raise app.UsageError(f"--paths: unknown {unknown or 'empty list'}; known paths: "
                                 f"{', '.join(PATH_NAMES)}")
        overlap = [f"--{f}" for f in ("backends", "serve_xla", "serve_litert")
                   if FLAGS[f].present]
        if overlap:
            raise app.UsageError(f"--paths names the rows itself; drop {' and '.join(overlap)}")
        if not (FLAGS.student or FLAGS.random_qwen3) and any(p in STUDENT_LABELS
                                                             for p in FLAGS.paths):
            raise app.UsageError("--paths names student rows but --student is not set")
        if FLAGS.skip_peer and any(p.startswith("st_") for p in FLAGS.paths):
            raise app.UsageError("--paths names sentence-transformers rows (st_...) but "
                                 "--skip_peer is set")
    if FLAGS.random_qwen3:
        if FLAGS.student:
            raise app.UsageError("--random_qwen3 writes the --student folder; drop --student")
        if FLAGS.random_layers < 1:
            raise app.UsageError(f"--random_layers must be >= 1, got {FLAGS.random_layers}")
        if os.path.exists(FLAGS.random_qwen3) and os.listdir(FLAGS.random_qwen3) \
                and not is_random_qwen3(FLAGS.random_qwen3, FLAGS.random_layers):
            raise app.UsageError(f"--random_qwen3={FLAGS.random_qwen3} holds files that are "
                                 f"not a random folder of {FLAGS.random_layers} layers written "
                                 "by this flag; name a new or empty folder")
    elif FLAGS.student and not os.path.isdir(FLAGS.student):
        raise app.UsageError(f"--student={FLAGS.student} is not a folder")
    if FLAGS.peer_student and not (FLAGS.student or FLAGS.random_qwen3):
        raise app.UsageError("--peer_student needs --student (or --random_qwen3)")
    if FLAGS.peer_student and FLAGS.student and not os.path.exists(
            os.path.join(FLAGS.student, "model.safetensors")):
        raise app.UsageError(f"--peer_student: --student={FLAGS.student} has no "
                             "model.safetensors (sentence-transformers serves a Hugging Face "
                             "or sentence-transformers folder)")


def selected_paths():
    """(tfsent rows, peer backends, student rows) to measure: --paths, else the older
    flags' defaults (and every student row when --student is set)."""
    if FLAGS.paths is None:
        ours = [p for p in TFSENT_LABELS if (FLAGS.serve_xla or p != "savedmodel_xla")
                and (HAS_ONNXRUNTIME or not p.startswith("onnx"))
                and ((FLAGS.serve_litert and HAS_LITERT) or not p.startswith("litert"))]
        student = [p for p in STUDENT_LABELS if FLAGS.student
                   and (HAS_ONNXRUNTIME or "onnx" not in p)]
        return ours, ([] if FLAGS.skip_peer else list(FLAGS.backends)), student
    return ([p for p in TFSENT_LABELS if p in FLAGS.paths],
            [b for b in PEER_BACKENDS if f"st_{b}" in FLAGS.paths],
            [p for p in STUDENT_LABELS if p in FLAGS.paths])


# Qwen3-Embedding-0.6B's config.json widths (its 28 layers: --random_layers of them)
QWEN3_06B_SIZES = {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8,
                   "head_dim": 128, "intermediate_size": 3072}


def is_random_qwen3(directory, layers):
    """True when `directory` holds a --random_qwen3 folder of `layers` layers (its
    config.json has the widths, its weights are there)."""
    try:
        with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return False
    wanted = {**QWEN3_06B_SIZES, "num_hidden_layers": layers, "model_type": "qwen3"}
    return all(config.get(k) == v for k, v in wanted.items()) and os.path.exists(
        os.path.join(directory, "model.safetensors"))


def write_random_qwen3(directory, layers):
    """A random Qwen3-Embedding-0.6B-shaped sentence-transformers folder at `directory`
    (a new or empty folder; one this function wrote with as many layers is reused);
    returns it."""
    if is_random_qwen3(directory, layers):
        return directory
    sys.path.insert(0, os.path.join(common.REPO_DIR, "tests"))
    from hf_decoder_checkpoints import make_qwen3_embedding_dir

    return make_qwen3_embedding_dir(directory, seed=0, max_seq_length=FLAGS.max_seq_length,
                                    sizes={**QWEN3_06B_SIZES, "num_hidden_layers": layers})


def min_cosine(a, b):
    """Lowest row-wise cosine between two lists of vectors (pure Python: few rows)."""
    import math

    worst = 1.0
    for u, v in zip(a, b):
        dot = sum(x * y for x, y in zip(u, v))
        norm = math.sqrt(sum(x * x for x in u)) * math.sqrt(sum(y * y for y in v))
        worst = min(worst, dot / norm)
    return worst


def table_rows(paths, throughput_key):
    """One row per path: p50 / p90 / p99 (ms) per latency scenario, and sentences/s."""
    rows = []
    for label, scenarios in paths:
        row = [label]
        for key in ("b1_c1", "b1_c4", "b8_c1", "b8_c4"):
            m = scenarios[key]
            row.append(f"{m['p50_ms']:.1f} / {m['p90_ms']:.1f} / {m['p99_ms']:.1f}")
        row.append(common.fmt(scenarios[throughput_key]["sent_per_s"]))
        rows.append(row)
    return rows


def main(argv):
    """Runs tfsent's side and each peer backend, writes --json, prints the table."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    validate_flags()
    data, note = common.data_or_usage_error(FLAGS.data)
    peer_env.worker_env()  # checks --peer_env
    busy, warning = common.check_busy()
    if FLAGS.random_qwen3:
        FLAGS.student = write_random_qwen3(FLAGS.random_qwen3, FLAGS.random_layers)
    our_paths, backends, student_paths = selected_paths()
    peer_python = None
    if backends:
        peer_python = peer_env.ensure_peer_env(FLAGS.peer_venv, FLAGS.peer_python,
                                               profile="serving")
    shared = [f"--data={data}", f"--max_sentences={FLAGS.n}",
              f"--max_seq_length={FLAGS.max_seq_length}", f"--calls={FLAGS.calls}",
              f"--throughput_calls={FLAGS.throughput_calls}",
              f"--throughput_batch={FLAGS.throughput_batch}",
              f"--warmup_calls={FLAGS.warmup_calls}"]
    load_before = common.load_average()
    peak = common.measure_peak(None, FLAGS.matmul_size, 5)["tf"]
    litert_paths = [p for p in our_paths if p.startswith("litert")]
    ours = common.run_worker(sys.executable, "tfsent_worker.py",
                             ["--mode=serve", "--serve_paths=" + ",".join(
                                 p for p in our_paths if p not in litert_paths),
                              f"--op_profile_calls={FLAGS.op_profile_calls}"] + shared,
                             what="tfsent SavedModel serving")
    if litert_paths:  # its own process, as every path; merged into tfsent's rows
        lite = common.run_worker(sys.executable, "tfsent_worker.py",
                                 ["--mode=serve_litert",
                                  f"--litert_threads={FLAGS.litert_threads}"] + shared,
                                 what="tfsent LiteRT serving")
        for name in litert_paths:
            ours["scenarios"][name] = lite["scenarios"][name]
            ours["embeddings"][name] = lite["embeddings"][name]
        ours["litert"] = {k: lite[k] for k in ("litert_threads", "model_bytes", "max_rss_mb")}
    student = None
    if student_paths:  # its own process; its rows' cosines are to its own SavedModel
        student = common.run_worker(sys.executable, "tfsent_worker.py",
                                    ["--mode=serve_student", f"--student={FLAGS.student}",
                                     "--serve_paths=" + ",".join(student_paths)] + shared,
                                    what="the student's serving")
    peers = {}
    peer_model = [f"--model_dir={os.path.abspath(FLAGS.student)}"] if FLAGS.peer_student else []
    for backend in backends:
        peers[backend] = common.run_worker(peer_python, "peer_serve.py",
                                           [f"--backend={backend}"] + shared + peer_model,
                                           env=peer_env.worker_env(),
                                           what=f"sentence-transformers backend={backend}")
    reference = ours["embeddings"]["savedmodel"]
    throughput_key = f"b{FLAGS.throughput_batch}_c1"
    paths = [(TFSENT_LABELS[name], ours["scenarios"][name]) for name in ours["scenarios"]]
    paths += [(PEER_LABELS[b], peers[b]["scenarios"]) for b in peers]
    cosines = {name: min_cosine(reference, emb) for name, emb in ours["embeddings"].items()}
    student_cosines = {}
    if student:
        layers = student["student"]["num_layers"]
        paths += [(f"{STUDENT_LABELS[name]} ({layers} layers)", student["scenarios"][name])
                  for name in student["scenarios"]]
        student_cosines = {name: min_cosine(student["embeddings"]["student_savedmodel"], emb)
                           for name, emb in student["embeddings"].items()}
    (student_cosines if FLAGS.peer_student else cosines).update({
        f"st_{b}": min_cosine(student["embeddings"]["student_savedmodel"] if FLAGS.peer_student
                              else reference, p["embeddings"]) for b, p in peers.items()})
    # the checkpoint every peer should have served: the student's with --peer_student
    peer_checkpoint = (common.file_sha256(os.path.join(FLAGS.student, "model.safetensors"))
                       if FLAGS.peer_student else ours["checkpoint_sha256"])
    result = {
        "tfsent": {k: v for k, v in ours.items() if k != "embeddings"},
        "peers": {b: {k: v for k, v in p.items() if k != "embeddings"} for b, p in
                  peers.items()},
        "min_cosine_to_tfsent_savedmodel": cosines,
        **({"student": {k: v for k, v in student.items() if k != "embeddings"},
            "min_cosine_to_student_savedmodel": student_cosines,
            # p50 of the student over the teacher's row of the same runtime
            "student_vs_teacher_p50_ratio": {
                name: {key: student["scenarios"][name][key]["p50_ms"]
                       / ours["scenarios"][name[len("student_"):]][key]["p50_ms"]
                       for key in ("b1_c1", "b8_c1")}
                for name in student["scenarios"]
                if name[len("student_"):] in ours["scenarios"]}} if student else {}),
        "same_checkpoint": all(p["checkpoint_sha256"] == peer_checkpoint
                               for p in peers.values()),
        "peers_serve": os.path.abspath(FLAGS.student) if FLAGS.peer_student else "minilm-l6",
        "settings": {"n": ours["n_sentences"], "data": data, "max_seq_length":
                     FLAGS.max_seq_length, "calls": FLAGS.calls,
                     "throughput_calls": FLAGS.throughput_calls,
                     "throughput_batch": FLAGS.throughput_batch,
                     "warmup_calls": FLAGS.warmup_calls, "peer_env": list(FLAGS.peer_env)},
        "load_average": [load_before, common.load_average()],
        "cpu_busy_before": busy,
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
    }
    # Profile: each single-caller cell's model FLOPs at the measured matmul peak (the time
    # a perfectly efficient kernel set would need), the tokenizer's share (serving_default
    # minus encode_ids), and what is left: dispatch and small-kernel inefficiency.
    plain = ours["scenarios"].get("savedmodel")
    result["profile"] = {} if plain is None or FLAGS.peer_student else {
        key: {"p50_ms": plain[key]["p50_ms"],
              "compute_bound_ms": 1000 * ours["request_flops"][key] / peak,
              "encode_ids_p50_ms": ours["encode_ids"][key]["p50_ms"],
              "tokenizer_ms": plain[key]["p50_ms"] - ours["encode_ids"][key]["p50_ms"],
              **{f"{PEER_LABELS[b]}_p50_ms": peers[b]["scenarios"][key]["p50_ms"]
                 for b in peers}}
        for key in ours["encode_ids"]}
    result["peak_flops"] = peak
    ops = ours.get("op_profile_b1")
    if ops:
        grouped = common.group_op_profile(ops["op_types"])
        result["op_profile_b1"] = {
            **ops, **grouped,
            "matmul_weight_gb_per_s": ops["matmul_weight_bytes"] / grouped["matmul_ms"] / 1e6,
            "top": sorted(ops["op_types"], key=lambda op: -ops["op_types"][op]["ms"])[:12]}
    if FLAGS.peer_student and student:  # the student's rows over each peer's, same model
        result["student_vs_peers_p50_ratio"] = {
            f"{name} / st_{b}": {key: student["scenarios"][name][key]["p50_ms"]
                                 / peers[b]["scenarios"][key]["p50_ms"]
                                 for key in ("b1_c1", "b8_c1")}
            for name in student["scenarios"] for b in peers}
    if "onnx" in peers and plain is not None and not FLAGS.peer_student:
        onnx = peers["onnx"]["scenarios"]
        result["tfsent_vs_onnx_fp32"] = {
            **{f"{key}_p50_latency_ratio": plain[key]["p50_ms"] / onnx[key]["p50_ms"]
               for key in ("b1_c1", "b1_c4", "b8_c1", "b8_c4")},
            "throughput_ratio": (plain[throughput_key]["sent_per_s"]
                                 / onnx[throughput_key]["sent_per_s"])}
    if warning:
        result["warning"] = warning
    if note:
        result["note"] = note
    result = common.write_result(FLAGS.json, result, peer_python)
    common.print_table(
        ["path", "batch 1: p50 / p90 / p99 ms", "batch 1, 4 callers", "batch 8",
         "batch 8, 4 callers", f"batch {FLAGS.throughput_batch} sent/s"],
        table_rows(paths, throughput_key),
        title=f"serving latency: minilm-l6 mean pooling"
              + (f" (sentence-transformers rows: the student {FLAGS.student})"
                 if FLAGS.peer_student else "")
              + f", max_seq_length {FLAGS.max_seq_length}, "
              f"{FLAGS.calls} requests per latency cell, requests from the first "
              f"{ours['n_sentences']} sentences")
    if result["profile"]:
        common.print_table(
            ["one caller", "tfsent p50 ms", "without tokenizer", "FLOPs at peak"]
            + [f"{PEER_LABELS[b]} p50" for b in peers],
            [[key, common.fmt(v["p50_ms"], 2), common.fmt(v["encode_ids_p50_ms"], 2),
              common.fmt(v["compute_bound_ms"], 2)]
             + [common.fmt(v[f"{PEER_LABELS[b]}_p50_ms"], 2) for b in peers]
             for key, v in result["profile"].items()],
            title=f"profile: tfsent's plain export without its tokenizer (`encode_ids` on "
                  f"pre-tokenized requests) and the model FLOPs at the measured TF matmul peak "
                  f"({peak / 1e9:.0f} GFLOP/s)")
    if ops:
        prof = result["op_profile_b1"]
        common.print_table(
            ["op type", "ms per request", "kernels per request"],
            [[op, common.fmt(ops["op_types"][op]["ms"], 3),
              common.fmt(ops["op_types"][op]["kernels"], 1)] for op in prof["top"]],
            title=f"op profile, batch 1 in the TF1 session ({prof['requests']} requests "
                  f"traced): matmul kernels {prof['matmul_ms']:.2f} ms (weights streamed at "
                  f"{prof['matmul_weight_gb_per_s']:.1f} GB/s), other kernels "
                  f"{prof['other_ms']:.2f} ms, {prof['kernels']:.0f} kernels; traced wall "
                  f"{prof['traced_wall_ms']:.2f} ms")
    print("lowest cosine to tfsent's SavedModel (first 8 sentences): " + ", ".join(
        f"{k} {v:.6f}" for k, v in cosines.items()))
    if student:
        print("lowest cosine to the student's SavedModel: " + ", ".join(
            f"{k} {v:.6f}" for k, v in student_cosines.items()))
        if FLAGS.peer_student:
            print("student / sentence-transformers p50, same model: " + "; ".join(
                f"{name}: " + ", ".join(f"{key} {r:.2f}x" for key, r in ratios.items())
                for name, ratios in result["student_vs_peers_p50_ratio"].items()))
        if result["student_vs_teacher_p50_ratio"]:  # none when no teacher row ran
            print("student / teacher p50, same runtime: " + "; ".join(
                f"{name}: " + ", ".join(f"{key} {r:.2f}x" for key, r in ratios.items())
                for name, ratios in result["student_vs_teacher_p50_ratio"].items()))
    if warning:
        print(f"warning: {warning}")
    print(f"wrote {FLAGS.json}")


if __name__ == "__main__":
    app.run(main)
