"""Serving formats: the registry `FORMATS` that `python -m tfsent.export --format=NAME` and
the Keras-native `model.export(path, format=NAME)` dispatch through.

    from tfsent import formats
    formats.export(encoder, "out/minilm", format="tf_saved_model", pooling="mean")

Formats (`FORMATS`, name -> `ExportFormat`):
  tf_saved_model  `tfsent.saved_model.export_encoder`: versioned SavedModels for TF Serving
                  under the target (`TARGET/1`, `TARGET/2`, ...; each export adds the next
                  version), with TF Serving's warm-up requests and batching parameters
                  (`tfsent.tf_serving`). `saved_model` is the same format's older name.
  onnx            `tfsent.formats.onnx:export_onnx`: ONNX Runtime (ids in, a new directory).
  litert          `tfsent.formats.litert:export_litert`: a LiteRT `.tflite` (a new directory).

A writer is named "module:function" and imported only when a format is used, so a format
whose module (or optional dependency) is missing fails with an error naming it, and the
other formats work. Every writer is called as

    writer(encoder, target, *, pooling=None, head=None, max_seq_length=None,
           metadata=None, query_prompt="", document_prompt="", <quantize kwarg>=(), ...)

and returns the path it wrote. `quantize` is a tuple of the entry's `quantize_modes`
(passed under the entry's `quantize_kwarg`; the SavedModel's are extra int8 / binary
outputs, ONNX's and LiteRT's int8 weights). A format that is not `versioned` writes a new
directory: an existing non-empty target is refused before anything is loaded or written.
"""

import dataclasses
import importlib
import os

from absl import logging

from tfsent.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class ExportFormat:
    """One serving format of the registry.

    Args:
        name: the `--format` value.
        writer: "module:function" of the function that writes it (imported on use).
        quantize_modes: the quantizations the format can write (`--quantize` values).
        quantize_kwarg: the writer's keyword argument that takes the quantize tuple.
        versioned: True when the target holds integer versions and each export adds one
            (TF Serving's layout); False when the target is a new directory.
        description: one line for `--help`.
        requires: "module:function" called before the model loads to check the format's
            optional dependency (raises ConfigError naming the extra); "" for none.
    """

    name: str
    writer: str
    quantize_modes: tuple = ()
    quantize_kwarg: str = "quantize"
    versioned: bool = False
    description: str = ""
    requires: str = ""

    def load_writer(self):
        """The writer function; ConfigError naming the module when it is not there."""
        module_name, function_name = self.writer.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name not in (module_name, *_parents(module_name)):
                raise  # the module exists; one of its own imports is missing
            raise ConfigError(f"format {self.name!r}: its writer module {module_name} is "
                              "not in this tfsent installation") from e
        writer = getattr(module, function_name, None)
        if writer is None:
            raise ConfigError(f"format {self.name!r}: {module_name} has no writer "
                              f"{function_name}")
        return writer


def _parents(module_name):
    """'a.b.c' -> ('a', 'a.b')."""
    parts = module_name.split(".")
    return tuple(".".join(parts[:i]) for i in range(1, len(parts)))


FORMATS = {
    "tf_saved_model": ExportFormat(
        "tf_saved_model", "tfsent.saved_model:export_encoder", ("int8", "binary"),
        quantize_kwarg="quantize_outputs", versioned=True,
        description="versioned SavedModels for TF Serving under the target (strings in)"),
    "onnx": ExportFormat(
        "onnx", "tfsent.formats.onnx:export_onnx", ("int8",),
        description="ONNX Runtime model (token ids in) in a new directory",
        requires="tfsent.formats.onnx:require_onnx"),
    "litert": ExportFormat(
        "litert", "tfsent.formats.litert:export_litert", ("int8",),
        description="LiteRT .tflite model (token ids in) in a new directory",
        requires="tfsent.formats.litert:interpreter_class"),
}
# Older names still accepted (`--format=saved_model` predates the registry).
ALIASES = {"saved_model": "tf_saved_model"}


