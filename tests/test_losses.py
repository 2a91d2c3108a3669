"""Losses against NumPy transcriptions of docs/methods.md and hand-computed cases.

The NumPy references below are written from the formulas in docs/methods.md ("InfoNCE and
NT-Xent", "CMLM-CSE"),
not from tfsent/losses.py: cos = x.y / (|x| |y|), cross-entropy = logsumexp(row) - row[label].
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from tfsent.losses import cosine_matrix, info_nce, masked_lm_loss, nt_xent

TOL = 1e-5


# --------------------------------------------------------------------------------------
# NumPy references (float64)
# --------------------------------------------------------------------------------------

def np_cos(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return a @ b.T


def np_ce(row, label):
    """-log softmax(row)[label], via a stable logsumexp."""
    m = np.max(row)
    return m + np.log(np.sum(np.exp(row - m))) - row[label]


def np_info_nce(z1, z2, z3=None, tau=0.05, w=0.0):
    """logits[i, j] = cos(z1_i, z2_j)/tau; with z3 append cos(z1_i, z3_j)/tau (+ w on
    anchor i's own hard negative j = i); label of anchor i is i; mean CE."""
    b = len(z1)
    losses = []
    for i in range(b):
        row = [np_cos(z1[i:i + 1], z2[j:j + 1])[0, 0] / tau for j in range(b)]
        if z3 is not None:
            row += [np_cos(z1[i:i + 1], z3[j:j + 1])[0, 0] / tau + (w if j == i else 0.0)
                    for j in range(b)]
        losses.append(np_ce(np.array(row), i))
    return float(np.mean(losses))


def np_nt_xent(z1, z2, tau=0.1, mask_self=True):
    """2B vectors v = [z1; z2]; anchor k's positive is its partner (k+B mod 2B); candidates
    are all other 2B-1 vectors (self excluded unless mask_self=False); mean over 2B anchors."""
    v = np.concatenate([z1, z2], 0)
    n2 = len(v)
    b = n2 // 2
    losses = []
    for k in range(n2):
        others = [j for j in range(n2) if j != k or not mask_self]
        row = np.array([np_cos(v[k:k + 1], v[j:j + 1])[0, 0] / tau for j in others])
        pos = others.index((k + b) % n2)
        losses.append(np_ce(row, pos))
    return float(np.mean(losses))


def np_masked_lm(logits, labels, weights):
    logits = np.asarray(logits, np.float64)
    total, count, correct = 0.0, 0.0, 0.0
    for b in range(logits.shape[0]):
        for p in range(logits.shape[1]):
            w = float(weights[b][p])
            total += w * np_ce(logits[b, p], labels[b][p])
            count += w
            correct += w * float(np.argmax(logits[b, p]) == labels[b][p])
    return total, count, correct


def _rand(seed, *shape):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


# --------------------------------------------------------------------------------------
# cosine_matrix
# --------------------------------------------------------------------------------------

def test_cosine_matrix_random_matches_numpy():
    a, b = _rand(0, 7, 12), _rand(1, 5, 12)
    out = cosine_matrix(a, b)
    assert out.dtype == tf.float32 and out.shape == (7, 5)
    np.testing.assert_allclose(out.numpy(), np_cos(a, b), atol=TOL)


def test_cosine_matrix_hand_case():
    a = np.array([[3.0, 4.0], [0.0, 5.0]], np.float32)  # unit: (0.6, 0.8), (0, 1)
    b = np.array([[4.0, 3.0], [2.0, 0.0], [0.0, -2.0]], np.float32)  # (0.8,0.6),(1,0),(0,-1)
    expected = np.array([
        [0.96, 0.6, -0.8],   # 0.6*0.8+0.8*0.6, 0.6*1, 0.8*-1
        [0.6, 0.0, -1.0],    # 1*0.6, 0, 1*-1
    ])
    np.testing.assert_allclose(cosine_matrix(a, b).numpy(), expected, atol=TOL)


# --------------------------------------------------------------------------------------
# info_nce
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("tau", [0.05, 0.5])
def test_info_nce_random_matches_numpy(tau):
    z1, z2 = _rand(2, 6, 10), _rand(3, 6, 10)
    out = info_nce(z1, z2, temperature=tau)
    assert out.dtype == tf.float32 and out.shape == ()
    np.testing.assert_allclose(float(out), np_info_nce(z1, z2, tau=tau), rtol=TOL, atol=TOL)


@pytest.mark.parametrize("w", [0.0, 0.7, -1.3])
def test_info_nce_hard_negatives_random_matches_numpy(w):
    z1, z2, z3 = _rand(4, 5, 8), _rand(5, 5, 8), _rand(6, 5, 8)
    out = info_nce(z1, z2, z3, temperature=0.1, hard_negative_weight=w)
    np.testing.assert_allclose(float(out), np_info_nce(z1, z2, z3, tau=0.1, w=w),
                               rtol=TOL, atol=TOL)


def test_info_nce_hard_negative_weight_changes_loss():
    z1, z2, z3 = _rand(7, 4, 8), _rand(8, 4, 8), _rand(9, 4, 8)
    base = float(info_nce(z1, z2, z3, temperature=0.1))
    # A positive weight raises each anchor's own hard-negative logit: the loss must grow.
    assert float(info_nce(z1, z2, z3, temperature=0.1, hard_negative_weight=1.0)) > base + 1e-3
    # Without z3, the weight has nothing to act on.
    np.testing.assert_allclose(float(info_nce(z1, z2, temperature=0.1, hard_negative_weight=1.0)),
                               float(info_nce(z1, z2, temperature=0.1)), atol=TOL)


# Hand case: z1 = (1,0), (0,1); z2 = (3,4) -> (0.6,0.8), (0,2) -> (0,1); tau = 0.5.
# cos(z1, z2) = [[0.6, 0], [0.8, 1]]  -> logits [[1.2, 0], [1.6, 2.0]]
HAND_Z1 = [[1.0, 0.0], [0.0, 1.0]]
HAND_Z2 = [[3.0, 4.0], [0.0, 2.0]]
HAND_Z3 = [[-1.0, 0.0], [0.0, -1.0]]  # cos(z1, z3) = [[-1, 0], [0, -1]] -> /tau [[-2,0],[0,-2]]


def test_info_nce_hand_case():
    # row 0, label 0: log(e^1.2 + e^0) - 1.2 = log(1 + e^-1.2) = 0.2632825...
    # row 1, label 1: log(e^1.6 + e^2) - 2 = log(1 + e^-0.4) = 0.5130152...
    # mean = (log(1 + e^-1.2) + log(1 + e^-0.4)) / 2 = 0.38814886
    out = info_nce(np.float32(HAND_Z1), np.float32(HAND_Z2), temperature=0.5)
    np.testing.assert_allclose(float(out), 0.38814886, atol=TOL)


def test_info_nce_hand_case_with_hard_negatives():
    # w = 0: row 0 logits [1.2, 0, -2, 0], label 0 -> log(1 + e^-1.2 + e^-3.2 + e^-1.2)
    #        row 1 logits [1.6, 2, 0, -2], label 1 -> log(e^-0.4 + 1 + e^-2 + e^-4)
    #        mean = 0.54881574
    out = info_nce(np.float32(HAND_Z1), np.float32(HAND_Z2), np.float32(HAND_Z3),
                   temperature=0.5)
    np.testing.assert_allclose(float(out), 0.54881574, atol=TOL)
    # w = 1 adds 1 to logit (i, B + i): row 0 [1.2, 0, -1, 0], row 1 [1.6, 2, 0, -1]
    #        row 0 -> log(1 + 2 e^-1.2 + e^-2.2); row 1 -> log(e^-0.4 + 1 + e^-2 + e^-3)
    #        mean = 0.57824061
    out = info_nce(np.float32(HAND_Z1), np.float32(HAND_Z2), np.float32(HAND_Z3),
                   temperature=0.5, hard_negative_weight=1.0)
    np.testing.assert_allclose(float(out), 0.57824061, atol=TOL)


# --------------------------------------------------------------------------------------
# nt_xent
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("tau", [0.1, 1.0])
def test_nt_xent_random_matches_numpy(tau):
    z1, z2 = _rand(10, 6, 9), _rand(11, 6, 9)
    mean = nt_xent(z1, z2, temperature=tau, direction_reduction="mean")
    assert mean.dtype == tf.float32 and mean.shape == ()
    np.testing.assert_allclose(float(mean), np_nt_xent(z1, z2, tau), rtol=TOL, atol=TOL)
    total = nt_xent(z1, z2, temperature=tau, direction_reduction="sum")
    np.testing.assert_allclose(float(total), 2.0 * np_nt_xent(z1, z2, tau), rtol=TOL, atol=TOL)


def test_nt_xent_hand_case_and_self_masking():
    # v = [a, b, c, d] = [(1,0), (0,1), (0.6,0.8), (-0.6,0.8)], tau = 1, B = 2.
    # Dot products: ab 0, ac 0.6, ad -0.6, bc 0.8, bd 0.8, cd -0.36+0.64 = 0.28.
    # a (pos c): candidates b,c,d = [0, 0.6, -0.6]  -> log(1+e^.6+e^-.6) - 0.6   = 0.61518880
    # b (pos d): candidates a,c,d = [0, 0.8, 0.8]   -> log(1+2e^.8) - 0.8        = 0.89581409
    # c (pos a): candidates a,b,d = [.6, .8, .28]   -> log(e^.6+e^.8+e^.28) - .6 = 1.08097493
    # d (pos b): candidates a,b,c = [-.6, .8, .28]  -> log(e^-.6+e^.8+e^.28) - .8 = 0.61037273
    # mean over 4 anchors = 0.80058764; "sum" = 2 * mean = 1.60117528
    z1 = np.float32([[1.0, 0.0], [0.0, 1.0]])
    z2 = np.float32([[0.6, 0.8], [-0.6, 0.8]])
    mean = float(nt_xent(z1, z2, temperature=1.0))
    np.testing.assert_allclose(mean, 0.80058764, atol=TOL)
    np.testing.assert_allclose(float(nt_xent(z1, z2, temperature=1.0, direction_reduction="sum")),
                               1.60117528, atol=TOL)
    # Masking matters here: with self (logit 1/tau = 1, the largest) among the candidates,
    # every denominator gains e^1 and the loss is much larger.
    unmasked = np_nt_xent(z1, z2, tau=1.0, mask_self=False)
    assert unmasked > mean + 0.3


def test_nt_xent_self_similarity_excluded_when_views_identical():
    # z1 == z2: the positive is an exact copy (cos 1); if self were not masked, self would
    # also have cos 1 and the loss could not drop below log 2 even at tiny tau.
    z = _rand(12, 4, 6)
    loss = float(nt_xent(z, z.copy(), temperature=0.01))
    assert loss < 1e-3
    assert np_nt_xent(z, z.copy(), tau=0.01, mask_self=False) > math.log(2) - 1e-3


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_nt_xent_valid_mask_drops_rows_exactly(reduction):
    """Invalid rows (padding slots) are neither anchors nor candidates: the masked loss is
    the loss of the valid rows alone; all-valid is the plain loss."""
    z1, z2 = _rand(20, 7, 5), _rand(21, 7, 5)
    valid = np.float32([1, 0, 1, 1, 0, 1, 1])
    keep = valid > 0
    scale = 2.0 if reduction == "sum" else 1.0
    np.testing.assert_allclose(float(nt_xent(z1, z2, 0.2, reduction, valid=valid)),
                               scale * np_nt_xent(z1[keep], z2[keep], 0.2), rtol=TOL, atol=TOL)
    np.testing.assert_allclose(float(nt_xent(z1, z2, 0.2, reduction, valid=np.ones(7))),
                               scale * np_nt_xent(z1, z2, 0.2), rtol=TOL, atol=TOL)


def test_nt_xent_rejects_unknown_reduction():
    z = _rand(13, 2, 4)
    with pytest.raises(ValueError):
        nt_xent(z, z, direction_reduction="max")


# --------------------------------------------------------------------------------------
# masked_lm_loss
# --------------------------------------------------------------------------------------

# 2 sequences x 3 slots, vocabulary 3.
MLM_LOGITS = np.float32([
    [[0, 0, 0], [1, 0, 0], [5, -5, 0]],
    [[0, 2, 0], [0, 0, 9], [-3, 4, 1]],
])
MLM_LABELS = np.int32([[2, 0, 1], [1, 2, 0]])
MLM_WEIGHTS = np.float32([[1, 1, 0], [1, 0, 0]])


def test_masked_lm_loss_hand_case():
    # (0,0): uniform, label 2          -> log 3               = 1.09861229  argmax 0 != 2
    # (0,1): [1,0,0], label 0          -> log(e+2) - 1 = log(1 + 2/e) = 0.55144471  correct
    # (0,2): weight 0 (CE would be ~10)                                   ignored
    # (1,0): [0,2,0], label 1          -> log(1 + 2/e^2)      = 0.23954477  correct
    # (1,1): weight 0, argmax 2 == label 2 (a correct prediction that must not count)
    # (1,2): weight 0
    # sum CE = 1.88960177, sum weights = 3, correct = 2
    total, count, correct = masked_lm_loss(MLM_LOGITS, MLM_LABELS, MLM_WEIGHTS)
    for t in (total, count, correct):
        assert t.dtype == tf.float32 and t.shape == ()
    np.testing.assert_allclose(float(total), 1.88960177, atol=TOL)
    assert float(count) == 3.0
    assert float(correct) == 2.0


def test_masked_lm_loss_ignores_weight_zero_slots():
    ref = [float(t) for t in masked_lm_loss(MLM_LOGITS, MLM_LABELS, MLM_WEIGHTS)]
    changed = MLM_LOGITS.copy()
    changed[0, 2] = [-7.0, 30.0, 2.0]  # now argmax == label 1, and a very different CE
    changed[1, 1] = [8.0, -8.0, 0.0]
    changed[1, 2] = [100.0, 0.0, 0.0]
    labels = MLM_LABELS.copy()
    labels[1, 2] = 2
    out = [float(t) for t in masked_lm_loss(changed, labels, MLM_WEIGHTS)]
    np.testing.assert_allclose(out, ref, atol=TOL)
    # ...while changing a weighted slot does change it.
    changed[0, 0] = [0.0, 0.0, 3.0]
    out = [float(t) for t in masked_lm_loss(changed, labels, MLM_WEIGHTS)]
    assert abs(out[0] - ref[0]) > 0.5 and out[2] == ref[2] + 1


def test_masked_lm_loss_random_matches_numpy():
    rng = np.random.default_rng(14)
    logits = rng.normal(size=(4, 5, 11)).astype(np.float32) * 3
    labels = rng.integers(0, 11, size=(4, 5)).astype(np.int32)
    weights = (rng.random((4, 5)) < 0.6).astype(np.float32)
    out = [float(t) for t in masked_lm_loss(logits, labels, weights)]
    np.testing.assert_allclose(out, np_masked_lm(logits, labels, weights), rtol=TOL, atol=TOL)


# --------------------------------------------------------------------------------------
# bfloat16 inputs: float32 result close to the float32 computation
# --------------------------------------------------------------------------------------

def _bf16(x):
    return tf.cast(tf.constant(x), tf.bfloat16)


def _rounded(x):
    """The float32 values the bfloat16 tensor actually holds."""
    return tf.cast(_bf16(x), tf.float32).numpy()


def test_bfloat16_inputs_give_float32_results():
    z1, z2, z3 = _rand(15, 6, 16), _rand(16, 6, 16), _rand(17, 6, 16)
    cases = [
        (lambda a, b, c: cosine_matrix(a, b), 0.02),
        (lambda a, b, c: info_nce(a, b, temperature=0.05), 0.1),
        (lambda a, b, c: info_nce(a, b, c, temperature=0.05, hard_negative_weight=0.5), 0.1),
        (lambda a, b, c: nt_xent(a, b, temperature=0.1), 0.05),
        (lambda a, b, c: nt_xent(a, b, temperature=0.1, direction_reduction="sum"), 0.1),
    ]
    for fn, loose in cases:
        out = fn(_bf16(z1), _bf16(z2), _bf16(z3))
        assert out.dtype == tf.float32
        # Same as float32 on the bf16-rounded values (the computation itself is float32)...
        same_values = fn(_rounded(z1), _rounded(z2), _rounded(z3)).numpy()
        np.testing.assert_allclose(out.numpy(), same_values, rtol=1e-5, atol=1e-5)
        # ...and loosely close to the full-precision result.
        np.testing.assert_allclose(out.numpy(), fn(z1, z2, z3).numpy(), atol=loose)

    rng = np.random.default_rng(18)
    logits = rng.normal(size=(3, 4, 9)).astype(np.float32)
    labels = rng.integers(0, 9, size=(3, 4)).astype(np.int32)
    weights = np.float32(rng.random((3, 4)) < 0.7)
    out = masked_lm_loss(_bf16(logits), labels, _bf16(weights))
    ref = masked_lm_loss(logits, labels, weights)
    for o, r in zip(out, ref):
        assert o.dtype == tf.float32
    np.testing.assert_allclose(float(out[0]), float(ref[0]), rtol=0.02)
    assert float(out[1]) == float(ref[1])
