"""Training and evaluation files as people have them: line ends, byte-order marks, header
rows, empty columns, broken JSON escapes, compressed files. Each case either reads what the
file means or raises InputError naming the file (and line)."""

import gzip
import json
import os

import pytest

from tfsent.data import beir, pairs, readers, senteval
from tfsent.data.textio import read_json_lines, read_lines
from tfsent.errors import InputError
from tfsent.search import mined_files


def _write(tmp_path, name, text, encoding="utf-8"):
    path = tmp_path / name
    path.write_bytes(text.encode(encoding) if isinstance(text, str) else text)
    return str(path)


def test_line_ends_and_byte_order_marks(tmp_path):
    # old Mac OS files end lines in a lone CR: three sentences, not one
    assert read_lines(_write(tmp_path, "mac.txt", "one\rtwo\rthree\r")) == [
        "one", "two", "three"]
    assert read_lines(_write(tmp_path, "dos.txt", "one\r\ntwo\r\n")) == ["one", "two"]
    assert read_lines(_write(tmp_path, "end.txt", "a\nb")) == ["a", "b"]
    assert read_lines(_write(tmp_path, "end.txt", "a\n\nb\n"), strip_newline=False) == [
        "a\n", "\n", "b\n"]
    # a UTF-8 byte-order mark is dropped also when the file is read as latin-1
    legacy = _write(tmp_path, "legacy.txt", b"\xef\xbb\xbfcaf\xe9\nna\xefve\n")
    assert senteval.read_legacy_lines(legacy) == ["caf\u00e9", "na\u00efve"]
    assert read_lines(_write(tmp_path, "bom.txt", "\ufeffhello\n")) == ["hello"]



def test_gzip_files_are_read_as_their_text(tmp_path):
    """sentence-transformers' data sets come as .tsv.gz / .jsonl.gz: read as the text they
    hold (known by the magic bytes, the name without .gz picks the reader)."""
    def zipped(name, text):
        path = tmp_path / name
        path.write_bytes(gzip.compress(text.encode("utf-8")))
        return str(path)

    assert readers.read_sentences(zipped("sentences.txt.gz", "\ufeffone\r\ntwo\n")) == [
        "one", "two"]
    assert readers.read_sentences(zipped("no_suffix", "one\n")) == ["one"]
    trip = zipped("AllNLI.tsv.gz", "premise\tentailment\tcontradiction\np\te\tc\n")
    assert readers.read_triplets_tsv(trip) == [("p", "e", "c")]
    assert readers.read_nli_triplets(trip) == [("p", "e", "c")]
    rows = zipped("pairs.jsonl.gz", '{"anchor": "q", "positive": "p", "negative_1": "n"}\n')
    assert pairs.read_training_pairs(rows) == [("q", "p", "n")]
    nli = zipped("nli.JSONL.GZ",
                 '{"sentence1": "p", "sentence2": "h", "gold_label": "entailment"}\n')
    assert readers.read_nli_pairs(nli) == [("p", "h", "entailment")]
    assert pairs.read_training_pairs(zipped("p.tsv.gz", "q\tp\n")) == [("q", "p")]
    # tfsent.mine writes what the readers read back.
    out = str(tmp_path / "mined.jsonl.gz")
    mined_files.write_rows(out, [("q", "p", "n1", "n2")])
    assert gzip.decompress(open(out, "rb").read()).startswith(b'{"anchor": "q"')
    assert pairs.read_training_pairs(out) == [("q", "p", "n1", "n2")]
    broken = tmp_path / "broken.txt.gz"
    broken.write_bytes(gzip.compress(b"one\ntwo\n" * 100)[:30])
    with pytest.raises(InputError, match=r"broken.txt.gz: not a readable gzip file"):
        readers.read_sentences(str(broken))


