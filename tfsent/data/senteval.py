"""Readers for evaluation data in SentEval's `data/downstream` layout.

`data_dir` is always the `downstream` folder itself (the one holding `STS/`, `SICK/`,
`MR/`, ...). Every reader returns plain Python data: lists of str, and NumPy arrays for
scores (float64) and labels (int64). Sentences are whitespace-split and re-joined with
single spaces, as SentEval does before handing them to an encoder.

Errors: an unknown task or split raises `tfsent.errors.ConfigError`. A missing file, a
malformed row (wrong column count, a score or label that is not a number or not a known
class) or undecodable bytes raise `tfsent.errors.InputError` naming the file and, for
rows, the 1-based line.

Encodings. STS, STS-B, SICK, SST and MRPC files must be UTF-8 (SentEval opens them as
UTF-8). MR, CR, SUBJ, MPQA and TREC come from older corpora that SentEval opens as
latin-1: these are read as UTF-8 when the whole file is valid UTF-8 (so a clean UTF-8
copy keeps its accents), and otherwise as latin-1, which is what SentEval does. SentEval's
own MR copy is pure ASCII but has `cat -v` escapes for the original's non-ASCII bytes
(e.g. "clichM-i" for "cliche" with an acute e); they are kept as they are, like SentEval,
so scores stay comparable with published ones. Its TREC train file has one stray byte
0xF0 (line 66), which latin-1 decodes to U+00F0.

Blank lines: in one-sentence-a-line files (MR, CR, SUBJ, MPQA) a blank line is kept as
an empty sentence, as SentEval does (CR has four, and its published size 3,775 counts
them). In tabular files (STS-B, SICK, SST, TREC, MRPC) blank lines are skipped. In STS
input files every line is a pair, aligned with the gold file line by line.
"""

import os

import numpy as np
from absl import logging

from tfsent.data.textio import read_lines
from tfsent.errors import ConfigError, InputError


# Subsets of each STS year, as SentEval evaluates them (STS13 has no SMT: licence).
STS_SUBSETS = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting",
              "question-question"),
}

SPLITS = ("train", "dev", "test")
SICK_COLUMNS = ("pair_ID", "sentence_A", "sentence_B", "relatedness_score",
                "entailment_judgment")
SICK_FILES = {"train": "SICK_train.txt", "dev": "SICK_trial.txt",
              "test": "SICK_test_annotated.txt"}
BINARY_FILES = {  # task -> (folder, file of label 1, file of label 0), as SentEval
    "MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
    "CR": ("CR", "custrev.pos", "custrev.neg"),
    "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"),
    "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg"),
}
TREC_FILES = {"train": "train_5500.label", "test": "TREC_10.label"}
TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
MRPC_FILES = {"train": "msr_paraphrase_train.txt", "test": "msr_paraphrase_test.txt"}


def normalize(text):
    """Whitespace-splits and re-joins a sentence with single spaces (SentEval)."""
    return " ".join(text.split())


def read_legacy_lines(path):
    """Lines of a file that is UTF-8 if it all decodes as UTF-8, else latin-1 (SentEval)."""
    try:
        return read_lines(path)
    except InputError as e:
        if e.line is None:  # missing file or a directory: not an encoding problem
            raise
    logging.info("%s is not valid UTF-8; reading it as latin-1 (as SentEval does)", path)
    return read_lines(path, encoding="latin-1")


def _check_split(split, allowed):
    if split not in allowed:
        raise ConfigError(f"unknown split {split!r}; expected one of {', '.join(allowed)}")


def _float(text, what, path, line):
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not np.isfinite(value):
        raise InputError(f"{what} {text!r} is not a number", path=path, line=line)
    return value


def _sentence(text, path, line):
    """`normalize(text)`, or InputError naming the file and line when it is empty."""
    sentence = normalize(text)
    if not sentence:
        raise InputError("empty sentence in a scored pair", path=path, line=line)
    return sentence


def _int_label(text, allowed, path, line):
    try:
        value = int(text.strip())
    except ValueError:
        value = None
    if value not in allowed:
        raise InputError(f"label {text!r} is not one of {sorted(allowed)}", path=path,
                         line=line)
    return value


def _columns(line, minimum, path, number, names, exact=False):
    cols = line.split("\t")
    if len(cols) < minimum or (exact and len(cols) != minimum):
        need = "" if exact else "at least "
        raise InputError(f"expected {need}{minimum} tab-separated columns ({names}), "
                         f"found {len(cols)}", path=path, line=number)
    return cols


