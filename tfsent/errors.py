"""Error types raised by tfsent for bad user input.

Every error about a file names the file and, where it applies, the 1-based line, so a
user can fix the input without reading a traceback from deep inside TensorFlow.
"""


class TfsentError(Exception):
    """Base class of all errors tfsent raises on purpose."""


class InputError(TfsentError, ValueError):
    """Bad input data: a missing file, a malformed row, undecodable bytes.

    Args:
        message: what is wrong.
        path: the file involved, if any.
        line: the 1-based line number involved, if any.
    """

    def __init__(self, message, path=None, line=None):
        self.path = None if path is None else str(path)
        self.line = line
        where = ""
        if path is not None:
            where = f"{path}"
            if line is not None:
                where += f", line {line}"
            where += ": "
        super().__init__(where + message)


class ConfigError(TfsentError, ValueError):
    """A bad flag or config field (unknown method, negative batch size, rate outside [0, 1])."""


class TrainingError(TfsentError, RuntimeError):
    """A run that had to stop (a non-finite loss); the message says what was kept and how
    to resume."""


def did_you_mean(name, choices):
    """" (did you mean X?)" naming the closest of `choices` to a misspelt `name`, or ""
    when none is close (difflib's ratio >= 0.6)."""
    import difflib
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1)
    return f" (did you mean {close[0]}?)" if close else ""
