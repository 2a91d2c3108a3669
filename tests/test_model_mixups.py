"""A cross-encoder given where a bi-encoder is expected, and the reverse (issue 42, bad
input): one clear error naming the argument and what the path is, before any model is built
(`tfsent.formats.model_paths`, used by the commands, the run config and the rerank checks).
The exports are real ones of a tiny model, written once for the module."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO


@pytest.fixture(scope="module")
def exports(tiny_encoder_dir, tmp_path_factory):
    """{name: path} of a tiny CrossEncoder's files: its `.keras` file, its cross_encoder
    SavedModel (export folder and version), its cross_encoder_hf folder, a hub-style
    *ForSequenceClassification folder (the same without tfsent's metadata), and a run
    folder whose config.json names the cross_encoder method."""
    from tfsent.encoders import load_encoder
    from tfsent.methods import CrossEncoder

    root = tmp_path_factory.mktemp("mixups")
    model = CrossEncoder(load_encoder(tiny_encoder_dir, pooling="cls"), seed=0)
    keras_file = str(root / "ce.keras")
    model.save(keras_file)
    version = model.export(str(root / "ce_export"), format="cross_encoder")
    hf = model.export(str(root / "ce_hf"), format="cross_encoder_hf")
    hub = str(root / "hub_reranker")
    os.makedirs(hub)
    for name in ("config.json", "model.safetensors", "vocab.txt"):
        shutil.copy(os.path.join(hf, name), hub)
    run = root / "ce_run"
    run.mkdir()
    (run / "config.json").write_text('{"method": "cross_encoder"}', encoding="utf-8")
    return {"keras": keras_file, "export": str(root / "ce_export"), "version": version,
            "hf": hf, "hub": hub, "run": str(run), "root": root}


WHAT = {"keras": "a CrossEncoder's .keras file", "export": "a cross_encoder export",
        "version": "a cross_encoder export", "hf": "a cross_encoder_hf export",
        "hub": "a Hugging Face BertForSequenceClassification folder",
        "run": "a cross_encoder training run"}


def test_every_cross_encoder_is_refused_where_a_bi_encoder_is_expected(exports,
                                                                      tiny_encoder_dir):
    from tfsent.errors import ConfigError
    from tfsent.formats.model_paths import check_bi_encoder, check_cross_encoder

    for name, what in WHAT.items():
        path = exports[name]
        with pytest.raises(ConfigError) as error:
            check_bi_encoder(path, "--model")
        assert str(error.value).startswith(f"--model={path} is {what}, a cross-encoder "
                                           "(it scores (query, passage) pairs"), name
        check_cross_encoder(path, "--rerank")  # where a cross-encoder belongs: passes
    for bi in (tiny_encoder_dir, "minilm-l6", str(exports["root"] / "no_such_folder")):
        check_bi_encoder(bi, "--model")  # loading reports a missing path its own way


def test_a_bi_encoder_is_refused_where_a_cross_encoder_is_expected(exports,
                                                                   tiny_encoder_dir):
    from tfsent.errors import ConfigError
    from tfsent.evaluation.rerank import check_rerank
    from tfsent.formats.cross_encoder import cross_encoder_export_path

    message = (f"={tiny_encoder_dir} is a sentence encoder's folder, a bi-encoder "
               "(sentence embeddings, no pair score)")
    with pytest.raises(ConfigError, match="--rerank" + message.replace("(", r"\(")
                       .replace(")", r"\)")):
        check_rerank(tiny_encoder_dir, 10, [], [])
    with pytest.raises(ConfigError, match="--reranker" + message.replace("(", r"\(")
                       .replace(")", r"\)")):
        cross_encoder_export_path(tiny_encoder_dir, "--reranker")
    assert cross_encoder_export_path(exports["export"]) == exports["version"]


def test_run_configs_refuse_a_model_of_the_other_kind(exports, tiny_encoder_dir):
    """`--config.encoder=` of a sentence-embedding method and `--config.retriever=` of
    cross_encoder are checked with the config (before any data or model is read); a
    cross_encoder run may start from a reranker folder."""
    from tfsent import training
    from tfsent.errors import ConfigError

    with pytest.raises(ConfigError, match=f"encoder={exports['keras']} is a CrossEncoder's "
                                          r".keras file.*\(method simcse_unsup trains "
                                          "sentence embeddings\\)"):
        training.resolve_config("simcse_unsup", overrides=[f"encoder={exports['keras']}"])
    with pytest.raises(ConfigError, match=f"retriever={exports['hf']} is a "
                                          "cross_encoder_hf export, a cross-encoder"):
        training.resolve_config("cross_encoder", overrides=[f"retriever={exports['hf']}"])
    config = training.resolve_config("cross_encoder", overrides=[
        f"encoder={exports['hub']}", f"retriever={tiny_encoder_dir}"])
    assert config.encoder == exports["hub"]


def test_export_refuses_a_cross_encoder_model_in_one_line(exports, tmp_path):
    """`python -m tfsent.export --model=CE.keras` for a sentence-embedding format: exit
    status 2, one error line, nothing written. (index and mine make the same call,
    `check_bi_encoder(FLAGS.model, "--model")`, as their first step, and evaluate's --model
    goes through `check_retriever`, test_rerank_eval.py: one command process here keeps the
    module cheap.)"""
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "tfsent.export", f"--model={exports['keras']}",
                        f"--export_dir={out}"], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1] == (
        f"error: --model={exports['keras']} is a CrossEncoder's .keras file, a cross-encoder "
        "(it scores (query, passage) pairs and has no sentence embeddings): give a bi-encoder "
        "(a sentence encoder) here (a cross-encoder exports as --format=cross_encoder or "
        "cross_encoder_hf from its .keras file or its training run's folder)")
    assert "Traceback" not in r.stderr and not out.exists()
