"""Reading text files line by line with errors that name the file and line."""

import codecs
import contextlib
import gzip
import json
import os
import zlib

from absl import logging

from tfsent.errors import InputError


def data_lines(path, is_header=None, lines=None, first_number=1):
    """Yields (1-based line number, line) for each non-blank line of the file `path` (or
    of `lines`, numbered from `first_number`); a first non-blank line for which
    `is_header(line)` holds is skipped, and logged."""
    lines = read_lines(path) if lines is None else lines
    first = True
    for number, line in enumerate(lines, start=first_number):
        if not line.strip():
            continue
        first, is_first = False, first
        if is_first and is_header is not None and is_header(line):
            logging.info("%s line %d is a header row (%s): skipped", path, number,
                         line.strip())
            continue
        yield number, line


def tab_rows(path, names, lines=None, first_number=1, headers=()):
    """Yields (1-based line number, columns) for each non-blank line of a tab-separated
    file whose rows hold exactly the columns `names`; a row with another count raises
    InputError naming the file, the line and the columns expected. `lines` (default: the
    file's, `read_lines`) numbered from `first_number` (2 after a header). A first
    non-blank row that is one of `headers` (`header_row`) is skipped."""
    for number, line in data_lines(path, lambda line: header_row(line, headers), lines,
                                   first_number):
        cols = line.split("\t")
        if len(cols) != len(names):
            raise InputError(f"expected {len(names)} tab-separated columns "
                             f"({', '.join(names)}), found {len(cols)}", path=path,
                             line=number)
        yield number, cols


def plain_name(path):
    """`path` lower-cased without a final `.gz` (read_lines reads gzip files as their
    text): what decides which reader a file goes to."""
    name = os.fspath(path).lower()
    return name[:-3] if name.endswith(".gz") else name


def is_jsonl(path):
    """True when `path` names a JSON-lines file (ends in .jsonl or .jsonl.gz, any case)."""
    return plain_name(path).endswith(".jsonl")


GZIP_MAGIC = b"\x1f\x8b"


@contextlib.contextmanager
def open_bytes(path):
    """The file `path` open for reading bytes; a gzip file (magic bytes) decompressed as it
    is read. A broken gzip file is an InputError naming it."""
    with open(path, "rb") as f:
        zipped = f.read(2) == GZIP_MAGIC
    f = gzip.open(path, "rb") if zipped else open(path, "rb")
    try:
        yield f
    except (OSError, EOFError, zlib.error) as e:
        if not zipped:
            raise
        raise InputError(f"not a readable gzip file ({type(e).__name__}: {e})",
                         path=path) from None
    finally:
        f.close()


def read_lines(path, strip_newline=True, encoding="utf-8"):
    """Returns the lines of a text file (UTF-8 by default) as a list of str.

    A gzip-compressed file (by its magic bytes, whatever its name) is read as the text it
    holds. Raises InputError naming the file when it is missing, a directory or a broken
    gzip file, and naming the file and the 1-based line when a line does not decode with
    `encoding`.
    A UTF-8 byte-order mark at the start is dropped (whatever `encoding`). Lines end in
    "\n" or "\r\n"; a file with no "\n" at all but "\r" in it (old Mac OS line ends) is
    split on "\r". `encoding` is any ASCII-compatible codec Python knows, e.g. "latin-1"
    for legacy SentEval files. With `strip_newline=False` each line keeps its line end.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError("file not found", path=path)
    if os.path.isdir(path):
        raise InputError("expected a file, found a directory", path=path)
    name = "UTF-8" if codecs.lookup(encoding).name == "utf-8" else encoding
    with open_bytes(path) as f:
        data = f.read()
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    end = b"\r" if b"\n" not in data and b"\r" in data else b"\n"
    raws = data.split(end)
    last_ended = raws[-1] == b""
    if last_ended:
        raws.pop()
    lines = []
    for number, raw in enumerate(raws, start=1):
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError as e:
            raise InputError(
                f"not valid {name} (byte {e.start}: {raw[e.start:e.start + 1]!r})",
                path=path, line=number) from None
        if strip_newline:
            text = text.rstrip("\r\n")
        elif number < len(raws) or last_ended:
            text += end.decode("ascii")
        lines.append(text)
    return lines


def check_json_text(obj, path, number):
    """InputError naming the file and line when a string field of a parsed JSON object holds
    a lone surrogate escape (e.g. "\\ud800"): JSON allows it, UTF-8 cannot encode it."""
    for key, value in obj.items():
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise InputError(f"field {key!r} holds an unpaired surrogate "
                                 f"{value[e.start:e.end]!r} (a broken \\uXXXX escape), "
                                 "which is not text", path=path, line=number) from None


def header_row(line, headers):
    """True when the tab-separated `line`, its columns stripped and lower-cased, is one of
    `headers` (tuples of column names): an optional header row."""
    return tuple(c.strip().lower() for c in line.split("\t")) in headers


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
        check_json_text(obj, path, number)
        for field in required:
            if not isinstance(obj.get(field), str):
                raise InputError(f"field {field!r} missing or not a string", path=path,
                                 line=number)
        yield number, obj
