"""Helpers for the evaluation tests: a deterministic fake encoder and a tiny SentEval tree.

Imported by name (pytest puts this folder on sys.path); not a conftest, so it does not
shadow tests/conftest.py.
"""

import os
import zlib

import numpy as np

SHARED_DATA = os.environ.get(
    "TFSENT_SHARED_DATA",
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data"))


class HashEncoder:
    """Hashing bag-of-words: each word adds a fixed pseudo-random vector. Records calls."""

    def __init__(self, dim=32):
        self.dim = dim
        self.calls = []

    def vector(self, word):
        rng = np.random.default_rng(zlib.crc32(word.encode("utf-8")))
        return rng.normal(size=self.dim)

    def __call__(self, sentences):
        self.calls.append(list(sentences))
        out = np.zeros((len(sentences), self.dim))
        for i, s in enumerate(sentences):
            for w in s.split():
                out[i] += self.vector(w)
        return out.astype(np.float32)


def write(root, rel, text, encoding="utf-8"):
    """Writes `text` (str, or bytes as they are) to root/rel, creating folders."""
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = text if isinstance(text, bytes) else text.encode(encoding)
    with open(path, "wb") as f:
        f.write(data)
    return path


FILLER = ("the a movie film plot actor story scene music camera day night "
          "long short old new first last").split()


def _sentence(rng, cue_words):
    words = list(rng.choice(FILLER, size=rng.integers(3, 7)))
    words.insert(int(rng.integers(0, len(words) + 1)), str(rng.choice(cue_words)))
    return " ".join(words)


def labelled_sentences(n, seed, classes=(("good", "great", "fine"), ("bad", "awful", "poor"))):
    """n sentences per class; class c contains one cue word of classes[c]."""
    rng = np.random.default_rng(seed)
    out = []
    for label, cues in enumerate(classes):
        out += [(_sentence(rng, cues), label) for _ in range(n)]
    return out


STS12_SUBSETS = ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews")


def sts_pairs(n, seed):
    """n (sent1, sent2, score) with score = 5 * word overlap, so a BoW model correlates."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a = list(rng.choice(FILLER, size=6, replace=False))
        keep = int(rng.integers(0, 6))  # never identical (tied cosines rank arbitrarily)
        others = [w for w in FILLER if w not in a]
        b = a[:keep] + list(rng.choice(others, size=6 - keep))
        out.append((" ".join(a), " ".join(b), round(5.0 * keep / 6 + rng.normal(0, .3), 3)))
    return out


def build_tree(root):
    """A tiny SentEval `downstream` tree with every task; returns its contents."""
    root = str(root)
    info = {"STS12": {}}
    for i, name in enumerate(STS12_SUBSETS):
        pairs = sts_pairs(12 + 3 * i, seed=i)
        gold = [str(p[2]) for p in pairs]
        if name == "MSRvid":
            gold[2] = ""  # empty gold: pair dropped
        write(root, f"STS/STS12-en-test/STS.input.{name}.txt",
              "".join(f"{a}\t{b}\n" for a, b, _ in pairs))
        write(root, f"STS/STS12-en-test/STS.gs.{name}.txt", "".join(g + "\n" for g in gold))
        info["STS12"][name] = [(a, b, float(g)) for (a, b, _), g in zip(pairs, gold) if g]
    for split, seed in (("train", 10), ("dev", 11), ("test", 12)):
        pairs = sts_pairs(20, seed)
        write(root, f"STS/STSBenchmark/sts-{split}.csv", "".join(
            f"main-captions\tMSRvid\t2012test\t{i:04d}\t{s}\t{a}\t{b}\n"
            for i, (a, b, s) in enumerate(pairs)))
        info[f"STSB-{split}"] = pairs
    for split, name, seed in (("train", "train", 20), ("dev", "trial", 21),
                              ("test", "test_annotated", 22)):
        pairs = sts_pairs(15, seed)
        write(root, f"SICK/SICK_{name}.txt",
              "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
              + "".join(f"{i}\t{a}\t{b}\t{s}\tNEUTRAL\n" for i, (a, b, s) in enumerate(pairs)))
        info[f"SICK-{split}"] = pairs
    for task, folder, first, second, seed in (
            ("MR", "MR", "rt-polarity.pos", "rt-polarity.neg", 30),
            ("CR", "CR", "custrev.pos", "custrev.neg", 31),
            ("SUBJ", "SUBJ", "subj.objective", "subj.subjective", 32),
            ("MPQA", "MPQA", "mpqa.pos", "mpqa.neg", 33)):
        data = labelled_sentences(25, seed)
        write(root, f"{folder}/{first}", "".join(s + "\n" for s, y in data if y == 0))
        write(root, f"{folder}/{second}", "".join(s + "\n" for s, y in data if y == 1))
    for split, seed in (("train", 40), ("dev", 41), ("test", 42)):
        data = labelled_sentences(15, seed)
        write(root, f"SST/binary/sentiment-{split}",
              "".join(f"{s}\t{1 - y}\n" for s, y in data))
    trec = (("what", "who"), ("where", "when"), ("how", "why"))
    coarse = ("DESC", "HUM", "LOC")
    for split, name, seed in (("train", "train_5500.label", 50),
                              ("test", "TREC_10.label", 51)):
        data = labelled_sentences(20 if split == "train" else 8, seed, trec)
        write(root, f"TREC/{name}", "".join(f"{coarse[y]}:other {s} ?\n" for s, y in data))
    for split, seed in (("train", 60), ("test", 61)):
        pairs = sts_pairs(40, seed)
        write(root, f"MRPC/msr_paraphrase_{split}.txt",
              "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n" + "".join(
                  f"{int(s > 2.5)}\t{i}\t{i + 1000}\t{a}\t{b}\n"
                  for i, (a, b, s) in enumerate(pairs)))
        info[f"MRPC-{split}"] = pairs
    return info
