"""Alignment and uniformity against a direct double loop."""

import math

import numpy as np
import pytest

from evalfixtures import HashEncoder, build_tree
from tfsent.errors import InputError
from tfsent.evaluation import align_uniform, alignment, uniformity


def _unit(v):
    return v / np.linalg.norm(v)


def _uniform_loop(x, t=2.0):
    total, count = 0.0, 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            d = _unit(x[i]) - _unit(x[j])
            total += math.exp(-t * float(d @ d))
            count += 1
    return math.log(total / count)


def test_alignment_matches_loop():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(9, 5)), rng.normal(size=(9, 5))
    want = np.mean([np.sum((_unit(a) - _unit(b)) ** 2) for a, b in zip(x, y)])
    assert alignment(x, y) == pytest.approx(want, rel=1e-12)
    assert alignment(x, x) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(InputError):
        alignment(x, y[:3])


@pytest.mark.parametrize("chunk", [1, 3, 1024])
def test_uniformity_matches_double_loop(chunk):
    x = np.random.default_rng(1).normal(size=(11, 4)) * 3 + 1
    assert uniformity(x, chunk=chunk) == pytest.approx(_uniform_loop(x), rel=1e-10)
    assert uniformity(x, t=0.5, chunk=chunk) == pytest.approx(_uniform_loop(x, 0.5),
                                                              rel=1e-10)


def test_uniformity_subsample_is_deterministic():
    x = np.random.default_rng(2).normal(size=(40, 3))
    a = uniformity(x, max_points=10, seed=5)
    assert a == uniformity(x, max_points=10, seed=5)
    keep = np.sort(np.random.default_rng(5).choice(40, 10, replace=False))
    assert a == pytest.approx(_uniform_loop(x[keep]), rel=1e-10)
    assert uniformity(x, max_points=None) == pytest.approx(_uniform_loop(x), rel=1e-10)
    with pytest.raises(InputError):
        uniformity(x[:1])


def test_align_uniform_on_stsb(tmp_path):
    info = build_tree(tmp_path)
    enc = HashEncoder()
    got = align_uniform(enc, str(tmp_path), split="dev")
    pairs = info["STSB-dev"]
    pos = [(a, b) for a, b, s in pairs if s > 4]
    sentences = list(dict.fromkeys([p[0] for p in pairs] + [p[1] for p in pairs]))
    emb = HashEncoder()(sentences).astype(np.float64)
    row = {s: i for i, s in enumerate(sentences)}
    want_align = np.mean([np.sum((_unit(emb[row[a]]) - _unit(emb[row[b]])) ** 2)
                          for a, b in pos])
    assert got["n_pairs"] == len(pos) > 0 and got["n_sentences"] == len(sentences)
    assert got["align"] == pytest.approx(want_align, rel=1e-6)
    assert got["uniform"] == pytest.approx(_uniform_loop(emb), rel=1e-6)
