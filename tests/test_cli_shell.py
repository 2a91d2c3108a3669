"""The command shell (tfsent.cli, tfsent._startup): a quiet start, one error line with a
"did you mean", `--help` exiting 0, and Ctrl-C as one line with exit status 130."""

import os
import subprocess
import sys

import pytest

from conftest import REPO, sigint_as_a_terminal_sends_it
from tfsent import _startup, cli
from tfsent.errors import ConfigError, did_you_mean

ENV = dict(os.environ, PYTHONPATH=REPO)


def _run(args, timeout=240):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO,
                          env=ENV, timeout=timeout, preexec_fn=sigint_as_a_terminal_sends_it)


def _own_lines(stderr):
    """stderr without the native notices of importing TensorFlow in `python -c`."""
    return [line for line in stderr.splitlines() if not _startup.is_notice(line)]


def test_a_bad_method_is_one_error_line_with_did_you_mean_and_no_startup_noise():
    result = _run(["-m", "tfsent.train", "--method=simcse_unsupp"])
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: unknown method 'simcse_unsupp' (did you mean simcse_unsup?); choose one of "
        "clsr, cmlm_cse, consert, consert_joint, consert_sup, cross_encoder, distill, "
        "retrieval, scd, scored_pairs, simcse_sup, simcse_unsup, supcon"], result.stderr


def test_a_bad_cpu_setting_flag_is_one_error_line():
    result = _run(["-m", "tfsent.train", "--method=simcse_unsup", "--cpu_onednn=maybe"])
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: --cpu_onednn: onednn must be auto, on or off, got 'maybe'"], result.stderr


def test_verbosity_keeps_the_native_notices():
    assert not _startup.quiet_wanted(["-m", "--verbosity=1"], {})
    assert not _startup.quiet_wanted(["-m", "-v", "1"], {})
    assert not _startup.quiet_wanted(["-m"], {"TFSENT_NATIVE_LOG": "1"})
    assert not _startup.quiet_wanted(["/usr/bin/pytest"], {})  # library use
    assert _startup.quiet_wanted(["-m", "--method=x"], {})


@pytest.mark.parametrize("line, notice", [
    ("WARNING: All log messages before absl::InitializeLog() is called are written to "
     "STDERR\n", True),
    ("I0000 00:00:1795712972.333009    4955 port.cc:153] oneDNN custom operations are on.\n",
     True),
    ("I0000 00:00:1795712972.333361    4955 cudart_stub.cc:31] Could not find cuda drivers "
     "on your machine, GPU will not be used.\n", True),
    ("E0000 00:00:1795713021.106606    5416 cuda_platform.cc:52] failed call to cuInit: "
     "INTERNAL: CUDA error\n", True),
    ("To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild "
     "TensorFlow with the appropriate compiler flags.\n", True),
    ("E0000 00:00:1795732108.709934   25596 util.cc:131] oneDNN supports DT_INT64 only on "
     "platforms with AVX-512. Falling back to the default Eigen-based implementation if "
     "present.\n", True),
    # kept: real errors, Python's own output, a notice-like word inside a sentence
    ("E0000 00:00:1795713021.106606    5416 op_kernel.cc:52] OOM when allocating tensor\n",
     False),
    ("Traceback (most recent call last):\n", False),
    ("error: --model=x: no such folder\n", False),
    ("see I0000 in the log\n", False),
])
def test_the_startup_filter_drops_only_native_notices(line, notice):
    assert _startup.is_notice(line) is notice


def test_the_filter_writes_back_what_is_not_a_notice(tmp_path):
    script = ("import os\n"
              "from tfsent import _startup\n"
              "with _startup.native_notices_filtered():\n"
              "    os.write(2, b'I0000 00:00:1.2    7 port.cc:153] oneDNN custom operations\\n')\n"
              "    os.write(2, b'a real warning\\n')\n"
              "os.write(2, b'after\\n')\n")
    result = _run(["-c", script])
    assert result.returncode == 0, result.stderr
    assert "port.cc:153] oneDNN custom operations\n" not in result.stderr  # the block's
    # (the import of tfsent itself under `python -c` is not filtered: not a command)
    assert _own_lines(result.stderr) == ["a real warning", "after"]


