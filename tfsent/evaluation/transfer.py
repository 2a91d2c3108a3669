"""SentEval transfer tasks: logistic regression on frozen sentence embeddings.

Tasks and protocol (SentEval's, as SimCSE and the papers here run it):
- MR, CR, SUBJ, MPQA: outer stratified k-fold; in each outer fold an inner k-fold on the
  outer training part picks the L2 strength, then a model refit on the whole outer
  training part is scored on the outer test part. "acc" is the mean outer test
  accuracy, "devacc" the mean of the best inner CV accuracies.
- TREC, MRPC: k-fold CV on train picks the L2 strength ("devacc" is its CV accuracy);
  a model fit on all of train gives the test "acc". MRPC features are [|u-v|, u*v] and
  its result also has "f1" (positive class: paraphrase).
- SST2: the dev split picks the L2 strength; "acc" is test accuracy.
k is 10 in mode "test" and 5 in mode "fasttest"; the L2 grid is 1e-5, 1e-4, 1e-3.
Accuracies are x100. Features are used as they are (no standardisation, as SentEval).

The classifier is multinomial logistic regression, mean softmax cross-entropy +
(l2 / 2) * ||W||^2 with the bias unpenalised, solved to convergence by L-BFGS from zeros,
so results are deterministic. `l2` plays the role of the weight decay of SentEval's
PyTorch classifier (which adds l2 * W to the gradient, as here); that classifier is
trained by Adam with early stopping instead of to convergence, so figures can differ
somewhat from SentEval's.
"""

import os

import numpy as np
from absl import logging
from scipy.optimize import minimize

from tfsent.errors import ConfigError
from tfsent.data import senteval as senteval_data
from tfsent.evaluation.sts import embed


TRANSFER_TASKS = ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"]
L2_GRID = (1e-5, 1e-4, 1e-3)  # 10^t for t in [-5, -2)
KFOLD = {"test": 10, "fasttest": 5}
DEFAULT_SEED = 1111  # SentEval's


# -- the classifier -----------------------------------------------------------------------

def softmax_objective(weights, bias, x, y, l2):
    """Mean softmax cross-entropy + (l2 / 2) * ||weights||^2, and its gradients.

    Args:
        weights: (D, C) array; bias: (C,) array (not penalised).
        x: (N, D) features; y: (N,) int labels in [0, C).
        l2: L2 strength.

    Returns:
        (loss, grad_weights, grad_bias).
    """
    n = len(y)
    logits = x @ weights + bias
    logits -= logits.max(axis=1, keepdims=True)  # stable log-sum-exp
    residual = np.exp(logits)
    norm = residual.sum(axis=1, keepdims=True)
    rows = np.arange(n)
    loss = np.mean(np.log(norm[:, 0]) - logits[rows, y]) + 0.5 * l2 * np.sum(weights ** 2)
    residual /= norm
    residual[rows, y] -= 1.0
    residual /= n
    return float(loss), x.T @ residual + l2 * weights, residual.sum(axis=0)


class FeatureBasis:
    """An exact change of variables that makes L-BFGS converge in far fewer iterations.

    Sentence embeddings are far from isotropic (a large common offset, a fast-decaying
    spectrum), which leaves plain L-BFGS hundreds of iterations away from the optimum.
    The features are centred (absorbed by the unpenalised bias) and rotated onto the
    eigenvectors of their covariance (orthonormal, so the L2 penalty is unchanged); the
    solver's variables are then scaled per direction by sqrt(0.25 * eigenvalue + l2),
    an estimate of the objective's curvature there. None of this changes the problem or
    its solution, only the solver's path; it is computed from features, never labels.
    """

    def __init__(self, x):
        x = np.asarray(x, dtype=np.float64)
        self.mean = x.mean(axis=0)
        centred = x - self.mean
        eigval, self.rotation = np.linalg.eigh(centred.T @ centred / max(len(x), 1))
        self.eigval = np.maximum(eigval, 0.0)

    def transform(self, x):
        """Features (N, D) -> centred, rotated features (N, D) (float64)."""
        return (np.asarray(x, dtype=np.float64) - self.mean) @ self.rotation


