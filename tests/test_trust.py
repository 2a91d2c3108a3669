"""Nothing a user owns is lost or silently reused, and bad input is refused before work:
the run directory checks of `tfsent.train`, `tfsent.evaluate`'s early checks and
`tfsent.mine`'s output checks (each fails on tfsent before these checks existed)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, TINY_RUN_FLAGS
from tfsent import training
from tfsent.errors import ConfigError, InputError
from tfsent.formats.metadata import list_versions


def _env():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    return env


def _cli(module, *args):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=300)


def _config(encoder_dir, *overrides):
    flags = [f.replace("--config.", "") for f in TINY_RUN_FLAGS]
    return training.resolve_config("simcse_unsup", overrides=[
        f"encoder={encoder_dir}", "max_seq_length=16", "batch_size=8", "steps=4",
        "eval_every=2", "jit_compile=false", "learning_rate=0.001", *flags, *overrides])


def test_a_model_checkpoint_folder_is_never_an_output_dir(tmp_path, tiny_encoder_dir):
    """A Hugging Face checkpoint folder given as --output_dir keeps its config.json."""
    folder = tmp_path / "bert-checkpoint"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert"}')
    r = _cli("tfsent.train", "--method=simcse_unsup", f"--output_dir={folder}",
             f"--config.encoder={tiny_encoder_dir}")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "config.json that tfsent did not write" in r.stderr
    assert "Traceback" not in r.stderr
    assert (folder / "config.json").read_text() == '{"model_type": "bert"}'
    assert sorted(os.listdir(folder)) == ["config.json"]
    # A non-empty folder without any run is refused too, even with --overwrite.
    with pytest.raises(ConfigError, match="holds no tfsent run"):
        (tmp_path / "notes").mkdir()
        (tmp_path / "notes" / "todo.txt").write_text("x")
        training.run("simcse_unsup", _config(tiny_encoder_dir), str(tmp_path / "notes"),
                     overwrite=True)
    assert os.listdir(tmp_path / "notes") == ["todo.txt"]


def test_finished_differing_and_overwritten_runs(tmp_path, tiny_encoder_dir, capsys):
    out = str(tmp_path / "run")
    first = training.run("simcse_unsup", _config(tiny_encoder_dir), out)
    assert first["steps"] == 4 and list_versions(os.path.join(out, "export")) == [1]
    # The same command again: finished, nothing trained or exported again.
    again = training.run("simcse_unsup", _config(tiny_encoder_dir), out)
    assert "already finished" in capsys.readouterr().out
    assert again == first and list_versions(os.path.join(out, "export")) == [1]
    # Another config in the same folder: refused, naming the field and both values.
    with pytest.raises(ConfigError) as info:
        training.run("simcse_unsup", _config(tiny_encoder_dir, "learning_rate=0.01"), out)
    message = str(info.value)
    assert "learning_rate: 0.001 in the folder's run, 0.01 now" in message
    assert "--overwrite" in message and "new --output_dir" in message
    with pytest.raises(ConfigError, match="method: 'simcse_unsup' in the folder's run"):
        config = training.resolve_config("scd", overrides=[f"encoder={tiny_encoder_dir}"])
        training.run("scd", config, out)
    assert list_versions(os.path.join(out, "export")) == [1]
    # --overwrite: the earlier run's files go, the new config trains from the start; the
    # user's own files stay, even those named like a run's (export_FORMAT is the run's).
    os.makedirs(os.path.join(out, "export_backup_v3"))
    open(os.path.join(out, "export_notes.md"), "w").close()
    os.makedirs(os.path.join(out, "export_onnx", "1"))
    redone = training.run("simcse_unsup", _config(tiny_encoder_dir, "learning_rate=0.01"),
                          out, overwrite=True)
    assert redone["steps"] == 4 and list_versions(os.path.join(out, "export")) == [1]
    assert os.path.isdir(os.path.join(out, "export_backup_v3"))
    assert os.path.isfile(os.path.join(out, "export_notes.md"))
    assert not os.path.exists(os.path.join(out, "export_onnx"))
    stored = json.load(open(os.path.join(out, "config.json")))
    assert stored["learning_rate"] == 0.01
    # --overwrite with a run that cannot start (a misspelt encoder name, a folder that is
    # no encoder, a max_seq_length beyond the positions) removes nothing of the earlier run.
    before = sorted(os.listdir(out))
    not_an_encoder = tmp_path / "notes"
    not_an_encoder.mkdir()
    (not_an_encoder / "todo.txt").write_text("x")
    for encoder, extra, message in [
            ("minilm-l66", [], "not a folder, a short name .*did you mean minilm-l6"),
            (str(not_an_encoder), [], "not an encoder directory"),
            (tiny_encoder_dir, ["max_seq_length=100000"], "max_seq_length=100000: encoder "
             ".* has \\d+ positions")]:
        with pytest.raises((ConfigError, InputError), match=message):
            training.run("simcse_unsup", _config(encoder, *extra), out, overwrite=True)
        assert sorted(os.listdir(out)) == before
        assert json.load(open(os.path.join(out, "config.json")))["learning_rate"] == 0.01
    # ... nor does it leave anything in a new folder, so the corrected command runs there.
    fresh = tmp_path / "fresh"
    with pytest.raises(InputError, match="not an encoder directory"):
        training.run("simcse_unsup", _config(str(not_an_encoder)), str(fresh))
    assert not fresh.exists() or not os.listdir(fresh)


def test_a_folder_with_only_an_earlier_attempts_config_is_a_new_run(tmp_path):
    """An attempt that stopped before training (e.g. its dev data failed) left config.json
    only: a corrected command (another config) starts there without --overwrite."""
    from tfsent.training.run_dir import prepare_run_dir

    (tmp_path / "config.json").write_text(json.dumps(
        {"method": "simcse_unsup", "train_data": "a.txt", "learning_rate": 0.1}))
    assert prepare_run_dir(str(tmp_path), {"method": "simcse_unsup", "train_data": "b.txt",
                                           "learning_rate": 0.01}) == "new"
    assert prepare_run_dir(str(tmp_path), {"method": "simcse_unsup", "train_data": "a.txt",
                                           "learning_rate": 0.1}) == "resume"  # the same
    (tmp_path / "tb").mkdir()  # once it trained, another config is refused again
    with pytest.raises(ConfigError, match="holds a run with another config"):
        prepare_run_dir(str(tmp_path), {"method": "simcse_unsup", "train_data": "b.txt"})
    # --overwrite only says so: the caller removes the run once it can start.
    assert prepare_run_dir(str(tmp_path), {"method": "simcse_unsup"}, overwrite=True) == \
        "overwrite"
    assert sorted(os.listdir(tmp_path)) == ["config.json", "tb"]


def test_test_tasks_are_checked_before_training(tmp_path, tiny_encoder_dir):
    """A bad test_tasks is refused with the config, or (no eval_data_dir: a recipe leaves
    it to the command line) when the run starts, before anything is written; not found
    after training (or skipped)."""
    for extra, message in [
            (["test_tasks=STS99", f"eval_data_dir={tmp_path}"],
             "test_tasks='STS99': unknown task 'STS99'"),
            ([f"test_tasks=beir:{tmp_path / 'missing'}"], "test_tasks='beir:.*not a folder")]:
        with pytest.raises(ConfigError, match=message):
            _config(tiny_encoder_dir, *extra)
    _config(tiny_encoder_dir, "test_tasks=sts", f"eval_data_dir={tmp_path}")
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match="test_tasks='sts' needs eval_data_dir"):
        training.run("simcse_unsup", _config(tiny_encoder_dir, "test_tasks=sts"), str(out))
    # report_geometry too (it was skipped without a word before 2026-11-29).
    with pytest.raises(ConfigError, match="report_geometry needs eval_data_dir"):
        training.run("simcse_unsup", _config(tiny_encoder_dir, "report_geometry=true"),
                     str(out))
    assert not out.exists()


def test_empty_training_data_is_refused_before_anything_is_written(tmp_path,
                                                                     tiny_encoder_dir):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    out = tmp_path / "run"
    r = _cli("tfsent.train", "--method=simcse_unsup", f"--output_dir={out}",
             f"--config.encoder={tiny_encoder_dir}", f"--config.train_data={empty}",
             "--config.steps=0", "--config.epochs=1")
    assert r.returncode == 2, r.stderr[-2000:]
    assert str(empty) in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()
    assert "dev before training" not in r.stderr  # no model was loaded or evaluated


def test_evaluate_checks_tasks_before_loading_and_fails_when_all_are_skipped(tmp_path):
    r = _cli("tfsent.evaluate", "--model=/no/such/model", "--tasks=STS12,bogus",
             f"--data_dir={tmp_path}")
    assert r.returncode == 2 and "unknown task 'bogus'" in r.stderr, r.stderr[-2000:]
    r = _cli("tfsent.evaluate", "--model=/no/such/model", "--tasks=sts",
             f"--data_dir={tmp_path / 'missing'}")
    assert r.returncode == 2 and "is not a folder" in r.stderr, r.stderr[-2000:]


def test_evaluate_all_skipped_is_an_error(tmp_path, tiny_encoder_dir):
    r = _cli("tfsent.evaluate", f"--model={tiny_encoder_dir}", "--tasks=sts",
             f"--data_dir={tmp_path}", "--skip_missing")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "no task could be run" in r.stderr


def test_mine_never_overwrites_its_input_or_an_existing_file(tmp_path):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a man plays\ta man is playing\nthe dog runs\ta dog is running\n")
    before = pairs.read_text()
    r = _cli("tfsent.mine", "--model=/no/such/model", f"--pairs={pairs}", f"--out={pairs}",
             "--num_negatives=1", "--overwrite")
    assert r.returncode == 2 and "also an input" in r.stderr, r.stderr[-2000:]
    existing = tmp_path / "mined.tsv"
    existing.write_text("keep\n")
    r = _cli("tfsent.mine", "--model=/no/such/model", f"--pairs={pairs}",
             f"--out={existing}", "--num_negatives=1")
    assert r.returncode == 2 and "already exists" in r.stderr, r.stderr[-2000:]
    assert pairs.read_text() == before and existing.read_text() == "keep\n"


def test_a_checkpoint_of_another_model_is_a_clear_error(tmp_path):
    """Resuming from a checkpoint whose variables do not fit the model names the checkpoint
    and the variable's two shapes, not a raw TensorFlow traceback."""
    import keras

    from conftest import TINY_VOCAB
    from tfsent.methods import SimCSE
    from tfsent.testing import tiny_encoder
    from tfsent.training import RunState

    def state(hidden):
        model = SimCSE(tiny_encoder(TINY_VOCAB, hidden_dim=hidden, max_seq_length=8))
        optimizer = keras.optimizers.AdamW(1e-3)
        model.compile(optimizer=optimizer)
        optimizer.build(model.trainable_variables)
        return RunState(str(tmp_path), model, optimizer)

    state(16).save_checkpoint(2)
    with pytest.raises(ConfigError) as info:
        state(24).restore()
    message = str(info.value)
    assert "checkpoints" in message and "does not fit this model" in message
    assert "shape (16, 16)" in message and "shape (24, 24)" in message, message
    assert "and name " in message  # TensorFlow's words: the variable restored into
