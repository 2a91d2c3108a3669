"""Run configuration: defaults, recipe files (configs/*.py) and `--config.FIELD=VALUE`.

A recipe is a Python file defining `get_config()` that returns a dict of fields to set
(it is executed: only run recipes you trust). The final config is
  base defaults  <  the method's defaults  <  the recipe  <  command-line overrides,
and the fields left unset there (None: `pooling`, `query_prompt`, `document_prompt`) take
the encoder's own (`resolve_encoder_fields`). Overrides are parsed to the type of the field
they replace; unknown fields are errors.
"""

import ast
import importlib.util
import os

from absl import logging

from tfsent import checks
from tfsent.checks import Field
from tfsent.data import mixture
import tfsent.encoders.families as families
from tfsent.encoders.loading import DEFAULT_ENCODER, own_settings
from tfsent.encoders.pooling import POOLINGS
from tfsent.errors import ConfigError, InputError, did_you_mean
from tfsent.methods import REGISTRY, get_method
from tfsent.training.distribute import STRATEGIES


class Config(dict):
    """A dict with attribute access (`config.batch_size`)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"config has no field {name!r}") from None

    def __setattr__(self, name, value):
        self[name] = value


# The run fields: name, default, check (`tfsent.checks`; shared with the constructors
# that take the same value) and a help line. A method's own fields come from its
# `MethodSpec` (tfsent/methods/<name>.py).
_POOLING = checks.Choices(POOLINGS)
RUN_FIELDS = [
    # Encoder and pooling.
    Field("encoder", DEFAULT_ENCODER, types=(str,),
          doc=f"preset name, checkpoint dir, tfsent dir or {DEFAULT_ENCODER}"),
    Field("pooling", None, _POOLING,
          doc="pooling inside the loss (None: the encoder's own: a sentence-transformers "
              "Pooling module's, a tfsent encoder directory's, the family's; else mean)"),
    Field("export_pooling", None, _POOLING, types=(str,),
          doc="pooling of the exported model (None: = pooling)"),
    Field("max_seq_length", 32, checks.Range(4, integer=True), doc="training truncation length"),
    Field("eval_max_seq_length", 256, checks.Range(2, integer=True),
          doc="truncation for dev/test evaluation and the export"),
    Field("export_formats", "saved_model", types=(str,),
          doc="also write: sentence_transformers,huggingface,keras_hub (comma-separated; "
              "the SavedModel is always written)"),
    # Data.
    Field("train_data", "demo", types=(str, tuple),
          doc="demo | demo_nli | text file | NLI source | tfds:NAME; several sources: "
              "comma-separated (a list in a recipe) make a mixture"),
    Field("source_weights", "", types=(str, tuple),
          doc="mixture: one positive weight per train_data source, comma-separated "
              "(\"\": proportional to the sources' sizes)"),
    Field("mixture_sampling", "proportional", checks.Choices(mixture.SAMPLINGS),
          doc="mixture: proportional (random by weight) | round_robin (sources in turn)"),
    Field("batch_per_source", True,
          doc="mixture: every batch from one source (false: examples mixed within batches)"),
    Field("train_split", "train", types=(str,), doc="split for NLI directories / TFDS"),
    Field("batch_size", 32, checks.SIZE, doc="global batch (all replicas)"),
    Field("steps", 150, checks.COUNT, doc="total optimizer steps (0: derive from epochs)"),
    Field("epochs", 0.0, checks.NON_NEGATIVE,
          doc="passes over the training data (used when steps == 0)"),
    # Optimizer: AdamW (or LARS), linear warmup then linear/cosine decay (or constant).
    Field("optimizer", "adamw", checks.Choices(("adamw", "lars")), doc="adamw | lars"),
    Field("learning_rate", 3e-5, checks.POSITIVE, doc="peak learning rate"),
    Field("lr_schedule", "linear", checks.Choices(("linear", "cosine", "constant")),
          doc="linear | cosine | constant"),
    Field("warmup_ratio", 0.0, checks.UNIT_INTERVAL, doc="share of the steps warming up"),
    Field("weight_decay", 0.0, checks.NON_NEGATIVE, doc="decoupled weight decay"),
    Field("clip_norm", 0.0, checks.NON_NEGATIVE,
          doc="global gradient-norm clipping (0: off)"),
    Field("grad_cache_chunk", 0, checks.COUNT,
          doc="GradCache: embed in chunks of N sentences per replica (0: off)"),
    Field("lora_rank", 0, checks.COUNT, types=(int,),
          doc="LoRA: rank of adapters on the encoder's attention query / value projections, "
              "the backbone's other weights frozen, merged into plain kernels at export "
              "(0: off, full fine-tuning)"),
    Field("lora_alpha", 0.0, checks.NON_NEGATIVE,
          doc="LoRA: the adapters' scale is lora_alpha / lora_rank (0: = lora_rank, scale 1)"),
    Field("max_grad_norm", 1e6, checks.NON_NEGATIVE,
          doc="stop the run when the gradient norm exceeds this (0: off)"),
    # Model selection on a dev set.
    Field("eval_data", "demo", types=(str,),
          doc="demo | stsb | sickr | scored-pair .tsv | beir:DIR[:SPLIT] (nDCG@10, split dev)"),
    Field("query_prompt", None, types=(str,),
          doc="text put before each query (retrieval training and dev; the export's "
              "encode_query). None: the encoder folder's query prompt, else none; \"\": none"),
    Field("document_prompt", None, types=(str,),
          doc="text put before each document (retrieval training and dev; the export's "
              "encode_document). None: the encoder folder's, else none; \"\": none"),
    Field("eval_data_dir", "", types=(str,),
          doc="SentEval layout dir (needed by stsb / sickr / test_tasks)"),
    Field("dev_pool", None, checks.COUNT, types=(int,),
          doc="retrieval dev: search a fixed candidate pool, the dev queries' judged "
              "documents and the starting encoder's top N of each (0: the whole corpus; "
              "None: 100 for a corpus above 20,000 documents, else the whole corpus)"),
    Field("eval_every", 50, checks.SIZE, doc="steps between dev evaluations and checkpoints"),
    Field("test_tasks", "", types=(str,),
          doc="after training: evaluate these tasks (needs eval_data_dir)"),
    Field("projector_every", 5, checks.COUNT,
          doc="TensorBoard projector snapshot every N evaluations (0: off)"),
    Field("projector_points", 1000, checks.SIZE, doc="dev sentences in each projector snapshot"),
    Field("report_geometry", False,
          doc="alignment/uniformity before and after (needs eval_data_dir)"),
    Field("first_eval_step", 10, checks.COUNT,
          doc="an early dev evaluation at this step when < eval_every (0: off)"),
    Field("export_if_worse", False,
          doc="export the best checkpoint even if the start scored higher"),
    # Divergence guard (tfsent.training.callbacks.DivergenceGuard; 0 turns a criterion off).
    Field("divergence_drop", 10.0, checks.NON_NEGATIVE,
          doc="stop when dev Spearman falls this far below the best/start"),
    Field("collapse_cosine_rise", 0.3, checks.NON_NEGATIVE,
          doc="... or the random-pair cosine rises this far above its start"),
    Field("collapse_uniformity_ratio", 0.75, checks.RATE,
          doc="... or uniformity loses this share of its start"),
    # Execution.
    Field("strategy", "auto", checks.Choices(STRATEGIES),
          doc="auto | one_device | mirrored | multi_worker | tpu"),
    Field("tpu", "", types=(str,), doc="TPU address"),
    Field("cpu_replicas", 0, checks.COUNT,
          doc="split the CPU into N logical devices (0: off); test distributed runs on one "
              "machine with strategy=mirrored"),
    Field("mixed_precision", "", checks.Choices(("", "mixed_bfloat16", "mixed_float16")),
          doc='"" | mixed_bfloat16 | mixed_float16'),
    Field("loss_scale", 32768.0, checks.POSITIVE,
          doc="mixed_float16: the LossScaleOptimizer's initial (dynamic) scale"),
    Field("jit_compile", None, types=(bool,),
          doc="XLA for the train step (None: the choice measured for this CPU, "
              "tfsent.cpu_settings; switched off for multi-replica CPU runs)"),
    Field("steps_per_execution", 1, checks.SIZE,
          doc="train steps per tf.function call (raise for tiny models)"),
    Field("seed", 0, checks.SEED, doc="seed of initialisation, data, views"),
]
RUN_FIELD = {f.name: f for f in RUN_FIELDS}
BASE_DEFAULTS = {f.name: f.default for f in RUN_FIELDS}


class Recipe(dict):
    """A recipe's fields (a dict) and the file they came from (`path`, for errors)."""

    def __init__(self, fields, path=None):
        super().__init__(fields)
        self.path = path


