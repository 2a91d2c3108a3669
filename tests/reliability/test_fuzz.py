"""Bounded fuzzing (hypothesis): random bytes into every file reader, random JSON into the
jsonl reader, random unicode into `encode` and the SavedModel. Each input gives data or an
InputError/ConfigError (a TfsentError naming the file), never another exception."""

import json
import os
import tempfile

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from conftest import TINY_VOCAB  # noqa: E402
from tfsent.data import readers  # noqa: E402
from tfsent.errors import TfsentError  # noqa: E402
from tfsent.data import senteval as senteval_data  # noqa: E402

# 500 examples per reader (the readers take microseconds); 100 for encode / SavedModel.
FUZZ = settings(max_examples=500, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
FUZZ_MODEL = settings(FUZZ, max_examples=100)

# Bytes that look like the formats (tabs, newlines, digits, labels) as well as noise.
FRAGMENTS = [b"\t", b"\n", b"\r\n", b"1.5", b"nan", b"-", b"entailment", b"neutral",
             b"contradiction", b"\xef\xbb\xbf", b"\xff", b"\xc3\xa9", b"a man plays", b" "]
FILE_BYTES = st.one_of(
    st.binary(max_size=300),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.binary(max_size=5)),
             max_size=40).map(b"".join))


def _write(folder, name, data):
    path = os.path.join(folder, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def _data_or_clear_error(fn, *args):
    try:
        return fn(*args)
    except TfsentError as e:
        assert str(e)  # a message, naming the file where there is one
        return None


FILE_READERS = {
    "sentences": readers.read_sentences,
    "scored_pairs": readers.read_scored_pairs,
    "triplets": readers.read_triplets_tsv,
    "pair_file": readers.read_pair_file,
    "nli_jsonl": readers.read_nli_pairs_jsonl,
    "legacy_lines": senteval_data.read_legacy_lines,
}


@pytest.mark.parametrize("reader", sorted(FILE_READERS))
@FUZZ
@given(data=FILE_BYTES)
def test_file_readers_on_random_bytes(reader, data):
    with tempfile.TemporaryDirectory() as folder:
        path = _write(folder, "input.txt", data)
        out = _data_or_clear_error(FILE_READERS[reader], path)
    if reader == "scored_pairs" and out is not None:
        assert all(np.isfinite(out[2]))   # nan / inf scores are rejected, not kept


@FUZZ
@given(s1=FILE_BYTES, s2=FILE_BYTES, labels=FILE_BYTES)
def test_senteval_nli_reader_on_random_bytes(s1, s2, labels):
    with tempfile.TemporaryDirectory() as folder:
        for name, data in (("s1", s1), ("s2", s2), ("labels", labels)):
            _write(folder, f"{name}.dev", data)
        _data_or_clear_error(readers.read_nli_pairs_senteval, folder, "dev")


@FUZZ
@given(sts=FILE_BYTES, sick=FILE_BYTES)
def test_sts_readers_on_random_bytes(sts, sick):
    with tempfile.TemporaryDirectory() as folder:
        _write(folder, "STS/STSBenchmark/sts-test.csv", sts)
        _write(folder, "SICK/SICK_test_annotated.txt", sick)
        for fn in (senteval_data.read_stsbenchmark, senteval_data.read_sick):
            out = _data_or_clear_error(fn, folder, "test")
            if out is not None:
                assert np.all(np.isfinite(out[2]))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.sampled_from(["sentence1", "sentence2", "gold_label", "x"]), children,
                      max_size=4),
    max_leaves=8)


@FUZZ
@given(rows=st.lists(JSON_VALUES, max_size=5))
@example(rows=[{"sentence1": 5, "sentence2": "a", "gold_label": "entailment"}])
@example(rows=[{"sentence1": "a", "sentence2": None, "gold_label": "neutral"}])
@example(rows=[{"sentence1": "a", "sentence2": "b", "gold_label": ["entailment"]}])
def test_nli_jsonl_on_random_json(rows):
    with tempfile.TemporaryDirectory() as folder:
        path = _write(folder, "nli.jsonl",
                      "\n".join(json.dumps(r) for r in rows).encode("utf-8"))
        out = _data_or_clear_error(readers.read_nli_pairs_jsonl, path)
    for p, h, y in out or []:
        assert isinstance(p, str) and isinstance(h, str) and y in readers.NLI_LABELS


TEXTS = st.lists(st.text(max_size=60), min_size=1, max_size=6)


@pytest.fixture(scope="module")
def tiny():
    from tfsent.testing import tiny_encoder

    return tiny_encoder(TINY_VOCAB, max_seq_length=16)


@FUZZ_MODEL
@given(texts=TEXTS)
def test_encode_random_unicode(tiny, texts):
    emb = tiny.encode(texts, batch_size=4, verbose=0)
    assert emb.shape == (len(texts), 16) and np.all(np.isfinite(emb))


@pytest.fixture(scope="module")
def served(tiny, tmp_path_factory):
    import tensorflow as tf

    from tfsent.formats.saved_model import export_encoder

    path = export_encoder(tiny, str(tmp_path_factory.mktemp("fuzz_export")))
    return tf.saved_model.load(path).signatures["serving_default"]


@FUZZ_MODEL
@given(texts=TEXTS)
def test_saved_model_random_unicode(tiny, served, texts):
    import tensorflow as tf

    out = served(sentences=tf.constant(texts))["embedding"].numpy()
    assert out.shape == (len(texts), 16) and np.all(np.isfinite(out))
    np.testing.assert_allclose(out, tiny.encode(texts, verbose=0), atol=1e-4)
