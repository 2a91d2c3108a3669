"""A cross-encoder training run's exported model, rebuilt from its folder to publish it in
another format (`python -m tfsent.export --model=RUN_DIR --format=cross_encoder_hf`): a run
keeps the weights of its export (best/ or start/, `run_dir.RunState`) and the config that
built the model, not a `.keras` file."""

import os

import tensorflow as tf
from absl import logging

from tfsent.encoders import load_encoder
from tfsent.errors import ConfigError, InputError
from tfsent.formats.metadata import read_metadata
from tfsent.methods import get_method
from tfsent.training.config import BASE_DEFAULTS, Config
from tfsent.training.run_dir import RunState, read_json, read_run_config


def load_run_cross_encoder(output_dir):
    """The CrossEncoder a `--method=cross_encoder` run exported: built from the run's
    config.json (the starting encoder it names, loaded again; pairs cut at the length its
    SavedModel export cuts them) with the weights that export was made of (metrics.json's
    "exported": best/, start/ or the last checkpoint's final weights; best/ before the run
    exported). Its MarginMSE teacher is not loaded, nor LoRA adapters (the kept weights
    are merged kernels), nor an optimizer. Refused: a folder that is not a run
    (InputError), a run of another method, one whose export reads another token or head
    than the model built today (ConfigError), one with no selected weights yet."""
    stored = read_run_config(output_dir)
    if stored is None:
        raise InputError("no config.json: not a tfsent training run", path=output_dir)
    spec = get_method(stored["method"])
    if not getattr(spec.cls, "scores_pairs", False):
        raise ConfigError(f"{output_dir} is a {stored['method']} run: its encoder folder, "
                          f"{os.path.join(output_dir, 'encoder')}, is what the sentence "
                          "formats export")
    config = Config(BASE_DEFAULTS)
    config.update(spec.defaults)
    config.update(stored)  # a field added since the run was written keeps its default
    config.update(teacher="", loss=spec.defaults.get("loss", config.get("loss")))
    metrics = read_json(os.path.join(output_dir, "metrics.json"), {})
    exported = metrics.get("exported") or {}
    export = read_metadata(metrics["export"], required=False) if metrics.get("export") \
        else {}
    length = export.get("max_seq_length") or config.get("eval_max_seq_length") \
        or config.max_seq_length

    def load(name, pooling=config.pooling):
        return load_encoder(name, pooling=pooling, max_seq_length=length,
                            dtype=config.mixed_precision or None, seed=config.seed)

    try:
        model = spec.build_run_model(config, load)
    except (ConfigError, InputError) as e:
        raise ConfigError(f"{output_dir}: rebuilding the run's model from its config.json "
                          f"(encoder={config.encoder!r}) failed: {e}") from None
    built = (model.train_pooling, type(model.score_head).__name__)
    if export and (export.get("pooling"), export.get("head")) != built:
        raise ConfigError(
            f"{output_dir}: its export's head ({export.get('head')} on the "
            f"{export.get('pooling')} token) is not the one a {model.encoder.family} "
            f"cross-encoder gets now ({built[1]} on the {built[0]} token): the run was "
            "trained with a head tfsent no longer builds by default; serve its SavedModel "
            f"({metrics['export']})")
    which = exported.get("which") or "best checkpoint"
    if which == "final weights":  # `selection.choose_export`'s records
        latest = tf.train.latest_checkpoint(os.path.join(output_dir, "checkpoints"))
        if latest is None:
            raise InputError("the run exported its final weights and kept no checkpoint",
                             path=output_dir)
        tf.train.Checkpoint(model=model).restore(latest).expect_partial()
    else:
        state = RunState(output_dir, model, None)
        if not (state.load_start() if which == "starting encoder" else state.load_best()):
            raise InputError("the run has no selected weights yet (best/ is written at "
                             "its first dev evaluation)", path=output_dir)
    logging.info("%s: the %s run's %s%s, pairs cut at %d tokens", output_dir,
                 stored["method"], which, "" if exported.get("step") is None
                 else f" (step {exported['step']})", model.encoder.tokenizer.max_seq_length)
    return model
