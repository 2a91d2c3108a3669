"""config.json of a Hugging Face checkpoint: reading it into a keras-hub backbone config
(checked: an unsupported family, position type or epsilon is a ConfigError, a missing field
an InputError naming the file), and writing a backbone's config under Hugging Face's field
names. The field names and the fixed fields are the family's (`Family.hf_config_keys`,
`Family.hf_config_fixed`)."""

import json
import os

import numpy as np

import tfsent.encoders.families as families
from tfsent.encoders.families import FAMILIES, family_of
from tfsent.errors import ConfigError, InputError

# tfsent / keras activation name -> Hugging Face `hidden_act` (gelu_new: the tanh form).
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_new", "gelu_new": "gelu_new",
                  "relu": "relu"}
# The backbone sizes every config.json holds (the family's field names).
_SIZES = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim")


def read_json(path):
    """JSON file contents; InputError naming the file and line on bad JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise InputError("file not found", path=path) from None
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON: {e.msg}", path=path, line=e.lineno) from None


def unsupported_family_message(model_type):
    """The error text for a model_type tfsent does not run."""
    names = [f"{f} (model_type {families.TABLE[f].hf_model_type})"
             if families.TABLE[f].hf_model_type else f for f in FAMILIES]
    return (f"model_type {model_type!r} is not supported; supported families: "
            f"{', '.join(names)}")


def read_hf_config(directory):
    """(family, config dict) of a Hugging Face checkpoint directory's config.json."""
    path = os.path.join(directory, "config.json")
    if not os.path.exists(path):
        raise InputError("no config.json: not a Hugging Face checkpoint directory",
                         path=directory)
    config = read_json(path)
    if not isinstance(config, dict) or "model_type" not in config:
        raise InputError("config.json has no model_type (cannot tell the model family)",
                         path=path)
    family = families.family_of_model_type(config["model_type"])
    if family is None:
        raise ConfigError(f"{path}: {unsupported_family_message(config['model_type'])}")
    return family, config


