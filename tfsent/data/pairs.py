"""Retrieval training rows: (anchor, positive, negative_1 .. negative_N), N >= 0.

Sources (`read_training_pairs`):

    beir:DIR[:SPLIT]   a BEIR folder's (query, relevant document) pairs, SPLIT default
                       train (`tfsent.data.beir.read_training_pairs`)
    FILE.tsv           tab-separated anchor, positive, then 0..N negatives, the same count on
                       every row; an optional first row that is exactly
                       `anchor<TAB>positive[<TAB>negative_1 ...]` is a header
                       (`tfsent.mine --output_format=n-tuple` writes such rows)
    FILE.jsonl         one object a line: "anchor", "positive", optional "negative_1" ..
                       "negative_N" or one "negative" (sentence-transformers' column
                       names), the same N on every line
    demo / demo_nli, a SentEval SNLI folder, an NLI .jsonl (sentence1, sentence2,
    gold_label), tfds:snli   NLI as (premise, entailment hypothesis) pairs, with the
                       contradiction as a negative column when hard negatives are asked
                       for (SimCSE's triplets, `tfsent.data.readers.read_nli_triplets`)

Every row's sides are whitespace-normalised and non-empty; a bad row raises InputError
naming the file and line.
"""

import json
import os

from absl import logging

from tfsent.data import beir, readers, sources
from tfsent.data.textio import (is_jsonl, open_bytes, plain_name, read_json_lines,
                                read_lines)
from tfsent.errors import InputError


column_names = readers.ntuple_column_names  # anchor, positive, negative_1 ..


def _describe(width):
    return "anchor, positive" + (f" and {width - 2} negative(s)" if width > 2 else "")


def read_pairs_tsv(path):
    """The rows of a pairs .tsv (see the module doc)."""
    rows, width = [], None
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        raw = line.split("\t")
        if not rows and width is None and [c.strip() for c in raw] == column_names(len(raw)) \
                and len(raw) >= 2:
            width = len(raw)  # the header row
            continue
        cols = [" ".join(c.split()) for c in raw]
        if len(cols) < 2:
            raise InputError("expected tab-separated anchor, positive[, negatives] columns, "
                             "found 1 column", path=path, line=number)
        if width is None:
            width = len(cols)
        if len(cols) != width:
            raise InputError(f"expected {width} tab-separated columns ({_describe(width)}, "
                             f"as in the first row), found {len(cols)}", path=path,
                             line=number)
        empty = [name for name, c in zip(column_names(width), cols) if not c]
        if empty:
            raise InputError(f"empty {', '.join(empty)}", path=path, line=number)
        rows.append(tuple(cols))
    return _finish(rows, path)


def read_pairs_jsonl(path):
    """The rows of a pairs .jsonl (see the module doc)."""
    rows, width = [], None
    for number, obj in read_json_lines(path, ("anchor", "positive")):
        if "negatives" in obj:
            raise InputError("a 'negatives' list is not read: give each negative its own "
                             "field, negative_1..negative_N (or one 'negative')", path=path,
                             line=number)
        if "negative" in obj:  # sentence-transformers' (anchor, positive, negative) triplets
            if any(key.startswith("negative_") for key in obj):
                raise InputError("both 'negative' and negative_N fields: use one naming",
                                 path=path, line=number)
            obj = dict(obj, negative_1=obj.pop("negative"))
        n_negatives = sum(1 for key in obj if key.startswith("negative_"))
        names = column_names(n_negatives + 2)
        if width is None:
            width = len(names)
        if len(names) != width:
            raise InputError(f"{len(names) - 2} negatives, but the first row has "
                             f"{width - 2} (every row needs the same count)", path=path,
                             line=number)
        cols = []
        for key in names:
            if not isinstance(obj.get(key), str):
                raise InputError(f"field {key!r} missing or not a string (negatives are "
                                 f"negative_1..negative_N)", path=path, line=number)
            cols.append(" ".join(obj[key].split()))
        empty = [name for name, c in zip(names, cols) if not c]
        if empty:
            raise InputError(f"empty {', '.join(empty)}", path=path, line=number)
        rows.append(tuple(cols))
    return _finish(rows, path)


def _finish(rows, path):
    if not rows:
        raise InputError("no (anchor, positive) rows", path=path)
    logging.info("read %d (%s) rows from %s", len(rows), _describe(len(rows[0])), path)
    return rows


def read_nli_as_pairs(source, split="train", hard_negatives=True):
    """NLI data as retrieval rows: (premise, entailment, contradiction) triplets (SimCSE's
    construction, `readers.read_nli_triplets`) with `hard_negatives`, else
    (premise, entailment hypothesis) pairs."""
    if hard_negatives:
        return readers.read_nli_triplets("demo" if source == "demo_nli" else source, split)
    if source in sources.DEMO_NAMES:
        return [(p, e) for p, e, _ in readers.read_triplets_tsv(readers.DEMO_TRIPLETS)]
    pairs = [(p, h) for p, h, y in readers.read_nli_pairs(source, split)
             if y == "entailment"]
    logging.info("%d (premise, entailment) pairs from %s", len(pairs), source)
    return pairs


def read_training_pairs(source, split="train", hard_negatives=True):
    """Retrieval training rows (anchor, positive, *negatives) from a source named as in the
    module doc. `split` is the NLI split of an SNLI folder / tfds source (a BEIR source
    names its own, default train). `hard_negatives=False` drops the negative columns (in-
    batch negatives only)."""
    if sources.is_beir(source):
        directory, beir_split = sources.parse_beir(source, default_split="train")
        rows = beir.read_training_pairs(directory, beir_split)
    elif is_jsonl(source) and not os.path.isdir(source):
        if not _is_pairs_jsonl(source):
            return read_nli_as_pairs(source, split, hard_negatives)
        rows = read_pairs_jsonl(source)
    elif (plain_name(source).endswith((".tsv", ".txt")) and not os.path.isdir(source)) or (
            os.path.isfile(source) and sources.parse_source(source).scheme == "path"):
        rows = read_pairs_tsv(source)
    else:
        return read_nli_as_pairs(source, split, hard_negatives)
    if not hard_negatives and len(rows[0]) > 2:
        logging.info("hard_negatives is off: the %d negative column(s) of %s are not used",
                     len(rows[0]) - 2, source)
        rows = [row[:2] for row in rows]
    return rows


def _is_pairs_jsonl(path):
    """True unless the first non-blank line of a .jsonl is an NLI row (sentence1, no
    anchor): a pairs file, or a broken file that `read_pairs_jsonl` will name."""
    if not os.path.isfile(path):
        return True  # read_pairs_jsonl names the missing file
    with open_bytes(path) as f:
        for raw in f:
            if raw.strip():
                try:
                    obj = json.loads(raw.decode("utf-8-sig"))
                except ValueError:
                    return True
                return not (isinstance(obj, dict) and "sentence1" in obj
                            and "anchor" not in obj)
    return True