def load_recipe(path):
    """Executes a recipe file and returns its `get_config()` dict (a `Recipe`)."""
    if not os.path.exists(path):
        raise ConfigError(f"config file not found: {path}")
    spec = importlib.util.spec_from_file_location("tfsent_recipe", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise ConfigError(f"config file {path} failed to load: {type(e).__name__}: {e}") from e
    if not callable(getattr(module, "get_config", None)):
        raise ConfigError(f"config file {path} defines no get_config() function")
    try:
        recipe = module.get_config()
    except Exception as e:
        raise ConfigError(f"config file {path}: get_config() failed: {type(e).__name__}: "
                          f"{e}") from e
    if not isinstance(recipe, dict):
        raise ConfigError(f"{path}: get_config() must return a dict")
    return Recipe(recipe, path)


def _parse_value(field, text, current, types=()):
    """Parses an override string to the field's type (`types`, else the current value's)."""
    kind = types[0] if len(types) == 1 else type(current)
    if kind is bool:
        low = text.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"--config.{field}: expected a boolean, got {text!r}")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"--config.{field}: expected an integer, got {text!r}") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"--config.{field}: expected a number, got {text!r}") from None
    if kind is str:
        if current is None and text.lower() == "none":  # an optional string set back to None
            return None
        return text
    # None or containers: a Python literal if it parses, else the string.
    if text.lower() == "none":
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def fields_of(method=None, config=None):
    """{name: Field} of the run fields and of `method`'s fields (no method: every method's
    field present in `config`, for configs built without naming the method)."""
    fields = dict(RUN_FIELD)
    if method is not None:
        fields.update((f.name, f) for f in get_method(method).fields)
        return fields
    for spec in REGISTRY.values():
        for f in spec.fields:
            if config is None or f.name in config:
                fields.setdefault(f.name, f)
    return fields


