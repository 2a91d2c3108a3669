"""Every output format of tfsent, in one registry: `FORMATS` (name -> `ExportFormat`), and
one dispatcher, `export`, that `python -m tfsent.export --format=NAME`, the Keras-native
`model.export(path, format=NAME)`, `python -m tfsent.index` and a training run's
`--config.export_formats` all go through.

    from tfsent import formats
    formats.export(encoder, "out/minilm", format="tf_saved_model", pooling="mean")
    formats.export(encoder, "out/st", format="sentence_transformers", normalize=True,
                   onnx=True)

Formats (one record each; its module writes it):
  tf_saved_model         `saved_model.py`: versioned SavedModels for TF Serving (strings in;
                         `TARGET/1`, `TARGET/2`, ...) with TF Serving's warm-up requests and
                         batching parameters (`tf_serving.py`); `saved_model` is its older
                         name. Quantized outputs: `quantize.py`.
  cross_encoder          `cross_encoder.py`: a cross-encoder's (`methods.CrossEncoder`)
                         SavedModel version with a `score(queries, passages)` signature.
  cross_encoder_hf       `cross_encoder_hf.py`: a cross-encoder as a Hugging Face
                         *ForSequenceClassification folder (sentence-transformers'
                         `CrossEncoder(DIR)`), the same logits.
  search_index           `search_index.py`: a SavedModel version with a corpus index and a
                         top-k `search` signature (`python -m tfsent.index`).
  onnx                   `onnx.py`: ONNX Runtime (token ids in), a new directory.
  litert                 `litert.py`: a LiteRT `.tflite` (token ids in), a new directory.
  sentence_transformers  `sentence_transformers.py`: `SentenceTransformer(DIR)` (Pooling,
                         Dense, Normalize modules; `onnx=True` adds its ONNX backend's files).
  huggingface            `huggingface.py`: the bare transformer (`AutoModel`) + tokenizer.
  keras_hub              `keras_hub_preset.py`: a keras-hub preset (Backbone, tokenizer, a
                         TextEmbedder task where keras-hub has one for the family).
Shared by all: `staging.py` (a new directory is written beside its target and renamed into
place; a folder of versions gains the next one: `next_version`), `metadata.py` (the
`tfsent_export.json` every export carries: `write_metadata`, `read_metadata`),
`model_paths.py` (whether a path holds a bi-encoder or a cross-encoder: the check of a model
given in the wrong place).

A new format is one `ExportFormat` record here plus its writer module. A writer is named
"module:function" and imported only when its format is used, so a format whose optional
dependency is missing fails with an error naming it and the others work. It is called as

    writer(encoder, target, **options)

with the options it takes by name (pooling, head, max_seq_length, metadata, prompts,
normalize, the record's `quantize_kwarg`, ...) and returns the path written. `export`
refuses, before the writer runs: an unknown format, a quantize mode it cannot write, a
target that is not new (a versioned format's: not a file), a missing optional dependency,
a head or a corpus the format cannot take, and any set option its writer does not take.
An option left unset (None, "", False) is not passed.

`SentenceEncoder.export` reaches `keras_export` through the exporter hook of
`tfsent.encoders.model` (`set_exporter`), which importing this package installs
(`import tfsent` always does): the encoders never import the formats that import them.
"""

import dataclasses
import importlib
import inspect
import os
import warnings

from absl import logging

import tfsent.encoders.families as families
from tfsent.encoders.lora import merge_lora
from tfsent.encoders.model import set_exporter
from tfsent.errors import ConfigError, InputError
from tfsent.encoders.huggingface.writing import write_hf_model, write_tokenizer_files
from tfsent.formats.metadata import (METADATA_FILE, export_format, list_versions, read_metadata,
                                     write_metadata)
from tfsent.formats.sentence_transformers import ST_POOLINGS, \
    check_sentence_transformers_pooling
from tfsent.formats.staging import check_new_target, check_versions_parent, next_version

EXPORT_INFO_FILE = METADATA_FILE  # its name in tfsent.publish

__all__ = ["ExportFormat", "FORMATS", "ALIASES", "get_format", "check_export", "export",
           "keras_export", "export_formats", "export_run_formats", "export_encoder_as",
           "check_sentence_transformers_pooling", "ST_POOLINGS", "METADATA_FILE",
           "EXPORT_INFO_FILE", "read_metadata", "write_metadata", "write_hf_model",
           "write_tokenizer_files", "next_version", "next_step_lines", "help_text",
           "quantize_tuple"]