# -- STS ----------------------------------------------------------------------------------

def read_sts_subset(input_path, gold_path):
    """One STS subset: `sent1<TAB>sent2` lines and a gold file with one score a line.

    Pairs whose gold line is empty are dropped (STS15/16 have some). Returns
    (sents1, sents2, scores) with scores a float64 array.
    """
    inputs = read_lines(input_path)
    golds = read_lines(gold_path)
    if len(inputs) != len(golds):
        raise InputError(f"{len(golds)} gold lines for {len(inputs)} input pairs in "
                         f"{input_path}", path=gold_path)
    s1, s2, scores = [], [], []
    for number, (pair, gold) in enumerate(zip(inputs, golds), start=1):
        cols = _columns(pair, 2, input_path, number, "sentence1, sentence2", exact=True)
        if not gold.strip():
            continue
        scores.append(_float(gold.strip(), "gold score", gold_path, number))
        s1.append(normalize(cols[0]))
        s2.append(normalize(cols[1]))
    return s1, s2, np.asarray(scores, dtype=np.float64)


def read_sts_year(data_dir, task):
    """STS12..STS16 (`STS/<task>-en-test/`): dict subset -> (sents1, sents2, scores).

    Subsets and their order are SentEval's (see `STS_SUBSETS`).
    """
    if task not in STS_SUBSETS:
        raise ConfigError(f"unknown STS year {task!r}; expected one of "
                          f"{', '.join(STS_SUBSETS)}")
    folder = os.path.join(os.fspath(data_dir), "STS", f"{task}-en-test")
    if not os.path.isdir(folder):
        raise InputError("STS folder not found", path=folder)
    out = {}
    for name in STS_SUBSETS[task]:
        out[name] = read_sts_subset(os.path.join(folder, f"STS.input.{name}.txt"),
                                    os.path.join(folder, f"STS.gs.{name}.txt"))
    logging.info("read %s: %d pairs in %d subsets", task,
             sum(len(v[2]) for v in out.values()), len(out))
    return out


def read_stsbenchmark(data_dir, split="test"):
    """STS Benchmark `STS/STSBenchmark/sts-<split>.csv` -> (sents1, sents2, scores).

    Tab-separated: genre, file, year, id, score, sentence1, sentence2; columns after the
    seventh (present in some copies) are ignored. `split` is train, dev or test.
    """
    _check_split(split, SPLITS)
    path = os.path.join(os.fspath(data_dir), "STS", "STSBenchmark", f"sts-{split}.csv")
    return read_stsbenchmark_file(path, split)


def read_stsbenchmark_file(path, split="file"):
    """One STS Benchmark csv (the layout of `read_stsbenchmark`) -> (sents1, sents2,
    scores); a bad row raises InputError naming the file and line."""
    s1, s2, scores = [], [], []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        cols = _columns(line, 7, path, number,
                        "genre, file, year, id, score, sentence1, sentence2")
        scores.append(_float(cols[4], "score", path, number))
        s1.append(_sentence(cols[5], path, number))
        s2.append(_sentence(cols[6], path, number))
    logging.info("read %d STS-B %s pairs from %s", len(scores), split, path)
    return s1, s2, np.asarray(scores, dtype=np.float64)


def read_sick(data_dir, split="test", with_labels=False):
    """SICK `SICK/SICK_<file>.txt` -> (sents1, sents2, relatedness scores).

    `split` is train, dev (the `trial` file) or test (`test_annotated`). The first line
    is a header (pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment)
    and is skipped. With `with_labels=True` a fourth item, the list of entailment
    judgments (str), is returned too.
    """
    _check_split(split, SPLITS)
    path = os.path.join(os.fspath(data_dir), "SICK", SICK_FILES[split])
    return read_sick_file(path, with_labels, split)


def read_sick_file(path, with_labels=False, split="file"):
    """One SICK file (the layout of `read_sick`) -> (sents1, sents2, scores[, labels]);
    a bad row raises InputError naming the file and line."""
    need = 5 if with_labels else 4
    s1, s2, scores, labels = [], [], [], []
    for number, line in enumerate(read_lines(path), start=1):
        if number == 1 or not line.strip():
            continue
        cols = _columns(line, need, path, number, ", ".join(SICK_COLUMNS[:need]))
        scores.append(_float(cols[3], "relatedness score", path, number))
        s1.append(_sentence(cols[1], path, number))
        s2.append(_sentence(cols[2], path, number))
        if with_labels:
            labels.append(cols[4].strip())
    logging.info("read %d SICK %s pairs from %s", len(scores), split, path)
    out = (s1, s2, np.asarray(scores, dtype=np.float64))
    return out + (labels,) if with_labels else out


