"""Task names (`resolve_tasks`) and the results table (`format_table`)."""

import pytest

from tfsent.errors import ConfigError
from tfsent.evaluation import STS_TASKS, TRANSFER_TASKS, format_table, resolve_tasks


def test_task_lists():
    assert STS_TASKS == ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark",
                         "SICKRelatedness"]
    assert TRANSFER_TASKS == ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"]


def test_resolve_groups_names_and_aliases():
    assert resolve_tasks("sts") == STS_TASKS
    assert resolve_tasks("transfer") == TRANSFER_TASKS
    assert resolve_tasks("all") == STS_TASKS + TRANSFER_TASKS
    assert resolve_tasks("sts,MR") == STS_TASKS + ["MR"]
    assert resolve_tasks(" mr , STS-B,sickr,sst, STS12,MR ") == [
        "MR", "STSBenchmark", "SICKRelatedness", "SST2", "STS12"]
    assert resolve_tasks(["TREC", "transfer"]) == ["TREC"] + [
        t for t in TRANSFER_TASKS if t != "TREC"]


def test_resolve_unknown_lists_valid_names():
    with pytest.raises(ConfigError, match=r"unknown task 'STS99'; valid: sts, transfer.*MRPC"):
        resolve_tasks("STS12,STS99")
    with pytest.raises(ConfigError, match="no task given"):
        resolve_tasks(" , ")


def test_format_table():
    results = {"STS12": {"spearman": 70.0, "pearson": 1.0},
               "STSBenchmark": {"spearman": 80.0}, "MR": {"acc": 75.5},
               "CR": {"acc": 80.25}}
    text = format_table(results)
    sts, transfer = text.split("\n\n")
    head, row = sts.splitlines()
    assert head.split(" | ") == ["STS12", "STS-B", " Avg."]
    assert row.split(" | ") == ["70.00", "80.00", "75.00"]
    head, row = transfer.splitlines()
    assert [c.strip() for c in head.split("|")] == ["MR", "CR", "Avg."]
    assert [c.strip() for c in row.split("|")] == ["75.50", "80.25", "77.88"]
    # canonical order regardless of dict order; unknown tasks get their own table
    text = format_table({"SICKRelatedness": {"spearman": 1.0}, "STS13": {"spearman": 3.0},
                         "mine": {"acc": 2.0}})
    assert text.splitlines()[0].split() == ["STS13", "|", "SICK-R", "|", "Avg."]
    assert "mine" in text.split("\n\n")[1]