@dataclasses.dataclass(frozen=True)
class ExportFormat:
    """One output format of the registry.

    Args:
        name: the `--format` value.
        writer: "module:function" of the function that writes it (imported on use).
        description: one line for `--help`.
        quantize_modes: the quantizations the format can write (`--quantize` values).
        quantize_kwarg: the writer's keyword argument that takes the quantize tuple.
        versioned: True when the target holds integer versions and each export adds one
            (TF Serving's layout); False when the target is a new directory.
        needs_tokenizer: the encoder must have a tokenizer (in the graph or as files).
        carries_head: the format can apply an export head (a layer on the pooled
            embedding, e.g. CLSR's MLP).
        needs_corpus: the writer indexes a corpus (the `corpus` option is required).
        requires: "module:function" called before the model loads to check the format's
            optional dependency (raises ConfigError naming the extra); "" for none.
        next_steps: lines telling the user what to do with the export ("{path}" is
            replaced by its path); a command prints them after the path
            (`next_step_lines`).
        scores_pairs: a cross-encoder's format (`export` takes a `methods.CrossEncoder`
            or its `.keras` file; the others take a sentence encoder).
    """

    name: str
    writer: str
    description: str = ""
    quantize_modes: tuple = ()
    quantize_kwarg: str = "quantize"
    versioned: bool = False
    needs_tokenizer: bool = True
    carries_head: bool = True
    needs_corpus: bool = False
    requires: str = ""
    next_steps: tuple = ()
    scores_pairs: bool = False

    def load_writer(self):
        """The writer function; ConfigError naming the module when it is not there."""
        return _load(self.writer, f"format {self.name!r}: its writer")

    def options(self):
        """The option names the writer takes (its keyword parameters)."""
        parameters = list(inspect.signature(self.load_writer()).parameters.values())[2:]
        return tuple(p.name for p in parameters
                     if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))

    def check_dependency(self):
        """Runs `requires` (ConfigError naming the missing extra)."""
        if self.requires:
            _load(self.requires, f"format {self.name!r}: its dependency check")()


def _load(spec, what):
    """The function named "module:function"; ConfigError naming `what` when absent."""
    module_name, function_name = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name not in (module_name, *_parents(module_name)):
            raise  # the module exists; one of its own imports is missing
        raise ConfigError(f"{what} module {module_name} is not in this tfsent "
                          "installation") from e
    function = getattr(module, function_name, None)
    if function is None:
        raise ConfigError(f"{what}: {module_name} has no {function_name}")
    return function


def _parents(module_name):
    """'a.b.c' -> ('a', 'a.b')."""
    parts = module_name.split(".")
    return tuple(".".join(parts[:i]) for i in range(1, len(parts)))


