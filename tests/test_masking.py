"""BERT-style MLM masking (`mask_tokens`): which positions, how many, labels, weights,
the 80/10/10 replacement split, and determinism."""

import numpy as np
import pytest
import tensorflow as tf

from tfsent.data.pipelines import mask_tokens, max_predictions
from tfsent.encoders import SentenceTokenizer
from tfsent.errors import ConfigError

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def make_tokenizer(n_words, max_seq_length):
    vocab = SPECIALS + [f"w{i}" for i in range(n_words)]
    return SentenceTokenizer(vocab, max_seq_length=max_seq_length)


# Hand-made batch, L = 12 (words are ids >= 5).
HAND_IDS = np.int32([
    [CLS, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, SEP],   # n = 10 real, non-special tokens
    [CLS, 5, 6, 7, SEP, PAD, PAD, PAD, PAD, PAD, PAD, PAD],  # n = 3
    [CLS, SEP, PAD, PAD, PAD, PAD, PAD, PAD, PAD, PAD, PAD, PAD],  # "" -> n = 0
    [CLS, 5, UNK, 6, 7, MASK, 8, 9, SEP, PAD, PAD, PAD],  # [UNK], [MASK] special -> n = 5
    [15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 5, 6],  # no specials at all: n = 12
    [CLS, 9, SEP, PAD, PAD, PAD, PAD, PAD, PAD, PAD, PAD, PAD],  # n = 1
])
HAND_MASK = np.int32(HAND_IDS != PAD)
HAND_MASK[4] = 1
RATE = 0.4
# P = max_predictions(12, 0.4) = max(1, ceil((12 - 2) * 0.4)) = ceil(4.0) = 4
# count = min(max(1, round(0.4 n)), P) for n > 0, else 0:
#   n=10 -> round(4.0) = 4;  n=3 -> round(1.2) = 1;  n=0 -> 0;  n=5 -> round(2.0) = 2;
#   n=12 -> round(4.8) = 5, capped at P = 4;  n=1 -> round(0.4) = 0, raised to 1.
HAND_P = 4
HAND_COUNTS = [4, 1, 0, 2, 4, 1]


def hand_features():
    return {"token_ids": tf.constant(HAND_IDS), "padding_mask": tf.constant(HAND_MASK),
            "segment_ids": tf.zeros_like(HAND_IDS)}


@pytest.fixture(scope="module")
def hand_tok():
    return make_tokenizer(30, 12)


@pytest.fixture(scope="module")
def hand_out(hand_tok):
    return {k: v.numpy() for k, v in mask_tokens(hand_features(), hand_tok, RATE,
                                                  seed=(7, 11)).items()}


def test_max_predictions():
    assert max_predictions(12, 0.4) == HAND_P
    assert max_predictions(32, 0.15) == 5   # ceil(30 * 0.15) = ceil(4.5)
    assert max_predictions(3, 0.15) == 1    # ceil(0.15) = 1
    assert max_predictions(2, 0.15) == 1    # at least one slot even with no room


def test_shapes_and_untouched_features(hand_out):
    assert hand_out["mask_positions"].shape == (6, HAND_P)
    assert hand_out["mask_labels"].shape == (6, HAND_P)
    assert hand_out["mask_weights"].shape == (6, HAND_P)
    assert hand_out["mask_weights"].dtype == np.float32
    assert hand_out["mask_positions"].dtype == np.int32
    assert hand_out["masked_token_ids"].shape == HAND_IDS.shape
    np.testing.assert_array_equal(hand_out["token_ids"], HAND_IDS)
    np.testing.assert_array_equal(hand_out["padding_mask"], HAND_MASK)
    assert "segment_ids" in hand_out


def test_counts_and_weights(hand_out):
    w = hand_out["mask_weights"]
    for row, count in enumerate(HAND_COUNTS):
        assert w[row].tolist() == [1.0] * count + [0.0] * (HAND_P - count), row


def test_selected_positions_are_real_non_special_tokens(hand_out):
    special = {PAD, UNK, CLS, SEP, MASK}
    for row, count in enumerate(HAND_COUNTS):
        pos = hand_out["mask_positions"][row, :count].tolist()
        assert len(set(pos)) == count, row  # distinct
        for p in pos:
            assert 0 <= p < 12 and HAND_MASK[row, p] == 1, (row, p)
            assert HAND_IDS[row, p] not in special, (row, p)


def test_labels_are_original_ids(hand_out):
    for row, count in enumerate(HAND_COUNTS):
        pos = hand_out["mask_positions"][row, :count]
        np.testing.assert_array_equal(hand_out["mask_labels"][row, :count], HAND_IDS[row, pos])