def _unknown_field(field, method, known, where):
    """ConfigError for a field the config does not have, saying which methods have it."""
    owners = sorted(name for name, spec in REGISTRY.items() if spec.field(field) is not None)
    if owners:
        return ConfigError(f"{where}: {field!r} is not a field of method {method or '?'} "
                           f"(it is one of {', '.join(owners)})")
    close = did_you_mean(field, known)
    if close:  # the likely one, not the list of ~60
        return ConfigError(f"{where}: unknown field {field!r}{close}; docs/training.md "
                           "lists every field")
    return ConfigError(f"{where}: unknown field {field!r}; known: {sorted(known)}")


def build_config(method_defaults, recipe=None, overrides=(), method=None):
    """Merges defaults, a recipe dict and `FIELD=VALUE` override strings into a Config,
    validated (`validate`; `method` adds the checks of the method's spec). A recipe value
    of the wrong type (the string "false" for a boolean, a number for a string) is a
    ConfigError naming the field and the recipe file."""
    config = Config(BASE_DEFAULTS)
    config.update(method_defaults)
    fields = fields_of(method, config)
    path = getattr(recipe, "path", None)
    where = f"recipe {path}" if path else "recipe"
    for key, value in (recipe or {}).items():
        if key == "method":  # which method the recipe was written for (kept, unchecked)
            config[key] = value
            continue
        if key not in config:
            raise _unknown_field(key, method, config, where)
        if key in fields:
            fields[key].check_type(value, where)
        config[key] = value
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--config.{item}: expected --config.FIELD=VALUE")
        field, text = item.split("=", 1)
        if field not in config:
            raise _unknown_field(field, method, config, f"--config.{field}")
        types = fields[field].types if field in fields else ()
        config[field] = _parse_value(field, text, config[field], types)
        if field in fields:
            fields[field].check_type(config[field], f"--config.{field}")
    given = {key for key in (recipe or {})} | {item.split("=", 1)[0] for item in overrides}
    encoder_pooling = get_method(method).encoder_pooling if method else None
    if encoder_pooling is not None and "pooling" not in given:
        config.pooling = encoder_pooling(config.encoder)
    resolve_encoder_fields(config, pooling_given="pooling" in given)
    validate(config, method)
    return config