FORMATS = {entry.name: entry for entry in (
    ExportFormat("tf_saved_model", "tfsent.formats.saved_model:export_encoder",
                 "versioned SavedModels for TF Serving under the target (strings in)",
                 quantize_modes=("int8", "binary"), quantize_kwarg="quantize_outputs",
                 versioned=True, next_steps=(
                     'load:     tf.saved_model.load("{path}").signatures["serving_default"]'
                     '(sentences=tf.constant([...]))  (README: serving it with TF Serving)',
                     "evaluate: python -m tfsent.evaluate --model={path} "
                     "--tasks=STSBenchmark,SICKRelatedness")),
    ExportFormat("onnx", "tfsent.formats.onnx:export_onnx",
                 "ONNX Runtime model (token ids in) in a new directory",
                 quantize_modes=("int8",), requires="tfsent.formats.onnx:require_onnx",
                 next_steps=('run:      onnxruntime.InferenceSession("{path}/model.onnx") on '
                             "the ids of the tokenizer in {path} (docs/export.md, "
                             '"ONNX Runtime")',)),
    ExportFormat("litert", "tfsent.formats.litert:export_litert",
                 "LiteRT .tflite model (token ids in) in a new directory",
                 quantize_modes=("int8",),
                 requires="tfsent.formats.litert:interpreter_class",
                 next_steps=('run:      ai_edge_litert Interpreter("{path}/model.tflite") on the '
                             "ids of the tokenizer in {path} (docs/export.md, LiteRT)",)),
    ExportFormat("sentence_transformers",
                 "tfsent.formats.sentence_transformers:export_sentence_transformers",
                 "a SentenceTransformer(DIR) folder (Pooling / Dense / Normalize modules) "
                 "in a new directory",
                 next_steps=('load:     SentenceTransformer("{path}") (sentence-transformers, '
                             "in a PyTorch environment)",)),
    ExportFormat("huggingface", "tfsent.formats.huggingface:export_huggingface",
                 "the bare transformer for AutoModel + its tokenizer, in a new directory",
                 carries_head=False,
                 next_steps=('load:     transformers.AutoModel.from_pretrained("{path}") and '
                             'AutoTokenizer.from_pretrained("{path}")',)),
    ExportFormat("keras_hub", "tfsent.formats.keras_hub_preset:export_keras_hub",
                 "a keras-hub preset (Backbone, tokenizer, TextEmbedder where it has one) "
                 "in a new directory", carries_head=False,
                 next_steps=('load:     keras_hub.models.Backbone.from_preset("{path}") '
                             "(docs/export.md, keras-hub)",)),
    ExportFormat("cross_encoder", "tfsent.formats.cross_encoder:export_cross_encoder",
                 "a cross-encoder's score(queries, passages) SavedModel for TF Serving "
                 "(strings in), as the next version under the target", versioned=True,
                 scores_pairs=True, next_steps=('load:     tf.saved_model.load("{path}").signatures["score"]'
                             "(queries=tf.constant([...]), passages=tf.constant([...]))",)),
    ExportFormat("cross_encoder_hf", "tfsent.formats.cross_encoder_hf:export_cross_encoder_hf",
                 "a cross-encoder as a Hugging Face sequence-classification folder "
                 "(sentence-transformers' CrossEncoder loads it), in a new directory",
                 scores_pairs=True, next_steps=(
                     'load:     sentence_transformers.CrossEncoder("{path}").predict([(query, '
                     "passage), ...]) (raw logits, as tfsent's score), or transformers."
                     'AutoModelForSequenceClassification.from_pretrained("{path}")',)),
    ExportFormat("search_index", "tfsent.formats.search_index:write_search_index",
                 "a top-k search SavedModel of a corpus, as the next version under the "
                 "target", quantize_modes=("int8", "binary"), versioned=True,
                 carries_head=False, needs_corpus=True,
                 next_steps=('query:    tf.saved_model.load("{path}").signatures["search"]'
                             "(queries=tf.constant([...]), k=tf.constant(10, tf.int32))  "
                             '(docs/search.md, "Querying it from Python")',)),
)}
# Older names still accepted (`--format=saved_model` predates the registry).
ALIASES = {"saved_model": "tf_saved_model"}


def get_format(name, option="--format"):
    """The ExportFormat called `name` (or an alias of it); ConfigError naming `option` and
    the known formats otherwise."""
    entry = FORMATS.get(ALIASES.get(name, name))
    if entry is None:
        raise ConfigError(f"{option}={name}: unknown format; valid: {', '.join(FORMATS)} "
                          f"({', '.join(f'{a} = {b}' for a, b in ALIASES.items())})")
    return entry


def next_step_lines(name, path):
    """The lines a command prints after writing `path` in format `name`: "next:" and what
    to do with it (the record's `next_steps`); [] when the format has none."""
    steps = get_format(name).next_steps
    return ["next:", *(f"  {step.format(path=path)}" for step in steps)] if steps else []


def help_text():
    """One line per format, for a `--format` flag's help."""
    return "; ".join(f"{e.name}: {e.description}" for e in FORMATS.values())


def check_export(name, target, quantize=(), options=None, option="--format",
                 target_option="--export_dir", quantize_option="--quantize",
                 option_names=None):
    """Everything about an export that can be refused before the model is loaded: the
    format, the quantize modes it can write, the target (a versioned format's must not be
    a file; any other's must be absent or an empty directory), the optional dependency,
    and the `options` (writer option -> value; set ones only) the format cannot take.
    Messages call an option `option_names[name]` (default: `--name` when `option` is a
    flag, else `name`). Returns the ExportFormat."""
    entry = get_format(name, option)
    cannot = [mode for mode in quantize if mode not in entry.quantize_modes]
    if cannot:
        can = ", ".join(entry.quantize_modes) or "none"
        raise ConfigError(f"{quantize_option}={','.join(quantize)}: {option}={entry.name} "
                          f"cannot write {cannot[0]!r} (it can: {can})")
    if target is None:
        raise ConfigError(f"{target_option}: no target path given")
    if entry.versioned:
        check_versions_parent(target, target_option)
        check_version_formats(target, entry.name, target_option)
    else:
        check_new_target(target, target_option)
    entry.check_dependency()
    if options:
        _check_options(entry, options, option, option_names)
    return entry


