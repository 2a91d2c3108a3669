"""A quiet start for the commands (`python -m tfsent.<command>`).

Importing TensorFlow and keras-hub writes native notices straight to the process's stderr
(file descriptor 2, past Python's `sys.stderr`): "All log messages before
absl::InitializeLog()", oneDNN and CPU-feature notices, "Could not find cuda drivers",
"failed call to cuInit". A command's first screen is for its own output, so while the
package imports under `python -m tfsent.<command>`, descriptor 2 goes to a temporary file
and afterwards every line but those notices is written back. `--verbosity=N` / `-v N`
or `TFSENT_NATIVE_LOG=1` keep everything. Library use (`import tfsent`) is untouched.
"""

import contextlib
import os
import re
import sys
import tempfile

# The native start-up notices: absl's pre-initialisation banner, INFO / WARNING lines of
# TensorFlow's C++ log (`I0000 00:00:... port.cc:153] ...`), the CUDA probe's errors on a
# machine without a GPU, and the CPU-feature guard's second line.
NOTICE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to "
    r"STDERR"
    r"|[IW]\d{4} [\d:. ]+\d+ \S+\] "
    r"|E\d{4} [\d:. ]+\d+ (cuda_\w+|cuda_platform|cuda_executor|cuda_diagnostics)\.cc:\d+\] "
    r"|E\d{4} [\d:. ]+\d+ util\.cc:\d+\] oneDNN supports "
    r"|To enable the following instructions: )")


def is_notice(line):
    """True for a native start-up notice (see NOTICE)."""
    return bool(NOTICE.match(line))


def quiet_wanted(argv=None, environ=None):
    """True while the package is imported by `python -m tfsent.<command>` (runpy puts "-m"
    in argv[0] until the command's module runs) without --verbosity / -v or
    TFSENT_NATIVE_LOG=1."""
    argv = sys.argv if argv is None else argv
    environ = os.environ if environ is None else environ
    if not argv or argv[0] != "-m" or environ.get("TFSENT_NATIVE_LOG") == "1":
        return False
    return not any(a == "-v" or a.startswith(("--verbosity", "-v=")) for a in argv[1:])


@contextlib.contextmanager
def native_notices_filtered(enabled=True):
    """Runs the block with descriptor 2 sent to a temporary file, then writes back every
    line of it that is not a start-up notice. If the block raises, everything is written
    back (the notices may explain the failure)."""
    if not enabled:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    failed = True
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
            failed = False
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", "replace")
            kept = [line for line in text.splitlines(keepends=True)
                    if failed or not is_notice(line)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
