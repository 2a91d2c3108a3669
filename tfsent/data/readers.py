"""Readers for training data: plain sentences, NLI triplets, scored pairs, the demo corpus.

Each reader returns plain Python lists and logs how many rows it read and skipped, so a
silently wrong dataset shows in the log. Malformed rows raise `InputError` naming the file
and line. Sources are named by a string (see `read_training_sentences`, `read_nli_triplets`).
"""

import json
import math
import os

from absl import logging

from tfsent.data import senteval as senteval_data
from tfsent.data.sources import DEMO_NAMES, is_tfds, parse_source
from tfsent.data.textio import (check_json_text, data_lines, header_row, is_jsonl, read_lines,
                                tab_rows)
from tfsent.errors import ConfigError, InputError

DEMO_DIR = os.path.join(os.path.dirname(__file__), "demo")
DEMO_SENTENCES = os.path.join(DEMO_DIR, "sentences.txt")
DEMO_TRIPLETS = os.path.join(DEMO_DIR, "nli_triplets.tsv")
DEMO_PAIRS = os.path.join(DEMO_DIR, "sts_pairs.tsv")

NLI_LABELS = ("entailment", "neutral", "contradiction")
# Optional header rows (compared stripped and lower-cased) of the tab-separated files below.
PAIR_HEADERS = (("sentence_a", "sentence_b"), ("sentence1", "sentence2"),
                ("sentence_1", "sentence_2"), ("anchor", "positive"), ("query", "positive"))
TRIPLET_HEADERS = (("premise", "entailment", "contradiction"), ("sent0", "sent1", "hard_neg"),
                   ("anchor", "positive", "negative"))


def read_sentences(path):
    """One sentence per line; blank lines are skipped (and counted in the log)."""
    lines = read_lines(path)
    sentences = [" ".join(line.split()) for line in lines]
    kept = [s for s in sentences if s]
    logging.info("read %d sentences from %s (%d blank lines skipped)", len(kept), path,
                 len(sentences) - len(kept))
    if not kept:
        raise InputError("no sentences (the file is empty or blank)", path=path)
    return kept


def read_scored_pairs(path):
    """`score<TAB>sentence1<TAB>sentence2` per line -> (sents1, sents2, scores); an optional
    first row `score<TAB>sentence1<TAB>sentence2` is a header."""
    s1, s2, scores = [], [], []
    for number, cols in tab_rows(path, ("score", "sentence1", "sentence2"),
                                 headers=(("score", "sentence1", "sentence2"),)):
        try:
            score = float(cols[0])
        except ValueError:
            raise InputError(f"score {cols[0]!r} is not a number", path=path,
                             line=number) from None
        if not math.isfinite(score):
            raise InputError(f"score {cols[0]!r} is not finite", path=path, line=number)
        a, b = " ".join(cols[1].split()), " ".join(cols[2].split())
        if not a or not b:
            raise InputError("empty sentence in a scored pair", path=path, line=number)
        s1.append(a)
        s2.append(b)
        scores.append(score)
    logging.info("read %d scored pairs from %s", len(scores), path)
    if not scores:
        raise InputError("no scored pairs", path=path)
    return s1, s2, scores


def read_tsv_rows(path, names, headers=()):
    """Rows of a tab-separated file with exactly len(names) non-empty columns, whitespace-
    normalised; blank lines skipped, and a first row that is one of `headers` (tuples of
    lower-case column names); a bad row raises InputError naming file and line."""
    rows = []
    for number, line in data_lines(path, lambda line: header_row(line, headers)):
        cols = [" ".join(c.split()) for c in line.split("\t")]
        _check_columns(cols, names, path, number)
        rows.append(tuple(cols))
    return rows


def _check_columns(cols, names, path, number, what=None):
    """InputError naming the file and line unless `cols` are len(names) non-empty columns."""
    if len(cols) != len(names):
        raise InputError(f"expected {len(names)} tab-separated columns "
                         f"({what or ', '.join(names)}), found {len(cols)}", path=path,
                         line=number)
    empty = [name for name, c in zip(names, cols) if not c]
    if empty:
        raise InputError(f"empty {', '.join(empty)} column", path=path, line=number)