def check_version_formats(parent, name, option="--export_dir"):
    """ConfigError (naming `option`) when the folder of versions `parent` holds a version
    of another format than `name`: TF Serving serves the newest version of a folder, so
    a new version of another kind would replace the signatures its clients call."""
    for version in list_versions(parent):
        found = export_format(os.path.join(parent, str(version)))
        if found and found != name:
            raise ConfigError(f"{option}={parent} holds version {version} of a {found} "
                              f"export; a {name} export goes in a folder of its own (TF "
                              f"Serving serves a folder's newest version): choose another "
                              f"folder")


def _check_options(entry, options, option, option_names):
    """ConfigError for a set option `entry` cannot take."""
    prefix = "--" if option.startswith("--") else ""
    named = {key: prefix + key for key in options}
    named.update(option_names or {})
    if options.get("head") is not None and not entry.carries_head:
        can = [e.name for e in FORMATS.values() if e.carries_head]
        raise ConfigError(f"format {entry.name} cannot carry the export head (a layer on the "
                          f"pooled embedding, e.g. CLSR's MLP); formats that can: "
                          f"{', '.join(can)}")
    if entry.needs_corpus and options.get("corpus") is None:
        raise ConfigError(f"{option}={entry.name} indexes a corpus: give "
                          f"{named.get('corpus', prefix + 'corpus')}")
    takes = entry.options()
    for key, value in options.items():
        if key not in takes and _is_set(value):
            raise ConfigError(f"{named[key]} does not apply to {option}={entry.name} (it "
                              f"takes: {', '.join(o for o in takes if o != entry.quantize_kwarg)})")


def _is_set(value):
    """False for the values that mean "not given": None, "", False, (), {}."""
    return value is not None and value is not False and not (
        isinstance(value, (str, tuple, list, dict)) and not value)


def quantize_tuple(quantize):
    """A quantize spec ("int8,binary", a tuple, None) as a tuple of mode names."""
    if isinstance(quantize, str):  # "int8,binary", as on the command line
        quantize = quantize.split(",")
    return tuple(q.strip() for q in quantize or () if q.strip())


def check_family_format(encoder, name):
    """ConfigError when `encoder`'s family cannot be written as format `name` yet
    (`Family.export_formats`)."""
    family = getattr(encoder, "family", None)
    record = families.TABLE.get(family)
    if record is not None and record.export_formats is not None \
            and name not in record.export_formats:
        raise ConfigError(f"the {family} family cannot be exported as {name} yet (it "
                          f"exports as {', '.join(record.export_formats)}; docs/export.md)")


def _cross_encoder_parts(model, entry, options):
    """(encoder, options) of the model given to `export`: a `methods.CrossEncoder` (or the
    path of its `.keras` file) gives its encoder and its score head as `head`, for a
    cross-encoder's format only (its writer refuses a sentence encoder without a score
    head)."""
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if os.path.isdir(path):
            raise InputError("a directory: a cross-encoder is republished from its .keras "
                             "file (a SavedModel export keeps no Keras config; save the "
                             "CrossEncoder with model.save(FILE.keras)) or, from the "
                             "command line, from its training run's folder", path=path)
        if not (path.endswith(".keras") and os.path.isfile(path)):
            raise InputError(f"no such .keras file: format {entry.name} takes a CrossEncoder "
                             "or its .keras file (model.save('ce.keras'))", path=path)
        import keras  # only here: loading a saved Keras model

        model = keras.saving.load_model(path)
        if not hasattr(model, "score_head"):
            raise InputError(f"a {type(model).__name__}, not a CrossEncoder (a sentence "
                             "encoder is exported from its directory)", path=path)
    is_cross = hasattr(model, "score_head") and hasattr(model, "encoder")
    if is_cross and not entry.scores_pairs:
        pair_formats = [e.name for e in FORMATS.values() if e.scores_pairs]
        raise ConfigError(f"format {entry.name}: a cross-encoder has no sentence embeddings; "
                          f"it exports as {' or '.join(pair_formats)}")
    if is_cross:
        options = {**options, "head": options.get("head") or model.score_head}
        if options.get("pooling") not in (None, model.train_pooling):
            raise ConfigError(f"pooling={options['pooling']!r}: this cross-encoder's head "
                              f"reads the {model.train_pooling} token; leave pooling unset")
        if "pooling" in entry.options():
            options["pooling"] = model.train_pooling  # the token its head reads
        model = model.encoder
    return model, options


