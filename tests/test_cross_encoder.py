"""Cross-encoder rerankers: in-graph pair tokenization against Hugging Face's tokenizers
(every family), the losses against NumPy transcriptions and hand-computed cases, training
on a tiny checkpoint, and the `score` SavedModel served in a fresh process."""

import numpy as np
import pytest
import tensorflow as tf

from hf_checkpoints import FAMILIES, demo_corpus, hf_tokenizer
from tfsent.encoders.huggingface import make_tokenizer
from tfsent.encoders.tokenizers import longest_first_lengths

MAX_LEN = 24

PAIR_CASES = [
    ("short query", "word " * 40),            # second text truncated, first kept whole
    ("word " * 40, "short passage"),          # first truncated
    ("alpha " * 30, "beta " * 30),            # both long, equal: halves (odd budget)
    ("alpha " * 30, "beta " * 25),            # both long, first longer
    ("alpha " * 25, "beta " * 30),            # both long, second longer
    # (an empty passage is left out: transformers takes text_pair="" for "no pair")
    ("", "an empty query"),
    ("Café crème à la française", "東京は日本の首都です。 emoji 😀"),
    ("x" * 150, "it's  two   spaces"),
]


@pytest.fixture(scope="module")
def pair_tokenizers(hf_checkpoint_dirs):
    return {family: {n: make_tokenizer(family, path, n, False, 10 ** 6) for n in (MAX_LEN, 25)}
            for family, path in hf_checkpoint_dirs.items()}


@pytest.mark.parametrize("family", FAMILIES)
def test_pair_ids_equal_hugging_face(family, hf_checkpoint_dirs, pair_tokenizers):
    reference = hf_tokenizer(hf_checkpoint_dirs[family])
    corpus = demo_corpus()
    pairs = PAIR_CASES + list(zip(corpus[:20], corpus[20:40]))
    first, second = (tf.constant([p[i] for p in pairs]) for i in (0, 1))
    for max_len in (MAX_LEN, 25):  # both parities of the budget
        tokenizer = pair_tokenizers[family][max_len]
        out = tf.function(tokenizer.tokenize_pairs)(first, second)
        ids, mask = out["token_ids"].numpy(), out["padding_mask"].numpy()
        for row, (a, b) in enumerate(pairs):
            want = reference(a, b, truncation="longest_first", max_length=max_len)
            assert ids[row][mask[row] == 1].tolist() == want["input_ids"], (family, a, b)
            if "segment_ids" in out:
                got = out["segment_ids"].numpy()[row][mask[row] == 1].tolist()
                assert got == want["token_type_ids"], (family, a, b)
        assert "segment_ids" in out or family != "bert"
        assert (mask.sum(1) == max_len).sum() >= 5  # truncation exercised


def test_longest_first_lengths_by_hand():
    # budget 10: (3, 20) -> (3, 7); (20, 3) -> (7, 3); (8, 8) -> (5, 5); (9, 6) -> (5, 5);
    # (6, 7) -> (5, 5); budget 9: (8, 8) -> (4, 5) (tie: second gets the odd piece);
    # (12, 6) -> (5, 4); fits: (4, 5) -> (4, 5).
    got = longest_first_lengths([3, 20, 8, 9, 6, 4], [20, 3, 8, 6, 7, 5], 10)
    assert [g.numpy().tolist() for g in got] == [[3, 7, 5, 5, 5, 4], [7, 3, 5, 5, 5, 5]]
    got = longest_first_lengths([8, 12], [8, 6], 9)
    assert [g.numpy().tolist() for g in got] == [[4, 5], [5, 4]]