# The run fields that, left unset (None), take what the encoder declares for itself.
ENCODER_FIELDS = ("pooling", "query_prompt", "document_prompt")


def resolve_encoder_fields(config, pooling_given=False):
    """Sets the ENCODER_FIELDS left at None to the encoder's own, in place (and returns
    `config`): `tfsent.encoders.own_settings(config.encoder)`, read from its files
    without loading it: the pooling a sentence-transformers Pooling module, a tfsent
    encoder directory or the family declares (else mean), the query / document prompts of
    config_sentence_transformers.json or a tfsent encoder directory (else ""). A value set
    by the method's defaults, a recipe or an override stays (an explicit "" prompt: none);
    a pooling that differs from one the encoder declares is a warning when the user gave
    it (`pooling_given`: a recipe or an override), an info line when it is the method's
    own default (e.g. supcon's mean_no_cls). Runs in `build_config`, so the run folder's
    config.json records the resolved values and a rerun of the same command compares
    equal; calling it again changes nothing."""
    if all(config.get(key, "") is not None for key in ENCODER_FIELDS) and not pooling_given:
        return config
    own = own_settings(config.encoder)
    pooling = config.get("pooling", "")
    if pooling is not None and own["declared"] and own["pooling"] not in (None, pooling):
        say = logging.warning if pooling_given else logging.info
        say("pooling %r (the %s) is used, not the %r that %s declares", pooling,
            "caller's" if pooling_given else "method's default", own["pooling"], own["where"])
    taken = []
    if config.get("pooling", "") is None and own["pooling"] is not None:
        config.pooling = own["pooling"]
        taken.append(f"pooling {own['pooling']!r} ({own['where']})")
    prompts = own["prompts"] or {}
    for key in ("query_prompt", "document_prompt"):
        if config.get(key, "") is None:
            config[key] = str(prompts.get(key) or "")
            if config[key]:
                taken.append(f"{key} {config[key]!r}")
    if taken:
        logging.info("the encoder's own settings (--config.FIELD overrides them): %s",
                     "; ".join(taken))
    return config


def validate(config, method=None):
    """Checks every field's type and value with the check of the constructor argument it
    feeds (`tfsent.checks`, shared with the constructors), so a config that passes here
    builds; `method` (a registry name) checks its spec's fields and runs its validation
    hook (without `method`: every method's field present in the config). Called once by
    `build_config`, before any data is read or model built. Raises ConfigError naming
    the field."""
    run_fields = RUN_FIELD if method is not None else fields_of(None, config)
    for name, field in run_fields.items():
        if name in config:
            field.validate(config[name])
    if config.steps == 0 and config.epochs == 0:
        raise ConfigError("set steps > 0, or steps = 0 and epochs > 0")
    if config.eval_every % config.steps_per_execution:
        raise ConfigError(f"steps_per_execution ({config.steps_per_execution}) must divide "
                          f"eval_every ({config.eval_every})")
    _validate_mixture(config, method)
    _validate_lora_and_precision(config, method)
    check_test_tasks(config)
    from tfsent import formats

    export_pooling = config.export_pooling or config.pooling
    if export_pooling is not None and \
            "sentence_transformers" in formats.export_formats(config.export_formats):
        formats.check_sentence_transformers_pooling(export_pooling)
    if method is not None:
        get_method(method).validate(config)  # its fields, then its validation hook


def check_test_tasks(config, need_data_dir=False):
    """`test_tasks`, run after training, checked before it: known task names and BEIR
    folders that hold their split; with `need_data_dir` (a run about to start; a recipe
    leaves eval_data_dir to the command line), eval_data_dir for the SentEval ones."""
    if not config.get("test_tasks"):
        return
    from tfsent.evaluation import resolve_tasks
    from tfsent.evaluation.retrieval import check_tasks

    try:
        tasks = resolve_tasks(config.test_tasks)
        retrieval = check_tasks(tasks)
    except (ConfigError, InputError) as e:
        raise ConfigError(f"test_tasks={config.test_tasks!r}: {e}") from None
    if need_data_dir and len(retrieval) < len(tasks) and not config.get("eval_data_dir"):
        raise ConfigError(f"test_tasks={config.test_tasks!r} needs eval_data_dir (the "
                          f"SentEval data/downstream folder): set --config.eval_data_dir")


