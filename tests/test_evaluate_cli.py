"""`python -m tfsent.evaluate` on the real data: the reference figures of minilm-l6."""

import json
import os
import subprocess
import sys


from conftest import REPO, SHARED_DATA, minilm_or_skip, shared_data_or_skip

# Measured independently with the SimCSE/SentEval protocol (../shared/data/README.md).
REFERENCE = {"STS12": 72.37, "STSBenchmark": 82.03, "SICKRelatedness": 77.15}


def _evaluate(model, tasks, out, extra=()):
    r = subprocess.run([sys.executable, "-m", "tfsent.evaluate", f"--model={model}",
                        "--pooling=mean", f"--data_dir={SHARED_DATA}", f"--tasks={tasks}",
                        f"--output_json={out}", *extra], cwd=REPO, capture_output=True,
                       text=True, timeout=1200, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.load(open(out)), r.stdout


def test_minilm_matches_reference_figures(tmp_path):
    minilm_or_skip()
    shared_data_or_skip("STS")
    results, table = _evaluate("minilm-l6", ",".join(REFERENCE), tmp_path / "r.json")
    for task, want in REFERENCE.items():
        assert abs(results[task]["spearman"] - want) <= 0.05, (task, results[task])
    assert "Avg." in table


def test_unknown_task_is_a_clear_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tfsent.evaluate", "--model=minilm-l6",
                        "--tasks=STS99", f"--output_json={tmp_path}/x.json"], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert "STS99" in r.stderr and "Traceback" not in r.stderr
