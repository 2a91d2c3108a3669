"""The export metadata: one JSON file, `METADATA_FILE`, in every export tfsent writes.

Where it lives: at the top of a new-directory export (sentence_transformers, huggingface,
keras_hub, onnx, litert), in `assets.extra/` of a SavedModel version (tf_saved_model,
search_index: TF Serving copies assets.extra along and never reads it as a graph asset).
`read_metadata` finds it from any of: such a directory, a SavedModel version directory,
or a folder of versions (its newest version).

What it holds: `export_metadata`'s common entries (format, family, pooling,
max_seq_length, head), the format's own details (e.g. the SavedModel's tokenizer options
and quantization ranges, the ONNX files), then the caller's entries (`python -m
tfsent.export` adds `model`, a training run `method` and `step`).
"""

import json
import os
import re

from tfsent.errors import InputError
from tfsent.matryoshka import resolve_truncate_dim
from tfsent.encoders.huggingface.writing import write_json

METADATA_FILE = "tfsent_export.json"
SAVED_MODEL_FILE = "saved_model.pb"
ASSETS_EXTRA = "assets.extra"


def list_versions(parent):
    """Integer version subdirectories of `parent` that hold a complete SavedModel."""
    if not os.path.isdir(parent):
        return []
    return sorted(int(name) for name in os.listdir(parent) if re.fullmatch(r"\d+", name)
                  and os.path.exists(os.path.join(parent, name, SAVED_MODEL_FILE)))


def resolve_savedmodel_dir(path):
    """A SavedModel version dir, or an export dir (its newest version), or None."""
    path = os.fspath(path)
    if os.path.exists(os.path.join(path, SAVED_MODEL_FILE)):
        return path
    versions = list_versions(path)
    if versions:
        return os.path.join(path, str(versions[-1]))
    return None


def export_format(path):
    """The `format` recorded in the metadata of the SavedModel export at `path` (a version
    directory or a folder of versions: the newest); "" when its metadata is missing or
    names none; None when `path` is no SavedModel export."""
    if resolve_savedmodel_dir(path) is None:
        return None
    return str(read_metadata(os.fspath(path), required=False).get("format") or "")


def metadata_path(path):
    """Where the metadata of the export at `path` is (or goes): `path/assets.extra/...`
    for a SavedModel version, `path/...` for a new-directory export, the newest version's
    for a folder of SavedModel versions."""
    path = os.fspath(path)
    if not os.path.exists(os.path.join(path, SAVED_MODEL_FILE)):
        versions = list_versions(path)
        if not versions:
            return os.path.join(path, METADATA_FILE)
        path = os.path.join(path, str(versions[-1]))
    return os.path.join(path, ASSETS_EXTRA, METADATA_FILE)


def export_metadata(format_name, encoder, pooling, max_seq_length, head=None, **details):
    """The entries every export records, then the format's `details`: format, family,
    pooling, max_seq_length (special tokens included), head (its class name or None)."""
    return {"format": format_name, "family": encoder.family, "pooling": pooling,
            "max_seq_length": int(max_seq_length),
            "head": None if head is None else type(head).__name__, **details}


def write_metadata(path, metadata, extra=None):
    """Writes `metadata` updated by the caller's `extra` entries as the metadata of the
    export being built at `path` (`metadata_path`; a SavedModel's after
    `tf.saved_model.save`). Returns the file's path."""
    target = metadata_path(path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    write_json(target, {**metadata, **(extra or {})})
    return target


def read_metadata(path, required=True):
    """The metadata dict of the export at `path` (any directory `metadata_path` takes).
    A missing or unreadable file: InputError when `required`, else {}."""
    target = metadata_path(path)
    try:
        with open(target, encoding="utf-8") as f:
            metadata = json.load(f)
        if not isinstance(metadata, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        if not required:
            return {}
        raise InputError(f"no readable tfsent export metadata ({e})", path=target) from None
    return metadata


def encoder_prompts(encoder, query_prompt=None, document_prompt=None):
    """(query prompt, document prompt) of an export: the ones given, None ones the
    encoder's own (`encoder.prompts`: a sentence-transformers folder's), else ""."""
    stored = getattr(encoder, "prompts", None) or {}
    return (stored.get("query_prompt", "") if query_prompt is None else query_prompt,
            stored.get("document_prompt", "") if document_prompt is None else document_prompt)


def encoder_truncate_dim(encoder, truncate_dim=None, width=None, head=None,
                         option="truncate_dim"):
    """The size an export cuts its embedding to (None: none): `truncate_dim` when given
    (0, `matryoshka.FULL_DIM`, or the full `width`: none), else the encoder's own
    (`encoder.truncate_dim`: a sentence-transformers folder's), which is a size of the
    encoder's embedding and so does not apply under a `head`. `width`: the exported
    embedding's (default: the encoder's). ConfigError naming `option` for a bad size."""
    own = None if head is not None else getattr(encoder, "truncate_dim", None)
    return resolve_truncate_dim(truncate_dim, own, width or encoder.hidden_dim, option)


def uncut_truncate_dim(encoder, head=None):
    """The metadata entries of a format whose graph returns the whole embedding (onnx,
    litert, keras_hub, huggingface) for an encoder with its own `truncate_dim`: that size,
    recorded for the caller to apply; {} when it has none (or a `head` is exported)."""
    own = encoder_truncate_dim(encoder, head=head)
    if own is None:
        return {}
    return {"truncate_dim": own,
            "truncation": f"not applied here: keep the first {own} dimensions of the "
                          "embedding, then L2-normalise (as the model's own encode does)"}
