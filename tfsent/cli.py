"""The shell every `python -m tfsent.<command>` runs in: absl flags, one error format.

A `TfsentError` (bad flag, config field or input file) ends the command with
`error: <message>` on stderr, the same line in the absl log, and exit status 2, before any
traceback; anything else is a bug and keeps its traceback.
"""

import sys

from absl import app, logging

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
