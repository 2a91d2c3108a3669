"""The shell every `python -m tfsent.<command>` runs in: absl flags, one error format.

A `TfsentError` (bad flag, config field or input file) ends the command with one line,
`error: <message>`, on stderr and exit status 2, before any traceback; anything else is a
bug and keeps its traceback. Ctrl-C ends it with one line (what to do next) and status
130; `--help` prints the usage and exits 0. The flags several commands share are defined
here once (`define_model_flags`, `define_cpu_flags`).
"""

import os
import sys

from absl import app, logging
from absl.logging import converter

from tfsent import cpu_settings
from tfsent.encoders import DEFAULT_ENCODER
from tfsent.errors import TfsentError


def run_command(body, argv, required=(), interrupt_hint=""):
    """Runs `body()` as a command's main: refuses positional arguments and missing
    `required` flags (pairs of (value, usage hint)) with absl's usage error, turns a
    TfsentError into `error: ...` and exit status 2, and Ctrl-C into `interrupted;
    <interrupt_hint>` and status 130. Returns what `body` returns."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    for value, hint in required:
        if not value:
            raise app.UsageError(hint)
    quiet_tensorflow_info()
    try:
        return body()
    except TfsentError as e:
        fail(e)
    except KeyboardInterrupt:
        interrupted(interrupt_hint)


def quiet_tensorflow_info():
    """TensorFlow's own INFO lines (each SavedModel save logs hundreds of renamed inputs,
    "Assets written to", fingerprints) are left out of a command's log unless
    `--verbosity=1` or more asks for them; its warnings and errors stay.

    Some of them go through TensorFlow's logger and some straight through absl's (e.g. the
    signature input renames), so the filter sits on absl's handler and drops INFO records
    whose source file is inside the `tensorflow` package, wherever they were logged."""
    if logging.get_verbosity() < 1:
        import tensorflow as tf  # every command's body imports it anyway
        tf.get_logger().setLevel("WARNING")
        handler = logging.get_absl_handler()
        if not any(isinstance(f, _DropTensorFlowInfo) for f in handler.filters):
            handler.addFilter(_DropTensorFlowInfo(os.path.dirname(tf.__file__)))


class _DropTensorFlowInfo:
    """A log-record filter (Python logging takes any object with `filter(record)`): drops
    records below WARNING whose source file is under `package_dir`."""

    def __init__(self, package_dir):
        self.package_dir = os.path.realpath(package_dir) + os.sep
        self._inside = {}  # source file -> whether it is under package_dir

    def filter(self, record):
        if record.levelno >= converter.STANDARD_WARNING:
            return True
        inside = self._inside.get(record.pathname)
        if inside is None:
            inside = os.path.realpath(record.pathname).startswith(self.package_dir)
            self._inside[record.pathname] = inside
        return not inside


def fail(error):
    """Reports a TfsentError the way every command does (one `error:` line on stderr; the
    absl log repeats it only at --verbosity=1 or more) and exits with status 2."""
    logging.vlog(1, "%s", error)
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)


def print_next_steps(lines):
    """A command's closing "next:" lines, on stderr: stdout keeps only the command's result
    (e.g. the path written), for scripts that read it."""
    if lines:
        sys.stderr.write("\n".join(lines) + "\n")


def interrupted(hint=""):
    """Ctrl-C: one line on stderr (`interrupted` and `hint`, what to do next) and exit
    status 130, instead of TensorFlow's traceback."""
    print("interrupted" + (f"; {hint}" if hint else ""), file=sys.stderr)
    sys.exit(130)


def start(main, argv=None, interrupt_hint=""):
    """`absl.app.run(main, argv)` for a command: `--help` (and absl's other help flags)
    exits 0, as help does in other programs (absl exits 1), and a Ctrl-C before `main`'s
    `run_command` takes over (flag parsing, imports) is one line too."""
    argv = sys.argv if argv is None else argv
    try:
        app.run(main, argv=argv)
    except SystemExit as e:
        if e.code == 1 and cpu_settings.asks_for_help(argv[1:]):
            sys.exit(0)
        raise
    except KeyboardInterrupt:
        interrupted(interrupt_hint)


# The encoder every command starts from when --model is not given: the library's default
# (`tfsent.encoders.DEFAULT_ENCODER`, also the training config's `encoder` default).
DEFAULT_MODEL = DEFAULT_ENCODER


def define_cpu_flags(flag_values=None):
    """--cpu_onednn, --cpu_jit_encode, --cpu_jit_train, --cpu_threads: TensorFlow's CPU
    settings (`tfsent.cpu_settings`). They are read from the command line before
    TensorFlow is imported (oneDNN cannot change later); absl only checks and documents
    them here."""
    from absl import flags
    fv = {} if flag_values is None else {"flag_values": flag_values}
    for name, what in (("onednn", "TensorFlow's oneDNN kernels"),
                       ("jit_encode", "XLA for encoding"),
                       ("jit_train", "XLA for the train step")):
        flags.DEFINE_enum(f"cpu_{name}", "auto", ["auto", "on", "off"],
                          f"{what}: auto (measured for this CPU where that pays, else "
                          "the default; $TFSENT_CPU_SETTINGS), on or off "
                          f"(over ${cpu_settings.ENV_VARS[name]}).", **fv)
    flags.DEFINE_string("cpu_threads", "auto", "Intra/inter-op threads: auto (as above), "
                        "default (TF's own) or INTRA/INTER, e.g. 2/1 (over "
                        "$TFSENT_THREADS).", **fv)


def define_model_flags(flag_values=None, *, what="Encoder", savedmodel=False,
                       prompts=True, batch_size=64):
    """Defines the flags every command that loads a model shares, with one meaning each:
    --model, --pooling, --max_seq_length (both default to the model's own setting: a
    sentence-transformers folder's Pooling module and max_seq_length, a tfsent encoder
    folder's, an export's), --batch_size, and (`prompts`) --query_prompt /
    --document_prompt (default: the prompts the model was saved with, if any)."""
    from absl import flags
    fv = {} if flag_values is None else {"flag_values": flag_values}
    loads = "anything tfsent.encoders.load_encoder takes" + (
        ", or an exported SavedModel directory" if savedmodel else "")
    flags.DEFINE_string("model", DEFAULT_MODEL, f"{what}: a preset name, a Hugging Face or "
                        f"sentence-transformers folder, a tfsent encoder folder or "
                        f"{DEFAULT_MODEL} ({loads}).", **fv)
    flags.DEFINE_string("pooling", None, "Pooling (default: the model's own, e.g. a "
                        "sentence-transformers Pooling module; else mean).", **fv)
    flags.DEFINE_integer("max_seq_length", None, "Truncation length in tokens, special "
                         "tokens included (default: the model's own, e.g. 256 for "
                         f"{DEFAULT_MODEL}; else 128).", lower_bound=1, **fv)
    flags.DEFINE_integer("batch_size", batch_size, "Texts per encoding batch.",
                         lower_bound=1, **fv)
    define_cpu_flags(flag_values)
    if prompts:
        flags.DEFINE_string("query_prompt", None, "Text put before each query (default: "
                            "the model's own query prompt, if it was saved with one; "
                            "--query_prompt= for none).", **fv)
        flags.DEFINE_string("document_prompt", None, "Text put before each document "
                            "(default: the model's own document prompt, if any; "
                            "--document_prompt= for none).", **fv)
