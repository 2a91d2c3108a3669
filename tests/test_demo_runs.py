"""The shipped demo: the main command with no flags (a fresh `python -m tfsent.train`), and
every method on the demo data (short runs, forks of one process that imported the CLI's
modules once).

Every run's export is served the TF Serving way by ONE fresh process per module (it
imports only tensorflow and tensorflow_text; started with the module, so its import
overlaps the first training run) instead of a new interpreter per export."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, SHARED_DATA, TF_SERVING_LOADER, minilm_or_skip
from tfsent.data import readers

DEMO_SENTENCES = ["A man is playing a guitar.", "Someone plays an instrument.", ""]


def _run(args, timeout=1500):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", "tfsent.train", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, env=env)


# Serves requests `{"path": SAVEDMODEL, "sentences": [...]}` (one JSON line each) as TF
# Serving loads exports, one JSON line back per request, with the modules imported so far.
SERVE_LOOP = TF_SERVING_LOADER + r"""
import json, sys
for line in sys.stdin:
    request = json.loads(line)
    out = serve_like_tf_serving(request["path"], request["sentences"])
    mods = sorted({k.split(".")[0] for k in sys.modules
                   if k.split(".")[0] in ("tfsent", "keras_hub")})
    print(json.dumps({"embedding": out["embedding"].tolist(),
                      "normalized": out["embedding_normalized"].tolist(), "modules": mods}),
          flush=True)
"""


@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    """serve(export path, sentences) -> the serving process's JSON answer (a dict)."""
    stderr = tmp_path_factory.mktemp("serve") / "stderr.txt"
    with open(stderr, "w") as err:
        server = subprocess.Popen([sys.executable, "-c", SERVE_LOOP], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=err, text=True,
                                  env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))

    def request(path, sentences):
        try:
            server.stdin.write(json.dumps({"path": path, "sentences": sentences}) + "\n")
            server.stdin.flush()
            answer = server.stdout.readline()
        except BrokenPipeError:
            answer = ""
        assert answer, f"the serving process died: {stderr.read_text()[-3000:]}"
        return json.loads(answer)

    yield request
    server.stdin.close()
    server.wait(timeout=60)


def _check_export(out, serve):
    export = os.path.join(out, "export", "1")
    assert os.path.exists(os.path.join(export, "saved_model.pb"))
    served = serve(export, DEMO_SENTENCES)
    assert served["modules"] == []  # neither tfsent nor keras_hub in the serving process
    emb = np.array(served["normalized"])
    assert emb.shape == (3, 384) and np.isfinite(emb).all()
    assert emb[0] @ emb[1] > emb[0] @ emb[2]  # related pair closer than the empty string
    return json.load(open(os.path.join(out, "metrics.json")))


def _check_tensorboard(out):
    """The dev callback's scalars and a projector config, read with TensorBoard's reader."""
    from google.protobuf import text_format
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.projector import ProjectorConfig

    tb = os.path.join(out, "tb")
    acc = EventAccumulator(tb, size_guidance={"tensors": 0})
    acc.Reload()
    tags = set(acc.Tags()["tensors"])
    for name in ("spearman", "alignment", "uniformity", "random_pair_cosine"):
        assert f"demo_dev/{name}" in tags, sorted(tags)
        values = [float(tf_tensor_value(e)) for e in acc.Tensors(f"demo_dev/{name}")]
        assert values and np.all(np.isfinite(values))
    config = text_format.Parse(open(os.path.join(tb, "projector_config.pbtxt")).read(),
                               ProjectorConfig())
    assert len(config.embeddings) >= 1
    entry = config.embeddings[0]
    vectors = np.loadtxt(os.path.join(tb, entry.tensor_path), delimiter="\t", ndmin=2)
    labels = open(os.path.join(tb, entry.metadata_path), encoding="utf-8").read().splitlines()
    assert vectors.shape[0] == len(labels) > 100 and vectors.shape[1] >= 64


def tf_tensor_value(event):
    from tensorboard.util import tensor_util

    return tensor_util.make_ndarray(event.tensor_proto)


def test_demo_corpus_shape():
    assert len(readers.read_sentences(readers.DEMO_SENTENCES)) >= 2000
    assert len(readers.read_triplets_tsv(readers.DEMO_TRIPLETS)) >= 300
    s1, _, scores = readers.read_scored_pairs(readers.DEMO_PAIRS)
    assert len(s1) >= 200 and min(scores) >= 0 and max(scores) <= 5


