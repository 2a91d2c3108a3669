"""Every method on every encoder family: a training step in-process (the model built as
`python -m tfsent.train` builds it; an eager step), an export, and the export serving strings
in a fresh process that imports only tensorflow and tensorflow_text and loads it as TF
Serving does, equal to `encode`. A diagonal of the grid also goes through the CLI
(`python -m tfsent.train --config.encoder=DIR`, traced XLA train steps).

Cost: every cell trains, but half of them export (`EXPORTED`: each method on two families,
each family with four methods; an export's graph is the family's tokenizer and backbone
plus the method's pooling and head, so the pairs cover both sides), and those exports are
served by ONE fresh process (module fixture), started before the first cell and fed each
export as soon as it is written, so that its TensorFlow import and the loading of each
export overlap the next cells' training. The CLI diagonal's four runs share one process
(the command's entry point run four times) and one fresh serving process."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import TF_SERVING_LOADER
from hf_checkpoints import FAMILIES

METHODS = ("simcse_unsup", "simcse_sup", "cmlm_cse", "consert", "scd", "supcon", "clsr",
           "distill")
SENTENCES = ["A man is playing a guitar.", "Someone plays an instrument.", "",
             "Café crème, naïve résumé 😀 東京は日本の首都です。", "word " * 40]
SERVE_LEN = 24
# Tiny-model settings every cell shares (the methods' own defaults otherwise).
# One step: it moves the variables as two would (the cells check that training runs and
# changes the model, not how far it gets).
OVERRIDES = ["steps=1", "eval_every=1", "batch_size=8", "max_seq_length=16",
             f"eval_max_seq_length={SERVE_LEN}", "jit_compile=False", "learning_rate=1e-3",
             "steps_per_execution=1"]
METHOD_OVERRIDES = {"cmlm_cse": ["extractor_layers=1", "fusion_layers=1"],
                    "clsr": ["cache_dir={tmp}/cache"],
                    # distill: a 2-layer student cut from the checkpoint (its own teacher)
                    "distill": ["cache_dir={tmp}/cache", "student_layers=0,2"]}

# The exported cells: method i on families i and i + 1 (mod 4).
EXPORTED = {(method, FAMILIES[(i + shift) % len(FAMILIES)])
            for i, method in enumerate(METHODS) for shift in (0, 1)}

# Reads `KEY<TAB>SAVEDMODEL PATH` lines from stdin, loads each SavedModel as TF Serving
# does and serves the sentences as soon as its line arrives; at the end of input prints the
# embeddings (both outputs of serving_default) and which of tfsent / keras_hub got imported
# (none should).
SERVE_MANY = TF_SERVING_LOADER + r"""
import json, sys
sentences = json.loads(sys.argv[1])
out, normalized = {}, {}
for line in sys.stdin:
    key, path = line.rstrip("\n").split("\t")
    served = serve_like_tf_serving(path, sentences)
    out[key] = served["embedding"].tolist()
    normalized[key] = served["embedding_normalized"].tolist()
