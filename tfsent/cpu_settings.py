"""TensorFlow's CPU settings for the machine tfsent runs on, chosen by measurement.

Four settings, each `auto` by default:
- `onednn` (on | off): TensorFlow's oneDNN kernels. TF 2.21 turns them on by itself only on
  CPUs with AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX, whether or not they are faster
  there; the choice is `TF_ENABLE_ONEDNN_OPTS`, read once when TensorFlow is imported.
- `jit_encode` (on | off): XLA for `SentenceEncoder.encode`'s default.
- `jit_train` (on | off): XLA for the training run's train step (config `jit_compile`).
- `threads` (`default` = TF's own, or `INTRA/INTER`): intra / inter-op thread pools.

`auto` means the measured choice where it pays, TF's and tfsent's own defaults (BUILTIN)
elsewhere: TFSENT_CPU_SETTINGS=auto (the default) measures only on x86-64 CPUs with AVX2
where TF leaves oneDNN off (`calibration_pays`), `measure` on every CPU, `default` never.
To measure, at first use on a machine, a calibration (`tfsent.cpu_probe`: tfsent's own
SimCSE train step and `encode` function on a 2-layer minilm-shaped encoder, plain graph
and XLA, in one subprocess per candidate oneDNN / thread setting, since neither can change
inside a process) picks the fastest, keeping TF's own default unless another setting wins
by more than MARGIN. A comparison closer than CLOSE (the probes' own noise) is measured
again on both sides, and each side's faster run counts (threads: only when a candidate
beat TF's default); every comparison is made on equal numbers of runs. The result is
cached per machine (CPU model, ISA flags, physical cores, TF version) under $TFSENT_CACHE
or ~/.cache/tfsent/, and one line says what runs.
A failed calibration is recorded there too: TF's and tfsent's defaults run, with a
warning, for FAILURE_RETRY_HOURS (or until the file is deleted), then it is measured again.

Precedence, highest first: the user's own `TF_ENABLE_ONEDNN_OPTS` (oneDNN only); a
command-line flag (`--cpu_onednn`, `--cpu_jit_encode`, `--cpu_jit_train`,
`--cpu_threads`) or `configure(...)` before `import tfsent`; the environment variables
TFSENT_ONEDNN, TFSENT_JIT_ENCODE, TFSENT_JIT_TRAIN, TFSENT_THREADS; the measured choice
(where `measuring_wanted`); TF's and tfsent's defaults.

When TensorFlow was imported before tfsent, oneDNN (and threads, once TF's runtime has
started) are what they are: the line says so and names what actually runs.

This module imports nothing of tfsent, and TensorFlow only inside functions: it runs before
TensorFlow is imported.
"""

import contextlib
import datetime
import hashlib
import json
import os
import subprocess
import sys
import time

SETTINGS = ("onednn", "jit_encode", "jit_train", "threads")
ENV_VARS = {"onednn": "TFSENT_ONEDNN", "jit_encode": "TFSENT_JIT_ENCODE",
            "jit_train": "TFSENT_JIT_TRAIN", "threads": "TFSENT_THREADS"}
FLAGS = {name: f"--cpu_{name}" for name in SETTINGS}
# What `auto` gives without a measurement (TFSENT_CPU_SETTINGS=default): TF's own oneDNN
# default ("tf"), encode without XLA, the train step with XLA, TF's thread pools.
BUILTIN = {"onednn": "tf", "jit_encode": "off", "jit_train": "on", "threads": "default"}
# A setting other than the default must be this much faster (noise of a shared machine).
MARGIN = 0.05
# A comparison closer than this (the slower score / the faster) is inside the probes' own
# noise: the same setting probed three times in a row scored up to 1.11x apart on machine C
# idle and 1.13x on the AVX2 proxy; one setting measured twice in a calibration, 1.19x
# (benchmarks/README.md, "Machine C, 2026-11-28: probe noise and the calibration's second
# runs"). The calibration then runs both settings of the comparison a second time and
# chooses again from each one's faster run. Every comparison is made on equal numbers of
# runs, so the minimum of two never favours one side (`paired_runs`; `calibrate`: threads
# only when a candidate beat TF's own).
CLOSE = 1.15
# TF 2.21's own rule (tensorflow/core/util/port.cc): oneDNN on by default with these.
TF_ONEDNN_DEFAULT_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_bf16",
                           "amx_int8")
