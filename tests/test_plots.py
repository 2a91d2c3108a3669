"""Visual diagnostics: geometry numbers, PNGs from `tfsent.evaluate --plots_dir`, the
message without matplotlib."""

import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, minilm_or_skip
from tfsent.data import readers
from tfsent.evaluation import geometry


def test_random_pair_cosines_match_numpy_and_detect_collapse():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 8))
    cos = geometry.random_pair_cosines(x, n_pairs=300, seed=3)
    # Independent transcription with the same pair draw.
    r = np.random.default_rng(3)
    i = r.integers(0, 50, 300)
    j = (i + r.integers(1, 50, 300)) % 50
    assert np.all(i != j)
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    np.testing.assert_allclose(cos, np.einsum("nd,nd->n", xn[i], xn[j]), rtol=1e-12)
    collapsed = np.ones((20, 8)) + 1e-3 * rng.normal(size=(20, 8))
    assert np.mean(geometry.random_pair_cosines(collapsed)) > 0.99
    assert abs(np.mean(cos)) < 0.2


def test_pair_geometry_hand_computed():
    # Two positive pairs (gold 5 > threshold 4 on a 0..5 range), one negative.
    e1 = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    e2 = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    gold = np.array([5.0, 5.0, 0.0])
    assert geometry.positive_threshold(gold) == 4.0
    sentences = np.array([[1.0, 0.0], [0.0, 1.0]])
    out = geometry.pair_geometry(e1, e2, gold, sentences)
    # alignment: mean of ||a-b||^2 = (0 + 2) / 2 = 1
    assert out["alignment"] == pytest.approx(1.0)
    # uniformity over the one pair (distance^2 = 2): log exp(-4) = -4
    assert out["uniformity"] == pytest.approx(-4.0)
    assert out["random_pair_cosine"] == pytest.approx(0.0)


def _sts_tree(root):
    """A SentEval-layout STS-B and SICK test set made from the shipped demo pairs."""
    s1, s2, gold = readers.read_scored_pairs(readers.DEMO_PAIRS)
    os.makedirs(os.path.join(root, "STS", "STSBenchmark"))
    with open(os.path.join(root, "STS", "STSBenchmark", "sts-test.csv"), "w") as f:
        f.writelines(f"g\tf\t2024\t{i}\t{g}\t{a}\t{b}\n"
                     for i, (a, b, g) in enumerate(zip(s1, s2, gold)))
    os.makedirs(os.path.join(root, "SICK"))
    with open(os.path.join(root, "SICK", "SICK_test_annotated.txt"), "w") as f:
        f.write("pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n")
        f.writelines(f"{i}\t{a}\t{b}\t{1 + 0.8 * g}\tNEUTRAL\n"
                     for i, (a, b, g) in enumerate(zip(s1[:200], s2[:200], gold[:200])))


def _assert_real_png(path):
    import matplotlib.image as mpimg

    assert os.path.getsize(path) > 5000, path
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] >= 300 and img.shape[1] >= 300, img.shape
    rgb = img[..., :3]
    non_white = np.mean(np.any(rgb < 0.9, axis=-1))
    assert non_white > 0.01, f"{path} is blank ({non_white:.4f} non-white)"
    assert len(np.unique(rgb.reshape(-1, 3), axis=0)) > 20, f"{path} has too few colours"


def test_evaluate_plots_minilm_vs_trained_model(tmp_path, tiny_encoder_dir):
    """minilm-l6 next to a model trained by tfsent (CLSR on the demo data, here on the tiny
    encoder's frozen embeddings and in this process: the plots, not the training, are under
    test; tests/test_clsr.py trains CLSR through the CLI)."""
    minilm_or_skip()
    from tfsent import training

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    run = str(tmp_path / "clsr")
    config = training.resolve_config("clsr", overrides=[
        f"encoder={tiny_encoder_dir}", "steps=100", "eval_every=100"])
    training.run("clsr", config, run)
    data = str(tmp_path / "data")
    _sts_tree(data)
    plots = str(tmp_path / "plots")
    r = subprocess.run([sys.executable, "-m", "tfsent.evaluate", f"--model={run}/export",
                        "--compare_model=minilm-l6", f"--data_dir={data}",
                        "--tasks=STSBenchmark,SICKRelatedness", f"--plots_dir={plots}"],
                       cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(os.listdir(plots)) == ["align_uniform.png", "random_pair_cosines.png",
                                         "sts_SICKRelatedness.png", "sts_STSBenchmark.png"]
    for name in os.listdir(plots):
        _assert_real_png(os.path.join(plots, name))
    assert "minilm-l6\n" in r.stdout and "clsr\n" in r.stdout   # both tables printed


def test_plots_without_matplotlib_names_the_extra(tmp_path):
    code = ("import sys, runpy; sys.modules['matplotlib'] = None; "
            f"sys.argv = ['evaluate', '--model={tmp_path}/none', '--plots_dir={tmp_path}/p']; "
            "runpy.run_module('tfsent.evaluate', run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 2
    assert "tfsent[plots]" in r.stderr and "matplotlib" in r.stderr
    assert not os.path.exists(tmp_path / "p")
