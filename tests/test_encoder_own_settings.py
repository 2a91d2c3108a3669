"""A run's `pooling`, `query_prompt` and `document_prompt` left unset take the encoder's own
(`tfsent.training.config.resolve_encoder_fields`, `tfsent.encoders.own_settings`): a
Qwen3-Embedding-shaped folder trains and exports last-token pooling with its query prompt,
an explicit value wins (with a warning line for a pooling), minilm-l6 stays mean, and the
run folder records the resolved values so a rerun of the same command is the same run."""

import json
import os
import shutil

import numpy as np
import pytest

from conftest import TINY_RUN_FLAGS, minilm_or_skip
from hf_decoder_checkpoints import QWEN_PROMPTS, make_qwen3_embedding_dir

from tfsent.encoders import own_settings
from tfsent.methods import get_method
from tfsent.training.config import BASE_DEFAULTS, build_config

QUERY = QWEN_PROMPTS["query"]
TEXTS = ["A man is playing a guitar.", "Where is the station?", "ok"]
# A tiny run: two optimizer steps, one dev evaluation, the SavedModel only.
RUN = ["steps=2", "eval_every=2", "batch_size=4", "max_seq_length=16",
       "eval_max_seq_length=128", "jit_compile=False", "learning_rate=1e-3",
       "projector_every=0", *(f[len("--config."):] for f in TINY_RUN_FLAGS)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_qwen3_embedding_dir(str(tmp_path_factory.mktemp("qwen3")))


def _config(method, *overrides):
    return build_config(get_method(method).defaults, {}, list(overrides), method=method)


def test_unset_fields_default_to_none():
    assert (BASE_DEFAULTS["pooling"], BASE_DEFAULTS["query_prompt"],
            BASE_DEFAULTS["document_prompt"]) == (None, None, None)


def test_minilm_resolves_to_the_defaults_of_before():
    """minilm-l6's Pooling module says mean and it has no prompts: what the fields' old
    defaults were ("mean", "", ""); a method's own demo pooling stays."""
    config = _config("simcse_unsup")
    assert (config.pooling, config.query_prompt, config.document_prompt) == ("mean", "", "")
    assert _config("retrieval").pooling == "mean"
    assert _config("supcon").pooling == "mean_no_cls"  # SupCon's demo default, kept


def test_a_methods_own_default_pooling_is_no_warning(absl_messages):
    """SupCon's mean_no_cls on minilm-l6 (whose Pooling module says mean) is the method's
    choice, not the user's: one info line, no warning; the user's own choice warns."""
    import logging

    minilm_or_skip()
    records = []

    class _Levels(logging.Handler):
        def emit(self, record):
            records.append((record.levelno, record.getMessage()))

    handler = _Levels(logging.INFO)
    logging.getLogger("absl").addHandler(handler)
    try:
        _config("supcon")
        _config("simcse_unsup", "pooling=cls")
    finally:
        logging.getLogger("absl").removeHandler(handler)
    said = [(level, m) for level, m in records if "is used, not the 'mean'" in m]
    assert [level for level, _ in said] == [logging.INFO, logging.WARNING], said
    assert "'mean_no_cls' (the method's default)" in said[0][1]
    assert "'cls' (the caller's)" in said[1][1]


def test_qwen3_folder_resolves_to_its_own(folder):
    config = _config("retrieval", f"encoder={folder}")
    assert (config.pooling, config.query_prompt, config.document_prompt) == (
        "last_token", QUERY, "")
    given = _config("retrieval", f"encoder={folder}", "pooling=mean", "query_prompt=",
                    "document_prompt=passage: ")
    assert (given.pooling, given.query_prompt, given.document_prompt) == (
        "mean", "", "passage: ")


def test_own_settings_of_each_kind_of_folder(folder, tmp_path):
    """A bare Hugging Face qwen3 folder (no modules.json): the family's last-token, no
    prompts; a bare BERT folder: tfsent's mean, not declared (no warning to give); a
    tfsent encoder directory: what it was saved with; a name that is no folder: mean."""
    from hf_checkpoints import make_tiny_checkpoint

    bare = str(tmp_path / "bare")
    shutil.copytree(folder, bare)
    for name in ("modules.json", "config_sentence_transformers.json"):
        os.remove(os.path.join(bare, name))
    assert own_settings(bare) == {"pooling": "last_token", "declared": True,
                                  "where": f"qwen3 releases ({bare})", "prompts": None,
                                  "truncate_dim": None, "family": "qwen3"}
    bert = make_tiny_checkpoint("bert", str(tmp_path / "bert"))
    assert (own_settings(bert)["pooling"], own_settings(bert)["declared"],
            own_settings(bert)["family"]) == ("mean", False, "bert")
    tfsent_dir = tmp_path / "enc"
    tfsent_dir.mkdir()
    prompts = {"query_prompt": "q: ", "document_prompt": "d: "}
    (tfsent_dir / "tfsent_encoder.json").write_text(json.dumps(
        {"pooling": "cls_before_pooler", "prompts": prompts}))
    own = own_settings(str(tfsent_dir))
    assert (own["pooling"], own["declared"], own["prompts"]) == ("cls_before_pooler", True,
                                                                 prompts)
    assert own["family"] == "bert"  # (a directory from before tfsent recorded the family)
    assert own_settings("bert_base_en_uncased")["pooling"] == "mean"
    config = _config("retrieval", f"encoder={tfsent_dir}")
    assert (config.pooling, config.query_prompt, config.document_prompt) == (
        "cls_before_pooler", "q: ", "d: ")


def test_a_registered_preset_name_takes_its_familys_pooling():
    """A keras-hub preset name (nothing downloaded: keras-hub's registry names its backbone
    class) takes its family's pooling: Qwen3-Embedding's presets the last token, so a
    cross-encoder run on a Qwen3 preset reads the last token without a flag; BERT's mean."""
    from tfsent import training

    own = own_settings("qwen3_embedding_0.6b_en")
    assert (own["family"], own["pooling"], own["declared"]) == ("qwen3", "last_token", True)
    assert "keras-hub preset qwen3_embedding_0.6b_en" in own["where"]
    assert (own_settings("bert_tiny_en_uncased")["family"],
            own_settings("bert_tiny_en_uncased")["pooling"]) == ("bert", "mean")
    assert own_settings("no_such_preset_xyz")["family"] is None
    assert training.resolve_config("cross_encoder", overrides=[
        "encoder=qwen3_0.6b_en"]).pooling == "last_token"


def test_explicit_pooling_wins_with_one_warning(folder, absl_messages):
    from tfsent.training import build_model

    config = _config("simcse_unsup", f"encoder={folder}", "pooling=mean", *RUN)
    encoder, model, _ = build_model(get_method("simcse_unsup"), config, 2, jit=False)
    assert (encoder.pooling, model.train_pooling, model.export_pooling) == ("mean",) * 3
    warned = [m for m in absl_messages if "'mean' (the caller's) is used" in m]
    assert len(warned) == 1 and "'last_token'" in warned[0], absl_messages


def test_old_run_folder_of_minilm_still_resumes(tmp_path):
    """A run folder written when the defaults were "mean" / "" compares equal to the same
    command now (the resolved values are recorded)."""
    from tfsent.training.run_dir import prepare_run_dir

    config = _config("simcse_unsup", *RUN)
    old = dict(config, method="simcse_unsup", pooling="mean", query_prompt="",
               document_prompt="")
    (tmp_path / "config.json").write_text(json.dumps(old))
    assert prepare_run_dir(str(tmp_path), dict(config, method="simcse_unsup")) == "resume"


@pytest.fixture(scope="module")
def qwen_run(folder, tmp_path_factory):
    """A retrieval run on the Qwen3 folder with no pooling or prompt given."""
    from tfsent.training import resolve_config, run

    out = str(tmp_path_factory.mktemp("run") / "out")
    config = resolve_config("retrieval", None, [f"encoder={folder}", *RUN])
    return out, config, run("retrieval", config, out)


def test_run_trains_and_exports_the_folders_pooling_and_prompt(qwen_run):
    import tensorflow as tf

    from tfsent.encoders import load_encoder

    out, config, metrics = qwen_run
    with open(os.path.join(out, "config.json")) as f:
        saved = json.load(f)
    assert (saved["pooling"], saved["query_prompt"], saved["document_prompt"]) == (
        "last_token", QUERY, "")
    assert metrics["steps"] == 2
    trained = load_encoder(os.path.join(out, "encoder"))
    assert trained.pooling == "last_token"
    assert trained.prompts == {"query_prompt": QUERY, "document_prompt": ""}
    # The last real token's state of prompt + text, taken here from the sequence output.
    tokenizer = trained.tokenizer.with_options(max_seq_length=128, pad_to_max_length=False)
    features = tokenizer([QUERY + t for t in TEXTS])
    states = trained(features)["sequence_output"].numpy()
    mask = features["padding_mask"].numpy()
    last = states[np.arange(len(TEXTS)), mask.sum(1) - 1]
    mean = (states * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)

    def unit(x):
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    served = tf.saved_model.load(metrics["export"])
    query = served.signatures["encode_query"](sentences=tf.constant(TEXTS))
    got = unit(query["embedding"].numpy())
    np.testing.assert_allclose(got, unit(last), atol=1e-5)
    assert np.abs(got - unit(mean)).max() > 1e-3  # the pooling matters here
    plain = served.signatures["encode_document"](sentences=tf.constant(TEXTS))
    assert np.abs(unit(plain["embedding"].numpy()) - got).max() > 1e-3  # so does the prompt


def test_rerun_of_the_same_command_is_the_same_run(qwen_run, folder, capsys):
    """The same command again: the folder's run is this one (finished: reported, not
    refused as another config); an explicit other pooling is another run."""
    from tfsent.errors import ConfigError
    from tfsent.training import resolve_config, run

    out, _, metrics = qwen_run
    again = run("retrieval", resolve_config("retrieval", None, [f"encoder={folder}", *RUN]),
                out)
    assert again["export"] == metrics["export"]
    assert "already finished" in capsys.readouterr().out
    other = resolve_config("retrieval", None, [f"encoder={folder}", "pooling=mean", *RUN])
    with pytest.raises(ConfigError, match="pooling: 'last_token' in the folder's run"):
        run("retrieval", other, out)


def test_python_api_takes_the_encoders_own(folder, tmp_path):
    """`from_preset` / the constructors pool as the encoder does; `RetrievalSimCSE` takes
    the encoder's prompts unless given ("" included) and exports the ones it trains with."""
    from tfsent.formats.metadata import read_metadata
    from tfsent.methods import RetrievalSimCSE, SimCSE

    model = SimCSE.from_preset(folder)
    assert (model.train_pooling, model.export_pooling) == ("last_token", "last_token")
    encoder = model.encoder
    assert RetrievalSimCSE(encoder).query_prompt == QUERY
    assert RetrievalSimCSE(encoder, query_prompt="").query_prompt == ""
    path = RetrievalSimCSE(encoder, query_prompt="q: ").export(str(tmp_path / "export"))
    meta = read_metadata(path)
    assert (meta["query_prompt"], meta["document_prompt"]) == ("q: ", "")
