"""Which kind of model a path holds, a bi-encoder (sentence embeddings) or a cross-encoder
(one score per (query, passage) pair), read from its files only (no model is loaded): the
one check every option that takes a model path makes before anything is built.

    cross_encoder_kind(path)        words for what makes `path` a cross-encoder, or None
    check_bi_encoder(path, option)  ConfigError when `path` is a cross-encoder
    check_cross_encoder(path, option)  ConfigError when `path` is a bi-encoder export
    keras_class_name(path)          the class a `.keras` file's config.json records
    is_run_dir(path)                whether `path` is a tfsent training run's folder

A cross-encoder is: a SavedModel export of format `cross_encoder`, a folder tfsent wrote
as format `cross_encoder_hf`, a `.keras` file of a CrossEncoder, a Hugging Face
*ForSequenceClassification folder (a reranker from the hub), or a `cross_encoder` training
run's folder.
"""

import json
import os
import zipfile

from tfsent.encoders.encoder_dir import ENCODER_CONFIG_FILE
from tfsent.errors import ConfigError
from tfsent.formats.metadata import METADATA_FILE, export_format

CROSS_ENCODER_FORMATS = ("cross_encoder", "cross_encoder_hf")
CROSS_ENCODER_CLASS = "CrossEncoder"  # tfsent.methods.CrossEncoder's class name
CROSS_ENCODER_METHOD = "cross_encoder"  # the method name a run's config.json records
# Files that mark an encoder folder: Hugging Face / sentence-transformers, tfsent's encoder
# directory, a tfsent export in a new folder.
_ENCODER_FILES = ("config.json", "modules.json", ENCODER_CONFIG_FILE, METADATA_FILE)


def keras_class_name(path):
    """The class name a `.keras` file's config.json records ("" when it cannot be read)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return str(json.loads(archive.read("config.json")).get("class_name") or "")
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return ""


def json_object(path):
    """The JSON object in `path`; {} when the file is missing or holds no readable object."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def is_run_dir(path):
    """Whether `path` is a folder holding a tfsent training run's config.json (one naming
    its "method" and "train_data"; a Hugging Face checkpoint's config.json does not)."""
    config = json_object(os.path.join(os.fspath(path), "config.json")) if path else {}
    return "method" in config and "train_data" in config


def cross_encoder_kind(path):
    """What makes `path` a cross-encoder, in words ("a cross_encoder export", ...), or None
    for anything else (a bi-encoder, a name, a path that does not exist)."""
    if not path or not isinstance(path, (str, os.PathLike)):
        return None
    path = os.fspath(path)
    if os.path.isfile(path):
        if path.endswith(".keras") and keras_class_name(path) == CROSS_ENCODER_CLASS:
            return "a CrossEncoder's .keras file"
        return None
    if not os.path.isdir(path):
        return None
    found = export_format(path)
    if found in CROSS_ENCODER_FORMATS:
        return f"a {found} export"
    own = json_object(os.path.join(path, METADATA_FILE)).get("format")
    if own in CROSS_ENCODER_FORMATS:
        return f"a {own} export"
    config = json_object(os.path.join(path, "config.json"))
    if config.get("method") == CROSS_ENCODER_METHOD:
        return "a cross_encoder training run"
    architectures = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        return f"a Hugging Face {architectures[0]} folder"
    return None


def check_bi_encoder(path, option, hint=""):
    """Refuses (ConfigError naming `option`) a cross-encoder given where a bi-encoder is
    expected; `hint` ends the message (where the cross-encoder goes instead)."""
    what = cross_encoder_kind(path)
    if what:
        raise ConfigError(f"{option}={path} is {what}, a cross-encoder (it scores (query, "
                          "passage) pairs and has no sentence embeddings): give a bi-encoder "
                          f"(a sentence encoder) here{hint}")


def check_cross_encoder(path, option):
    """Refuses (ConfigError naming `option`) a bi-encoder's SavedModel export or encoder
    folder given where a cross-encoder is expected (what `path` is, in words); anything
    that is not recognisably a bi-encoder passes to the option's own checks."""
    if not path or cross_encoder_kind(path):
        return
    path = os.fspath(path)
    found = export_format(path)
    if found is not None:
        what = f"a {found} export" if found else "a SavedModel without tfsent metadata"
    elif os.path.isfile(path) and path.endswith(".keras"):
        what = f"a {keras_class_name(path) or 'unreadable'} model's .keras file"
    elif json_object(os.path.join(path, "config.json")).get("method"):
        what = f"a {json_object(os.path.join(path, 'config.json'))['method']} training run"
    elif os.path.isdir(path) and any(os.path.exists(os.path.join(path, name))
                                     for name in _ENCODER_FILES):
        what = "a sentence encoder's folder"
    else:
        return
    raise ConfigError(f"{option}={path} is {what}, a bi-encoder (sentence embeddings, no "
                      "pair score): give a cross-encoder (a cross_encoder export, a "
                      "CrossEncoder's .keras file or a cross_encoder training run)")