def test_main_command_cmlm_cse_with_no_flags(tmp_path, serve):
    """`python -m tfsent.train --method=cmlm_cse --output_dir=D`, nothing else."""
    minilm_or_skip()
    out = str(tmp_path / "D")
    r = _run(["--method=cmlm_cse", f"--output_dir={out}"])
    assert r.returncode == 0, r.stderr[-3000:]
    for name in ("contrastive_loss", "mlm_loss", "mlm_accuracy"):
        assert name in r.stdout
    assert f"export: {out}/export/1" in r.stdout
    # the run folder's size, what resuming and selection need and no more (issue 43)
    assert "run folder: " in r.stdout and "checkpoints/ " in r.stdout
    assert sorted(os.listdir(os.path.join(out, "start"))) == ["encoder.weights.h5",
                                                              "start.json"]
    # the time left, dev evaluations included
    assert "step 50 of 150 (" in r.stderr and " left (train steps " in r.stderr
    # TensorFlow's own INFO lines of the export are left out (issue 43, item 7)
    assert "Assets written to" not in r.stderr and "unsupported characters" not in r.stderr
    # the closing lines: the next commands, on this run's own paths
    assert (f"  evaluate: python -m tfsent.evaluate --model={out}/export/1 "
            "--tasks=STSBenchmark,SICKRelatedness\n") in r.stdout
    assert (f"  publish:  python -m tfsent.export --model={out}/encoder "
            f"--format=sentence_transformers --export_dir={out}/st") in r.stdout
    metrics = _check_export(out, serve)
    assert metrics["steps"] == 150 and "dev_best" in metrics


# Every method on its demo defaults, shortened for CI (4 steps, one dev evaluation).
# Without XLA: compiling the train step costs more than the steps take; the CLI's XLA
# path on minilm is covered by the no-flag cmlm_cse run and test_simcse_sup_on_snli, each
# method's XLA train step by its own file's XLA test.
_SHORT = ["--config.steps=4", "--config.eval_every=4", "--config.batch_size=16"]
_NO_XLA = ["--config.jit_compile=false"]
SHORT_RUNS = {
    "simcse_unsup": _SHORT + _NO_XLA,
    # simcse_sup: test_simcse_sup_on_snli (the demo triplets when ../shared is absent)
    "supcon": _SHORT + _NO_XLA,
    "scd": _SHORT + _NO_XLA,
    "clsr": ["--config.steps=100", "--config.eval_every=100", "--config.first_eval_step=0"],
    "consert": _SHORT + _NO_XLA,
    "consert_joint": _SHORT + _NO_XLA,
}


def _snli_args():
    """The SNLI flags of the simcse_sup run ([] when ../shared's SNLI is absent)."""
    snli = os.path.join(SHARED_DATA, "SNLI")
    return ([f"--config.train_data={snli}", "--config.train_split=dev"]
            if os.path.isdir(snli) else [])


@pytest.fixture(scope="module")
def short_runs(tmp_path_factory):
    """{name: (the finished `python -m tfsent.train` run, its output_dir)} for every method's
    short demo run and simcse_sup on SNLI: forks of one process that imported TensorFlow,
    keras-hub and tfsent once (conftest.cli_runs_in_one_process), one run after another."""
    from conftest import TRAIN_IMPORTS, cli_runs_in_one_process

    minilm_or_skip()
    root = tmp_path_factory.mktemp("short_runs")
    cases = {method: [f"--method={method}", *args] for method, args in SHORT_RUNS.items()}
    cases["sup_snli"] = ["--method=simcse_sup", *_snli_args(), *_SHORT]
    outputs = {name: str(root / name) for name in cases}
    runs = cli_runs_in_one_process(
        "tfsent.train", [[*argv, f"--output_dir={outputs[name]}"]
                         for name, argv in cases.items()],
        str(root), preload=TRAIN_IMPORTS, timeout=1500)
    return {name: (r, outputs[name]) for name, r in zip(cases, runs)}


@pytest.mark.parametrize("method", sorted(SHORT_RUNS))
def test_each_method_on_demo_data(method, short_runs, serve):
    r, out = short_runs[method]
    assert r.returncode == 0, r.stderr[-3000:]
    metrics = _check_export(out, serve)
    _check_tensorboard(out)
    steps = int(SHORT_RUNS[method][0].split("=")[1])
    every = int(SHORT_RUNS[method][1].split("=")[1])
    assert metrics["steps"] == steps and len(metrics["dev_history"]) == steps // every


def test_simcse_sup_on_snli(short_runs, serve):
    """Supervised SimCSE on SNLI triplets read from SentEval's s1/s2/labels files (with XLA);
    the method's demo run too: on the demo's NLI triplets when ../shared is absent."""
    r, out = short_runs["sup_snli"]
    assert r.returncode == 0, r.stderr[-3000:]
    metrics = _check_export(out, serve)
    _check_tensorboard(out)
    assert metrics["steps"] == 4 and len(metrics["dev_history"]) == 1
    if not _snli_args():
        return
    assert "triplets from" in r.stderr  # the reader logs how many triplets it built
    # SNLI has several hypotheses per premise: duplicate-free batching defers some rows.
    deferred = re.search(r"duplicate-free batches, epoch 0: (\d+) of (\d+) examples deferred",
                         r.stderr)
    assert deferred and 0 < int(deferred.group(1)) < int(deferred.group(2))
