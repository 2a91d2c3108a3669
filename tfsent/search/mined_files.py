"""Mining from files to a file: the run of `python -m tfsent.mine`, and its rows on disk.

`mine_to_file` checks everything it can (options, inputs, the output path, an impossible
number of negatives, texts a .tsv cannot hold) before it loads the encoder, mines with
`tfsent.search.mining`, and writes the rows. `--output_format=triplet` (default): one row
`anchor<TAB>positive<TAB>negative` per negative, the file `tfsent.train
--method=simcse_sup --config.train_data=FILE` reads; `n-tuple`: one row
`anchor<TAB>positive<TAB>neg1..negN`, anchors with fewer than N negatives left out. An
output ending in `.jsonl` holds the same rows as JSON objects with the keys "anchor",
"positive", "negative_1".."negative_N" (the pairs-file format); a text holding a tab or a
line break can only go there.
"""

import gzip
import json
import os

from absl import logging

from tfsent import fsio
from tfsent.data.beir import check_folder, qrels_path
from tfsent.data.readers import (PAIR_HEADERS, ntuple_column_names, read_sentences,
                                 read_tsv_rows)
from tfsent.data.textio import is_jsonl
from tfsent.data.sources import parse_beir
from tfsent.errors import ConfigError, InputError
from tfsent.search.mining import (MiningProblem, check_available, check_options, log_report,
                                  mine_problem, prepare_beir)


def read_pairs(path):
    """`anchor<TAB>positive` per line -> list of (anchor, positive), after an optional header
    row (`readers.PAIR_HEADERS`); a malformed row raises InputError naming the file and
    line."""
    pairs = read_tsv_rows(path, ("anchor", "positive"), PAIR_HEADERS)
    if not pairs:
        raise InputError("no (anchor, positive) pairs (the file is empty or blank)", path=path)
    logging.info("read %d (anchor, positive) pairs from %s", len(pairs), path)
    return pairs


def format_rows(pairs, negatives, output_format, num_negatives):
    """Output rows (tuples of strings): one (anchor, positive, negative) per negative, or
    for "n-tuple" one (anchor, positive, neg1..negN) per pair with all N negatives."""
    rows = []
    for (anchor, positive), negs in zip(pairs, negatives):
        if output_format == "triplet":
            rows += [(anchor, positive, n) for n in negs]
        elif len(negs) == num_negatives:
            rows.append((anchor, positive, *negs))
    return rows


def row_object(row):
    """(anchor, positive, neg1..negN) -> the pairs-file JSON object: "anchor", "positive",
    "negative_1".."negative_N" (sentence-transformers' column names)."""
    return dict(zip(ntuple_column_names(len(row)), row))


def write_rows(path, rows):
    """Writes rows to `path` atomically (a temporary file, fsynced, renamed): one JSON
    object a line (`row_object`) when `path` ends in .jsonl, else tab-separated;
    gzip-compressed when it ends in .gz (as the training readers read it)."""
    if is_jsonl(path):
        text = "".join(json.dumps(row_object(row), ensure_ascii=False) + "\n" for row in rows)
    else:
        text = "".join("\t".join(row) + "\n" for row in rows)
    data = text.encode("utf-8")
    if os.fspath(path).lower().endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    fsio.write_file_atomic(path, data)


def check_tsv_safe(texts, out, source):
    """A .tsv row cannot hold a tab or a line break: InputError naming the first such
    text (and `source`, the file it comes from) unless `out` is a .jsonl file. Run before
    the model loads, over every text a row could hold."""
    if is_jsonl(out):
        return
    bad = [t for t in texts if "\t" in t or "\n" in t or "\r" in t]
    if bad:
        raise InputError(f"a .tsv row cannot hold a tab or a line break, and {len(bad)} of "
                         f"the texts do (the first: {bad[0][:80]!r}); write JSON lines "
                         f"instead (--out=....jsonl)", path=source)


def resolve_prompts(encoder, query_prompt=None, document_prompt=None):
    """(query prompt, document prompt): each given one as it is ("" for none), each None
    the one `encoder` was saved with (an export's `prompts`; "" when it has none)."""
    stored = getattr(encoder, "prompts", None) or {}
    resolved = tuple(stored.get(key, "") if given is None else given for key, given in
                     (("query_prompt", query_prompt), ("document_prompt", document_prompt)))
    for key, given, value in zip(("query", "document"), (query_prompt, document_prompt),
                                 resolved):
        if given is None and value:
            logging.info("using the model's own %s prompt %r", key, value)
    return resolved