def _validate_lora_and_precision(config, method):
    """`lora_rank` against the method (one that trains no encoder, or exports through its
    own format, refuses it) and the encoder's family (its `lora_targets`), and
    `mixed_float16` against the family (`float16_safe`); the family is read from the
    encoder's files, before any model loads (a preset name is checked when it loads,
    `training.loop.build_model`)."""
    rank = config.get("lora_rank", 0)
    if config.get("lora_alpha") and not rank:
        raise ConfigError(f"lora_alpha={config.lora_alpha} is set but lora_rank is 0 (LoRA "
                          "off); set lora_rank > 0 or leave lora_alpha at 0")
    if rank and method is not None:
        cls = get_method(method).cls
        refusal = getattr(cls, "lora_refusal", None)
        if refusal is None and getattr(cls, "dev_selection", None) == "reranked":
            refusal = ("the cross-encoder is exported through its own format, which does "
                       "not merge adapters")
        if refusal:
            raise ConfigError(f"lora_rank={rank}: method {method} takes no LoRA: {refusal}")
    if not rank and config.get("mixed_precision") != "mixed_float16":
        return
    family = own_settings(config.encoder).get("family")
    if family is None:
        return
    check_family_settings(family, rank, config.get("mixed_precision"),
                          f"encoder={config.encoder!r}")


def check_family_settings(family, lora_rank, mixed_precision, where):
    """ConfigError naming the field when the encoder `family` cannot take `lora_rank`
    (no `lora_targets`) or `mixed_precision` (mixed_float16 on a family whose
    activations overflow float16)."""
    record = families.TABLE[family]
    if lora_rank and not record.lora_targets:
        raise ConfigError(f"lora_rank={lora_rank}: the {family} family of {where} has no "
                          "LoRA targets")
    if mixed_precision == "mixed_float16" and not record.float16_safe:
        raise ConfigError(f"mixed_precision=mixed_float16: the {family} family of {where} "
                          "overflows float16 (its activations exceed 65504); use "
                          "mixed_bfloat16 or leave mixed_precision unset")


def _validate_mixture(config, method):
    """The mixture fields (train_data's sources, source_weights, mixture_sampling,
    batch_per_source) against each other and the method's batches (`tfsent.data.mixture`)."""
    if method is None:
        mixture.check_config(config)
        return
    spec = get_method(method)
    duplicate_free = (spec.data_kind in mixture.ROW_KINDS
                      and config.get("duplicate_free_batches", False))
    mixture.check_config(config, spec.data_kind, duplicate_free=duplicate_free,
                         premise_grouped=spec.data_kind == "nli_pairs" and spec.premise_grouped)


def resolve_config(method, recipe_path=None, overrides=()):
    """The run config of `method`: defaults < recipe < overrides."""
    spec = get_method(method)
    recipe = load_recipe(recipe_path) if recipe_path else {}
    if recipe.get("method", method) != method:
        logging.warning("recipe %s was written for method %s, running %s", recipe_path,
                        recipe["method"], method)
    return build_config(spec.defaults, recipe, overrides, method=method)


def split_config_overrides(argv):
    """Pulls `--config.FIELD=VALUE` arguments out of argv (absl does not know them)."""
    rest, overrides = [], []
    for arg in argv:
        if arg.startswith("--config."):
            overrides.append(arg[len("--config."):])
        else:
            rest.append(arg)
    return rest, overrides


def help_text(method=None):
    """The fields (run fields, and `method`'s or every method's) with default (`method`'s
    run default), accepted values and help, one per line."""
    defaults = dict(BASE_DEFAULTS, **(get_method(method).defaults if method else {}))
    lines = []
    for name, field in fields_of(method).items():
        check = field.check.describe() if isinstance(
            field.check, (checks.Range, checks.Choices)) else field.type_text()
        lines.append(f"  {name} = {defaults.get(name, field.default)!r}  ({check}) "
                     f"{field.doc}")
    return "\n".join(lines)