def ntuple_column_names(width):
    """anchor, positive, negative_1 .. negative_{width - 2}: the columns of an n-tuple row
    (sentence-transformers' names)."""
    return ["anchor", "positive"] + [f"negative_{i}" for i in range(1, width - 1)]


def _ntuple_header(line):
    """True for a header row anchor, positive, negative_1..negative_N (N >= 1)."""
    cols = [c.strip().lower() for c in line.split("\t")]
    return len(cols) >= 3 and cols == ntuple_column_names(len(cols))


def read_triplets_tsv(path):
    """`premise<TAB>entailment<TAB>contradiction` per line -> list of 3-tuples; also
    n-tuples `anchor<TAB>positive<TAB>neg1<TAB>...<TAB>negN` (as `tfsent.mine
    --output_format=n-tuple` writes them): every row has the first row's width, N >= 1.
    An optional first row of column names (`TRIPLET_HEADERS`, or anchor, positive,
    negative_1..negative_N) is skipped."""
    rows = []
    for number, line in data_lines(
            path, lambda line: header_row(line, TRIPLET_HEADERS) or _ntuple_header(line)):
        cols = [" ".join(c.split()) for c in line.split("\t")]
        width = len(rows[0]) if rows else max(3, len(cols))
        if width == 3:
            names, what = ("premise", "entailment", "contradiction"), None
        else:
            names = ntuple_column_names(width)
            what = f"anchor, positive, {width - 2} negatives, as in the first row"
        _check_columns(cols, names, path, number, what)
        rows.append(tuple(cols))
    if rows and len(rows[0]) > 3:
        logging.info("read %d (anchor, positive, %d hard negatives) rows from %s", len(rows),
                     len(rows[0]) - 2, path)
    else:
        logging.info("read %d NLI triplets from %s", len(rows), path)
    return rows


def _log_empty_nli(empty, path):
    """Warns how many NLI rows with an empty premise or hypothesis were skipped."""
    if empty:
        logging.warning("%s: %d NLI row(s) with an empty premise or hypothesis skipped "
                        "(the first at line %d)", path, len(empty), empty[0])


def read_nli_pairs_senteval(directory, split):
    """SentEval's SNLI layout: s1.SPLIT, s2.SPLIT, labels.SPLIT -> list of (p, h, label)."""
    paths = [os.path.join(directory, f"{name}.{split}") for name in ("s1", "s2", "labels")]
    s1, s2, labels = (read_lines(p) for p in paths)
    if not len(s1) == len(s2) == len(labels):
        raise InputError(f"s1/s2/labels have different line counts ({len(s1)}, {len(s2)}, "
                         f"{len(labels)})", path=directory)
    rows, empty = [], []
    for number, (p, h, y) in enumerate(zip(s1, s2, labels), start=1):
        y = y.strip()
        if y not in NLI_LABELS:
            raise InputError(f"label {y!r} is not one of {NLI_LABELS}", path=paths[2],
                             line=number)
        p, h = " ".join(p.split()), " ".join(h.split())
        if not p or not h:
            empty.append(number)
            continue
        rows.append((p, h, y))
    _log_empty_nli(empty, os.path.join(directory, f"{{s1,s2}}.{split}"))
    logging.info("read %d NLI pairs from %s (split %s)", len(rows), directory, split)
    return rows