KEY_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
             "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")
# The calibration starts no probe after this many seconds (each probe: ~25 s idle).
CALIBRATION_TIMEOUT = 300
# Each probe times its four functions, interleaved, for 4 x this many seconds in all (11-12
# calls each on machine C idle, 7-8 with oneDNN off). At 0.8 (5-6 calls) one probe in
# three put XLA's encode 17% ahead where the other two had it 2% behind; full runs have the
# two within ~4% of each other either way (benchmarks/README.md).
PROBE_BUDGET = 2.0
# A failed calibration is recorded and measured again after this many hours.
FAILURE_RETRY_HOURS = 24
# 2: the probe times tfsent's own train step and encode (cpu_probe); 3: encode on three
# batch widths with real text's bucket padding (~3,000 tokens a call against 1,344, so
# encode now weighs ~40% of `score` where it weighed ~25%), and a longer timing; 4: encode's
# batch function on pre-tokenized batches of the widths `encode` forms since it batches by
# token count (~2,300 tokens a call); 5: the train step under XLA draws its dropout masks
# from Threefry (docs/methods.md, "Dropout masks under XLA"), 1.12-1.13x faster on
# machine C; 6: a close comparison runs both of its settings a second time and keeps each
# one's faster whole run (5 ran only the setting not chosen again, and mixed the two runs'
# timings); 7: every comparison on equal numbers of runs (`paired_runs`), and a thread
# candidate that takes the lead after a second run is confirmed too.
CACHE_VERSION = 7
# Set beside TF_ENABLE_ONEDNN_OPTS when tfsent set it, so a child process (inheriting both)
# does not take tfsent's own choice for the user's variable.
SET_BY_US = "TFSENT_SET_TF_ENABLE_ONEDNN_OPTS"

# absl's help flags (`asks_for_help`; tfsent.cli reads them too).
HELP_FLAGS = ("--help", "-help", "-h", "--helpshort", "--helpfull", "--helpxml", "-?")

# The settings in force in this process (set by `choose_before_tensorflow`).
_ACTIVE = {}
_OVERRIDES = {}


def configure(**settings):
    """Sets settings for this process before `import tfsent` (like the flags), e.g.
    `configure(onednn="off", threads="2/1")`; values as for the environment variables."""
    for name, value in settings.items():
        if name not in SETTINGS:
            raise _config_error(f"unknown CPU setting {name!r}; known: {', '.join(SETTINGS)}")
        _OVERRIDES[name] = check_value(name, value, f"configure({name}=...)")
    if "tensorflow" in sys.modules and "onednn" in settings:
        from absl import logging
        logging.warning("configure(onednn=...) after TensorFlow was imported has no effect "
                        "on oneDNN")


def _config_error(message):
    from tfsent.errors import ConfigError  # only on bad input: nothing of tfsent at start
    return ConfigError(message)


def check_value(name, value, where):
    """The canonical value of setting `name` ("auto", "on", "off"; threads: "auto",
    "default" or "INTRA/INTER"), or ConfigError naming `where`."""
    text = str(value).strip().lower()
    if isinstance(value, bool):
        text = "on" if value else "off"
    text = {"1": "on", "true": "on", "0": "off", "false": "off"}.get(text, text)
    if name == "threads":
        if text in ("auto", "default"):
            return text
        parts = text.split("/")
        if len(parts) == 2 and all(p.isdigit() for p in parts):
            return f"{int(parts[0])}/{int(parts[1])}"
        raise _config_error(f"{where}: threads must be auto, default or INTRA/INTER (e.g. "
                            f"2/1; 0 is TF's default), got {value!r}")
    if text not in ("auto", "on", "off"):
        raise _config_error(f"{where}: {name} must be auto, on or off, got {value!r}")
    return text


