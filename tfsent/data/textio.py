"""Reading text files line by line with errors that name the file and line."""

import os

from tfsent.errors import InputError


def read_lines(path, strip_newline=True):
    """Returns the lines of a UTF-8 text file as a list of str.

    Raises InputError naming the file when it is missing or a directory, and naming the
    file and the 1-based line when a line is not valid UTF-8. A UTF-8 byte-order mark at
    the start is dropped; "\\r\\n" line ends are accepted.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError("file not found", path=path)
    if os.path.isdir(path):
        raise InputError("expected a file, found a directory", path=path)
    lines = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(
                    f"not valid UTF-8 (byte {e.start}: {raw[e.start:e.start + 1]!r})",
                    path=path, line=number) from None
            if number == 1 and text.startswith("\ufeff"):
                text = text[1:]
            if strip_newline:
                text = text.rstrip("\r\n")
            lines.append(text)
    return lines