def keras_hub_overrides(family, config, weight_names=None):
    """Settings passed over keras-hub's converter for a folder of a family it loads: the
    family's `keras_hub_overrides`, and for a bidirectional sliding window (EmbeddingGemma)
    a window keras-hub reads as Hugging Face does. transformers lets a token see
    `sliding_window // 2` tokens on each side; keras-hub's window of size s sees s // 2
    after and s - s // 2 - 1 before (one fewer: 255 / 256 for EmbeddingGemma's 512), so it
    gets s = 2 * (sliding_window // 2) + 1. A base model saved with `tie_word_embeddings`
    false and no `lm_head.weight` among `weight_names` (its safetensors names) loads tied:
    the converter would look for the LM head, which an embedding model never runs."""
    out = dict(families.TABLE[family].keras_hub_overrides or {})
    if families.TABLE[family].keras_hub_ties_flag and config.get("tie_word_embeddings") \
            is False and weight_names is not None and "lm_head.weight" not in weight_names:
        out["tie_word_embeddings"] = True
    window = config.get("sliding_window")
    if families.TABLE[family].layer_type_period and window \
            and config.get("use_bidirectional_attention"):
        out["sliding_window_size"] = 2 * (int(window) // 2) + 1
    return out


def rope_types(config):
    """The rotary scaling kinds a config.json asks for: `rope_type` (or `type`) of
    transformers 4's `rope_scaling` and of transformers 5's `rope_parameters` (one dict,
    or one per layer type); "default" when a dict names none."""
    found = set()
    scaling = config.get("rope_scaling")
    parameters = config.get("rope_parameters") or {}
    dicts = [scaling] if isinstance(scaling, dict) else []
    if isinstance(parameters, dict):
        nested = [v for v in parameters.values() if isinstance(v, dict)]
        dicts += nested if nested and "rope_type" not in parameters else [parameters]
    for d in dicts:
        if d:
            found.add(str(d.get("rope_type", d.get("type", "default"))))
    return found


def check_keras_hub_fixed(family, config, path):
    """ConfigError when config.json sets what keras-hub's backbone of the family fixes
    (`Family.layer_type_period`, `Family.rope_thetas`, `Family.rope_types`,
    `Family.keras_hub_unread`, `Family.query_scale_field`): such a checkpoint would load
    without error and compute something else."""
    record = families.TABLE[family]
    for field, value in (record.keras_hub_unread or {}).items():
        if field in config and config[field] != value:
            raise ConfigError(f"{path}: {field} {config[field]!r}; keras-hub's {family} "
                              f"backbone runs only {value!r} (its blocks do not read {field})")
    field = record.query_scale_field
    head_dim = config.get("head_dim")
    if field and config.get(field) is not None and head_dim is not None \
            and config[field] != head_dim:
        raise ConfigError(f"{path}: {field} {config[field]!r}; keras-hub's {family} blocks "
                          f"scale queries by 1 / sqrt(head_dim) ({head_dim}) only")
    unsupported = sorted(rope_types(config) - set(record.rope_types))
    if unsupported:
        applied = [t for t in record.rope_types if t != "default"]
        raise ConfigError(f"{path}: rotary scaling {', '.join(unsupported)} "
                          f"(rope_scaling / rope_parameters); keras-hub's {family} backbone "
                          f"applies {' or '.join(applied) + ' scaling' if applied else 'none'}"
                          ": the positions would be computed otherwise")
    period = record.layer_type_period
    types = config.get("layer_types")
    if period and types:
        expected = ["sliding_attention" if (i + 1) % period else "full_attention"
                    for i in range(len(types))]
        if list(types) != expected:
            raise ConfigError(f"{path}: layer_types {types} differ from keras-hub's "
                              f"{family} layout (every {period}th layer full attention, "
                              "the others sliding)")
    for kind, theta in (record.rope_thetas or {}).items():
        given = ((config.get("rope_parameters") or {}).get(kind) or {}).get("rope_theta")
        if given is None:  # transformers 4's fields
            given = config.get("rope_local_base_freq" if kind == "sliding_attention"
                               else "rope_theta")
        if given is not None and float(given) != theta:
            raise ConfigError(f"{path}: rope_theta {given} of {kind} layers; keras-hub's "
                              f"{family} backbone fixes it at {theta:g}")


def position_offset(family, config):
    """Rows of the position table before position 0 in a checkpoint with `config`."""
    return families.TABLE[family].position_offset(config.get("pad_token_id"))


def backbone_config(family, config, path="config.json"):
    """(keras-hub backbone config, activation name) from a Hugging Face config dict."""
    record = families.TABLE[family]
    keys = record.hf_config_keys

    def get(setting):
        if keys[setting] not in config:
            raise InputError(f"config.json of a {family} checkpoint lacks {keys[setting]!r}",
                             path=path)
        return config[keys[setting]]

    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ConfigError(f"{path}: position_embedding_type "
                          f"{config['position_embedding_type']!r} is not supported "
                          "(absolute positions only)")
    out = {setting: get(setting) for setting in _SIZES}
    out["dropout"] = config.get(keys["dropout"], 0.1)
    out["max_sequence_length"] = (get("max_sequence_length")
                                  - position_offset(family, config))
    if record.has_segments:
        out["num_segments"] = config.get(keys["num_segments"], 2)
    activation = config.get(keys["activation"], "gelu")
    fixed = record.layer_norm_epsilon
    epsilon = (config.get(keys["layer_norm_epsilon"], fixed)
               if "layer_norm_epsilon" in keys else fixed)
    if not np.isclose(epsilon, fixed, rtol=1e-3, atol=0):
        raise ConfigError(f"{path}: layer_norm_eps={epsilon} is not supported for {family} "
                          f"(keras-hub's backbone fixes {fixed})")
    if out["hidden_dim"] % out["num_heads"]:
        raise InputError(f"hidden size {out['hidden_dim']} is not a multiple of the "
                         f"{out['num_heads']} attention heads", path=path)
    if activation not in HF_ACTIVATIONS:
        raise ConfigError(f"{path}: activation {activation!r} is not supported")
    return out, activation


def checked_family(backbone):
    """The family of a keras-hub backbone; ConfigError for other classes."""
    family = family_of(backbone)
    if family is None:
        names = families.backbone_class_names()
        raise ConfigError(f"cannot publish a {type(backbone).__name__}: supported backbones "
                          f"are {', '.join(sorted(names))} (families {', '.join(FAMILIES)})")
    return family


def hf_config(backbone, activation=None, pad_token_id=None):
    """config.json of a keras-hub backbone under Hugging Face's field names (a base model).

    `activation`: the feed-forward activation the weights were trained with (tfsent's
    `encoder.activation`; default: the one keras-hub builds the family with).
    `pad_token_id`: default the family's."""
    family = checked_family(backbone)
    record = families.TABLE[family]
    activation = activation or record.activation
    if activation not in HF_ACTIVATIONS:
        raise ConfigError(f"activation {activation!r} has no Hugging Face equivalent; "
                          f"supported: {', '.join(sorted(HF_ACTIVATIONS))}")
    pad = record.pad_token_id if pad_token_id is None else int(pad_token_id)
    dropout = float(getattr(backbone, "dropout", 0.1))
    settings = {setting: int(getattr(backbone, setting)) for setting in _SIZES}
    settings.update(
        activation=HF_ACTIVATIONS[activation], dropout=dropout, attention_dropout=dropout,
        max_sequence_length=int(backbone.max_sequence_length) + record.position_offset(pad),
        layer_norm_epsilon=record.layer_norm_epsilon)
    if record.has_segments:
        settings["num_segments"] = int(backbone.num_segments)
    keys = record.hf_config_keys
    return {"architectures": [record.hf_model_class], "model_type": family,
            "initializer_range": 0.02, "dtype": "float32",
            **{keys[k]: value for k, value in settings.items() if k in keys},
            "pad_token_id": pad, **record.hf_config_fixed}
