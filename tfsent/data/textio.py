"""Reading text files line by line with errors that name the file and line."""

import codecs
import json
import os

from tfsent.errors import InputError


def tab_rows(path, names, lines=None, first_number=1):
    """Yields (1-based line number, columns) for each non-blank line of a tab-separated
    file whose rows hold exactly the columns `names`; a row with another count raises
    InputError naming the file, the line and the columns expected. `lines` (default: the
    file's, `read_lines`) numbered from `first_number` (2 after a header)."""
    lines = read_lines(path) if lines is None else lines
    for number, line in enumerate(lines, start=first_number):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) != len(names):
            raise InputError(f"expected {len(names)} tab-separated columns "
                             f"({', '.join(names)}), found {len(cols)}", path=path,
                             line=number)
        yield number, cols


def read_lines(path, strip_newline=True, encoding="utf-8"):
    """Returns the lines of a text file (UTF-8 by default) as a list of str.

    Raises InputError naming the file when it is missing or a directory, and naming the
    file and the 1-based line when a line does not decode with `encoding`. A UTF-8
    byte-order mark at the start is dropped; "\\r\\n" line ends are accepted.
    `encoding` is any ASCII-compatible codec Python knows (lines are split on b"\\n"),
    e.g. "latin-1" for legacy SentEval files.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError("file not found", path=path)
    if os.path.isdir(path):
        raise InputError("expected a file, found a directory", path=path)
    name = "UTF-8" if codecs.lookup(encoding).name == "utf-8" else encoding
    lines = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                text = raw.decode(encoding)
            except UnicodeDecodeError as e:
                raise InputError(
                    f"not valid {name} (byte {e.start}: {raw[e.start:e.start + 1]!r})",
                    path=path, line=number) from None
            if number == 1 and text.startswith("\ufeff"):
                text = text[1:]
            if strip_newline:
                text = text.rstrip("\r\n")
            lines.append(text)
    return lines


def read_json_lines(path, required=()):
    """Yields (line number, object) of a JSON-lines file (blank lines skipped), each object
    with the `required` string fields; InputError naming the file and line otherwise."""
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise InputError(f"not a JSON object ({e})", path=path, line=number) from None
        if not isinstance(obj, dict):
            raise InputError("not a JSON object", path=path, line=number)
        for field in required:
            if not isinstance(obj.get(field), str):
                raise InputError(f"field {field!r} missing or not a string", path=path,
                                 line=number)
        yield number, obj