def test_only_selected_positions_change(hand_out, hand_tok):
    masked = hand_out["masked_token_ids"]
    for row, count in enumerate(HAND_COUNTS):
        selected = set(hand_out["mask_positions"][row, :count].tolist())
        for p in range(12):
            if p not in selected:  # padding, [CLS]/[SEP]/[UNK]/[MASK], unselected words
                assert masked[row, p] == HAND_IDS[row, p], (row, p)
            else:
                assert 0 <= masked[row, p] < hand_tok.vocabulary_size
    # Padding and special positions in particular.
    special = np.isin(HAND_IDS, [PAD, UNK, CLS, SEP, MASK])
    np.testing.assert_array_equal(masked[special], HAND_IDS[special])
    # Something was masked at all.
    assert (masked != HAND_IDS).any()


def test_rate_outside_open_unit_interval_raises(hand_tok):
    with pytest.raises(ConfigError):
        mask_tokens(hand_features(), hand_tok, 0.0, seed=(0, 0))
    with pytest.raises(ConfigError):
        mask_tokens(hand_features(), hand_tok, 1.0, seed=(0, 0))


def test_deterministic_for_a_seed_and_different_for_another(hand_tok):
    a = mask_tokens(hand_features(), hand_tok, RATE, seed=(7, 11))
    b = mask_tokens(hand_features(), hand_tok, RATE, seed=(7, 11))
    # Same seed given as the pipeline gives it: (python int, int64 tensor from enumerate).
    c = mask_tokens(hand_features(), hand_tok, RATE, seed=(7, tf.constant(11, tf.int64)))
    for key in ("masked_token_ids", "mask_positions", "mask_labels", "mask_weights"):
        np.testing.assert_array_equal(a[key].numpy(), b[key].numpy())
        np.testing.assert_array_equal(a[key].numpy(), c[key].numpy())
    d = mask_tokens(hand_features(), hand_tok, RATE, seed=(7, 12))
    w = a["mask_weights"].numpy() > 0
    assert not np.array_equal(a["mask_positions"].numpy()[w], d["mask_positions"].numpy()[w])


# --------------------------------------------------------------------------------------
# Big batch: the 80/10/10 split
# --------------------------------------------------------------------------------------

def big_batch(rows=512, length=64, vocab_size=3005, seed=0):
    rng = np.random.default_rng(seed)
    ids = np.full((rows, length), PAD, np.int32)
    mask = np.zeros((rows, length), np.int32)
    n_real = rng.integers(0, length - 1, size=rows)  # 0..62 words
    n_real[:256] = length - 2  # half the rows full
    for r, n in enumerate(n_real):
        ids[r, 0] = CLS
        ids[r, 1:n + 1] = rng.integers(5, vocab_size, size=n)
        ids[r, n + 1] = SEP
        mask[r, :n + 2] = 1
    return ids, mask, n_real


def test_80_10_10_split_on_a_big_batch():
    tok = make_tokenizer(3000, 64)
    ids, mask, n_real = big_batch(vocab_size=tok.vocabulary_size)
    out = mask_tokens({"token_ids": tf.constant(ids), "padding_mask": tf.constant(mask)},
                      tok, 0.15, seed=(3, 4))
    pos = out["mask_positions"].numpy()
    w = out["mask_weights"].numpy() > 0
    labels = out["mask_labels"].numpy()
    masked = out["masked_token_ids"].numpy()
    assert pos.shape[1] == max_predictions(64, 0.15) == 10

    # Counts per row: max(1, round(0.15 n)) (n <= 62 keeps it under the 10 slots).
    # (In float32, as the op computes it: 0.15f * 30 == 4.5 exactly, which rounds half to
    # even, to 4.)
    scaled = np.float32(0.15) * n_real.astype(np.float32)
    expected = np.where(n_real > 0, np.maximum(1, np.round(scaled)), 0)
    np.testing.assert_array_equal(w.sum(1), expected)

    rows = np.broadcast_to(np.arange(len(ids))[:, None], pos.shape)
    new = masked[rows[w], pos[w]]
    orig = labels[w]
    np.testing.assert_array_equal(orig, ids[rows[w], pos[w]])
    total = len(new)
    assert total > 3000
    frac_mask = np.mean(new == MASK)
    frac_same = np.mean(new == orig)
    frac_random = np.mean((new != MASK) & (new != orig))
    assert abs(frac_mask - 0.8) < 0.02, frac_mask
    assert abs(frac_same - 0.1) < 0.02, frac_same
    assert abs(frac_random - 0.1) < 0.02, frac_random
    # The random branch draws many different wordpieces, not one fixed id.
    assert len(np.unique(new[(new != MASK) & (new != orig)])) > 200
    # Nothing outside the selected positions changed.
    changed = masked != ids
    sel = np.zeros_like(changed)
    sel[rows[w], pos[w]] = True
    assert not (changed & ~sel).any()
    # Selection is spread over the sentence, not biased to its start: in the full rows,
    # about half of the selected positions lie in the first half (1..31 of 1..62).
    full = n_real == 62
    first_half = (pos[full][w[full]] <= 31).mean()
    assert abs(first_half - 0.5) < 0.05, first_half