def test_header_rows_are_skipped(tmp_path):
    trip = _write(tmp_path, "nli.tsv", "sent0\tsent1\thard_neg\np\te\tc\n")
    assert readers.read_triplets_tsv(trip) == [("p", "e", "c")]
    trip = _write(tmp_path, "nli.tsv", "Premise\tEntailment\tContradiction\np\te\tc\n")
    assert readers.read_triplets_tsv(trip) == [("p", "e", "c")]
    mined = _write(tmp_path, "mined.tsv",
                   "anchor\tpositive\tnegative_1\tnegative_2\nq\tp\tn1\tn2\n")
    assert readers.read_triplets_tsv(mined) == [("q", "p", "n1", "n2")]
    two = _write(tmp_path, "pairs.tsv", "sentence_a\tsentence_b\na\tb\n")
    assert readers.read_pair_file(two) == [("a", "b")]
    twice = _write(tmp_path, "twice.tsv", "sentence_a\tsentence_b\nSentence_A\tsentence_b\n")
    assert readers.read_pair_file(twice) == [("Sentence_A", "sentence_b")]
    twice = _write(tmp_path, "twice.tsv", "premise\tentailment\tcontradiction\n" * 2)
    assert readers.read_triplets_tsv(twice) == [("premise", "entailment", "contradiction")]
    two = _write(tmp_path, "anchors.tsv", "\nanchor\tpositive\nq\td\n")
    assert mined_files.read_pairs(two) == [("q", "d")]
    scored = _write(tmp_path, "scored.tsv", "sentence1\tsentence2\tscore\na\tb\t4.5\n")
    assert readers.read_scored_pair_tsv(scored) == [("a", "b", 4.5)]
    dev = _write(tmp_path, "dev.tsv", "score\tsentence1\tsentence2\n4\ta\tb\n1\tc\td\n")
    assert readers.read_dev_pairs(dev)[2] == [4.0, 1.0]
    # only the first row can be a header: later it is a row like any other
    late = _write(tmp_path, "late.tsv", "a\tb\t1\nsentence1\tsentence2\tscore\n")
    with pytest.raises(InputError, match=r"late.tsv, line 2: score 'score' is not a number"):
        readers.read_scored_pair_tsv(late)


def test_an_empty_column_is_named(tmp_path):
    path = _write(tmp_path, "pairs.tsv", "a\tb\nc\t \n")
    with pytest.raises(InputError, match=r"pairs.tsv, line 2: empty sentence_b column"):
        readers.read_pair_file(path)
    path = _write(tmp_path, "trip.tsv", "p\te\tc\np\t\tc\n")
    with pytest.raises(InputError, match=r"trip.tsv, line 2: empty entailment column"):
        readers.read_triplets_tsv(path)
    path = _write(tmp_path, "ntuple.tsv", "q\tp\tn1\tn2\nq\tp\tn1\t\n")
    with pytest.raises(InputError, match=r"ntuple.tsv, line 2: empty negative_2 column"):
        readers.read_triplets_tsv(path)
    path = _write(tmp_path, "trip.tsv", "p\te\tc\np\te\n")
    with pytest.raises(InputError, match=r"line 2: expected 3 tab-separated columns "
                                         r"\(premise, entailment, contradiction\), found 2"):
        readers.read_triplets_tsv(path)