def fit_softmax(z, y, n_classes, l2, eigval=None, max_iter=1000):
    """Fits (weights, bias) of L2 softmax regression on features `z` by L-BFGS.

    `eigval` (per-feature curvature, from `FeatureBasis`) only rescales the solver's
    variables. Starts from zeros, so the fit is deterministic.
    """
    dim = z.shape[1]
    scale = np.ones(dim) if eigval is None else np.sqrt(0.25 * eigval + l2)

    def fun(theta):
        weights = theta[:dim * n_classes].reshape(dim, n_classes) / scale[:, None]
        loss, g_w, g_b = softmax_objective(weights, theta[dim * n_classes:], z, y, l2)
        return loss, np.concatenate([(g_w / scale[:, None]).ravel(), g_b])

    theta0 = np.zeros(dim * n_classes + n_classes)
    res = minimize(fun, theta0, jac=True, method="L-BFGS-B",
                   options={"maxiter": max_iter})
    if not res.success and res.nit >= max_iter:
        logging.warning("logistic regression stopped after %d iterations: %s", res.nit,
                    res.message)
    weights = res.x[:dim * n_classes].reshape(dim, n_classes) / scale[:, None]
    return weights, res.x[dim * n_classes:]


class LogisticRegression:
    """Multinomial logistic regression: softmax cross-entropy + (l2 / 2) * ||W||^2.

    The bias is not penalised. Solved by L-BFGS from zeros (deterministic), in the
    well-conditioned coordinates of `FeatureBasis`; `coef_` (D, C) and `intercept_`
    (C,) are in the original feature space.
    """

    def __init__(self, l2=1e-4, max_iter=1000):
        self.l2 = float(l2)
        self.max_iter = int(max_iter)
        self.coef_ = self.intercept_ = self.classes_ = None

    def fit(self, x, y, basis=None):
        """Fits on features x (N, D) and labels y (N,); `basis` reuses a FeatureBasis."""
        x = np.asarray(x, dtype=np.float64)
        self.classes_, y_idx = np.unique(np.asarray(y), return_inverse=True)
        basis = FeatureBasis(x) if basis is None else basis
        weights, bias = fit_softmax(basis.transform(x), y_idx, len(self.classes_),
                                    self.l2, basis.eigval, self.max_iter)
        self.coef_ = basis.rotation @ weights
        self.intercept_ = bias - basis.mean @ self.coef_
        return self

    def decision_function(self, x):
        """Logits (N, C)."""
        return np.asarray(x, dtype=np.float64) @ self.coef_ + self.intercept_

    def predict(self, x):
        """Predicted labels (N,)."""
        return self.classes_[np.argmax(self.decision_function(x), axis=1)]

    def score(self, x, y):
        """Accuracy in [0, 1]."""
        return float(np.mean(self.predict(x) == np.asarray(y)))


# -- cross-validation ---------------------------------------------------------------------

def stratified_kfold(labels, k, seed=DEFAULT_SEED):
    """Seeded stratified k-fold: a list of k (train_idx, test_idx) pairs.

    Each class is shuffled and dealt round-robin over the folds (continuing from where
    the previous class stopped), so fold sizes differ by at most one and every fold
    has each class in proportion.
    """
    labels = np.asarray(labels)
    if k < 2 or k > len(labels):
        raise ConfigError(f"k-fold needs 2 <= k <= {len(labels)} (samples), got {k}")
    rng = np.random.default_rng(seed)
    fold = np.empty(len(labels), dtype=np.int64)
    dealt = 0
    for cls in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == cls))
        fold[idx] = (dealt + np.arange(len(idx))) % k
        dealt += len(idx)
    return [(np.flatnonzero(fold != i), np.flatnonzero(fold == i)) for i in range(k)]


class _Problem:
    """Features in FeatureBasis coordinates plus labels, fit by index subsets."""

    def __init__(self, x, y, max_iter):
        self.basis = FeatureBasis(x)
        self.z = self.basis.transform(x)
        self.y = np.asarray(y)
        self.classes = np.unique(self.y)
        self.y_idx = np.searchsorted(self.classes, self.y)
        self.max_iter = max_iter

    def fit(self, idx, l2):
        return fit_softmax(self.z[idx], self.y_idx[idx], len(self.classes), l2,
                           self.basis.eigval, self.max_iter)

    def predict(self, model, z):
        weights, bias = model
        return np.argmax(z @ weights + bias, axis=1)

    def accuracy(self, model, idx):
        return float(np.mean(self.predict(model, self.z[idx]) == self.y_idx[idx]))

    def cv_accuracy(self, idx, l2, k, seed):
        scores = []
        for train, test in stratified_kfold(self.y[idx], k, seed):
            scores.append(self.accuracy(self.fit(idx[train], l2), idx[test]))
        return float(np.mean(scores))

    def select_l2(self, idx, grid, k, seed):
        """(best l2, its CV accuracy) by k-fold CV on the samples `idx`."""
        scores = [self.cv_accuracy(idx, l2, k, seed) for l2 in grid]
        best = int(np.argmax(scores))
        return grid[best], scores[best]


