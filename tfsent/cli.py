"""The shell every `python -m tfsent.<command>` runs in: absl flags, one error format.

A `TfsentError` (bad flag, config field or input file) ends the command with
`error: <message>` on stderr, the same line in the absl log, and exit status 2, before any
traceback; anything else is a bug and keeps its traceback.
"""

import sys

from absl import app, logging

from tfsent.encoders import DEFAULT_ENCODER
from tfsent.errors import TfsentError


def run_command(body, argv, required=()):
    """Runs `body()` as a command's main: refuses positional arguments and missing
    `required` flags (pairs of (value, usage hint)) with absl's usage error, and turns a
    TfsentError into `error: ...` and exit status 2. Returns what `body` returns."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    for value, hint in required:
        if not value:
            raise app.UsageError(hint)
    try:
        return body()
    except TfsentError as e:
        fail(e)


def fail(error):
    """Reports a TfsentError the way every command does and exits with status 2."""
    logging.error("%s", error)
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)


# The encoder every command starts from when --model is not given: the library's default
# (`tfsent.encoders.DEFAULT_ENCODER`, also the training config's `encoder` default).
DEFAULT_MODEL = DEFAULT_ENCODER


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
    if prompts:
        flags.DEFINE_string("query_prompt", None, "Text put before each query (default: "
                            "the model's own query prompt, if it was saved with one; "
                            "--query_prompt= for none).", **fv)
        flags.DEFINE_string("document_prompt", None, "Text put before each document "
                            "(default: the model's own document prompt, if any; "
                            "--document_prompt= for none).", **fv)
