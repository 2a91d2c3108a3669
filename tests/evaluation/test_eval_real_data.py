"""Readers and evaluators on the real SentEval data in ../shared/data (skipped if absent)."""

import os

import numpy as np
import pytest

from evalfixtures import SHARED_DATA, HashEncoder
from tfsent.evaluation import evaluate_sts
from tfsent.data import senteval as sd


def _data(*parts):
    path = os.path.join(SHARED_DATA, *parts)
    if not os.path.exists(path):
        pytest.skip(f"needs the SentEval data in ../shared/data ({path} not found)")
    return SHARED_DATA


def test_sts12_rows():
    root = _data("STS", "STS12-en-test")
    data = sd.read_sts_year(root, "STS12")
    assert {k: len(v[2]) for k, v in data.items()} == {
        "MSRpar": 750, "MSRvid": 750, "SMTeuroparl": 459, "surprise.OnWN": 750,
        "surprise.SMTnews": 399}
    assert sum(len(v[2]) for v in data.values()) == 3108
    for s1, s2, gold in data.values():
        assert len(s1) == len(s2) == len(gold) and gold.min() >= 0 and gold.max() <= 5


@pytest.mark.parametrize("split,n", [("train", 5749), ("dev", 1500), ("test", 1379)])
def test_stsbenchmark_rows(split, n):
    s1, s2, gold = sd.read_stsbenchmark(_data("STS", "STSBenchmark"), split)
    assert len(s1) == len(s2) == len(gold) == n
    assert gold.min() >= 0 and gold.max() <= 5 and all(s1) and all(s2)


@pytest.mark.parametrize("split,n", [("train", 4500), ("dev", 500), ("test", 4927)])
def test_sick_rows(split, n):
    s1, s2, gold = sd.read_sick(_data("SICK"), split)
    assert len(s1) == len(s2) == len(gold) == n and gold.min() >= 1 and gold.max() <= 5


def test_transfer_rows():
    root = _data("MR")
    sentences, labels = sd.read_binary(root, "MR")
    assert len(sentences) == 10662 and labels.sum() == 5331
    sentences, labels = sd.read_binary(_data("CR"), "CR")
    assert len(sentences) == 3775 and labels.sum() == 2407
    train, test = (sd.read_trec(_data("TREC"), s) for s in ("train", "test"))
    assert len(train[0]) == 5452 and len(test[0]) == 500
    assert np.bincount(train[1]).tolist() == [86, 1162, 1250, 1223, 835, 896]
    # the stray byte 0xF0 of line 66 (SentEval reads the file as latin-1)
    assert train[0][65] == ("Which city has the oldest relationship as a sister\u00f0city "
                            "with Los Angeles ?")
    for split, n in (("train", 4076), ("test", 1725)):
        s1, s2, labels = sd.read_mrpc(_data("MRPC"), split)
        assert len(s1) == len(s2) == len(labels) == n


def test_sts12_hash_encoder_runs_end_to_end():
    root = _data("STS", "STS12-en-test")
    res = evaluate_sts(HashEncoder(dim=64), root, ["STS12"])["STS12"]
    assert res["n"] == 3108 and set(res["subsets"]) == set(sd.STS_SUBSETS["STS12"])
    assert 0 < res["spearman"] < 100  # word overlap correlates with STS gold
