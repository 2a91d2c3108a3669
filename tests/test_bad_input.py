"""Bad input: documented results or errors naming the file and line."""

import numpy as np
import pytest

from tfsent.data import readers
from tfsent.data.textio import read_lines
from tfsent.encoders import check_pooling, load_encoder
from tfsent.errors import ConfigError, InputError


@pytest.fixture(scope="module")
def encoder(tiny_encoder_dir):
    return load_encoder(tiny_encoder_dir, max_seq_length=16)


def test_empty_list_gives_empty_array(encoder):
    out = encoder.encode([])
    assert out.shape == (0, encoder.hidden_dim) and out.dtype == np.float32


def test_empty_and_whitespace_strings_encode_like_cls_sep(encoder):
    out = encoder.encode(["", "   ", "\t\n"])
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out[0], out[1], atol=1e-6)
    np.testing.assert_allclose(out[0], out[2], atol=1e-6)


def test_long_text_is_truncated(encoder):
    long = "the man plays " * 5000
    feats = encoder.tokenize([long])
    assert feats["token_ids"].shape[1] == 16
    assert int(feats["token_ids"][0, -1]) == encoder.tokenizer.sep_id
    # Same embedding as its own first 14 wordpieces.
    short = " ".join(long.split()[:14])
    np.testing.assert_allclose(encoder.encode([long]), encoder.encode([short]), atol=1e-5)


def test_encode_rejects_non_strings(encoder):
    with pytest.raises(InputError, match="sentence 1"):
        encoder.encode(["ok", None])
    with pytest.raises(InputError, match="list of strings"):
        encoder.encode("one string")


def test_missing_file(tmp_path):
    path = tmp_path / "nope.txt"
    with pytest.raises(InputError, match="nope.txt: file not found"):
        read_lines(path)
    with pytest.raises(InputError, match="nope.txt"):
        readers.read_sentences(str(path))


def test_non_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes("first line\nsecond ok\nthird \xff bad\n".encode("latin-1"))
    with pytest.raises(InputError, match=r"bad.txt, line 3: not valid UTF-8"):
        readers.read_sentences(str(path))


def test_malformed_rows_name_file_and_line(tmp_path):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("4.5\ta\tb\n3.0\tonly two\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"pairs.tsv, line 2: expected 3"):
        readers.read_scored_pairs(str(pairs))
    pairs.write_text("4.5\ta\tb\nhigh\ta\tb\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"pairs.tsv, line 2: score 'high'"):
        readers.read_scored_pairs(str(pairs))
    trip = tmp_path / "trip.tsv"
    trip.write_text("p\te\tc\np\t\tc\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"trip.tsv, line 2"):
        readers.read_triplets_tsv(str(trip))
    nli = tmp_path / "snli.jsonl"
    nli.write_text('{"sentence1": "a", "sentence2": "b", "gold_label": "entailment"}\n{oops\n')
    with pytest.raises(InputError, match=r"snli.jsonl, line 2"):
        readers.read_nli_pairs_jsonl(str(nli))


def test_a_dev_set_of_one_gold_score_is_refused(tmp_path):
    """Spearman cannot rank equal gold scores: the run used to take it, then call its
    NaN dev score a collapse of the model."""
    dev = tmp_path / "dev.tsv"
    dev.write_text("3\ta\tb\n3\tc\td\n3\te\tf\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"dev.tsv: a dev set needs at least two different "
                                         r"gold scores .*3 pair\(s\), all scored 3.0"):
        readers.read_dev_pairs(str(dev))
    dev.write_text("3\ta\tb\n1\tc\td\n", encoding="utf-8")
    assert readers.read_dev_pairs(str(dev))[2] == [3.0, 1.0]


def test_blank_file_is_an_error(tmp_path):
    path = tmp_path / "blank.txt"
    path.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(InputError, match="blank.txt: no sentences"):
        readers.read_sentences(str(path))
    # a .jsonl given as unlabelled sentences would train on its JSON text
    rows = tmp_path / "queries.jsonl"
    rows.write_text('{"_id": "0", "text": "global warming"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"queries.jsonl: unlabelled sentences are read from "
                                         r"a text file"):
        readers.read_training_sentences(str(rows))


def test_bad_encoder_names():
    with pytest.raises(InputError, match="encoder directory not found"):
        load_encoder("./no/such/dir")
    with pytest.raises(ConfigError, match="unknown pooling"):
        check_pooling("max")