def inner_kfold_accuracy(x, y, k, grid=L2_GRID, seed=DEFAULT_SEED, max_iter=1000):
    """MR/CR/SUBJ/MPQA protocol: outer k-fold, inner k-fold choosing L2.

    Returns {"acc", "devacc"} (x100) and "l2_folds" (the L2 chosen in each outer fold).
    """
    problem = _Problem(x, y, max_iter)
    accs, devs, chosen = [], [], []
    for train, test in stratified_kfold(problem.y, k, seed):
        l2, dev = problem.select_l2(train, grid, k, seed)
        accs.append(problem.accuracy(problem.fit(train, l2), test))
        devs.append(dev)
        chosen.append(l2)
    return {"acc": 100.0 * float(np.mean(accs)), "devacc": 100.0 * float(np.mean(devs)),
            "l2_folds": chosen}


def kfold_then_test(x_train, y_train, x_test, y_test, k, grid=L2_GRID,
                    seed=DEFAULT_SEED, max_iter=1000):
    """TREC/MRPC protocol: k-fold CV on train picks L2, then test accuracy.

    Returns {"acc", "devacc"} (x100), "l2" and "predictions" (test labels predicted).
    """
    return _select_then_test(x_train, y_train, x_test, y_test, max_iter,
                             lambda problem, idx: problem.select_l2(idx, grid, k, seed))


def dev_then_test(x_train, y_train, x_dev, y_dev, x_test, y_test, grid=L2_GRID,
                  max_iter=1000):
    """SST2 protocol: the dev split picks L2 (model fit on train), then test accuracy.

    Returns {"acc", "devacc"} (x100), "l2" and "predictions".
    """
    n_train = len(y_train)
    dev_idx = np.arange(n_train, n_train + len(y_dev))

    def select(problem, idx):
        scores = [problem.accuracy(problem.fit(idx, l2), dev_idx) for l2 in grid]
        best = int(np.argmax(scores))
        return grid[best], scores[best]

    x = np.concatenate([x_train, x_dev])
    y = np.concatenate([y_train, y_dev])
    return _select_then_test(x, y, x_test, y_test, max_iter, select, n_train=n_train)


def _select_then_test(x, y, x_test, y_test, max_iter, select, n_train=None):
    """Picks L2 with `select(problem, train_idx)`, refits on train, scores on test."""
    problem = _Problem(x, y, max_iter)
    train = np.arange(len(y) if n_train is None else n_train)
    l2, dev = select(problem, train)
    model = problem.fit(train, l2)
    pred = problem.classes[problem.predict(model, problem.basis.transform(x_test))]
    return {"acc": 100.0 * float(np.mean(pred == np.asarray(y_test))),
            "devacc": 100.0 * dev, "l2": l2, "predictions": pred}