def read_nli_pairs_jsonl(path):
    """SNLI / MultiNLI jsonl (sentence1, sentence2, gold_label); '-' labels are skipped."""
    rows, skipped, empty = [], 0, []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            p, h, y = obj["sentence1"], obj["sentence2"], obj["gold_label"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise InputError(f"not an NLI json row ({type(e).__name__}: {e})", path=path,
                             line=number) from None
        check_json_text(obj, path, number)
        if y is None or y == "-":  # no consensus label (SNLI's '-')
            skipped += 1
            continue
        if not isinstance(y, str) or y not in NLI_LABELS:
            raise InputError(f"gold_label {y!r} is none of {', '.join(NLI_LABELS)} or '-' "
                             "(no consensus: skipped)", path=path, line=number)
        if not isinstance(p, str) or not isinstance(h, str):
            raise InputError("sentence1 and sentence2 must be strings", path=path,
                             line=number)
        p, h = " ".join(p.split()), " ".join(h.split())
        if not p or not h:
            empty.append(number)
            continue
        rows.append((p, h, y))
    _log_empty_nli(empty, path)
    logging.info("read %d NLI pairs from %s (%d without gold label skipped)", len(rows), path,
                 skipped)
    return rows


TFDS_PIP_LINE = 'pip install "tfsent[tfds]"  (from a checkout: pip install -e ".[tfds]")'


def import_tfds(source):
    """The tensorflow_datasets module, or a ConfigError naming `source` (a `tfds:` training
    source) and the install line when the optional package is missing."""
    try:
        # Optional and heavy: only the `tfds:` sources need it (the `tfds` extra).
        import tensorflow_datasets
    except ImportError as e:
        raise ConfigError(
            f"train_data={source!r} reads TensorFlow Datasets, but tensorflow-datasets is not "
            f"installed (an optional dependency): {TFDS_PIP_LINE}, or pass a local file or "
            f"directory as --config.train_data") from e
    return tensorflow_datasets


def _tfds_name(source):
    """The name `tfds.load` takes for an NLI `tfds:NAME[:VERSION]` source."""
    parsed = parse_source(source)
    return parsed.location + (f":{parsed.option}" if parsed.option else "")


def read_nli_pairs_tfds(name, split="train"):
    """TFDS `snli` / `multi_nli` (needs network on first use) -> list of (p, h, label)."""
    tfds = import_tfds(f"tfds:{name}")
    ds = tfds.load(name, split=split)
    rows = []
    for ex in tfds.as_numpy(ds):
        label = int(ex["label"])
        if label < 0:
            continue
        rows.append((ex["premise"].decode("utf-8"), ex["hypothesis"].decode("utf-8"),
                     NLI_LABELS[label]))
    logging.info("read %d NLI pairs from TFDS %s/%s", len(rows), name, split)
    return rows


def triplets_from_pairs(rows):
    """NLI pairs -> SimCSE triplets (premise, entailment, contradiction).

    Every entailment hypothesis of a premise is paired with every contradiction hypothesis
    of the same premise (SimCSE's construction); premises lacking either are skipped.
    """
    by_premise = {}
    for p, h, y in rows:
        entry = by_premise.setdefault(p, {"entailment": [], "contradiction": []})
        if y in entry:
            entry[y].append(h)
    triplets = [(p, e, c) for p, d in by_premise.items()
                for e in d["entailment"] for c in d["contradiction"]]
    logging.info("built %d triplets from %d premises", len(triplets), len(by_premise))
    return triplets


def read_nli_triplets(source, split="train"):
    """NLI triplets from `demo`, a .tsv of triplets, a .jsonl, a SentEval SNLI directory
    (split `dev`/`test`/`train`), or `tfds:snli` / `tfds:multi_nli`."""
    if source == "demo":
        return read_triplets_tsv(DEMO_TRIPLETS)
    if is_tfds(source):
        return triplets_from_pairs(read_nli_pairs_tfds(_tfds_name(source), split))
    if os.path.isdir(source):
        return triplets_from_pairs(read_nli_pairs_senteval(source, split))
    if is_jsonl(source):
        return triplets_from_pairs(read_nli_pairs_jsonl(source))
    return read_triplets_tsv(source)


def read_training_sentences(source):
    """Unlabelled sentences from `demo`, a text file, `tfds:NAME[:FIELD]`, or NLI data
    (a SentEval SNLI directory: premises and hypotheses, deduplicated)."""
    if source == "demo":
        return read_sentences(DEMO_SENTENCES)
    if is_tfds(source):
        tfds = import_tfds(source)
        parsed = parse_source(source)
        name, field = parsed.location, parsed.option or "text"
        ds = tfds.load(name, split="train")
        out = [ex[field].decode("utf-8") for ex in tfds.as_numpy(ds)]
        logging.info("read %d sentences from TFDS %s (field %s)", len(out), name, field)
        return out
    if os.path.isdir(source):
        rows = []
        for split in ("train", "dev", "test"):
            if os.path.exists(os.path.join(source, f"s1.{split}")):
                rows += read_nli_pairs_senteval(source, split)
        seen = dict.fromkeys(s for p, h, _ in rows for s in (p, h))
        return list(seen)
    if is_jsonl(source):  # one sentence a line would be the JSON itself
        raise InputError("unlabelled sentences are read from a text file, one a line; a "
                         ".jsonl is not one (NLI rows: a SentEval SNLI folder or a pairs "
                         "method; BEIR: beir:DIR)", path=source)
    return read_sentences(source)


def read_dev_pairs(source, data_dir=None):
    """Dev pairs for model selection: `demo`, `stsb` (STS-B dev), `sickr` (SICK trial),
    or a scored-pair .tsv. Returns (sents1, sents2, scores); at least two different gold
    scores (Spearman ranks them), else InputError."""
    if source == "demo":
        s1, s2, scores = read_scored_pairs(DEMO_PAIRS)
    elif source in ("stsb", "sickr"):
        if not data_dir:
            raise InputError(f"dev set {source!r} needs eval_data_dir (SentEval layout)")
        read = (senteval_data.read_stsbenchmark if source == "stsb"
                else senteval_data.read_sick)
        s1, s2, scores = read(data_dir, "dev")
    else:
        s1, s2, scores = read_scored_pairs(source)
    distinct = {float(score) for score in scores}
    if len(distinct) < 2:
        described = (f"all scored {distinct.pop()}" if distinct else "none")
        raise InputError(f"a dev set needs at least two different gold scores (Spearman "
                         f"ranks them): {len(scores)} pair(s), {described}", path=source)
    return s1, s2, scores


def read_pair_file(path):
    """Two tab-separated columns per line (sentence_a, sentence_b) -> list of pairs."""
    pairs = read_tsv_rows(path, ("sentence_a", "sentence_b"), PAIR_HEADERS)
    logging.info("read %d sentence pairs from %s", len(pairs), path)
    return pairs


def read_positive_pairs(source, data_dir=None, threshold=4.0, split="train"):
    """Positive pairs for CLSR.

    `demo`: the demo triplets' (premise, entailment) pairs (not the demo scored pairs: they
    are the demo dev set, and training on its positives would make dev selection see its own
    training pairs); `stsb`: STS-B train pairs with score > threshold (needs `data_dir`);
    an NLI source (SentEval SNLI directory, .jsonl, `tfds:NAME`): entailment pairs;
    any other file: two tab-separated columns.
    """
    if source == "demo":
        pairs = [(p, e) for p, e, _ in read_triplets_tsv(DEMO_TRIPLETS)]
    elif source == "stsb":
        if not data_dir:
            raise InputError("train_data 'stsb' needs eval_data_dir (SentEval layout)")
        s1, s2, scores = senteval_data.read_stsbenchmark(data_dir, "train")
        pairs = [(a, b) for a, b, y in zip(s1, s2, scores) if y > threshold]
    elif is_tfds(source) or os.path.isdir(source) or is_jsonl(source):
        if is_tfds(source):
            rows = read_nli_pairs_tfds(_tfds_name(source), split)
        elif os.path.isdir(source):
            rows = read_nli_pairs_senteval(source, split)
        else:
            rows = read_nli_pairs_jsonl(source)
        pairs = [(p, h) for p, h, y in rows if y == "entailment"]
    else:
        pairs = read_pair_file(source)
    logging.info("%d positive pairs from %s", len(pairs), source)
    if not pairs:
        raise InputError("no positive pairs", path=source)
    return pairs


def read_nli_pairs(source, split="train"):
    """(premise, hypothesis, label) rows from `demo`/`demo_nli` (the demo triplets, each
    giving an entailment and a contradiction row), a SentEval SNLI directory, a .jsonl, or
    `tfds:snli` / `tfds:multi_nli`."""
    if source in DEMO_NAMES:
        rows = []
        for p, e, c in read_triplets_tsv(DEMO_TRIPLETS):
            rows += [(p, e, "entailment"), (p, c, "contradiction")]
        return rows
    if is_tfds(source):
        return read_nli_pairs_tfds(_tfds_name(source), split)
    if os.path.isdir(source):
        return read_nli_pairs_senteval(source, split)
    if is_jsonl(source):
        return read_nli_pairs_jsonl(source)
    raise InputError("NLI pairs need a SentEval SNLI directory, a .jsonl file, demo_nli or "
                     "tfds:NAME", path=source)


def read_scored_pair_tsv(path):
    """`sentence1<TAB>sentence2<TAB>score` per line -> list of (sentence1, sentence2,
    score); blank lines skipped, and an optional header row (sentence1, sentence2, score or
    label); a bad row raises InputError naming file and line."""
    rows = []
    for number, cols in tab_rows(path, ("sentence1", "sentence2", "score"),
                                 headers=(("sentence1", "sentence2", "score"),
                                          ("sentence1", "sentence2", "label"))):
        a, b = " ".join(cols[0].split()), " ".join(cols[1].split())
        if not a or not b:
            raise InputError("empty sentence in a scored pair", path=path, line=number)
        try:
            score = float(cols[2])
        except ValueError:
            score = float("nan")
        if not math.isfinite(score):
            raise InputError(f"score {cols[2].strip()!r} is not a number", path=path,
                             line=number)
        rows.append((a, b, score))
    logging.info("read %d scored pairs from %s", len(rows), path)
    return rows


def read_scored_training_pairs(source, data_dir=None, split="train"):
    """(sentence1, sentence2, score) rows for the scored_pairs kind.

    `stsb` / `sickr`: STS-B / SICK split `split` from `data_dir` (SentEval layout; SICK's
    dev is its trial file); a path to an STS-B csv (`sts-*.csv`) or a SICK file
    (`SICK_*.txt`) in their own layouts; any other file: `sentence1<TAB>sentence2<TAB>
    score`. The demo's scored pairs are the demo dev set, so `demo` is refused.
    """
    if source in DEMO_NAMES:
        raise ConfigError(f"train_data={source!r}: the demo's scored pairs are the demo dev "
                          "set, so they cannot also be training data; use stsb (with "
                          "eval_data_dir) or a sentence1<TAB>sentence2<TAB>score file")
    if source in ("stsb", "sickr"):
        if not data_dir:
            raise ConfigError(f"train_data {source!r} needs eval_data_dir (the SentEval "
                              "downstream folder holding STS/ and SICK/)")
        read = (senteval_data.read_stsbenchmark if source == "stsb"
                else senteval_data.read_sick)
        columns = read(data_dir, split)
    elif parse_source(source).scheme != "path" or os.path.isdir(source):
        raise ConfigError(f"train_data {source!r}: scored pairs come from stsb, sickr, an "
                          "STS-B csv, a SICK file or a sentence1<TAB>sentence2<TAB>score "
                          "file")
    else:
        name = os.path.basename(source)
        if name.startswith("sts-") and name.endswith(".csv"):
            columns = senteval_data.read_stsbenchmark_file(source)
        elif name.startswith("SICK_"):
            columns = senteval_data.read_sick_file(source)
        else:
            columns = None
            rows = read_scored_pair_tsv(source)
    if columns is not None:
        rows = [(a, b, float(y)) for a, b, y in zip(*columns)]
    if not rows:
        raise InputError("no scored pairs", path=source)
    return rows


def check_score_range(rows, low, high, where):
    """InputError naming `where` and the first row whose score is outside [low, high]:
    its place among the rows read (blank and header lines not counted) and its first
    sentence, to find it in the file."""
    for i, (first, _, score) in enumerate(rows):
        if not low <= score <= high:
            raise InputError(f"{where}: pair {i + 1} of the {len(rows)} read (sentence1 "
                             f"{first[:60]!r}) has score {score}, outside the declared "
                             f"range [{low}, {high}] (score_min / score_max)")
