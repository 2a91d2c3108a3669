"""SentEval-layout readers on tiny trees written by the tests."""

import os

import numpy as np
import pytest

from evalfixtures import build_tree, write
from tfsent.data.textio import read_lines
from tfsent.errors import ConfigError, InputError
from tfsent.data import senteval as sd


@pytest.fixture()
def tree(tmp_path):
    info = build_tree(tmp_path)
    return str(tmp_path), info


def test_sts_year_drops_empty_gold_and_keeps_order(tree):
    root, info = tree
    data = sd.read_sts_year(root, "STS12")
    assert list(data) == list(sd.STS_SUBSETS["STS12"])
    for name, (s1, s2, gold) in data.items():
        want = info["STS12"][name]
        assert s1 == [a for a, _, _ in want] and s2 == [b for _, b, _ in want]
        np.testing.assert_allclose(gold, [g for _, _, g in want])
        assert gold.dtype == np.float64
    assert len(data["MSRvid"][2]) == 15 - 1  # one empty gold line


def test_sts_whitespace_is_normalised(tmp_path):
    inp = write(tmp_path, "in.txt", "  a   b\t c  d \n")
    gs = write(tmp_path, "gs.txt", "3.5\n")
    assert sd.read_sts_subset(inp, gs)[:2] == (["a b"], ["c d"])


def test_sts_malformed_pair_names_file_and_line(tmp_path):
    inp = write(tmp_path, "STS.input.x.txt", "a\tb\nonly one column\n")
    gs = write(tmp_path, "STS.gs.x.txt", "1\n2\n")
    with pytest.raises(InputError, match=r"STS.input.x.txt, line 2: expected 2") as e:
        sd.read_sts_subset(inp, gs)
    assert e.value.line == 2 and e.value.path == inp


def test_sts_non_numeric_gold_names_gold_file(tmp_path):
    inp = write(tmp_path, "in.txt", "a\tb\nc\td\n")
    gs = write(tmp_path, "gs.txt", "1\nfive\n")
    with pytest.raises(InputError, match=r"gs.txt, line 2: gold score 'five'"):
        sd.read_sts_subset(inp, gs)


def test_sts_line_count_mismatch(tmp_path):
    inp = write(tmp_path, "in.txt", "a\tb\nc\td\n")
    gs = write(tmp_path, "gs.txt", "1\n")
    with pytest.raises(InputError, match="1 gold lines for 2 input pairs"):
        sd.read_sts_subset(inp, gs)


def test_sts_missing_folder_and_file(tree, tmp_path):
    root, _ = tree
    with pytest.raises(InputError, match="STS13-en-test: STS folder not found"):
        sd.read_sts_year(root, "STS13")
    os.remove(os.path.join(root, "STS/STS12-en-test/STS.gs.MSRpar.txt"))
    with pytest.raises(InputError, match=r"STS.gs.MSRpar.txt: file not found"):
        sd.read_sts_year(root, "STS12")
    with pytest.raises(ConfigError, match="STS17"):
        sd.read_sts_year(root, "STS17")


def test_stsbenchmark_splits_and_extra_columns(tree):
    root, info = tree
    for split in ("train", "dev", "test"):
        s1, s2, gold = sd.read_stsbenchmark(root, split)
        assert s1 == [a for a, _, _ in info[f"STSB-{split}"]]
        np.testing.assert_allclose(gold, [g for _, _, g in info[f"STSB-{split}"]])
    path = write(root, "STS/STSBenchmark/sts-test.csv",
                 "g\tf\ty\t1\t4.5\ta  b\tc\textra\tmore\n\ng\tf\ty\t2\t1\td\te\n")
    assert sd.read_stsbenchmark(root, "test")[0] == ["a b", "d"]
    write(root, "STS/STSBenchmark/sts-test.csv", "g\tf\ty\t1\t4.5\ta\tb\ng\tf\t2\t1\td\n")
    with pytest.raises(InputError, match=r"sts-test.csv, line 2: expected at least 7"):
        sd.read_stsbenchmark(root, "test")
    write(root, "STS/STSBenchmark/sts-test.csv", "g\tf\ty\t1\tx4.5\ta\tb\n")
    with pytest.raises(InputError, match=r"line 1: score 'x4.5' is not a number") as e:
        sd.read_stsbenchmark(root, "test")
    assert e.value.path == path
    with pytest.raises(ConfigError, match="validation"):
        sd.read_stsbenchmark(root, "validation")


