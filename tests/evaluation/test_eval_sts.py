"""STS evaluation against a direct NumPy/SciPy computation, on a fake encoder."""

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from evalfixtures import STS12_SUBSETS, HashEncoder, build_tree
from tfsent.errors import ConfigError, InputError
from tfsent.evaluation import evaluate_sts, sts_from_pairs


@pytest.fixture()
def tree(tmp_path):
    return str(tmp_path), build_tree(tmp_path)


def _expected(encoder, pairs):
    """(cosines, gold) computed directly, one sentence at a time."""
    cos = []
    for a, b, _ in pairs:
        u, v = encoder([a])[0].astype(np.float64), encoder([b])[0].astype(np.float64)
        cos.append(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))
    return np.array(cos), np.array([g for _, _, g in pairs])


def _corr(cos, gold):
    return 100 * spearmanr(cos, gold)[0], 100 * pearsonr(cos, gold)[0]


def test_sts12_all_mean_wmean_and_subsets(tree):
    root, info = tree
    enc, ref = HashEncoder(), HashEncoder()
    res = evaluate_sts(enc, root, ["STS12"])["STS12"]
    per, sizes, all_cos, all_gold = [], [], [], []
    for name in STS12_SUBSETS:
        cos, gold = _expected(ref, info["STS12"][name])
        sp, pe = _corr(cos, gold)
        got = res["subsets"][name]
        assert got["n"] == len(gold)
        np.testing.assert_allclose([got["spearman"], got["pearson"]], [sp, pe], atol=1e-4)
        per.append((sp, pe))
        sizes.append(len(gold))
        all_cos.append(cos)
        all_gold.append(gold)
    sp, pe = _corr(np.concatenate(all_cos), np.concatenate(all_gold))
    np.testing.assert_allclose([res["spearman"], res["pearson"]], [sp, pe], atol=1e-4)
    per = np.array(per)
    np.testing.assert_allclose(res["mean"]["spearman"], per[:, 0].mean(), atol=1e-4)
    np.testing.assert_allclose(res["wmean"]["pearson"],
                               np.average(per[:, 1], weights=sizes), atol=1e-4)
    assert res["n"] == sum(sizes) == 12 + 14 + 18 + 21 + 24
    # one encoder call, each distinct sentence once
    assert len(enc.calls) == 1
    assert len(enc.calls[0]) == len(set(enc.calls[0]))


def test_stsb_and_sick_splits(tree):
    root, info = tree
    res = evaluate_sts(HashEncoder(), root, ["STSBenchmark", "SICKRelatedness"])
    for task, key in (("STSBenchmark", "STSB-test"), ("SICKRelatedness", "SICK-test")):
        sp, pe = _corr(*_expected(HashEncoder(), info[key]))
        assert res[task]["split"] == "test" and res[task]["n"] == len(info[key])
        np.testing.assert_allclose([res[task]["spearman"], res[task]["pearson"]], [sp, pe],
                                   atol=1e-4)
    dev = evaluate_sts(HashEncoder(), root, ["STSBenchmark"], split="dev")["STSBenchmark"]
    want = _corr(*_expected(HashEncoder(), info["STSB-dev"]))[0]
    np.testing.assert_allclose(dev["spearman"], want, atol=1e-4)


def test_sts_from_pairs_matches(tree):
    _, info = tree
    pairs = info["STSB-dev"]
    got = sts_from_pairs(HashEncoder(), [p[0] for p in pairs], [p[1] for p in pairs],
                         [p[2] for p in pairs])
    sp, pe = _corr(*_expected(HashEncoder(), pairs))
    np.testing.assert_allclose([got["spearman"], got["pearson"]], [sp, pe], atol=1e-4)
    assert got["n"] == len(pairs)


def test_missing_tasks_raise_or_skip(tree):
    root, _ = tree
    with pytest.raises(InputError, match="STS13-en-test"):
        evaluate_sts(HashEncoder(), root, ["STS12", "STS13"])
    res = evaluate_sts(HashEncoder(), root, ["STS13", "STS12"], skip_missing=True)
    assert list(res) == ["STS12"]


def test_bad_arguments(tree):
    root, _ = tree
    with pytest.raises(ConfigError, match="STS99.*valid: STS12"):
        evaluate_sts(HashEncoder(), root, ["STS99"])
    with pytest.raises(ConfigError, match="split"):
        evaluate_sts(HashEncoder(), root, ["STSBenchmark"], split="validation")
    with pytest.raises(ConfigError, match="encode_fn returned an array of shape"):
        evaluate_sts(lambda s: np.zeros((len(s) - 1, 4)), root, ["STSBenchmark"])


def test_non_finite_embeddings_do_not_crash(tree):
    root, _ = tree

    def encode(sentences):
        out = HashEncoder()(sentences)
        out[0] = np.nan
        return out

    res = evaluate_sts(encode, root, ["STSBenchmark"])["STSBenchmark"]
    assert np.isfinite(res["spearman"])
