"""The train stage: one run from a config to a selected, exported encoder.

`run(method, config, output_dir)` is what `python -m tfsent.train` calls. Modules:
  config       the run config: fields, recipes (configs/*.py), `--config.FIELD=VALUE`
  loop         the run itself (`Run`, `run` and its steps; model, optimizer, dataset)
  run_dir      the run directory: `RunState`, new / resume / finished (`prepare_run_dir`)
  callbacks    the Keras callbacks `fit` runs (dev evaluations, guards, checkpoints)
  dev_scoring  the dev set's STS score and TensorBoard projector snapshots
  selection    the best checkpoint and what gets exported
  published    a cross-encoder run's exported model, rebuilt to publish it
  schedules    learning-rate schedules; optimizers: LARS
  distribute   tf.distribute strategies and this worker's role
(The methods' cross-replica gathers and GradCache are in `tfsent.methods`.)
"""

from tfsent.training.config import (Config, build_config, load_recipe, resolve_config,
                                    split_config_overrides)
from tfsent.training.dev_scoring import dev_embeddings, sts_dev_score, write_projector_snapshot
from tfsent.training.loop import (Run, build_model, load_training_data, load_training_sources,
                                  make_dataset, make_optimizer, run, total_steps)
from tfsent.training.published import load_run_cross_encoder
from tfsent.training.run_dir import (RECOVERY_FIELDS, RESUME_FREE_FIELDS, RUN_CONFIG_FILE,
                                     RUN_ENTRIES, RunState, config_differences,
                                     prepare_run_dir, read_json, read_run_config,
                                     run_finished)
from tfsent.training.schedules import WarmupCosineDecay, WarmupLinearDecay

__all__ = [
    "Config", "build_config", "load_recipe", "resolve_config", "split_config_overrides",
    "dev_embeddings", "sts_dev_score", "write_projector_snapshot",
    "Run", "build_model", "load_training_data", "load_training_sources", "make_dataset",
    "make_optimizer", "run", "total_steps", "load_run_cross_encoder",
    "RECOVERY_FIELDS", "RESUME_FREE_FIELDS", "RUN_CONFIG_FILE", "RUN_ENTRIES", "RunState",
    "config_differences", "prepare_run_dir", "read_json", "read_run_config", "run_finished",
    "WarmupCosineDecay", "WarmupLinearDecay",
]
