"""Run configuration: defaults, recipe files (configs/*.py) and `--config.FIELD=VALUE`.

A recipe is a Python file defining `get_config()` that returns a dict of fields to set
(it is executed: only run recipes you trust). The final config is
  base defaults  <  the method's defaults  <  the recipe  <  command-line overrides.
Overrides are parsed to the type of the field they replace; unknown fields are errors.
"""

import ast
import importlib.util
import os

from tfsent.errors import ConfigError


class Config(dict):
    """A dict with attribute access (`config.batch_size`)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"config has no field {name!r}") from None

    def __setattr__(self, name, value):
        self[name] = value


BASE_DEFAULTS = {
    # Encoder and pooling.
    "encoder": "minilm-l6",        # preset name, checkpoint dir, tfsent dir or minilm-l6
    "pooling": "mean",             # pooling inside the loss
    "export_pooling": None,        # pooling of the exported model (None: = pooling)
    "max_seq_length": 32,          # training truncation length
    "eval_max_seq_length": 256,    # truncation for dev/test evaluation and the export
    "export_formats": "saved_model",  # also write: sentence_transformers,huggingface,keras_hub
                                   # (comma-separated; the SavedModel is always written)
    # Data.
    "train_data": "demo",          # demo | demo_nli | text file | NLI source | tfds:NAME
    "train_split": "train",        # split for NLI directories / TFDS
    "batch_size": 32,              # global batch (all replicas)
    "steps": 150,                  # total optimizer steps (0: derive from epochs)
    "epochs": 0.0,                 # passes over the training data (used when steps == 0)
    # Optimizer: AdamW (or LARS), linear warmup then linear/cosine decay (or constant).
    "optimizer": "adamw",          # adamw | lars
    "learning_rate": 3e-5,
    "lr_schedule": "linear",       # linear | cosine | constant
    "warmup_ratio": 0.0,
    "weight_decay": 0.0,
    "clip_norm": 0.0,              # global gradient-norm clipping (0: off)
    "grad_cache_chunk": 0,         # GradCache: embed in chunks of N sentences per replica (0: off)
    "max_grad_norm": 1e6,          # stop the run when the gradient norm exceeds this (0: off)
    # Model selection on a dev set.
    "eval_data": "demo",           # demo | stsb | sickr | scored-pair .tsv
    "eval_data_dir": "",           # SentEval layout dir (needed by stsb / sickr / test_tasks)
    "eval_every": 50,              # steps between dev evaluations and checkpoints
    "test_tasks": "",              # after training: evaluate these tasks (needs eval_data_dir)
    "projector_every": 5,          # TensorBoard projector snapshot every N evaluations (0: off)
    "projector_points": 1000,      # dev sentences in each projector snapshot
    "report_geometry": False,      # alignment/uniformity before and after (needs eval_data_dir)
    # Execution.
    "strategy": "auto",            # auto | one_device | mirrored | multi_worker | tpu
    "tpu": "",
    "cpu_replicas": 0,             # split the CPU into N logical devices (0: off); test
                                   # distributed runs on one machine with strategy=mirrored
    "mixed_precision": "",         # "" | mixed_bfloat16 | mixed_float16
    "jit_compile": True,           # XLA (switched off for multi-replica CPU runs)
    "steps_per_execution": 1,      # train steps per tf.function call (raise for tiny models)
    "seed": 0,
}


def load_recipe(path):
    """Executes a recipe file and returns its `get_config()` dict."""
    if not os.path.exists(path):
        raise ConfigError(f"config file not found: {path}")
    spec = importlib.util.spec_from_file_location("tfsent_recipe", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise ConfigError(f"config file {path} failed to load: {type(e).__name__}: {e}") from e
    if not hasattr(module, "get_config"):
        raise ConfigError(f"config file {path} defines no get_config()")
    recipe = module.get_config()
    if not isinstance(recipe, dict):
        raise ConfigError(f"{path}: get_config() must return a dict")
    return dict(recipe)


def _parse_value(field, text, current):
    """Parses an override string to the type of the current value."""
    if isinstance(current, bool):
        low = text.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"--config.{field}: expected a boolean, got {text!r}")
    if isinstance(current, int):
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"--config.{field}: expected an integer, got {text!r}") from None
    if isinstance(current, float):
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"--config.{field}: expected a number, got {text!r}") from None
    if isinstance(current, str):
        return text
    # None or containers: a Python literal if it parses, else the string.
    if text.lower() == "none":
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def build_config(method_defaults, recipe=None, overrides=()):
    """Merges defaults, a recipe dict and `FIELD=VALUE` override strings into a Config."""
    config = Config(BASE_DEFAULTS)
    config.update(method_defaults)
    for key, value in (recipe or {}).items():
        if key not in config and key != "method":
            raise ConfigError(f"recipe sets unknown field {key!r}; known: {sorted(config)}")
        config[key] = value
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--config.{item}: expected --config.FIELD=VALUE")
        field, text = item.split("=", 1)
        if field not in config:
            raise ConfigError(f"--config.{field}: unknown field; known: {sorted(config)}")
        config[field] = _parse_value(field, text, config[field])
    validate(config)
    return config


def validate(config):
    """Range checks with messages that name the field."""
    def positive(name):
        if not isinstance(config[name], (int, float)) or config[name] <= 0:
            raise ConfigError(f"{name} must be > 0, got {config[name]!r}")

    for name in ("batch_size", "max_seq_length", "eval_every", "learning_rate"):
        positive(name)
    if config.steps < 0 or config.epochs < 0 or (config.steps == 0 and config.epochs == 0):
        raise ConfigError("set steps > 0, or steps = 0 and epochs > 0")
    if config.max_seq_length < 4:
        raise ConfigError(f"max_seq_length must be >= 4, got {config.max_seq_length}")
    for name in ("warmup_ratio", "mask_rate", "dropout_rate_a", "dropout_rate_b"):
        if name in config and not 0.0 <= config[name] <= 1.0:
            raise ConfigError(f"{name} must be in [0, 1], got {config[name]}")
    if config.lr_schedule not in ("linear", "cosine", "constant"):
        raise ConfigError("lr_schedule must be linear, cosine or constant, got "
                          f"{config.lr_schedule!r}")
    if config.optimizer not in ("adamw", "lars"):
        raise ConfigError(f"optimizer must be adamw or lars, got {config.optimizer!r}")
    if config.steps_per_execution < 1 or config.eval_every % config.steps_per_execution:
        raise ConfigError("steps_per_execution must be >= 1 and divide eval_every, got "
                          f"{config.steps_per_execution}")
    if config.mixed_precision not in ("", "mixed_bfloat16", "mixed_float16"):
        raise ConfigError("mixed_precision must be '', mixed_bfloat16 or mixed_float16, got "
                          f"{config.mixed_precision!r}")
    if "temperature" in config:
        positive("temperature")
    if not isinstance(config.cpu_replicas, int) or config.cpu_replicas < 0:
        raise ConfigError(f"cpu_replicas must be an integer >= 0, got {config.cpu_replicas!r}")
    if not isinstance(config.projector_every, int) or config.projector_every < 0:
        raise ConfigError(f"projector_every must be an integer >= 0, got "
                          f"{config.projector_every!r}")
    positive("projector_points")
    if not isinstance(config.max_grad_norm, (int, float)) or config.max_grad_norm < 0:
        raise ConfigError(f"max_grad_norm must be a number >= 0 (0: off), got "
                          f"{config.max_grad_norm!r}")
    from tfsent import publish

    if "sentence_transformers" in publish.export_formats(config.export_formats):
        publish.check_sentence_transformers_pooling(config.export_pooling or config.pooling)
    drop = config.get("encoder_dropout")
    if isinstance(drop, (int, float)) and not 0.0 <= drop < 1.0:
        raise ConfigError(f"encoder_dropout must be in [0, 1), got {drop}")