def f1_score(y_true, y_pred, positive=1):
    """F1 (x100) of the positive class."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    tp = np.sum((y_pred == positive) & (y_true == positive))
    denom = np.sum(y_pred == positive) + np.sum(y_true == positive)
    return 100.0 * 2.0 * float(tp) / float(denom) if denom else 0.0


# -- the tasks ----------------------------------------------------------------------------

_TASK_DIRS = {"MR": "MR", "CR": "CR", "SUBJ": "SUBJ", "MPQA": "MPQA", "SST2": "SST/binary",
              "TREC": "TREC", "MRPC": "MRPC"}


def _run_task(task, encode_fn, data_dir, k, grid, seed, max_iter):
    if task in senteval_data.BINARY_FILES:
        sentences, labels = senteval_data.read_binary(data_dir, task)
        x = embed(encode_fn, sentences)
        out = inner_kfold_accuracy(x, labels, k, grid, seed, max_iter)
        return {**out, "ndev": len(labels), "ntest": len(labels)}
    if task == "SST2":
        splits = [senteval_data.read_sst2(data_dir, s) for s in senteval_data.SPLITS]
        x = embed(encode_fn, [s for sents, _ in splits for s in sents])
        sizes = np.cumsum([0] + [len(labels) for _, labels in splits])
        xs = [x[a:b] for a, b in zip(sizes[:-1], sizes[1:])]
        (_, y_tr), (_, y_dev), (_, y_te) = splits
        out = dev_then_test(xs[0], y_tr, xs[1], y_dev, xs[2], y_te, grid, max_iter)
        return {"acc": out["acc"], "devacc": out["devacc"], "l2": out["l2"],
                "ndev": len(y_dev), "ntest": len(y_te)}
    if task == "TREC":
        (s_tr, y_tr), (s_te, y_te) = (senteval_data.read_trec(data_dir, s)
                                      for s in ("train", "test"))
        x = embed(encode_fn, s_tr + s_te)
        out = kfold_then_test(x[:len(s_tr)], y_tr, x[len(s_tr):], y_te, k, grid, seed,
                              max_iter)
        return {"acc": out["acc"], "devacc": out["devacc"], "l2": out["l2"],
                "ndev": len(y_tr), "ntest": len(y_te)}
    # MRPC
    (a_tr, b_tr, y_tr), (a_te, b_te, y_te) = (senteval_data.read_mrpc(data_dir, s)
                                              for s in ("train", "test"))
    n_tr = len(y_tr)
    emb = embed(encode_fn, a_tr + a_te + b_tr + b_te)
    u, v = np.split(emb, 2)
    feats = np.concatenate([np.abs(u - v), u * v], axis=1)
    out = kfold_then_test(feats[:n_tr], y_tr, feats[n_tr:], y_te, k, grid, seed, max_iter)
    return {"acc": out["acc"], "devacc": out["devacc"], "l2": out["l2"],
            "f1": f1_score(y_te, out["predictions"]), "ndev": n_tr, "ntest": len(y_te)}


def evaluate_transfer(encode_fn, data_dir, tasks=None, mode="test", seed=DEFAULT_SEED,
                      l2_grid=L2_GRID, skip_missing=False, max_iter=1000):
    """Evaluates `encode_fn` on SentEval transfer tasks of a `data/downstream` folder.

    Args:
        encode_fn: list of str -> array (N, D).
        data_dir: the SentEval `downstream` folder.
        tasks: names from `TRANSFER_TASKS` (default: all seven).
        mode: "test" (10-fold) or "fasttest" (5-fold).
        seed: seed of the fold shuffles.
        l2_grid: L2 strengths to choose from.
        skip_missing: skip (with a warning) tasks whose folder is absent instead of
            raising InputError.
        max_iter: L-BFGS iteration cap per fit.

    Returns:
        dict task -> {"acc", "devacc" (x100), "ndev", "ntest", ...}: "l2" (chosen L2)
        for SST2/TREC/MRPC, "l2_folds" for MR/CR/SUBJ/MPQA, "f1" for MRPC.
    """
    tasks = list(TRANSFER_TASKS if tasks is None else tasks)
    unknown = [t for t in tasks if t not in TRANSFER_TASKS]
    if unknown:
        raise ConfigError(f"unknown transfer task(s) {', '.join(map(repr, unknown))}; "
                          f"valid: {', '.join(TRANSFER_TASKS)}")
    if mode not in KFOLD:
        raise ConfigError(f"unknown mode {mode!r}; expected one of {', '.join(KFOLD)}")
    grid = tuple(float(v) for v in l2_grid)
    if not grid or min(grid) <= 0:
        raise ConfigError(f"l2_grid must be non-empty and positive, got {l2_grid!r}")
    data_dir = os.fspath(data_dir)
    results = {}
    for task in dict.fromkeys(tasks):
        folder = os.path.join(data_dir, _TASK_DIRS[task])
        if skip_missing and not os.path.isdir(folder):
            logging.warning("skipping %s: %s not found", task, folder)
            continue
        results[task] = _run_task(task, encode_fn, data_dir, KFOLD[mode], grid, seed,
                                  max_iter)
        logging.info("%s: acc %.2f (dev %.2f)", task, results[task]["acc"],
                 results[task]["devacc"])
    return results