mods = sorted({k.split(".")[0] for k in sys.modules if k.split(".")[0] in ("tfsent", "keras_hub")})
json.dump({"embeddings": out, "normalized": normalized, "modules": mods}, sys.stdout)
"""


def train_and_export(method, family, checkpoint, workdir, export=True):
    """A step of `method` on the tiny `family` checkpoint, then (`export`) an export;
    returns (export path or None, model.encode(SENTENCES), logs of the last step)."""
    import keras

    from tfsent.formats.saved_model import export_encoder
    from tfsent.methods import get_method
    from tfsent.training import build_model, load_training_data, make_dataset, resolve_config

    extra = [o.format(tmp=workdir) for o in METHOD_OVERRIDES.get(method, [])]
    config = resolve_config(method, None, [f"encoder={checkpoint}", *OVERRIDES, *extra])
    spec = get_method(method)
    keras.utils.set_random_seed(0)
    encoder, model, optimizer = build_model(spec, config, 1, jit=False)
    # Eager train steps: tracing a train function per cell would triple the grid's cost;
    # the traced (XLA) step of every family runs in test_cli_trains_a_family_checkpoint.
    model.compile(optimizer=optimizer, run_eagerly=True)
    assert encoder.family == family
    before = [v.numpy().copy() for v in model.trainable_variables]
    examples = load_training_data(spec, config)
    dataset = make_dataset(spec, config, encoder, examples, 0, workdir, model=model)
    history = model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0)
    assert int(optimizer.iterations.numpy()) == 1
    logs = {k: v[-1] for k, v in history.history.items()}
    assert all(np.isfinite(v) for v in logs.values()), logs
    moved = [not np.array_equal(b, v.numpy()) for b, v in zip(before,
                                                              model.trainable_variables)]
    assert sum(moved) > len(moved) // 2, f"{sum(moved)} of {len(moved)} variables changed"
    path = export_encoder(encoder, os.path.join(workdir, "export"),
                          pooling=model.export_pooling, head=model.export_head,
                          max_seq_length=SERVE_LEN) if export else None
    expected = model.encode(SENTENCES, max_seq_length=SERVE_LEN)
    return path, expected, logs


class ServingProcess:
    """One fresh process (SERVE_MANY) that serves each export fed to it, started before the
    first one exists so that its TensorFlow import overlaps the work that writes them."""

    def __init__(self, tmp_path_factory):
        self.stderr = tmp_path_factory.mktemp("serve") / "stderr.txt"
        with open(self.stderr, "w") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-c", SERVE_MANY, json.dumps(SENTENCES)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))

    def serve(self, key, path):
        """Queues the SavedModel at `path`; its embeddings come back under `key`."""
        try:
            self.process.stdin.write(f"{key}\t{path}\n")
            self.process.stdin.flush()
        except BrokenPipeError:  # the server died: its stderr is reported by `results`
            pass

    def results(self):
        """{"embeddings": {key: rows}, "modules": [...]} once every export is served."""
        try:
            out, _ = self.process.communicate(timeout=900)
        finally:
            if self.process.poll() is None:
                self.process.kill()
        assert self.process.returncode == 0, self.stderr.read_text()[-3000:]
        return json.loads(out)


@pytest.fixture(scope="module")
def grid(hf_checkpoint_dirs, tmp_path_factory):
    """{(method, family): (export path, encode output, logs) or the exception raised},
    plus the fresh process's served embeddings for every export."""
    results = {}
    server = ServingProcess(tmp_path_factory)
    for family in FAMILIES:
        for method in METHODS:
            workdir = str(tmp_path_factory.mktemp(f"{method}-{family}"))
            try:
                results[method, family] = train_and_export(
                    method, family, hf_checkpoint_dirs[family], workdir,
                    export=(method, family) in EXPORTED)
            except Exception as e:  # noqa: BLE001  (reported by the cell's own test)
                results[method, family] = e
                continue
            if (method, family) in EXPORTED:
                server.serve(f"{method}|{family}", results[method, family][0])
    return results, server.results()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("method", METHODS)
def test_method_trains_and_export_serves_strings(method, family, grid):
    results, served = grid
    result = results[method, family]
    if isinstance(result, Exception):
        raise result
    _, expected, logs = result
    assert logs["loss"] > 0 and np.isfinite(expected).all()
    if (method, family) not in EXPORTED:
        return  # trained and encodes; its export's two sides are served in other cells
    assert served["modules"] == []  # neither tfsent nor keras_hub in the serving process
    got = np.array(served["embeddings"][f"{method}|{family}"], np.float32)
    assert got.shape == expected.shape and np.isfinite(got).all()
    cosine = np.sum(got * expected, 1) / (np.linalg.norm(got, axis=1)
                                          * np.linalg.norm(expected, axis=1))
    assert cosine.min() >= 0.99999, cosine


