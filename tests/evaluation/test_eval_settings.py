"""What `python -m tfsent.evaluate` turns its settings into (`tfsent.evaluation.runner`):
the retrieval prompts, the size / quantization variants, the run files, model labels."""

import os

import pytest

from tfsent.errors import ConfigError
from tfsent.evaluation.runner import (check_run_files, evaluation_prompts, model_label,
                                      parse_variants)


class _Export:
    prompts = {"query_prompt": "query: ", "document_prompt": "passage: "}


class _Encoder:
    pass


def test_prompts_given_empty_or_not_given():
    """None: not given (an export's own prompts apply to retrieval); "": given empty."""
    export = _Export()
    none = {"query_prompt": "", "document_prompt": ""}
    assert evaluation_prompts(export, "e", True) == export.prompts
    assert evaluation_prompts(export, "e", False) == none  # no retrieval task
    assert evaluation_prompts(export, "e", True, "", None) == none
    assert evaluation_prompts(export, "e", True, None, "doc: ") == {
        "query_prompt": "", "document_prompt": "doc: "}
    assert evaluation_prompts(_Encoder(), "m", True) == none


def test_variants_are_checked_before_loading(tmp_path):
    assert parse_variants() == ((None,), (), None)
    assert parse_variants(truncate_dim=64) == ((64,), (), None)
    dims, kinds, calibration = parse_variants(dims="128,64", quantizations="int8,binary",
                                              calibration_file=None)
    assert (dims, kinds, calibration) == ((128, 64), ("int8", "binary"), None)
    with pytest.raises(ConfigError, match="not both"):
        parse_variants(truncate_dim=64, dims="128,64")
    with pytest.raises(ConfigError, match="use it with --quantize=int8"):
        parse_variants(quantizations="binary", calibration_file=str(tmp_path / "c.txt"))


def test_run_files_need_a_retrieval_task_and_an_existing_folder(tmp_path):
    assert check_run_files(None, []) == {}
    with pytest.raises(ConfigError, match="give a beir:DIR"):
        check_run_files(str(tmp_path / "run.trec"), [])


def test_model_labels():
    assert model_label(os.path.join("runs", "scd", "export", "3")) == "scd"
    assert model_label(os.path.join("runs", "scd", "encoder")) == "scd"
    assert model_label("minilm-l6") == "minilm-l6"