# -- the machine ----------------------------------------------------------------------------

def read_cpu(cpuinfo_text=None):
    """{"model", "flags" (the KEY_FLAGS present), "physical_cores", "logical_cpus"} from
    /proc/cpuinfo (or `cpuinfo_text`)."""
    if cpuinfo_text is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo_text = f.read()
        except OSError:
            cpuinfo_text = ""
    model, flags, cores, logical = None, set(), set(), 0
    physical_id = core_id = None
    for line in cpuinfo_text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "processor":
            logical += 1
        elif key == "model name" and model is None:
            model = value
        elif key == "flags" and not flags:
            flags = set(value.split())
        elif key == "physical id":
            physical_id = value
        elif key == "core id":
            core_id = value
            cores.add((physical_id, core_id))
    logical = logical or os.cpu_count() or 1
    return {"model": model or "unknown CPU", "flags": [f for f in KEY_FLAGS if f in flags],
            "physical_cores": len(cores) or logical, "logical_cpus": logical}


def tensorflow_version():
    """The installed TensorFlow's version, read without importing it."""
    import importlib.metadata
    for name in ("tensorflow", "tensorflow-cpu", "tf-nightly"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def machine_key(cpu, tf_version):
    """The cache key: what the measured choice depends on."""
    return {"cpu_model": cpu["model"], "isa_flags": cpu["flags"],
            "physical_cores": cpu["physical_cores"], "logical_cpus": cpu["logical_cpus"],
            "tensorflow": tf_version, "version": CACHE_VERSION}


def cache_path(key, environ=None):
    """$TFSENT_CACHE (or ~/.cache/tfsent)/cpu-settings-<hash of the key>.json."""
    environ = os.environ if environ is None else environ
    root = environ.get("TFSENT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                       "tfsent")
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return os.path.join(root, f"cpu-settings-{digest}.json")


def tf_onednn_default(cpu):
    """Whether TF 2.21 turns oneDNN on by itself on this CPU (port.cc's rule)."""
    return any(f in cpu["flags"] for f in TF_ONEDNN_DEFAULT_FLAGS)


# -- the decision -----------------------------------------------------------------------------

def _best(probe, job):
    return min(probe[f"{job}_graph"], probe[f"{job}_xla"])


def score(probe):
    """Seconds of one probe encode call (its three batches) plus one train step, each in
    its faster mode."""
    return _best(probe, "encode") + _best(probe, "train")


# The prefix of a probe's name when the calibration runs that setting a second time.
AGAIN = "again:"


def best_run(probes, name):
    """Setting `name`'s faster whole run (by `score`) of "<name>" and, when it ran twice,
    "again:<name>": one run's four timings are never mixed with another's."""
    return min((probes[n] for n in (name, AGAIN + name) if n in probes), key=score)


def paired_runs(probes, a, b):
    """The runs settings `a` and `b` are compared on, equal in number: each one's faster
    whole run when both ran twice, else their first runs (the faster of two runs against
    a single run would favour the side measured twice)."""
    if AGAIN + a in probes and AGAIN + b in probes:
        return best_run(probes, a), best_run(probes, b)
    return probes[a], probes[b]


def decide(probes, onednn_default, margin=MARGIN):
    """The measured choice from the probes' medians (seconds per call).

    `probes`: {"onednn=on,threads=default": {...}, "onednn=off,threads=default": {...},
    optionally "onednn=<chosen>,threads=I/J": {...} and "again:<name>": {...} (a second
    run of a setting; comparisons: `paired_runs`)}, each {"encode_graph", "encode_xla",
    "train_graph", "train_xla"}. A setting other than the default is chosen only when it
    is faster by more than `margin`; XLA from the chosen setting's `best_run`. Returns
    {"onednn", "jit_encode", "jit_train", "threads"} and the speed-ups behind them
    ("*_speedup": default's time / chosen's, or the chosen one's advantage over the
    alternative)."""
    names = {o: f"onednn={o},threads=default" for o in ("on", "off")}
    default, other = ("on", "off") if onednn_default else ("off", "on")
    default_run, other_run = paired_runs(probes, names[default], names[other])
    onednn = other if score(default_run) / score(other_run) > 1 + margin else default
    chosen, alternative = ((other_run, default_run) if onednn == other
                           else (default_run, other_run))
    prefix = f"onednn={onednn},threads="
    threads, threads_gain = "default", 1.0
    for name in probes:
        if name.startswith(prefix) and not name.endswith("=default"):
            own, candidate = paired_runs(probes, prefix + "default", name)
            g = score(own) / score(candidate)
            if g > 1 + margin and g > threads_gain:
                threads, threads_gain = name[len(prefix):], g
    final = best_run(probes, prefix + threads)
    # encode: XLA only when faster by the margin; the train step: XLA unless slower by it.
    jit_encode = final["encode_graph"] / final["encode_xla"] > 1 + margin
    jit_train = final["train_xla"] / final["train_graph"] <= 1 + margin
    return {"onednn": onednn, "jit_encode": "on" if jit_encode else "off",
            "jit_train": "on" if jit_train else "off", "threads": threads,
            "onednn_speedup": round(score(alternative) / score(chosen), 3),
            "jit_encode_speedup": round(final["encode_graph"] / final["encode_xla"], 3),
            "jit_train_speedup": round(final["train_graph"] / final["train_xla"], 3),
            "threads_speedup": round(threads_gain, 3)}


def thread_candidates(cpu):
    """Thread settings tried besides TF's default: one intra-op thread per physical core
    with one inter-op thread, and (with hyper-threads) one per logical CPU."""
    cands = [f"{cpu['physical_cores']}/1"]
    if cpu["logical_cpus"] != cpu["physical_cores"]:
        cands.append(f"{cpu['logical_cpus']}/1")
    return cands


# -- the calibration ------------------------------------------------------------------------

def run_probe(onednn, threads="default", budget=PROBE_BUDGET, timeout=120, size="minilm"):
    """Times the probe workload (`tfsent.cpu_probe`: tfsent's SimCSE train step and encode
    function on a 2-layer minilm-shaped encoder) in a fresh Python process with
    TF_ENABLE_ONEDNN_OPTS set to `onednn` and the thread setting `threads`; returns its
    medians and TF's own oneDNN state."""
    env = {k: v for k, v in os.environ.items()
           if k not in (SET_BY_US, ENV_VARS["onednn"], ENV_VARS["threads"])}
    env.update(TF_ENABLE_ONEDNN_OPTS="1" if onednn == "on" else "0", TF_CPP_MIN_LOG_LEVEL="2",
               TFSENT_CPU_SETTINGS="default")  # the child applies the candidate, no calibration
    if threads != "default":
        env[ENV_VARS["threads"]] = threads
    # The package this file belongs to, importable in the child whatever its working folder.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    spec = json.dumps({"threads": threads, "budget": budget, "size": size})
    # Run as a file (the probe imports all of tfsent, which imports this module first).
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_probe.py")
    proc = subprocess.run([sys.executable, script, spec],
                          capture_output=True, text=True, env=env, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"CPU settings probe (oneDNN {onednn}, threads {threads}) failed "
                           f"(exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    result = json.loads(lines[-1])
    if result["onednn_enabled"] != (onednn == "on"):
        raise RuntimeError(f"probe asked for oneDNN {onednn}, TensorFlow ran with "
                           f"IsMklEnabled()={result['onednn_enabled']}")
    return result


def calibrate(cpu, budget=PROBE_BUDGET, probe=run_probe, timeout=CALIBRATION_TIMEOUT,
              clock=time.monotonic):
    """Runs the probes (oneDNN on and off with TF's threads; then each thread candidate
    with the faster oneDNN setting; both sides of a comparison closer than CLOSE a second
    time: oneDNN on and off, or TF's threads and a candidate that beat them) and returns
    {"probes", "choice"}.
    No probe starts after `timeout` seconds (by `clock`): without both oneDNN probes that
    is a TimeoutError; later, the choice stands on the probes done, with a warning. With
    run_probe's own limit per probe, the calibration cannot hold `import tfsent` for more
    than a few minutes."""
    from absl import logging
    onednn_default = tf_onednn_default(cpu)
    deadline = clock() + timeout
    probes = {}

    def skipped(what):
        logging.warning("cpu settings calibration: over its %s s, %s not measured; the "
                        "choice stands on the probes done (%s)", timeout, what,
                        ", ".join(probes))

    def measure(name):
        onednn, threads = (part.split("=", 1)[1] for part in name.split(","))
        probes[AGAIN + name if name in probes else name] = probe(onednn, threads, budget)

    def confirmed(choice, setting):
        # A close comparison is measured again on both sides (a side already measured twice
        # keeps its two runs), and the choice is made again on the pair's faster runs.
        # oneDNN: either way (on the AVX2 proxy it probed 1.11-1.25x faster than TF's
        # default there, off: one slow run could keep the slower default). Threads: only
        # when a candidate beat TF's own pools (on 2 cores the two were within noise in
        # every calibration so far; re-running losing candidates cost ~25 s each, always).
        if setting == "onednn":
            pair = [f"onednn={o},threads=default" for o in ("on", "off")]
        elif choice["threads"] == "default":
            return choice
        else:
            prefix = f"onednn={choice['onednn']},threads="
            pair = [prefix + choice["threads"], prefix + "default"]
        slower, faster = sorted(map(score, paired_runs(probes, *pair)), reverse=True)
        if slower / faster >= CLOSE:
            return choice
        measured_now = []
        for name in [name for name in pair if AGAIN + name not in probes]:
            if clock() > deadline:
                for done in measured_now:  # unequal numbers of runs favour the side run twice
                    probes.pop(AGAIN + done)
                skipped(f"{name} a second time")
                return choice
            measure(name)
            measured_now.append(name)
        new = decide(probes, onednn_default)
        if setting == "threads" and new["threads"] not in ("default", choice["threads"]):
            # Another candidate, compared on first runs, now leads: confirm it too (each
            # round runs one more setting twice, so this ends).
            return confirmed(new, "threads")
        return new

    for onednn in ("on", "off"):
        if probes and clock() > deadline:
            raise TimeoutError(f"the calibration took over {timeout} s (probes done: "
                               f"{', '.join(probes)})")
        measure(f"onednn={onednn},threads=default")
    choice = confirmed(decide(probes, onednn_default), "onednn")
    for threads in thread_candidates(cpu):
        if clock() > deadline:
            skipped(f"threads {threads}")
            break
        measure(f"onednn={choice['onednn']},threads={threads}")
    choice = confirmed(decide(probes, onednn_default), "threads")
    logging.info("cpu settings calibration: %s", json.dumps(probes))
    return {"probes": probes, "choice": choice}


def _failure_expired(data):
    """Whether a recorded failure is older than FAILURE_RETRY_HOURS (then: measure again)."""
    try:
        when = datetime.datetime.fromisoformat(data["date"])
    except (KeyError, TypeError, ValueError):
        return True
    age = datetime.datetime.now(datetime.timezone.utc) - when
    return age > datetime.timedelta(hours=FAILURE_RETRY_HOURS)


def load_cache(path, key):
    """The cached calibration for `key`, or None (missing); a corrupt or foreign file gives
    None with a warning, so the caller measures again."""
    from absl import logging
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("key") != key:
            raise ValueError("it was written for another machine key")
        if isinstance(data.get("failed"), str):  # a recorded failure: kept for a while
            return None if _failure_expired(data) else data
        choice = data["choice"]
        for name in SETTINGS:
            value = check_value(name, choice[name], path)
            if value == "auto":
                raise ValueError(f"{name} is auto")
        return data
    except Exception as e:  # noqa: BLE001 -- any unreadable cache is measured again
        logging.warning("cpu settings cache %s is unusable (%s: %s); calibrating again",
                        path, type(e).__name__, e)
        return None


def write_cache(path, data):
    """Writes the calibration atomically (a temporary file renamed into place)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


@contextlib.contextmanager
def _locked(path):
    """An exclusive lock on `path`.lock (several processes starting at once calibrate once)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "w") as lock:
        try:
            import fcntl
            fcntl.flock(lock, fcntl.LOCK_EX)
        except ImportError:  # not POSIX: no lock
            pass
        yield


class CalibrationFailed(RuntimeError):
    """The calibration failed now or on a recent run (recorded in the cache file, so a
    machine where it cannot run pays for it once a day, not at every import)."""


def measured_choice(cpu=None, environ=None, probe=run_probe, budget=PROBE_BUDGET):
    """(choice, cache file): the cached calibration of this machine, or a new one. A failed
    calibration is cached too (CalibrationFailed now and on calls in the next
    FAILURE_RETRY_HOURS, or until the file is deleted)."""
    from absl import logging
    cpu = cpu or read_cpu()
    key = machine_key(cpu, tensorflow_version())
    path = cache_path(key, environ)
    data = load_cache(path, key)
    if data is None:
        with _locked(path):
            data = load_cache(path, key) if os.path.exists(path) else None
            if data is None:
                logging.warning("calibrating TensorFlow's CPU settings for this machine (1-3 "
                                "minutes, once: cached in %s; TFSENT_CPU_SETTINGS=default "
                                "skips it)", path)
                start = time.time()
                stamp = dict(key=key,
                             date=datetime.datetime.now(datetime.timezone.utc).isoformat())
                try:
                    data = dict(calibrate(cpu, budget, probe), **stamp)
                except Exception as e:  # noqa: BLE001 -- recorded, then raised
                    write_cache(path, dict(stamp, failed=f"{type(e).__name__}: {e}"[:4000]))
                    raise CalibrationFailed(
                        f"{type(e).__name__}: {e} (recorded in {path}: measured again after "
                        f"{FAILURE_RETRY_HOURS} h, or delete it)") from e
                data["seconds"] = round(time.time() - start, 1)
                write_cache(path, data)
    if "failed" in data:
        raise CalibrationFailed(f"it failed on {data['date']} ({data['failed'][:300]}; "
                                f"recorded in {path}: measured again after "
                                f"{FAILURE_RETRY_HOURS} h, or delete it)")
    return data["choice"], path


def _measured_or_builtin():
    """measured_choice(), or tfsent's built-in defaults with a warning if the calibration
    fails (a probe that cannot start TensorFlow, a timeout): `import tfsent` must not."""
    try:
        return measured_choice()
    except Exception as e:  # noqa: BLE001 -- any failure: run with the defaults, say so
        from absl import logging
        logging.warning("cpu settings: calibration failed (%s: %s); using TF's and tfsent's "
                        "defaults", type(e).__name__, e)
        return dict(BUILTIN), None


# -- resolution and applying ------------------------------------------------------------------

def asks_for_help(args):
    """Whether command-line `args` (without the program) ask for absl's help."""
    return any(a.split("=")[0] in HELP_FLAGS for a in args)


def peek_flags(argv):
    """{setting: value} of the --cpu_* flags in a command line (read before TensorFlow is
    imported; absl parses the same flags later, `tfsent.cli.define_cpu_flags`)."""
    found = {}
    for i, arg in enumerate(argv):
        for name, flag in FLAGS.items():
            if arg.startswith(flag + "="):
                found[name] = check_value(name, arg.split("=", 1)[1], flag)
            elif arg == flag and i + 1 < len(argv):
                found[name] = check_value(name, argv[i + 1], flag)
    return found


def calibration_pays(cpu):
    """True on the machine kind where TF's own default is measured to lose: an x86-64 CPU
    with AVX2 but none of the flags that make TF 2.21 turn oneDNN on by itself. There TF
    runs Eigen's kernels, and on AMD EPYC Zen 4 with every kernel library capped at AVX2
    oneDNN ran `encode` 1.54x and the training step 1.18x faster, the choice the
    calibration made too (benchmarks/README.md, "Machine C, 2026-11-27"); on the
    AVX-512 VNNI kinds checked (Xeon / AMX, Zen 4) TF's defaults were already the fastest
    or within noise of it."""
    return "avx2" in cpu["flags"] and not tf_onednn_default(cpu)


def calibration_mode(environ):
    """TFSENT_CPU_SETTINGS: "auto" (unset), "measure" or "default"; ConfigError otherwise."""
    value = environ.get("TFSENT_CPU_SETTINGS", "auto").strip().lower()
    if value not in ("default", "measure", "auto"):
        raise _config_error(f"TFSENT_CPU_SETTINGS={value!r}: use auto, measure or default")
    return value


def measuring_wanted(environ, cpu=None):
    """Whether to calibrate, from TFSENT_CPU_SETTINGS: "measure" always, "default" never,
    "auto" (or unset) only where `calibration_pays` on this CPU (`cpu`: `read_cpu()`'s
    answer, read here when needed). The calibration costs 1-3 minutes once per
    machine."""
    value = calibration_mode(environ)
    if value == "auto":
        return calibration_pays(read_cpu() if cpu is None else cpu)
    return value == "measure"


def resolve(flag_values, environ, measure, cpu=None):
    """{setting: (value, source)}: each setting's value after the precedence (flag >
    environment > measured); `measure()` gives (choice, cache path) and is called only if
    a setting is still auto and `measuring_wanted(environ, cpu)`. The user's
    TF_ENABLE_ONEDNN_OPTS beats everything for oneDNN.
    """
    resolved, pending = {}, []
    for name in SETTINGS:
        env = ENV_VARS[name]
        users = environ.get("TF_ENABLE_ONEDNN_OPTS") not in (None, "", environ.get(SET_BY_US))
        if name == "onednn" and users:
            on = environ["TF_ENABLE_ONEDNN_OPTS"].strip().lower() in ("1", "true", "on")
            resolved[name] = ("on" if on else "off", "your TF_ENABLE_ONEDNN_OPTS")
        elif flag_values.get(name, "auto") != "auto":
            resolved[name] = (flag_values[name], "set")
        elif check_value(name, environ.get(env, "auto"), env) != "auto":
            resolved[name] = (check_value(name, environ[env], env), env)
        else:
            pending.append(name)
    if pending:
        if not measuring_wanted(environ, cpu):
            for name in pending:
                resolved[name] = (BUILTIN[name], "default")
        else:
            choice, path = measure()
            source = "measured" if path else "default: calibration failed"
            for name in pending:
                resolved[name] = (choice[name], source)
            resolved["_choice"], resolved["_cache"] = choice, path
    return resolved


def choose_before_tensorflow(argv=None, environ=None, measure=None):
    """Resolves the settings and, if TensorFlow is not imported yet, sets
    TF_ENABLE_ONEDNN_OPTS for the chosen oneDNN setting. Called by `import tfsent` before
    it imports TensorFlow; returns the resolution. A command asked for its help (any of
    HELP_FLAGS) never calibrates."""
    environ = os.environ if environ is None else environ
    argv = sys.argv if argv is None else argv
    command = bool(argv) and argv[0] == "-m"
    flag_values = dict(peek_flags(argv[1:]) if command else {}, **_OVERRIDES)
    wants_help = command and asks_for_help(argv[1:])
    calibration_mode(environ)  # a malformed value is reported even when nothing measures
    resolved = resolve(flag_values, dict(environ, TFSENT_CPU_SETTINGS="default") if wants_help
                       else environ, measure or _measured_or_builtin)
    tf_imported = "tensorflow" in sys.modules
    onednn, source = resolved["onednn"]
    if onednn in ("on", "off") and source != "your TF_ENABLE_ONEDNN_OPTS" and not tf_imported:
        environ["TF_ENABLE_ONEDNN_OPTS"] = environ[SET_BY_US] = "1" if onednn == "on" else "0"
    _ACTIVE.clear()
    _ACTIVE.update(resolved, _tf_imported_first=tf_imported)
    return resolved


def apply_after_tensorflow():
    """Sets the thread pools if TF's runtime has not started, and logs one line of what
    runs (`log_once`). Returns the line."""
    import tensorflow as tf
    from tensorflow.python.util import _pywrap_util_port

    threads = _ACTIVE.get("threads", ("default", "default"))[0]
    threads_note = ""
    if threads != "default":
        intra, inter = (int(v) for v in threads.split("/"))
        try:
            tf.config.threading.set_intra_op_parallelism_threads(intra)
            tf.config.threading.set_inter_op_parallelism_threads(inter)
        except RuntimeError:
            threads_note = " (not applied: TensorFlow's runtime had started)"
    intra = tf.config.threading.get_intra_op_parallelism_threads()
    inter = tf.config.threading.get_inter_op_parallelism_threads()
    line = describe(bool(_pywrap_util_port.IsMklEnabled()), f"{intra}/{inter}", threads_note)
    _ACTIVE["_line"] = line
    if not (sys.argv and sys.argv[0] == "-m"):  # a command logs it at first use
        log_once()
    return line


def log_once():
    """Logs the settings line the first time it is called in this process (at import for
    library use; under `python -m tfsent.X` when the work starts: the first `encode` or
    training run, so a mistyped flag still gets a one-line error)."""
    if _ACTIVE.get("_line") and not _ACTIVE.get("_logged"):
        from absl import logging
        logging.info("%s", _ACTIVE["_line"])
        _ACTIVE["_logged"] = True


def active_line():
    """The "cpu settings: ..." line of this process (what runs, and why); None before
    TensorFlow was set up through tfsent."""
    return _ACTIVE.get("_line")


def describe(onednn_running, threads_running, threads_note=""):
    """The one line: what runs, and why."""
    choice = _ACTIVE.get("_choice", {})

    def why(name, speedup_key):
        value, source = _ACTIVE.get(name, (BUILTIN[name], "default"))
        if source == "measured" and speedup_key in choice:
            return f"measured {choice[speedup_key]:.2f}x"
        return {"default": "default"}.get(source, source)

    onednn, onednn_source = _ACTIVE.get("onednn", ("tf", "default"))
    parts = [f"oneDNN {'on' if onednn_running else 'off'} ({why('onednn', 'onednn_speedup')}"]
    if (_ACTIVE.get("_tf_imported_first") and onednn != "tf"
            and onednn_source != "your TF_ENABLE_ONEDNN_OPTS"):
        parts[0] += (f"; TensorFlow was imported before tfsent, so not chosen here: the "
                     f"choice was {onednn}")
    parts[0] += ")"
    for name, label in (("jit_encode", "jit encode"), ("jit_train", "jit train")):
        parts.append(f"{label} {jit(name)} ({why(name, name + '_speedup')})")
    parts.append(f"threads {threads_running} ({why('threads', 'threads_speedup')})"
                 + threads_note)
    line = "cpu settings: " + ", ".join(parts)
    if _ACTIVE.get("_cache"):
        line += f"; cached in {_ACTIVE['_cache']}"
    return line


def jit(name):
    """"on" / "off": the XLA setting `name` ("jit_encode" or "jit_train") in force."""
    log_once()
    return _ACTIVE.get(name, (BUILTIN[name], "default"))[0]


def jit_encode():
    """True when `SentenceEncoder.encode` runs under XLA by default on this machine."""
    return jit("jit_encode") == "on"


def jit_train(config_value=None):
    """Whether the train step runs under XLA: the config's `jit_compile` when set (True /
    False), else the setting in force on this machine."""
    if config_value is not None:
        log_once()
        return bool(config_value)
    return jit("jit_train") == "on"


def summary():
    """The settings line of this process ("" before `import tfsent` finished)."""
    return _ACTIVE.get("_line", "")