def mine_to_file(out, load_encoder, pairs=None, corpus=None, beir=None, overwrite=False,
                 output_format="triplet", num_negatives=3, range_min=0, range_max=None,
                 max_score=None, margin=None, relative_margin=None, query_prompt=None,
                 document_prompt=None, batch_size=64, query_chunk=256,
                 candidate_chunk=16384, verbose=1, load_rescorer=None):
    """Mines hard negatives from files and writes the rows to `out` (the run of `python -m
    tfsent.mine`; errors name its flags).

    Args:
        out: the new .tsv or .jsonl file (never one of the inputs; an existing file only
            with `overwrite`).
        load_encoder: `fn() -> encoder`, called once every check has passed.
        load_rescorer: None, or `fn() -> cross-encoder` (called after `load_encoder`):
            its scores rank and filter the candidates (`tfsent.search.mining`).
        pairs: a file of `anchor<TAB>positive` lines; or `beir`: a BEIR folder
            `DIR[:SPLIT]` (a leading "beir:" allowed; split train by default).
        corpus: candidate sentences, one per line (with `pairs`; default its positives).
        query_prompt, document_prompt: put before anchors / candidates and positives when
            embedding; None: the encoder's own (`resolve_prompts`).
        the others: as `tfsent.search.mining.mine_hard_negatives` and `format_rows`.
    Returns:
        the rows written.
    """
    if pairs and beir:
        raise ConfigError("--pairs and --beir both given; mine one source at a time")
    if not pairs and not beir:
        raise ConfigError("--pairs (a file of anchor<TAB>positive lines) or --beir (a BEIR "
                          "folder, DIR[:SPLIT]) is required")
    if beir and corpus:
        raise ConfigError("--corpus goes with --pairs; with --beir the candidates are the "
                          "documents of DIR/corpus.jsonl")
    if not out:
        raise ConfigError("--out is required (where to write the mined rows)")
    check_options(num_negatives, range_min, range_max, max_score, margin, relative_margin,
                  output_format, rescored=load_rescorer is not None)
    for name, value in (("query_chunk", query_chunk), ("candidate_chunk", candidate_chunk),
                        ("batch_size", batch_size)):
        if value < 1:
            raise ConfigError(f"--{name} must be >= 1, got {value}")
    out_dir = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(out_dir):
        raise InputError("the directory of --out does not exist", path=out_dir)
    prompts = (query_prompt or "", document_prompt or "")
    if beir:
        directory, split = parse_beir(beir, default_split="train", bare=True)
        check_folder(directory, split)
        fsio.check_new_file(out, "--out", overwrite=overwrite, input_dirs=[directory])
        rows, problem, source = prepare_beir(directory, split, *prompts)
        where, text_source = qrels_path(directory, split), directory
    else:
        fsio.check_new_file(out, "--out", overwrite=overwrite, inputs=[pairs, corpus])
        rows = read_pairs(pairs)
        source = f"--corpus={corpus}" if corpus else f"the positives of {pairs}"
        problem = MiningProblem(rows, read_sentences(corpus) if corpus else None, *prompts)
        where, text_source = pairs, corpus or pairs
    # Refuse an impossible num_negatives, or texts a .tsv cannot hold, before loading the
    # model.
    check_available(problem, num_negatives, range_min, source)
    check_tsv_safe(problem.texts, out, text_source)
    encoder = load_encoder()
    problem = problem.with_prompts(*resolve_prompts(encoder, query_prompt, document_prompt))
    negatives, report = mine_problem(
        encoder, problem, num_negatives, range_min, range_max, max_score, margin,
        relative_margin, batch_size, query_chunk, candidate_chunk, verbose=verbose,
        rescorer=None if load_rescorer is None else load_rescorer())
    log_report(report, len(rows), num_negatives,
               "Raise --range_max (the ranks searched) or loosen the filters to get more.")
    written = format_rows(rows, negatives, output_format, num_negatives)
    if output_format == "n-tuple" and report["short"]:
        logging.warning("n-tuple rows need %d negatives each: %d pairs left out",
                        num_negatives, report["short"])
    if not written:
        raise InputError("no pair got a negative that passes the filters; nothing written "
                         "(loosen --max_score/--margin/--relative_margin or raise "
                         "--range_max)", path=where)
    write_rows(out, written)
    return written
