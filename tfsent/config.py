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
    "first_eval_step": 10,         # an early dev evaluation at this step when < eval_every (0: off)
    "export_if_worse": False,      # export the best checkpoint even if the start scored higher
    # Divergence guard (tfsent.callbacks.DivergenceGuard; 0 turns a criterion off).
    "divergence_drop": 10.0,       # stop when dev Spearman falls this far below the best/start
    "collapse_cosine_rise": 0.3,   # ... or the random-pair cosine rises this far above its start
    "collapse_uniformity_ratio": 0.75,  # ... or uniformity loses this share of its start
    # Execution.
    "strategy": "auto",            # auto | one_device | mirrored | multi_worker | tpu
    "tpu": "",
    "cpu_replicas": 0,             # split the CPU into N logical devices (0: off); test
                                   # distributed runs on one machine with strategy=mirrored
    "mixed_precision": "",         # "" | mixed_bfloat16 | mixed_float16
    "loss_scale": 32768.0,         # mixed_float16: the LossScaleOptimizer's initial (dynamic) scale
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


def build_config(method_defaults, recipe=None, overrides=(), method=None):
    """Merges defaults, a recipe dict and `FIELD=VALUE` override strings into a Config,
    validated (`validate`; `method` adds the checks that depend on the method)."""
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
    validate(config, method)
    return config


def _field_ranges():
    """Field -> the `tfsent.checks` range its constructor argument is checked with."""
    from tfsent import checks as c

    return {
        # Run fields.
        "batch_size": c.SIZE, "max_seq_length": c.Range(4, integer=True),
        "eval_max_seq_length": c.Range(2, integer=True), "steps": c.COUNT,
        "epochs": c.NON_NEGATIVE, "learning_rate": c.POSITIVE,
        "warmup_ratio": c.UNIT_INTERVAL, "weight_decay": c.NON_NEGATIVE,
        "clip_norm": c.NON_NEGATIVE, "grad_cache_chunk": c.COUNT,
        "max_grad_norm": c.NON_NEGATIVE, "eval_every": c.SIZE, "projector_every": c.COUNT,
        "projector_points": c.SIZE, "cpu_replicas": c.COUNT, "steps_per_execution": c.SIZE,
        "seed": c.Range(integer=True), "loss_scale": c.POSITIVE,
        # Dev selection and the divergence guard (0: off).
        "first_eval_step": c.COUNT, "divergence_drop": c.NON_NEGATIVE,
        "collapse_cosine_rise": c.NON_NEGATIVE, "collapse_uniformity_ratio": c.RATE,
        # Method fields (present in a method's defaults).
        "temperature": c.POSITIVE, "hard_negative_weight": c.Range(),
        "mask_rate": c.OPEN_RATE, "mlm_weight": c.NON_NEGATIVE,
        "contrastive_weight": c.NON_NEGATIVE, "extractor_layers": c.SIZE,
        "fusion_layers": c.SIZE, "scl_weight": c.UNIT_INTERVAL, "max_positives": c.COUNT,
        "max_negatives": c.COUNT, "clsr_hidden_dim": c.COUNT, "clsr_output_dim": c.COUNT,
        "positive_threshold": c.Range(), "dropout_rate_a": c.RATE, "dropout_rate_b": c.RATE,
        "scd_alpha": c.NON_NEGATIVE, "scd_beta": c.NON_NEGATIVE, "scd_lambda": c.NON_NEGATIVE,
        "projector_width": c.SIZE, "token_cutoff_rate": c.RATE,
        "feature_cutoff_rate": c.RATE, "aug_dropout_rate": c.RATE,
        "adversarial_epsilon": c.NON_NEGATIVE, "consert_alpha": c.NON_NEGATIVE,
    }


def _field_choices():
    """Field -> the values its constructor accepts."""
    from tfsent.distribute import STRATEGIES
    from tfsent.encoders.pooling import POOLINGS
    from tfsent.layers.augment import AUGMENTATIONS
    from tfsent.layers.heads import MLPEncoder
    from tfsent.methods.consert import DIRECTION_REDUCTIONS
    from tfsent.methods.supcon import SIMILARITIES

    return {
        "lr_schedule": ("linear", "cosine", "constant"), "optimizer": ("adamw", "lars"),
        "mixed_precision": ("", "mixed_bfloat16", "mixed_float16"), "strategy": STRATEGIES,
        "pooling": POOLINGS, "similarity": SIMILARITIES,
        "direction_reduction": DIRECTION_REDUCTIONS, "view1_augmentation": AUGMENTATIONS,
        "view2_augmentation": AUGMENTATIONS, "clsr_head_init": MLPEncoder.INITIALIZERS,
    }


def validate(config, method=None):
    """Checks every field with the range or choices of the constructor argument it feeds
    (`tfsent.checks`, shared with the constructors), so a config that passes here builds;
    `method` (a registry name) adds the checks that depend on the method. Called once by
    `build_config`, before any data is read or model built. Raises ConfigError naming
    the field."""
    from tfsent import checks
    from tfsent.encoders.model import resolve_dropout_rates

    for name, allowed in _field_ranges().items():
        if name in config:
            allowed.check(name, config[name])
    for name, choices in _field_choices().items():
        if name in config:
            checks.one_of(name, config[name], choices)
    if config.export_pooling is not None:
        checks.one_of("export_pooling", config.export_pooling, _field_choices()["pooling"])
    if config.steps == 0 and config.epochs == 0:
        raise ConfigError("set steps > 0, or steps = 0 and epochs > 0")
    if config.eval_every % config.steps_per_execution:
        raise ConfigError(f"steps_per_execution ({config.steps_per_execution}) must divide "
                          f"eval_every ({config.eval_every})")
    if "encoder_dropout" in config:
        try:
            resolve_dropout_rates(config.encoder_dropout, 0.0)
        except ConfigError as e:
            raise ConfigError(f"encoder_dropout: {e}") from None
    from tfsent import publish

    if "sentence_transformers" in publish.export_formats(config.export_formats):
        publish.check_sentence_transformers_pooling(config.export_pooling or config.pooling)
    if method is not None:
        _validate_for_method(config, method)


def _validate_for_method(config, method):
    """The checks that depend on the method (the same functions its constructor calls)."""
    if "view1_augmentation" in config:  # ConSERT: adversarial views need the CE loss
        from tfsent.layers.augment import check_augmentation

        for name in ("view1_augmentation", "view2_augmentation"):
            try:
                check_augmentation(config[name], supervised=method != "consert")
            except ConfigError as e:
                raise ConfigError(f"{name}: {e}") from None
    if method == "clsr":
        from tfsent.methods.clsr import check_export_pooling

        check_export_pooling(config.pooling, config.export_pooling)