def export(encoder, target, format="tf_saved_model", quantize=(), **options):
    """Writes `encoder` (a `tfsent.encoders.SentenceEncoder`; for a cross-encoder's format
    a `tfsent.methods.CrossEncoder` or the path of its `.keras` file) as `format` to
    `target`; returns the path written (for a versioned format the new version directory).

    `quantize` is a tuple (or comma-separated string) of the format's quantize modes;
    `options` go to the format's writer (pooling, head, max_seq_length, metadata,
    query_prompt, document_prompt, normalize, corpus, onnx, ... as each writer takes them;
    unset ones are dropped). Everything `check_export` refuses is refused before the
    writer runs."""
    quantize = quantize_tuple(quantize)
    entry = get_format(format, "format")
    encoder, options = _cross_encoder_parts(encoder, entry, options)
    encoder = merge_lora(encoder)  # LoRA adapters merged: plain kernels leave the run
    entry = check_export(format, target, quantize, options, option="format",
                         target_option="target", quantize_option="quantize")
    if entry.needs_tokenizer and encoder.tokenizer is None:
        raise ConfigError(f"cannot export an encoder without a tokenizer as {entry.name}")
    check_family_format(encoder, entry.name)
    takes = entry.options()
    kwargs = {key: value for key, value in options.items()
              if key in takes and value is not None}
    if quantize:
        kwargs[entry.quantize_kwarg] = quantize
    return entry.load_writer()(encoder, os.fspath(target), **kwargs)


def keras_export(encoder, filepath, format, verbose, input_signature, defaults, kwargs):
    """The body of `SentenceMethod.export` / `SentenceEncoder.export` (Keras'
    `Model.export(filepath, format, verbose, input_signature, **kwargs)`): `encoder`
    written through `export` with the writer options `defaults` (the model's pooling,
    head, ...) updated by `kwargs` (a `metadata` dict is merged). `input_signature` must
    be None: a tfsent export's signatures are fixed (see `tfsent.formats.saved_model`).
    Logs the path at INFO when `verbose` (None: True, as Keras does for a SavedModel).
    Returns the path written."""
    if input_signature is not None:
        raise ConfigError("input_signature: a tfsent export has fixed signatures (strings "
                          "in for tf_saved_model, token ids for onnx / litert); leave it "
                          "None")
    options = {**defaults, **kwargs}
    if "metadata" in defaults and "metadata" in kwargs:
        options["metadata"] = {**defaults["metadata"], **(kwargs["metadata"] or {})}
    path = export(encoder, filepath, format=format, **options)
    (logging.info if verbose is None or verbose else logging.debug)(
        "exported the encoder as %s to %s", format, path)
    return path


set_exporter(keras_export)  # SentenceEncoder.export's writer (see the module docstring)


def export_formats(spec):
    """The format names of a comma-separated list (`--config.export_formats`), as given;
    ConfigError for an unknown format, one that needs a corpus (a training run has none),
    or one whose optional dependency is missing (before any training)."""
    names = [s.strip() for s in str(spec).split(",") if s.strip()]
    for name in names:
        entry = get_format(name, "export_formats")
        if entry.needs_corpus:
            raise ConfigError(f"export_formats={name}: the format indexes a corpus, which a "
                              "training run does not have; build it from the run's encoder "
                              "with python -m tfsent.index --model=OUTPUT_DIR/encoder")
        entry.check_dependency()
    return names


def export_run_formats(encoder, output_dir, names, **options):
    """A training run's exports besides its SavedModel: every format in `names` (a
    comma-separated string or a list, `--config.export_formats`) but tf_saved_model (the
    run writes that to OUTPUT_DIR/export itself), each to OUTPUT_DIR/export_<format>/<n>
    with n the next version (`next_version`), so a second run into the same directory
    adds a version. `options` go to every writer (`export`); the prompts of a token-ids
    format (onnx, litert: the caller tokenizes) are recorded in its metadata instead.
    Returns {format: path}."""
    if not isinstance(names, str):
        names = ",".join(names)
    paths = {}
    for name in export_formats(names):
        entry = get_format(name)
        if entry.name == "tf_saved_model":
            continue
        parent = os.path.join(output_dir, f"export_{name}")
        takes = entry.options()
        own = dict(options)
        for key in ("query_prompt", "document_prompt"):
            if key not in takes and own.get(key):
                own["metadata"] = {**(own.get("metadata") or {}), key: own.pop(key)}
        paths[name] = export(encoder, os.path.join(parent, str(next_version(parent))),
                             format=name, **own)
    return paths


def export_encoder_as(encoder, directory, format="sentence_transformers", **options):
    """Deprecated: `export(encoder, directory, format=format, **options)`."""
    warnings.warn("tfsent.formats.export_encoder_as is deprecated; use "
                  "tfsent.formats.export(encoder, directory, format=..., ...)",
                  FutureWarning, stacklevel=2)
    return export(encoder, directory, format=format, **options)