# -- transfer tasks -----------------------------------------------------------------------

def read_binary(data_dir, task):
    """MR, CR, SUBJ or MPQA -> (sentences, labels), one sentence a line in two files.

    Label 1 is the first file of `BINARY_FILES[task]` (pos; `subj.objective` for SUBJ),
    label 0 the second; sentences of label 1 come first. Blank lines are kept as ""
    (SentEval keeps them). UTF-8, or latin-1 when a file is not valid UTF-8.
    """
    if task not in BINARY_FILES:
        raise ConfigError(f"unknown binary task {task!r}; expected one of "
                          f"{', '.join(BINARY_FILES)}")
    folder, first, second = BINARY_FILES[task]
    sentences, labels = [], []
    for name, label in ((first, 1), (second, 0)):
        lines = read_legacy_lines(os.path.join(os.fspath(data_dir), folder, name))
        sentences += [normalize(line) for line in lines]
        labels += [label] * len(lines)
    logging.info("read %d %s sentences", len(sentences), task)
    return sentences, np.asarray(labels, dtype=np.int64)


def read_sst2(data_dir, split="test"):
    """SST-2 `SST/binary/sentiment-<split>`: `sentence<TAB>label` -> (sentences, labels)."""
    _check_split(split, SPLITS)
    path = os.path.join(os.fspath(data_dir), "SST", "binary", f"sentiment-{split}")
    sentences, labels = [], []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        cols = _columns(line, 2, path, number, "sentence, label", exact=True)
        labels.append(_int_label(cols[1], {0, 1}, path, number))
        sentences.append(normalize(cols[0]))
    logging.info("read %d SST-2 %s sentences", len(sentences), split)
    return sentences, np.asarray(labels, dtype=np.int64)


def read_trec(data_dir, split="test"):
    """TREC question types: `COARSE:fine words ...` lines -> (sentences, labels).

    `split` is train (`train_5500.label`) or test (`TREC_10.label`). Labels index
    `TREC_CLASSES` (ABBR, DESC, ENTY, HUM, LOC, NUM); the fine label is dropped.
    UTF-8, or latin-1 when the file is not valid UTF-8.
    """
    _check_split(split, tuple(TREC_FILES))
    path = os.path.join(os.fspath(data_dir), "TREC", TREC_FILES[split])
    sentences, labels = [], []
    for number, line in enumerate(read_legacy_lines(path), start=1):
        if not line.strip():
            continue
        coarse, sep, rest = line.strip().partition(":")
        parts = rest.split(None, 1)
        if not sep or coarse not in TREC_CLASSES or len(parts) != 2:
            raise InputError(f"expected 'COARSE:fine question' with COARSE one of "
                             f"{', '.join(TREC_CLASSES)}, found {line[:40]!r}",
                             path=path, line=number)
        labels.append(TREC_CLASSES.index(coarse))
        sentences.append(normalize(parts[1]))
    logging.info("read %d TREC %s questions", len(sentences), split)
    return sentences, np.asarray(labels, dtype=np.int64)


def read_mrpc(data_dir, split="test"):
    """MRPC `MRPC/msr_paraphrase_<split>.txt` -> (sents1, sents2, labels).

    `split` is train or test. The first line is a header (Quality, #1 ID, #2 ID,
    #1 String, #2 String) and is skipped; label 1 means paraphrase.
    """
    _check_split(split, tuple(MRPC_FILES))
    path = os.path.join(os.fspath(data_dir), "MRPC", MRPC_FILES[split])
    s1, s2, labels = [], [], []
    for number, line in enumerate(read_lines(path), start=1):
        if number == 1 or not line.strip():
            continue
        cols = _columns(line, 5, path, number,
                        "Quality, #1 ID, #2 ID, #1 String, #2 String")
        labels.append(_int_label(cols[0], {0, 1}, path, number))
        s1.append(normalize(cols[3]))
        s2.append(normalize(cols[4]))
    logging.info("read %d MRPC %s pairs", len(labels), split)
    return s1, s2, np.asarray(labels, dtype=np.int64)
