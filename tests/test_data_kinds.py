"""The training-data kinds (`tfsent.data.kinds`) and the source grammar
(`tfsent.data.sources`): the DataKind table against the method registry and the readers,
dispatch through the records, and the parser on hand-written sources."""

import os

import pytest
import tensorflow as tf

from tfsent.data import kinds, pairs, readers, sources
from tfsent.errors import ConfigError
from tfsent.methods import REGISTRY
from tfsent.methods.spec import DATA_KINDS


class _Config(dict):
    """The reading fields of a run config (attribute access, as tfsent's Config)."""
    __getattr__ = dict.__getitem__


CONFIG = _Config(train_split="train", hard_negatives=True, eval_data_dir=None,
                 positive_threshold=4.0)


def test_every_kind_is_one_record_with_a_reader_and_a_pipeline():
    assert DATA_KINDS == kinds.DATA_KINDS == tuple(kinds.KINDS)
    assert set(DATA_KINDS) == {"sentences", "sentences_mlm", "triplets", "pairs",
                               "cross_pairs", "nli_pairs", "embedding_pairs",
                               "distill_sentences", "scored_pairs"}
    for name, kind in kinds.KINDS.items():
        assert kind.name == name and kind.doc and kind.accepts
        assert callable(kind.read) and callable(kind.pipeline)
        assert kind.embedder in (None, "frozen encoder", "teacher")
    assert {n for n, k in kinds.KINDS.items() if k.embedder} == {"embedding_pairs",
                                                                 "distill_sentences"}
    assert {spec.data_kind for spec in REGISTRY.values()} <= set(DATA_KINDS)
    with pytest.raises(ConfigError, match="unknown data kind 'poems'"):
        kinds.get_kind("poems")


def test_reading_a_source_as_each_kind_is_the_readers():
    demo_triplets = readers.read_triplets_tsv(readers.DEMO_TRIPLETS)
    expected = {
        "sentences": readers.read_sentences(readers.DEMO_SENTENCES),
        "triplets": demo_triplets,
        "pairs": demo_triplets,
        "cross_pairs": demo_triplets,
        "nli_pairs": readers.read_nli_pairs("demo"),
        "embedding_pairs": [(p, e) for p, e, _ in demo_triplets],
    }
    expected["sentences_mlm"] = expected["distill_sentences"] = expected["sentences"]
    for name in DATA_KINDS:
        if name == "scored_pairs":  # the demo's scored pairs are its dev set: refused
            with pytest.raises(ConfigError, match="demo dev set"):
                kinds.read_training_examples(name, "demo", CONFIG)
            continue
        assert kinds.read_training_examples(name, "demo", CONFIG) == expected[name], name
    assert kinds.read_training_examples("triplets", "demo_nli", CONFIG) == demo_triplets
    no_negatives = _Config(CONFIG, hard_negatives=False)
    assert kinds.read_training_examples("pairs", "demo_nli", no_negatives) == [
        (p, e) for p, e, _ in demo_triplets]
    assert pairs.read_training_pairs("demo") == demo_triplets


def test_the_pipeline_of_a_kind_is_its_records():
    rows = [("a1", "p1", "n1"), ("a2", "p2", "n2"), ("a3", "p3", "n3")]

    def tokenizer(strings):  # the strings themselves, to read back
        return {"text": strings}

    batch = next(iter(kinds.dataset_for_kind("pairs", rows, tokenizer, 3, shuffle=False,
                                             query_prompt="q: ", document_prompt="d: ")))
    assert [t.decode() for t in batch["anchor"]["text"].numpy()] == ["q: a1", "q: a2", "q: a3"]
    assert [t.decode() for t in batch["negative"]["text"].numpy()] == ["d: n1", "d: n2", "d: n3"]
    embedded = kinds.dataset_for_kind(
        "embedding_pairs", [("x", "y"), ("y", "z")], None, 2, shuffle=False, repeat=False,
        embed=lambda s: tf.one_hot([ord(c) - ord("x") for c in s], 3).numpy())
    batch = next(iter(embedded))
    assert batch["a"].numpy().argmax(1).tolist() == [0, 1]
    assert batch["b"].numpy().argmax(1).tolist() == [1, 2]


def test_the_source_grammar(tmp_path):
    def parsed(text):
        s = sources.parse_source(text)
        return s.scheme, s.location, s.split, s.option

    assert parsed("beir:data/scifact") == ("beir", "data/scifact", None, None)
    assert parsed("beir:data/scifact:dev") == ("beir", "data/scifact", "dev", None)
    # Windows-ish paths: a drive colon is no split; a split after it still is.
    assert parsed("beir:C:\\data\\scifact") == ("beir", "C:\\data\\scifact", None, None)
    assert parsed("beir:C:\\data\\scifact:test") == ("beir", "C:\\data\\scifact", "test", None)
    # A folder whose name holds a colon: the whole name when that folder exists.
    odd = tmp_path / "run:2"
    odd.mkdir()
    assert parsed(f"beir:{odd}") == ("beir", str(odd), None, None)
    assert parsed(f"beir:{tmp_path}/run:2:dev") == ("beir", str(odd), "dev", None)
    assert parsed("tfds:snli") == ("tfds", "snli", None, None)
    assert parsed("tfds:wiki:title") == ("tfds", "wiki", None, "title")
    assert parsed("demo") == ("demo", "demo", None, None)
    assert parsed("demo_nli") == ("demo", "demo_nli", None, None)
    assert parsed("pairs.jsonl") == ("path", "pairs.jsonl", None, None)
    assert parsed("C:\\corpus.txt") == ("path", "C:\\corpus.txt", None, None)
    assert sources.parse_beir("beir:d:dev", "test") == ("d", "dev")
    assert sources.parse_beir("beir:d", "train") == ("d", "train")
    assert sources.parse_beir(os.path.join("a", "b"), "dev", bare=True) == (
        os.path.join("a", "b"), "dev")
    assert sources.parse_sources("a.txt, beir:b:train") == ["a.txt", "beir:b:train"]
    assert sources.parse_sources(["a.txt", "demo"]) == ["a.txt", "demo"]
    for bad, message in (("beir:", "'beir:': no folder given"),
                         ("beir::dev", "'beir::dev': no folder given"),
                         ("tfds:", "'tfds:': no dataset name"),
                         ("  ", "data source '  ' is empty"),
                         (3, "a data source is a string, got int 3")):
        with pytest.raises(ConfigError, match=message):
            sources.parse_source(bad)
    with pytest.raises(ConfigError, match="'demo' is not a retrieval source"):
        sources.parse_beir("demo")
    with pytest.raises(ConfigError, match=r"train_data='a,,b' names an empty source"):
        sources.parse_sources("a,,b")
    with pytest.raises(ConfigError, match="names a.txt more than once"):
        sources.parse_sources("a.txt,a.txt")
