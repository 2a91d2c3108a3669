"""Readers for SentEval's `data/downstream` layout (STS12-16, STS-B, SICK, transfer tasks).

Every reader returns plain Python data; sentences are whitespace-split and re-joined as
SentEval does. Files are read with `read_lines` (UTF-8; errors name the file and line),
except where SentEval's copies are known not to be UTF-8 (see `_read_text`).
"""

import os

import numpy as np

from tfsent.data.textio import read_lines
from tfsent.errors import InputError

STS_SUBSETS = {
    "STS12": ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"],
    "STS13": ["FNWN", "headlines", "OnWN"],  # the SMT subset's text is not distributed
    "STS14": ["deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"],
    "STS15": ["answers-forums", "answers-students", "belief", "headlines", "images"],
    "STS16": ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"],
}


def _norm(text):
    return " ".join(text.split())


def _read_text(path):
    """Lines of a text file: UTF-8, falling back to Latin-1 for SentEval's MR/CR/SUBJ/MPQA
    copies, which contain a few Latin-1 bytes (SentEval reads them as latin-1 too)."""
    try:
        return read_lines(path)
    except InputError as e:
        if "UTF-8" not in str(e):
            raise
        with open(path, encoding="latin-1") as f:
            return [line.rstrip("\r\n") for line in f]


def read_sts_year(data_dir, task):
    """STS12..STS16 -> {subset: (sents1, sents2, scores)}; pairs with empty gold dropped."""
    if task not in STS_SUBSETS:
        raise InputError(f"unknown STS task {task!r}")
    folder = os.path.join(data_dir, "STS", f"{task}-en-test")
    out = {}
    for subset in STS_SUBSETS[task]:
        inp = os.path.join(folder, f"STS.input.{subset}.txt")
        gs = os.path.join(folder, f"STS.gs.{subset}.txt")
        pairs, gold = read_lines(inp), read_lines(gs)
        if len(pairs) != len(gold):
            raise InputError(f"{len(pairs)} input lines but {len(gold)} gold lines in {gs}",
                             path=inp)
        s1, s2, scores = [], [], []
        for number, (pair, score) in enumerate(zip(pairs, gold), start=1):
            if not score.strip():
                continue  # SentEval drops pairs without a gold score
            cols = pair.split("\t")
            if len(cols) < 2:
                raise InputError("expected two tab-separated sentences", path=inp, line=number)
            try:
                value = float(score)
            except ValueError:
                raise InputError(f"gold score {score!r} is not a number", path=gs,
                                 line=number) from None
            s1.append(_norm(cols[0]))
            s2.append(_norm(cols[1]))
            scores.append(value)
        out[subset] = (s1, s2, np.array(scores, np.float64))
    return out


def read_stsbenchmark(data_dir, split="test"):
    """STS-B sts-{train,dev,test}.csv -> (sents1, sents2, scores)."""
    path = os.path.join(data_dir, "STS", "STSBenchmark", f"sts-{split}.csv")
    s1, s2, scores = [], [], []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 7:
            raise InputError(f"expected 7 tab-separated columns, found {len(cols)}", path=path,
                             line=number)
        try:
            scores.append(float(cols[4]))
        except ValueError:
            raise InputError(f"score {cols[4]!r} is not a number", path=path,
                             line=number) from None
        s1.append(_norm(cols[5]))
        s2.append(_norm(cols[6]))
    return s1, s2, np.array(scores, np.float64)


_SICK_FILES = {"train": "SICK_train.txt", "dev": "SICK_trial.txt",
               "test": "SICK_test_annotated.txt"}


def read_sick(data_dir, split="test", with_labels=False):
    """SICK relatedness -> (sents1, sents2, scores[, entailment labels]); trial = dev."""
    path = os.path.join(data_dir, "SICK", _SICK_FILES[split])
    s1, s2, scores, labels = [], [], [], []
    for number, line in enumerate(read_lines(path), start=1):
        if number == 1 or not line.strip():
            continue  # header
        cols = line.split("\t")
        if len(cols) < 5:
            raise InputError(f"expected 5 tab-separated columns, found {len(cols)}", path=path,
                             line=number)
        try:
            scores.append(float(cols[3]))
        except ValueError:
            raise InputError(f"relatedness {cols[3]!r} is not a number", path=path,
                             line=number) from None
        s1.append(_norm(cols[1]))
        s2.append(_norm(cols[2]))
        labels.append(cols[4].strip())
    out = (s1, s2, np.array(scores, np.float64))
    return out + (labels,) if with_labels else out


def read_binary_task(data_dir, task):
    """MR, CR, SUBJ, MPQA -> (sentences, labels 0/1)."""
    files = {"MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
             "CR": ("CR", "custrev.pos", "custrev.neg"),
             "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"),
             "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg")}
    folder, pos, neg = files[task]
    sentences, labels = [], []
    for name, label in ((pos, 1), (neg, 0)):
        for line in _read_text(os.path.join(data_dir, folder, name)):
            if line.strip():
                sentences.append(_norm(line))
                labels.append(label)
    return sentences, np.array(labels, np.int64)


def read_sst2(data_dir):
    """SST/binary/sentiment-{train,dev,test} -> {split: (sentences, labels)}."""
    out = {}
    for split in ("train", "dev", "test"):
        path = os.path.join(data_dir, "SST", "binary", f"sentiment-{split}")
        sentences, labels = [], []
        for number, line in enumerate(read_lines(path), start=1):
            if not line.strip():
                continue
            text, _, label = line.rpartition("\t")
            if label.strip() not in ("0", "1"):
                raise InputError(f"label {label!r} is not 0 or 1", path=path, line=number)
            sentences.append(_norm(text))
            labels.append(int(label))
        out[split] = (sentences, np.array(labels, np.int64))
    return out


TREC_CLASSES = ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]


def read_trec(data_dir):
    """TREC train_5500.label / TREC_10.label -> {split: (questions, coarse labels)}."""
    out = {}
    for split, name in (("train", "train_5500.label"), ("test", "TREC_10.label")):
        path = os.path.join(data_dir, "TREC", name)
        sentences, labels = [], []
        for number, line in enumerate(_read_text(path), start=1):
            if not line.strip():
                continue
            tag, _, text = line.partition(" ")
            coarse = tag.split(":")[0]
            if coarse not in TREC_CLASSES:
                raise InputError(f"unknown TREC class {coarse!r}", path=path, line=number)
            sentences.append(_norm(text))
            labels.append(TREC_CLASSES.index(coarse))
        out[split] = (sentences, np.array(labels, np.int64))
    return out


def read_mrpc(data_dir):
    """MRPC msr_paraphrase_{train,test}.txt -> {split: (sents1, sents2, labels)}."""
    out = {}
    for split in ("train", "test"):
        path = os.path.join(data_dir, "MRPC", f"msr_paraphrase_{split}.txt")
        s1, s2, labels = [], [], []
        for number, line in enumerate(_read_text(path), start=1):
            if number == 1 or not line.strip():
                continue
            cols = line.split("\t")
            if len(cols) < 5 or cols[0].strip() not in ("0", "1"):
                raise InputError("expected Quality, #1 ID, #2 ID, #1 String, #2 String",
                                 path=path, line=number)
            labels.append(int(cols[0]))
            s1.append(_norm(cols[3]))
            s2.append(_norm(cols[4]))
        out[split] = (s1, s2, np.array(labels, np.int64))
    return out