def get_format(name, option="--format"):
    """The ExportFormat called `name` (or an alias of it); ConfigError naming `option` and
    the known formats otherwise."""
    entry = FORMATS.get(ALIASES.get(name, name))
    if entry is None:
        raise ConfigError(f"{option}={name}: unknown format; valid: {', '.join(FORMATS)}")
    return entry


def refuse_text_options(format_name, query_prompt="", document_prompt="", normalize=False):
    """ConfigError for options a token-ids format cannot carry: prompts belong to the
    caller's tokenization, and the model serves both `embedding` and
    `embedding_normalized`."""
    for option, value in (("query_prompt", query_prompt), ("document_prompt", document_prompt),
                          ("normalize", normalize)):
        if value:
            raise ConfigError(f"--{option} does not apply to --format={format_name} (the "
                              "model takes token ids and serves embedding and "
                              "embedding_normalized)")


def check_export(name, target, quantize=(), option="--format",
                 target_option="--export_dir", quantize_option="--quantize"):
    """Everything about an export that can be refused before the model is loaded: the
    format, the quantize modes it can write, the target (a versioned format's target must
    not be a file; any other format's must be absent or an empty directory). Returns the
    ExportFormat."""
    entry = get_format(name, option)
    cannot = [mode for mode in quantize if mode not in entry.quantize_modes]
    if cannot:
        can = ", ".join(entry.quantize_modes) or "none"
        raise ConfigError(f"{quantize_option}={','.join(quantize)}: {option}={entry.name} "
                          f"cannot write {cannot[0]!r} (it can: {can})")
    if target is None:
        raise ConfigError(f"{target_option}: no target path given")
    target = os.fspath(target)
    if entry.versioned:
        if os.path.exists(target) and not os.path.isdir(target):
            raise ConfigError(f"{target_option}={target} exists and is not a folder (it "
                              "holds the versions of a SavedModel)")
    elif os.path.exists(target) and (not os.path.isdir(target) or os.listdir(target)):
        raise ConfigError(f"{target_option}={target} exists and is not an empty directory; "
                          "choose a new directory (an export never overwrites another)")
    if entry.requires:
        module_name, function_name = entry.requires.split(":")
        getattr(importlib.import_module(module_name), function_name)()
    return entry


def export(encoder, target, format="tf_saved_model", quantize=(), **kwargs):
    """Writes `encoder` (a `tfsent.encoders.SentenceEncoder`) as `format` to `target`;
    returns the path written (for tf_saved_model the new version directory). `quantize`
    is a tuple (or comma-separated string) of the format's quantize modes; `kwargs` go to the format's writer
    (pooling, head, max_seq_length, metadata, query_prompt, document_prompt, ...).
    Everything `check_export` refuses is refused before the writer runs."""
    if isinstance(quantize, str):  # "int8,binary", as on the command line
        quantize = quantize.split(",")
    quantize = tuple(q.strip() for q in quantize or () if q.strip())
    entry = check_export(format, target, quantize, option="format",
                         target_option="target", quantize_option="quantize")
    writer = entry.load_writer()
    if quantize:
        kwargs[entry.quantize_kwarg] = quantize
    return writer(encoder, os.fspath(target), **kwargs)


def keras_export(encoder, filepath, format, verbose, input_signature, defaults, kwargs):
    """The body of `SentenceMethod.export` / `SentenceEncoder.export` (Keras'
    `Model.export(filepath, format, verbose, input_signature, **kwargs)`): `encoder`
    written through `export` with the writer options `defaults` (the model's pooling,
    head, ...) updated by `kwargs` (a `metadata` dict is merged). `input_signature` must
    be None: a tfsent export's signatures are fixed (see `tfsent.saved_model`). Logs the
    path at INFO when `verbose` (None: True, as Keras does for a SavedModel). Returns the
    path written."""
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