def test_nli_rows_with_an_empty_sentence_are_skipped(tmp_path):
    snli = tmp_path / "SNLI"
    snli.mkdir()
    (snli / "s1.dev").write_text("a man\nthe dog\n \n", encoding="utf-8")
    (snli / "s2.dev").write_text("a person\n\na cat\n", encoding="utf-8")
    (snli / "labels.dev").write_text("entailment\nneutral\ncontradiction\n")
    assert readers.read_nli_pairs_senteval(str(snli), "dev") == [
        ("a man", "a person", "entailment")]
    rows = [{"sentence1": "p", "sentence2": "h", "gold_label": "entailment"},
            {"sentence1": "p", "sentence2": "  ", "gold_label": "contradiction"}]
    path = _write(tmp_path, "nli.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    assert readers.read_nli_pairs_jsonl(path) == [("p", "h", "entailment")]


def test_an_empty_sentence_in_an_sts_or_sick_file_is_named(tmp_path):
    sts = _write(tmp_path, "sts-train.csv", "g\tf\t2012\t1\t4.0\ta\tb\n"
                                            "g\tf\t2012\t2\t3.0\t \tb\n")
    with pytest.raises(InputError, match=r"sts-train.csv, line 2: empty sentence"):
        readers.read_scored_training_pairs(sts)
    sick = _write(tmp_path, "SICK_train.txt", "pair_ID\tsentence_A\tsentence_B\t"
                  "relatedness_score\tentailment_judgment\n1\ta\t\t4.5\tNEUTRAL\n")
    with pytest.raises(InputError, match=r"SICK_train.txt, line 2: empty sentence"):
        readers.read_scored_training_pairs(sick)


def test_a_stsb_dev_set_needs_two_different_scores(tmp_path):
    folder = tmp_path / "downstream" / "STS" / "STSBenchmark"
    folder.mkdir(parents=True)
    (folder / "sts-dev.csv").write_text("g\tf\t2012\t1\t3.0\ta\tb\ng\tf\t2012\t2\t3.0\tc\td\n")
    with pytest.raises(InputError, match=r"stsb: a dev set needs at least two different "
                                         r"gold scores .*2 pair\(s\), all scored 3.0"):
        readers.read_dev_pairs("stsb", str(tmp_path / "downstream"))


def test_a_lone_surrogate_escape_in_jsonl_is_named(tmp_path):
    broken = '"text with \\ud83d half an emoji"'
    path = _write(tmp_path, "pairs.jsonl", '{"anchor": "q", "positive": "p"}\n'
                  f'{{"anchor": "q", "positive": {broken}}}\n')
    with pytest.raises(InputError, match=r"pairs.jsonl, line 2: field 'positive' holds an "
                                         r"unpaired surrogate"):
        pairs.read_training_pairs(path)
    path = _write(tmp_path, "snli.jsonl", '{"sentence1": "a", "sentence2": '
                  f'{broken}, "gold_label": "neutral"}}\n')
    with pytest.raises(InputError, match=r"snli.jsonl, line 1: field 'sentence2'"):
        readers.read_nli_pairs_jsonl(path)
    path = _write(tmp_path, "corpus.jsonl", f'{{"_id": "d1", "text": {broken}}}\n')
    with pytest.raises(InputError, match=r"corpus.jsonl, line 1: field 'text'"):
        beir.read_corpus(path)
    # a surrogate pair written as two escapes is one character, and fine
    path = _write(tmp_path, "ok.jsonl", '{"_id": "d1", "text": "\\ud83d\\ude00"}\n')
    assert [obj["text"] for _, obj in read_json_lines(path)] == ["\U0001F600"]


def test_a_gzipped_beir_folder_reads_as_the_plain_one(tmp_path):
    """corpus.jsonl.gz, queries.jsonl.gz, qrels/<split>.tsv.gz (files gzipped in place, as
    some mirrors ship BEIR sets): every reader gives what the plain folder gives; a
    missing split names the gzipped splits that are there."""
    import shutil

    from test_retrieval import SMALL_CORPUS, SMALL_QUERIES, write_beir
    from tfsent.evaluation.rerank import count_documents
    from tfsent.search.mining import beir_pairs

    qrels = {"test": [("q1", "d1", 2), ("q2", "d3", 1)], "train": [("q1", "d1", 1)]}
    plain = write_beir(tmp_path / "plain", SMALL_CORPUS, SMALL_QUERIES, qrels)
    zipped = str(tmp_path / "zipped")
    shutil.copytree(plain, zipped)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv", "qrels/train.tsv"):
        path = os.path.join(zipped, name)
        with open(path, "rb") as f:
            data = f.read()
        with open(path + ".gz", "wb") as f:
            f.write(gzip.compress(data))
        os.remove(path)
    a, b = beir.read_split(plain, "test"), beir.read_split(zipped, "test")
    assert (b.corpus.ids, b.corpus.texts, b.query_ids, b.query_texts, b.qrels) == (
        a.corpus.ids, a.corpus.texts, a.query_ids, a.query_texts, a.qrels)
    assert beir.read_training_pairs(zipped) == beir.read_training_pairs(plain)
    assert beir_pairs(b) == beir_pairs(a)
    assert count_documents(zipped) == count_documents(plain) == len(SMALL_CORPUS)
    with pytest.raises(InputError, match=r"qrels/dev.tsv: missing BEIR file \(qrels "
                                         r"splits here: test, train\)"):
        beir.check_folder(zipped, "dev")


def test_a_beir_title_that_is_not_a_string_is_refused(tmp_path):
    path = _write(tmp_path, "corpus.jsonl", '{"_id": "d1", "text": "t", "title": 0}\n')
    with pytest.raises(InputError, match=r"corpus.jsonl: document 'd1': title is not a "
                                         r"string"):
        beir.read_corpus(path)
    path = _write(tmp_path, "corpus.jsonl", '{"_id": "d1", "text": "t", "title": null}\n')
    assert beir.read_corpus(path).texts == ["t"]


def test_pairs_files_by_any_name_or_case(tmp_path):
    for name in ("PAIRS.TSV", "pairs.txt", "pairs"):
        path = _write(tmp_path, name, "anchor\tpositive\nq\td\n")
        assert pairs.read_training_pairs(path) == [("q", "d")], name
    path = _write(tmp_path, "PAIRS.JSONL", '{"anchor": "q", "positive": "d"}\n')
    assert pairs.read_training_pairs(path) == [("q", "d")]
    nli = _write(tmp_path, "SNLI.JSONL", json.dumps(
        {"sentence1": "p", "sentence2": "h", "gold_label": "entailment"}) + "\n")
    assert pairs.read_training_pairs(nli, hard_negatives=False) == [("p", "h")]
    assert not os.path.exists(tmp_path / "missing.tsv")
    with pytest.raises(InputError, match="missing.tsv: file not found"):
        pairs.read_training_pairs(str(tmp_path / "missing.tsv"))