def test_sick_header_trial_is_dev_and_labels(tree):
    root, info = tree
    s1, s2, gold = sd.read_sick(root, "dev")
    assert len(gold) == 15 and s1[0] == info["SICK-dev"][0][0]
    *_, labels = sd.read_sick(root, "test", with_labels=True)
    assert labels == ["NEUTRAL"] * 15
    write(root, "SICK/SICK_train.txt", "header\n1\ta\tb\t3.0\tNEUTRAL\n2\ta\tb\n")
    with pytest.raises(InputError, match=r"SICK_train.txt, line 3: expected at least 4"):
        sd.read_sick(root, "train")


def test_non_utf8_strict_file_names_line(tree):
    root, _ = tree
    write(root, "STS/STSBenchmark/sts-dev.csv",
          b"g\tf\ty\t1\t4.5\ta\tb\ng\tf\ty\t2\t1\tcaf\xe9\tb\n")
    with pytest.raises(InputError, match=r"sts-dev.csv, line 2: not valid UTF-8"):
        sd.read_stsbenchmark(root, "dev")


def test_binary_tasks_labels_blank_lines_and_latin1(tree):
    root, _ = tree
    sentences, labels = sd.read_binary(root, "MR")
    assert len(sentences) == 50 and labels.tolist() == [1] * 25 + [0] * 25
    write(root, "CR/custrev.pos", b"caf\xe9  ok .\n\nfine\n")          # latin-1 bytes
    write(root, "CR/custrev.neg", "caf\u00e9 bad\n".encode("utf-8"))   # UTF-8
    sentences, labels = sd.read_binary(root, "CR")
    assert sentences == ["caf\u00e9 ok .", "", "fine", "caf\u00e9 bad"]
    assert labels.tolist() == [1, 1, 1, 0]
    with pytest.raises(InputError, match="subj.objective: file not found"):
        sd.read_binary(str(root) + "/nowhere", "SUBJ")
    with pytest.raises(ConfigError):
        sd.read_binary(root, "SST2")


def test_read_lines_encoding_parameter(tmp_path):
    path = write(tmp_path, "x.txt", b"a\ncaf\xe9\n")
    assert read_lines(path, encoding="latin-1") == ["a", "caf\u00e9"]
    with pytest.raises(InputError, match=r"x.txt, line 2: not valid UTF-8"):
        read_lines(path)


def test_sst2(tree):
    root, _ = tree
    sentences, labels = sd.read_sst2(root, "dev")
    assert len(sentences) == 30 and set(labels.tolist()) == {0, 1}
    write(root, "SST/binary/sentiment-test", "nice film\t1\nbad film\tpositive\n")
    with pytest.raises(InputError, match=r"sentiment-test, line 2: label 'positive'"):
        sd.read_sst2(root, "test")


def test_trec(tree):
    root, _ = tree
    write(root, "TREC/TREC_10.label",
          b"NUM:date When did it   happen ?\nLOC:city Which sister\xf0city ?\n")
    sentences, labels = sd.read_trec(root, "test")
    assert sentences == ["When did it happen ?", "Which sister\u00f0city ?"]
    assert [sd.TREC_CLASSES[i] for i in labels] == ["NUM", "LOC"]
    write(root, "TREC/TREC_10.label", "NUM:date When ?\nFOO:bar What ?\n")
    with pytest.raises(InputError, match=r"TREC_10.label, line 2: expected 'COARSE:fine"):
        sd.read_trec(root, "test")
    with pytest.raises(ConfigError):
        sd.read_trec(root, "dev")


def test_mrpc(tree):
    root, info = tree
    s1, s2, labels = sd.read_mrpc(root, "train")
    assert len(labels) == 40 and s1[0] == info["MRPC-train"][0][0]
    assert labels.tolist() == [int(s > 2.5) for _, _, s in info["MRPC-train"]]
    write(root, "MRPC/msr_paraphrase_test.txt",
          "Quality\t#1\t#2\tA\tB\n1\t1\t2\ta\tb\n2\t1\t2\ta\tb\n")
    with pytest.raises(InputError, match=r"msr_paraphrase_test.txt, line 3: label '2'"):
        sd.read_mrpc(root, "test")
