"""Logistic regression, cross-validation protocols and the transfer tasks on a tiny tree."""

import numpy as np
import pytest

from evalfixtures import HashEncoder, build_tree
from tfsent.errors import ConfigError
from tfsent.evaluation import TRANSFER_TASKS, LogisticRegression, evaluate_transfer
from tfsent.data import senteval as sd
from tfsent.evaluation import transfer as tr


def _toy(n=60, d=5, classes=3, seed=0, sep=4.0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    centres = rng.normal(size=(classes, d)) * sep
    # a large common offset and uneven scales, like real sentence embeddings
    x = (centres[y] + rng.normal(size=(n, d))) * np.linspace(0.2, 3, d) + 10.0
    return x, y


def test_objective_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(20, 4)), rng.integers(0, 3, 20)
    w, b, l2 = rng.normal(size=(4, 3)), rng.normal(size=3), 0.3
    loss, g_w, g_b = tr.softmax_objective(w, b, x, y, l2)
    # the loss itself, written out
    logits = x @ w + b
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    assert loss == pytest.approx(-np.mean(np.log(p[np.arange(20), y]))
                                 + 0.5 * l2 * np.sum(w ** 2), rel=1e-12)
    eps = 1e-6
    for i in range(4):
        for j in range(3):
            dw = np.zeros_like(w)
            dw[i, j] = eps
            num = (tr.softmax_objective(w + dw, b, x, y, l2)[0]
                   - tr.softmax_objective(w - dw, b, x, y, l2)[0]) / (2 * eps)
            assert g_w[i, j] == pytest.approx(num, abs=1e-7)
    for j in range(3):
        db = np.zeros(3)
        db[j] = eps
        num = (tr.softmax_objective(w, b + db, x, y, l2)[0]
               - tr.softmax_objective(w, b - db, x, y, l2)[0]) / (2 * eps)
        assert g_b[j] == pytest.approx(num, abs=1e-7)


def test_separable_data_reaches_100_percent():
    x, y = _toy(sep=6.0)
    clf = LogisticRegression(l2=1e-3).fit(x, y)
    assert clf.score(x, y) == 1.0
    x2, y2 = _toy(seed=0, sep=6.0)
    assert clf.score(x2, y2) == 1.0


def test_solution_is_the_optimum_and_deterministic():
    x, y = _toy(sep=1.0, seed=3)
    l2 = 1e-2
    clf = LogisticRegression(l2=l2).fit(x, y)
    # the gradient of the original objective (nearly) vanishes at the returned solution
    loss, g_w, g_b = tr.softmax_objective(clf.coef_, clf.intercept_, x, y, l2)
    assert np.abs(g_w).max() < 1e-3 and np.abs(g_b).max() < 1e-3
    # plain L-BFGS on the raw features (badly conditioned) gets no lower, and to the
    # same place: the basis changes only the solver's path
    w_plain, b_plain = tr.fit_softmax(x, y, 3, l2, eigval=None, max_iter=5000)
    assert loss <= tr.softmax_objective(w_plain, b_plain, x, y, l2)[0] + 1e-9
    np.testing.assert_allclose(clf.coef_, w_plain, atol=0.02 * np.abs(w_plain).max())
    again = LogisticRegression(l2=l2).fit(x, y)
    np.testing.assert_array_equal(clf.coef_, again.coef_)
    np.testing.assert_array_equal(clf.predict(x), again.predict(x))


def test_labels_keep_their_values():
    x, y = _toy(classes=2, sep=6.0)
    clf = LogisticRegression().fit(x, np.where(y == 1, 7, -2))
    assert set(clf.predict(x)) == {7, -2}


def test_protocol_constants():
    assert tr.L2_GRID == (1e-5, 1e-4, 1e-3)
    assert tr.KFOLD == {"test": 10, "fasttest": 5}


def test_stratified_kfold():
    labels = np.array([0] * 23 + [1] * 7 + [2] * 10)
    folds = tr.stratified_kfold(labels, 5, seed=1)
    tests = np.concatenate([t for _, t in folds])
    assert sorted(tests.tolist()) == list(range(40))
    assert {len(t) for _, t in folds} == {8}
    for train, test in folds:
        assert set(train).isdisjoint(test) and len(train) + len(test) == 40
        counts = np.bincount(labels[test], minlength=3)
        assert all(abs(c - n / 5) < 1 for c, n in zip(counts, (23, 7, 10)))
    again = tr.stratified_kfold(labels, 5, seed=1)
    assert all((a[1] == b[1]).all() for a, b in zip(folds, again))
    other = tr.stratified_kfold(labels, 5, seed=2)
    assert any((a[1] != b[1]).any() for a, b in zip(folds, other))
    with pytest.raises(ConfigError):
        tr.stratified_kfold(labels[:3], 5)


