"""Duplicate-free batches: no text twice in one (global) batch of an in-batch-negative
objective on triplets; deferred rows, resumable streams, the pipeline and `fit`."""

import itertools

import numpy as np
import pytest

from conftest import TINY_VOCAB
from tfsent.data import pipelines
from tfsent.data.grouping import duplicate_free_batches, duplicate_free_stream
from tfsent.errors import ConfigError


def _check_no_duplicates(batches, texts):
    for batch in batches:
        seen = [t for i in batch for t in texts[i]]
        assert len(seen) == len(set(seen)), batch


def test_hand_computed_case():
    # Batch 2, in order: 0 opens the batch; 1 shares "a" with it -> deferred; 2 fills it.
    # The next batch takes the deferred 1 first, then 3.
    texts = [{"a", "b"}, {"a", "c"}, {"d", "e"}, {"f", "g"}]
    batches, deferred, left = duplicate_free_batches(texts, 2, [0, 1, 2, 3])
    np.testing.assert_array_equal(batches, [[0, 2], [1, 3]])
    assert (deferred, left) == (1, 0)


def test_random_rows_with_many_repeats():
    rng = np.random.default_rng(0)
    # Mined triplets: each anchor appears in 3 rows, hard negatives drawn from a small pool.
    texts = [frozenset({f"anchor{i // 3}", f"pos{i // 3}", f"neg{rng.integers(40)}"})
             for i in range(300)]
    order = rng.permutation(len(texts))
    batches, deferred, left = duplicate_free_batches(texts, 16, order)
    _check_no_duplicates(batches, texts)
    used = batches.ravel().tolist()
    assert len(used) == len(set(used))  # every row at most once per epoch
    assert len(used) + left == len(texts) and left < 16 + deferred
    assert deferred > 0
    # Plain shuffled batches of the same rows do contain duplicates (the case this fixes).
    plain = order[:len(order) // 16 * 16].reshape(-1, 16)
    with pytest.raises(AssertionError):
        _check_no_duplicates(plain, texts)


def test_stream_resumes_and_reshuffles():
    texts = [frozenset({f"a{i % 7}", f"p{i}"}) for i in range(60)]
    full = list(itertools.islice(duplicate_free_stream(texts, 5, seed=3), 30))
    resumed = list(itertools.islice(duplicate_free_stream(texts, 5, seed=3, skip_batches=17),
                                    13))
    for a, b in zip(full[17:], resumed):
        np.testing.assert_array_equal(a, b)
    per_epoch = len(duplicate_free_batches(texts, 5, np.arange(60))[0])
    assert not np.array_equal(full[0], full[per_epoch])  # epoch 2 is another permutation


def test_no_possible_batch_is_an_error():
    texts = [frozenset({"same", str(i)}) for i in range(10)]
    with pytest.raises(ConfigError, match="no duplicate-free batch of 2"):
        next(duplicate_free_stream(texts, 2, seed=0))


def test_pipeline_batches_have_no_repeated_text():
    from tfsent.testing import tiny_encoder

    tokenizer = tiny_encoder(TINY_VOCAB, max_seq_length=8).tokenizer
    words = TINY_WORDS_DISTINCT
    rows = [(words[i % 6], words[6 + i % 9], words[15 + i % 5], words[20 + i % 4])
            for i in range(36)]  # anchors repeat every 6 rows, negatives every 5 and 4
    ds = pipelines.triplet_dataset(rows, tokenizer, 4, seed=1, duplicate_free=True)
    for batch in itertools.islice(iter(ds), 20):
        ids = np.concatenate([batch["anchor"]["token_ids"], batch["positive"]["token_ids"],
                              batch["negative"]["token_ids"]])
        assert len({tuple(r) for r in ids.tolist()}) == len(ids)  # 4 + 4 + 8 distinct texts
    plain = pipelines.triplet_dataset(rows, tokenizer, 4, seed=1)
    repeats = 0
    for batch in itertools.islice(iter(plain), 20):
        ids = batch["anchor"]["token_ids"].numpy().tolist()
        repeats += len(ids) - len({tuple(r) for r in ids})
    assert repeats > 0


TINY_WORDS_DISTINCT = TINY_VOCAB[7:]


def test_fit_on_raw_triplets_is_duplicate_free_and_reshuffles():
    from tfsent.data import preprocessing
    from tfsent.methods import SimCSE
    from tfsent.testing import tiny_encoder

    model = SimCSE(tiny_encoder(TINY_VOCAB, max_seq_length=8), supervised=True)
    w = TINY_WORDS_DISTINCT
    rows = [(w[i % 5], w[5 + i % 10], w[15 + i % 7]) for i in range(40)]
    ds = preprocessing.dataset_for(model, rows, 4, shuffle=True, argument="x")
    epochs = [[b["anchor"]["token_ids"].numpy().tolist() for b in ds] for _ in range(2)]
    for batch in epochs[0]:
        assert len({tuple(r) for r in batch}) == len(batch)
    assert epochs[0] != epochs[1]