def test_help_exits_zero():
    result = _run(["-c", "from tfsent import cli; cli.start(lambda argv: None)", "--help"])
    assert result.returncode == 0, result.stderr
    assert "--[no]helpfull" in result.stdout or "helpfull" in result.stdout
    # a usage error still exits non-zero
    result = _run(["-c", "from tfsent import cli; cli.start(lambda argv: None)", "--nosuch"])
    assert result.returncode == 1


def test_ctrl_c_is_one_line_and_status_130():
    script = ("import os, signal, time\n"
              "from tfsent import cli\n"
              "def body():\n"
              "    os.kill(os.getpid(), signal.SIGINT)\n"
              "    time.sleep(30)\n"
              "cli.start(lambda argv: cli.run_command(body, argv, interrupt_hint="
              "'run the same command again to resume'))\n")
    result = _run(["-c", script])
    assert result.returncode == 130
    assert _own_lines(result.stderr) == [
        "interrupted; run the same command again to resume"], result.stderr


def test_did_you_mean():
    assert did_you_mean("learning_rat", ["learning_rate", "batch_size"]) == \
        " (did you mean learning_rate?)"
    assert did_you_mean("zzz", ["learning_rate", "batch_size"]) == ""


def test_the_shared_model_flags_default_to_the_models_own_settings():
    from absl import flags
    values = flags.FlagValues()
    cli.define_model_flags(values)
    values(["prog"])
    assert values.model == cli.DEFAULT_MODEL
    assert values.pooling is None and values.max_seq_length is None
    assert values.query_prompt is None and values.document_prompt is None
    with pytest.raises(flags.IllegalFlagValueError):
        values(["prog", "--max_seq_length=0"])


def test_a_runs_closing_lines_name_the_next_commands(tmp_path):
    from types import SimpleNamespace

    from tfsent.training.loop import next_steps

    (tmp_path / "encoder").mkdir()
    metrics = {"export": f"{tmp_path}/export/1"}
    beir = SimpleNamespace(eval_data="beir:/d/climate-fever:dev", eval_data_dir="")
    lines = next_steps(beir, metrics, str(tmp_path))
    assert lines[0] == "next:"
    assert lines[1] == (f"  evaluate: python -m tfsent.evaluate --model={tmp_path}/export/1 "
                        "--tasks=beir:/d/climate-fever:test")
    assert lines[-1].startswith(f"  publish:  python -m tfsent.export --model={tmp_path}/encoder")
    sts = SimpleNamespace(eval_data="stsb", eval_data_dir="../shared/data")
    assert "--data_dir=../shared/data" in next_steps(sts, metrics, str(tmp_path))[1]
    demo = SimpleNamespace(eval_data="demo", eval_data_dir=None)  # evaluate's own default
    assert next_steps(demo, metrics, str(tmp_path))[1].endswith(
        "--tasks=STSBenchmark,SICKRelatedness")
    assert next_steps(beir, metrics, str(tmp_path), "bert")[-1] == lines[-1]
    # the decoder families publish as sentence-transformers folders too (docs/families.md)
    for family in ("qwen3", "gemma3"):
        assert next_steps(beir, metrics, str(tmp_path), family)[-1] == lines[-1]
    (tmp_path / "encoder").rmdir()  # a run with an export head writes no encoder folder
    assert not any("publish" in line for line in next_steps(sts, metrics, str(tmp_path)))


