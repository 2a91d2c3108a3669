"""tools/mining_experiment.py: the pairs and random-negative files behind the table in docs/training.md."""

import os

import pytest

from conftest import load_tool

TOOL = load_tool("mining_experiment")


def _snli(root, rows):
    os.makedirs(os.path.join(root, "SNLI"))
    for i, name in enumerate(("s1", "s2", "labels")):
        with open(os.path.join(root, "SNLI", f"{name}.dev"), "w", encoding="utf-8") as f:
            f.write("".join(row[i] + "\n" for row in rows))


def test_entailment_pairs_and_random_negatives(tmp_path):
    tool = TOOL
    _snli(str(tmp_path), [("a dog runs .", "an animal moves .", "entailment"),
                          ("a dog runs .", "a cat sleeps .", "contradiction"),
                          ("a dog runs .", "a pet runs .", "entailment"),
                          ("two men talk .", "people talk .", "entailment"),
                          ("a girl sings .", "someone sings .", "entailment"),
                          ("a girl sings .", "she is loud .", "neutral")])
    pairs = tool.snli_entailment_pairs(str(tmp_path))
    assert pairs == [("a dog runs .", "an animal moves ."), ("a dog runs .", "a pet runs ."),
                     ("two men talk .", "people talk ."), ("a girl sings .", "someone sings .")]
    mined = [[p, h, "x"] for p, h in pairs] * 25
    rows = tool.random_negatives(mined, pairs, seed=0)
    assert [tuple(r[:2]) for r in rows] == [tuple(m[:2]) for m in mined]  # only the negative differs
    own = {"a dog runs .": {"an animal moves .", "a pet runs ."},
           "two men talk .": {"people talk ."}, "a girl sings .": {"someone sings ."}}
    candidates = {h for _, h in pairs}
    for anchor, _, negative in rows:
        assert negative in candidates and negative not in own[anchor]
    # "a dog runs ." can only get the two other anchors' positives; both appear.
    assert {r[2] for r in rows if r[0] == "a dog runs ."} == {"people talk .", "someone sings ."}
    assert rows == tool.random_negatives(mined, pairs, seed=0)  # deterministic


def test_missing_snli_is_a_clear_error(tmp_path):
    tool = TOOL
    with pytest.raises(SystemExit, match="SNLI/s1.dev"):
        tool.snli_entailment_pairs(str(tmp_path))