def test_the_exported_cells_cover_every_method_and_family():
    from collections import Counter

    assert Counter(m for m, _ in EXPORTED) == {m: 2 for m in METHODS}
    assert Counter(f for _, f in EXPORTED) == {f: len(METHODS) // 2 for f in FAMILIES}


# The CLI on a diagonal of the grid (every family once, different methods). One run keeps
# the default XLA train step; the others trace it without XLA (CPU cost: XLA compiles take
# most of a tiny run).
CLI_DIAGONAL = [("scd", "roberta"), ("cmlm_cse", "xlm-roberta"),
                ("consert", "distilbert"), ("supcon", "bert")]
CLI_XLA = {("scd", "roberta")}


@pytest.fixture(scope="module")
def cli_runs(hf_checkpoint_dirs, tmp_path_factory):
    """{(method, family): (the finished `python -m tfsent.train` run, its output_dir)} for
    the diagonal, plus the served embeddings of every run's export. The four runs go
    through the command's entry point in one process, their exports through one fresh
    serving process (conftest.cli_runs_in_one_process: each run a fork of one process that
    imported TensorFlow, keras-hub and tfsent once, ~9 CPU seconds a fresh process pays)."""
    from conftest import TINY_RUN_FLAGS, TRAIN_IMPORTS, cli_runs_in_one_process

    outputs, arg_lists = [], []
    for method, family in CLI_DIAGONAL:
        outputs.append(str(tmp_path_factory.mktemp(f"cli-{method}-{family}") / "run"))
        extra = ["--config.extractor_layers=1", "--config.fusion_layers=1"] \
            if method == "cmlm_cse" else []
        if (method, family) not in CLI_XLA:
            extra.append("--config.jit_compile=False")
        arg_lists.append([f"--method={method}", f"--config.encoder={hf_checkpoint_dirs[family]}",
                          "--config.steps=3", "--config.eval_every=3", "--config.batch_size=8",
                          "--config.eval_max_seq_length=32", f"--output_dir={outputs[-1]}",
                          *TINY_RUN_FLAGS, *extra])
    runs = cli_runs_in_one_process("tfsent.train", arg_lists,
                                   str(tmp_path_factory.mktemp("cli-forks")),
                                   preload=TRAIN_IMPORTS, timeout=1800)
    runs = dict(zip(CLI_DIAGONAL, zip(runs, outputs)))
    server = ServingProcess(tmp_path_factory)
    for (method, family), (r, out) in runs.items():
        if r.returncode == 0:
            server.serve(f"{method}|{family}", os.path.join(out, "export", "1"))
    return runs, server.results()


@pytest.mark.parametrize("method,family", CLI_DIAGONAL)
def test_cli_trains_a_family_checkpoint(method, family, cli_runs):
    runs, served = cli_runs
    r, out = runs[method, family]
    assert r.returncode == 0, r.stderr[-3000:]
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["steps"] == 3
    meta = json.load(open(os.path.join(out, "encoder", "tfsent_encoder.json")))
    assert meta["family"] == family
    embedding = np.array(served["embeddings"][f"{method}|{family}"], np.float32)
    assert embedding.shape[0] == len(SENTENCES) and np.isfinite(embedding).all()
    assert np.isfinite(served["normalized"][f"{method}|{family}"]).all()
    assert served["modules"] == []


def test_cmlm_extractor_and_mlm_head_come_from_the_checkpoint(hf_checkpoint_dirs, tmp_path,
                                                               absl_messages):
    """CMLM-CSE's extractor is the first k layers of the same family; its MLM head starts
    from the checkpoint's head (RoBERTa's lm_head here), or is new when there is none."""
    from safetensors.numpy import load_file

    from hf_checkpoints import make_sentence_transformers_dir
    from tfsent.encoders import load_encoder
    from tfsent.methods import CMLMCSE

    path = hf_checkpoint_dirs["roberta"]
    encoder = load_encoder(path, max_seq_length=16)
    model = CMLMCSE(encoder, extractor_layers=2, fusion_layers=1)
    assert "CMLM-CSE: MLM head from the roberta checkpoint" in absl_messages
    stored = load_file(f"{path}/model.safetensors")
    np.testing.assert_array_equal(model.fusioner.transform.kernel.numpy(),
                                  stored["lm_head.dense.weight"].T)
    np.testing.assert_array_equal(model.fusioner.output_bias.numpy(), stored["lm_head.bias"])
    assert model.fusioner.layer_norm.epsilon == 1e-5
    extractor = model.extractor.encoder
    assert extractor.family == "roberta" and extractor.num_layers == 2
    feats = encoder.tokenizer(["a man plays the guitar", "water boils"])
    hidden = encoder(feats, output_hidden_states=True)["hidden_states"]
    np.testing.assert_allclose(model.extractor(feats), hidden[2], atol=1e-5)
    base = load_encoder(make_sentence_transformers_dir("roberta", str(tmp_path / "st")))
    fresh = CMLMCSE(base, extractor_layers=1, fusion_layers=1)
    assert "CMLM-CSE: new MLM head (the roberta checkpoint has none)" in absl_messages
    assert not np.array_equal(fresh.fusioner.transform.kernel.numpy(),
                              stored["lm_head.dense.weight"].T)