def test_evaluate_ends_with_the_next_steps(tmp_path):
    from types import SimpleNamespace

    from tfsent.evaluation.runner import evaluation_next_steps

    beir = [SimpleNamespace(directory="/d/climate-fever")]
    lines = evaluation_next_steps("minilm-l6", beir)
    assert lines == [
        "next:",
        "  rerank:   the same command with --rerank=CROSS_ENCODER_EXPORT --rerank_top=100 "
        "(docs/search.md, reranking)",
        "  index:    python -m tfsent.index --model=minilm-l6 --corpus=/d/climate-fever "
        "--export_dir=exports/search",
        "  keep:     the same command with --output_json=results.json"]
    export = tmp_path / "export"
    (export / "1").mkdir(parents=True)
    (export / "1" / "saved_model.pb").write_bytes(b"")
    # an export cannot be indexed (tfsent.index embeds with an encoder); reranked, kept
    assert evaluation_next_steps(str(export), beir, "ce", "r.json") == []
    assert evaluation_next_steps("minilm-l6", [], None, "r.json") == []  # STS: nothing more


def test_every_export_format_names_its_next_step_with_the_path():
    from tfsent import formats

    for name, entry in formats.FORMATS.items():
        lines = formats.next_step_lines(name, "/x/out/3")
        assert lines[0] == "next:" and len(lines) == 1 + len(entry.next_steps) > 1, name
        assert all(line.startswith("  ") and "/x/out/3" in line for line in lines[1:]), name
        assert not any("{" + "path}" in line for line in lines), name
    assert formats.next_step_lines("saved_model", "p") == formats.next_step_lines(
        "tf_saved_model", "p")


def test_a_misspelt_config_field_names_the_likely_one_not_sixty():
    from tfsent.training.config import resolve_config

    with pytest.raises(ConfigError) as error:
        resolve_config("simcse_unsup", overrides=["learning_rat=1e-4"])
    assert str(error.value) == ("--config.learning_rat: unknown field 'learning_rat' (did you "
                                "mean learning_rate?); docs/training.md lists every field")


def test_command_usage_keeps_its_line_breaks():
    """A command's usage (its module docstring, which absl prints for --help) keeps the
    shell's line continuations: in a plain string a `\\` at a line's end joins the next
    line onto it, so a docstring with such lines must be a raw string."""
    import ast
    import glob

    paths = [os.path.join(REPO, "tfsent", f"{name}.py")
             for name in ("train", "evaluate", "export", "mine", "index")]
    paths += sorted(glob.glob(os.path.join(REPO, "tools", "*.py")))
    joined = []
    for path in paths:
        source = open(path, encoding="utf-8").read()
        first = ast.parse(source).body[0]
        lines = source.splitlines()[first.lineno - 1:first.end_lineno]
        if any(line.endswith("\\") for line in lines) and not lines[0].startswith('r"""'):
            joined.append(os.path.relpath(path, REPO))
    assert not joined, joined


_QUIET_SAVE = """
import os, sys
import tensorflow as tf
from absl import app, logging
from tfsent import cli

def main(argv):
    cli.quiet_tensorflow_info()
    logging.info("our own line")
    module = tf.Module()
    module.f = tf.function(lambda x: {"y": x * 2},
                           input_signature=[tf.TensorSpec([None], tf.float32, name="Input")])
    tf.saved_model.save(module, sys.argv[1], signatures={"serving_default": module.f})

app.run(main, sys.argv[:2] + ["--verbosity=" + sys.argv[2]])
"""


@pytest.mark.parametrize("verbosity", ["0", "1"])
def test_tensorflow_info_lines_of_a_save_show_only_at_verbosity_1(tmp_path, verbosity):
    """TensorFlow logs a signature's renamed inputs through absl directly (not its own
    logger): a command drops them, keeps its own INFO lines, and shows them on request."""
    result = _run(["-c", _QUIET_SAVE, str(tmp_path / "saved"), verbosity])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "our own line" in result.stderr
    renamed = "contains input name(s) Input with unsupported characters"
    assert (renamed in result.stderr) == (verbosity == "1"), result.stderr[-3000:]