def test_inner_kfold_protocol_by_hand():
    x, y = _toy(n=45, classes=2, sep=0.7, seed=4)
    grid, k = (1e-1, 10.0), 3
    got = tr.inner_kfold_accuracy(x, y, k, grid, seed=7)
    accs, devs, chosen = [], [], []
    for train, test in tr.stratified_kfold(y, k, 7):
        scores = []
        for l2 in grid:
            inner = [LogisticRegression(l2).fit(x[train][a], y[train][a])
                     .score(x[train][b], y[train][b])
                     for a, b in tr.stratified_kfold(y[train], k, 7)]
            scores.append(np.mean(inner))
        best = int(np.argmax(scores))
        chosen.append(grid[best])
        devs.append(scores[best])
        accs.append(LogisticRegression(grid[best]).fit(x[train], y[train])
                    .score(x[test], y[test]))
    assert got["l2_folds"] == chosen
    assert got["acc"] == pytest.approx(100 * np.mean(accs))
    assert got["devacc"] == pytest.approx(100 * np.mean(devs))


def test_dev_then_test_by_hand():
    x, y = _toy(n=90, classes=3, sep=0.8, seed=5)
    grid = (1e-3, 1.0, 30.0)
    tr_i, dev_i, te_i = np.arange(0, 45), np.arange(45, 66), np.arange(66, 90)
    got = tr.dev_then_test(x[tr_i], y[tr_i], x[dev_i], y[dev_i], x[te_i], y[te_i], grid)
    dev = [LogisticRegression(l2).fit(x[tr_i], y[tr_i]).score(x[dev_i], y[dev_i])
           for l2 in grid]
    best = grid[int(np.argmax(dev))]
    assert got["l2"] == best and got["devacc"] == pytest.approx(100 * max(dev))
    want = LogisticRegression(best).fit(x[tr_i], y[tr_i]).score(x[te_i], y[te_i])
    assert got["acc"] == pytest.approx(100 * want)


def test_all_tasks_on_tiny_tree(tmp_path):
    build_tree(tmp_path)
    enc = HashEncoder(dim=32)
    # One strong L2 keeps these tiny, nearly separable problems fast to solve; the L2
    # choice itself is checked by hand in the tests above.
    res = evaluate_transfer(enc, str(tmp_path), mode="fasttest", l2_grid=(1.0,))
    assert list(res) == TRANSFER_TASKS
    for task in ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC"):
        assert res[task]["acc"] >= 80, (task, res[task])
        assert 0 <= res[task]["devacc"] <= 100
    assert res["MR"]["ntest"] == 50 and len(res["MR"]["l2_folds"]) == 5
    assert res["SST2"]["ntest"] == 30 and res["TREC"]["ntest"] == 24
    assert res["MRPC"]["ntest"] == 40 and 0 <= res["MRPC"]["f1"] <= 100
    assert len(enc.calls) == len(TRANSFER_TASKS)
    assert all(len(c) == len(set(c)) for c in enc.calls)


def test_mrpc_features_are_abs_diff_and_product(tmp_path):
    build_tree(tmp_path)
    enc = HashEncoder(dim=8)
    got = evaluate_transfer(enc, str(tmp_path), ["MRPC"], mode="fasttest",
                            l2_grid=(0.1, 1.0))["MRPC"]
    (a_tr, b_tr, y_tr), (a_te, b_te, y_te) = (sd.read_mrpc(str(tmp_path), s)
                                              for s in ("train", "test"))

    def feats(a, b):
        u, v = enc(a).astype(np.float64), enc(b).astype(np.float64)
        return np.concatenate([np.abs(u - v), u * v], axis=1)

    want = tr.kfold_then_test(feats(a_tr, b_tr), y_tr, feats(a_te, b_te), y_te, k=5,
                              grid=(0.1, 1.0))
    assert got["acc"] == pytest.approx(want["acc"])
    assert got["devacc"] == pytest.approx(want["devacc"]) and got["l2"] == want["l2"]
    assert got["f1"] == pytest.approx(tr.f1_score(y_te, want["predictions"]))


def test_bad_arguments(tmp_path):
    with pytest.raises(ConfigError, match="valid: MR"):
        evaluate_transfer(HashEncoder(), str(tmp_path), ["MRX"])
    with pytest.raises(ConfigError, match="mode"):
        evaluate_transfer(HashEncoder(), str(tmp_path), ["MR"], mode="dev")
    with pytest.raises(ConfigError, match="l2_grid"):
        evaluate_transfer(HashEncoder(), str(tmp_path), ["MR"], l2_grid=())
    assert evaluate_transfer(HashEncoder(), str(tmp_path), skip_missing=True) == {}
