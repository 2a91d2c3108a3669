"""Hugging Face and sentence-transformers directories: reading them into keras-hub
backbones and tfsent tokenizers, and writing an encoder's weights back under Hugging Face's
names.

Families (config.json `model_type`): bert, roberta, xlm-roberta, distilbert. tfsent reads
`model.safetensors` (or a sharded `model.safetensors.index.json`) itself, rather than through
keras-hub's converters, so that
  - every weight is checked against config.json before anything is built (a missing or
    mis-shaped weight is an `InputError` naming the file and the weight),
  - a base-model prefix (`bert.`, `roberta.`, `distilbert.`, or none, as sentence-transformers
    saves them) is found the same way for every family,
  - RoBERTa / XLM-R position tables drop their first `pad_token_id + 1` rows (position ids
    there start at padding_idx + 1; tfsent's, like keras-hub's, start at 0), and a non-zero
    token-type row (always zero in converted fairseq checkpoints) is folded into them,
  - the MLM head, when the checkpoint has one, is available to CMLM-CSE (`read_mlm_head`).
`hf_state_dict` / `hf_config` are the inverse: a backbone's weights and config under Hugging
Face's names, as `tfsent.publish` writes them. The families' names and weight maps are
`families.TABLE`'s; the keras-hub sublayers they name come from `keras_hub_adapter`.
"""

import json
import os

import numpy as np
from absl import logging
from safetensors import safe_open
from safetensors.numpy import load_file

import tfsent.encoders.families as families
import tfsent.encoders.keras_hub_adapter as kh
from tfsent.encoders.families import FAMILIES, family_of
from tfsent.encoders.tokenizers import (ByteBPETokenizer, SentencePieceTokenizer,
                                        SentenceTokenizer)
from tfsent.errors import ConfigError, InputError

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
# tfsent / keras activation name -> Hugging Face `hidden_act` (gelu_new: the tanh form).
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_new", "gelu_new": "gelu_new",
                  "relu": "relu"}
# Word embeddings name without prefix, used to find the base-model prefix.
_ANCHOR = "embeddings.word_embeddings.weight"


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
    return (f"model_type {model_type!r} is not supported; supported families: "
            f"{', '.join(FAMILIES)}")


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
    family = config["model_type"]
    if family not in FAMILIES:
        raise ConfigError(f"{path}: {unsupported_family_message(family)}")
    return family, config


def _field(config, key, path, family):
    if key not in config:
        raise InputError(f"config.json of a {family} checkpoint lacks {key!r}", path=path)
    return config[key]


def _position_offset(family, config):
    """Rows of the position table before position 0 in a checkpoint with `config`."""
    return families.TABLE[family].position_offset(config.get("pad_token_id", 1))


def backbone_config(family, config, path="config.json"):
    """(keras-hub backbone config, activation name) from a Hugging Face config dict."""
    get = lambda key: _field(config, key, path, family)  # noqa: E731
    if family == "distilbert":
        out = {"vocabulary_size": get("vocab_size"), "num_layers": get("n_layers"),
               "num_heads": get("n_heads"), "hidden_dim": get("dim"),
               "intermediate_dim": get("hidden_dim"), "dropout": config.get("dropout", 0.1),
               "max_sequence_length": get("max_position_embeddings")}
        activation = config.get("activation", "gelu")
        epsilon = families.TABLE[family].layer_norm_epsilon  # not in DistilBERT's config
    else:
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ConfigError(f"{path}: position_embedding_type "
                              f"{config['position_embedding_type']!r} is not supported "
                              "(absolute positions only)")
        out = {"vocabulary_size": get("vocab_size"), "num_layers": get("num_hidden_layers"),
               "num_heads": get("num_attention_heads"), "hidden_dim": get("hidden_size"),
               "intermediate_dim": get("intermediate_size"),
               "dropout": config.get("hidden_dropout_prob", 0.1),
               "max_sequence_length": (get("max_position_embeddings")
                                       - _position_offset(family, config))}
        if family == "bert":
            out["num_segments"] = config.get("type_vocab_size", 2)
        activation = config.get("hidden_act", "gelu")
        epsilon = config.get("layer_norm_eps", families.TABLE[family].layer_norm_epsilon)
    fixed = families.TABLE[family].layer_norm_epsilon
    if not np.isclose(epsilon, fixed, rtol=1e-3, atol=0):
        raise ConfigError(f"{path}: layer_norm_eps={epsilon} is not supported for {family} "
                          f"(keras-hub's backbone fixes {fixed})")
    if out["hidden_dim"] % out["num_heads"]:
        raise InputError(f"hidden size {out['hidden_dim']} is not a multiple of the "
                         f"{out['num_heads']} attention heads", path=path)
    if activation not in HF_ACTIVATIONS:
        raise ConfigError(f"{path}: activation {activation!r} is not supported")
    return out, activation


# --------------------------------------------------------------------------------------
# Weight names
# --------------------------------------------------------------------------------------
# kinds: how a Hugging Face tensor maps onto the keras variable
#   copy      same layout
#   linear    torch Linear weight (out, in) -> Dense kernel (in, out)
#   qkv       (heads*hd, H) -> EinsumDense kernel (H, heads, hd)
#   qkv_bias  (heads*hd,) -> (heads, hd)
#   attn_out  (H, heads*hd) -> EinsumDense kernel (heads, hd, H)
#   positions (offset + P, H) -> (P, H): the first `offset` rows dropped (written as zeros)

# Dense roles of a transformer block (`keras_hub_adapter.BlockParts`) -> (weight kind, bias
# kind); the block's other roles are LayerNorms.
_DENSE_KINDS = {"query": ("qkv", "qkv_bias"), "key": ("qkv", "qkv_bias"),
                "value": ("qkv", "qkv_bias"), "attention_output": ("attn_out", "copy"),
                "ffn_inner": ("linear", "copy"), "ffn_output": ("linear", "copy")}


def _to_keras(kind, value, shape, offset=0):
    if kind == "copy":
        return value
    if kind == "linear":
        return value.T
    if kind in ("qkv", "attn_out"):
        return np.reshape(value.T, shape)
    if kind == "qkv_bias":
        return np.reshape(value, shape)
    if kind == "positions":
        return value[offset:]
    raise ValueError(kind)


def _to_hf(kind, value, offset=0):
    if kind == "copy":
        return value
    if kind == "linear":
        return value.T
    if kind == "qkv":
        return np.reshape(value, (value.shape[0], -1)).T
    if kind == "attn_out":
        return np.reshape(value, (-1, value.shape[-1])).T
    if kind == "qkv_bias":
        return np.reshape(value, (-1,))
    if kind == "positions":
        return np.concatenate([np.zeros((offset, value.shape[1]), value.dtype), value])
    raise ValueError(kind)


def _hf_shape(kind, keras_shape, offset=0):
    if kind == "copy":
        return tuple(keras_shape)
    if kind == "linear":
        return tuple(reversed(keras_shape))
    if kind == "qkv":
        return (keras_shape[1] * keras_shape[2], keras_shape[0])
    if kind == "attn_out":
        return (keras_shape[2], keras_shape[0] * keras_shape[1])
    if kind == "qkv_bias":
        return (keras_shape[0] * keras_shape[1],)
    if kind == "positions":
        return (keras_shape[0] + offset, keras_shape[1])
    raise ValueError(kind)


def _norm(prefix, layer):
    return [(f"{prefix}.weight", layer.gamma, "copy"), (f"{prefix}.bias", layer.beta, "copy")]


def _dense(prefix, layer, kind="linear", bias_kind="copy"):
    return [(f"{prefix}.weight", layer.kernel, kind), (f"{prefix}.bias", layer.bias, bias_kind)]


def weight_specs(family, backbone):
    """[(Hugging Face name without prefix, keras variable, kind)] of a backbone's weights,
    pooler excluded (see `pooler_specs`): `families.TABLE[family]`'s weight map over the
    sublayers `keras_hub_adapter` finds."""
    names = families.TABLE[family]
    emb = kh.embedding_parts(backbone)
    specs = [(f"{names.embeddings['token']}.weight", emb.token.embeddings, "copy"),
             (f"{names.embeddings['position']}.weight", emb.position.position_embeddings,
              "positions")]
    if emb.segment is not None:
        specs.append((f"{names.embeddings['segment']}.weight", emb.segment.embeddings, "copy"))
    specs += _norm(names.embeddings["norm"], emb.norm)
    for i, layer in enumerate(backbone.transformer_layers):
        parts = kh.transformer_block_parts(layer)
        for role, module in names.layer.items():
            sublayer, module = getattr(parts, role), module.format(i=i)
            specs += (_dense(module, sublayer, *_DENSE_KINDS[role]) if role in _DENSE_KINDS
                      else _norm(module, sublayer))
    return specs


def pooler_specs(backbone):
    """The pooler's weights (empty for families without a pooler)."""
    dense = kh.pooler_dense(backbone)
    name = families.TABLE[family_of(backbone)].pooler
    return [] if dense is None or name is None else _dense(name, dense)


# --------------------------------------------------------------------------------------
# Reading safetensors
# --------------------------------------------------------------------------------------

class SafetensorsCheckpoint:
    """The tensors of `model.safetensors` (or of a sharded checkpoint's index), read lazily;
    `shape(name)` without loading. Names are the file's own (prefix included)."""

    def __init__(self, directory):
        self.directory = directory
        index = os.path.join(directory, SAFETENSORS_INDEX)
        single = os.path.join(directory, SAFETENSORS_FILE)
        if os.path.exists(single):
            files = {None: single}
            self.where = None
        elif os.path.exists(index):
            weight_map = read_json(index).get("weight_map")
            if not isinstance(weight_map, dict):
                raise InputError("no weight_map", path=index)
            files = {name: os.path.join(directory, name) for name in set(weight_map.values())}
            self.where = weight_map
        else:
            others = [n for n in ("pytorch_model.bin", "tf_model.h5", "model.ckpt.index")
                      if os.path.exists(os.path.join(directory, n))]
            hint = (f" (found {', '.join(others)}: tfsent reads safetensors only; convert with "
                    "transformers' save_pretrained(..., safe_serialization=True))"
                    if others else "")
            raise InputError(f"no {SAFETENSORS_FILE}{hint}", path=directory)
        self._files = {}
        for key, path in files.items():
            if not os.path.exists(path):
                raise InputError("shard named in the index is missing", path=path)
            try:
                self._files[key] = (path, safe_open(path, framework="np"))
            except Exception as e:  # noqa: BLE001  (safetensors raises its own error types)
                raise InputError(f"not a readable safetensors file ({e})", path=path) from None
        self.names = set()
        for key, (_, f) in self._files.items():
            self.names.update(f.keys())

    def path_of(self, name):
        """The file holding tensor `name` (for error messages)."""
        key = None if self.where is None else self.where.get(name)
        return self._files.get(key, next(iter(self._files.values())))[0]

    @property
    def path(self):
        """The file to name in errors about the checkpoint as a whole."""
        return (os.path.join(self.directory, SAFETENSORS_FILE) if self.where is None
                else os.path.join(self.directory, SAFETENSORS_INDEX))

    def _file(self, name):
        key = None if self.where is None else self.where.get(name)
        return self._files[key][1]

    def shape(self, name):
        """Shape of tensor `name`, read from the header only."""
        return tuple(self._file(name).get_slice(name).get_shape())

    def get(self, name):
        """Tensor `name` as a float32 array."""
        return np.asarray(self._file(name).get_tensor(name), np.float32)

    def base_prefix(self):
        """The prefix of the base model's names ("", "bert.", "roberta.", ...)."""
        matches = sorted((n for n in self.names if n.endswith(_ANCHOR)), key=len)
        if not matches:
            raise InputError("no embeddings.word_embeddings.weight tensor: not a BERT-family "
                             "checkpoint", path=self.path)
        return matches[0][: -len(_ANCHOR)]


def _lookup(ckpt, prefix, name):
    """The stored name of `name` (LayerNorm weight/bias also as old gamma/beta), or None."""
    candidates = [prefix + name]
    if name.endswith("LayerNorm.weight"):
        candidates.append(prefix + name[: -len("weight")] + "gamma")
    if name.endswith("LayerNorm.bias"):
        candidates.append(prefix + name[: -len("bias")] + "beta")
    for candidate in candidates:
        if candidate in ckpt.names:
            return candidate
    return None


def load_weights(family, backbone, directory, config):
    """Assigns a Hugging Face checkpoint's weights to `backbone` after checking every name
    and shape (InputError naming the file and the weight otherwise). Returns True when the
    checkpoint had BERT's pooler (a BERT without one keeps a fresh pooler, logged)."""
    ckpt = SafetensorsCheckpoint(directory)
    prefix = ckpt.base_prefix()
    offset = _position_offset(family, config)
    specs = weight_specs(family, backbone)
    values = []
    for name, variable, kind in specs:
        values.append(_checked(ckpt, prefix, name, variable, kind, offset, family))
    has_pooler = True
    pooler = pooler_specs(backbone)
    if pooler:
        if _lookup(ckpt, prefix, pooler[0][0]) is None:
            has_pooler = False
            logging.warning("%s has no pooler weights: `cls` pooling's Dense is freshly "
                            "initialised", ckpt.path)
        else:
            for name, variable, kind in pooler:
                specs.append((name, variable, kind))
                values.append(_checked(ckpt, prefix, name, variable, kind, offset, family))
    # RoBERTa's token types: one row, added to every token (zero in fairseq conversions).
    for zero_name in families.TABLE[family].zero_tensors:
        name = _lookup(ckpt, prefix, zero_name)
        if name is not None:
            rows = ckpt.get(name)
            if rows.ndim != 2 or rows.shape[1] != backbone.hidden_dim:
                raise InputError(f"weight {name} has shape {rows.shape}, expected (1, "
                                 f"{backbone.hidden_dim})", path=ckpt.path_of(name))
            if np.any(rows[0]):
                logging.info("%s: token type 0's embedding folded into the position table "
                             "(%s has no token-type input)", ckpt.path, family)
                index = [i for i, s in enumerate(specs) if s[2] == "positions"][0]
                values[index] = values[index] + rows[0]
    for (_, variable, _), value in zip(specs, values):
        variable.assign(value.astype(variable.dtype))
    return has_pooler


def _checked(ckpt, prefix, name, variable, kind, offset, family):
    stored = _lookup(ckpt, prefix, name)
    if stored is None:
        raise InputError(f"missing weight {prefix + name} (a {family} checkpoint with "
                         "config.json's sizes has it)", path=ckpt.path)
    expected = _hf_shape(kind, tuple(variable.shape), offset)
    shape = ckpt.shape(stored)
    if shape != expected:
        raise InputError(f"weight {stored} has shape {shape}, config.json implies "
                         f"{expected}", path=ckpt.path_of(stored))
    return _to_keras(kind, ckpt.get(stored), tuple(variable.shape), offset)


def read_mlm_head(family, directory, hidden_dim, vocab_size):
    """The checkpoint's MLM head as numpy arrays {"kernel" (H, H), "bias", "gamma", "beta",
    "output_bias" (V,)}, or None when the checkpoint has none (a base model)."""
    ckpt = SafetensorsCheckpoint(directory)
    dense, norm, biases = families.TABLE[family].mlm_head
    names = {"kernel": f"{dense}.weight", "bias": f"{dense}.bias",
             "gamma": f"{norm}.weight", "beta": f"{norm}.bias"}
    found = {key: _lookup(ckpt, "", name) for key, name in names.items()}
    found["output_bias"] = next((b for b in biases if b in ckpt.names), None)
    if all(v is None for v in found.values()):
        return None
    missing = [names.get(k, biases[0]) for k, v in found.items() if v is None]
    if missing:
        raise InputError(f"incomplete MLM head: missing {', '.join(missing)}", path=ckpt.path)
    expected = {"kernel": (hidden_dim, hidden_dim), "bias": (hidden_dim,),
                "gamma": (hidden_dim,), "beta": (hidden_dim,), "output_bias": (vocab_size,)}
    head = {}
    for key, stored in found.items():
        if ckpt.shape(stored) != expected[key]:
            raise InputError(f"weight {stored} has shape {ckpt.shape(stored)}, expected "
                             f"{expected[key]}", path=ckpt.path_of(stored))
        head[key] = ckpt.get(stored)
    head["kernel"] = head["kernel"].T
    return head


# --------------------------------------------------------------------------------------
# Tokenizer files
# --------------------------------------------------------------------------------------

def _special_token(value):
    return value.get("content") if isinstance(value, dict) else value


def tokenizer_settings(directory):
    """tokenizer_config.json merged over special_tokens_map.json ({} when absent)."""
    settings = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            data = read_json(path)
            if isinstance(data, dict):
                settings.update(data)
    return settings


def _tokenizer_json(directory):
    path = os.path.join(directory, "tokenizer.json")
    return (path, read_json(path)) if os.path.exists(path) else (path, None)


def make_tokenizer(family, directory, max_seq_length, pad_to_max_length, vocab_size):
    """The tfsent tokenizer of a Hugging Face checkpoint directory (its classic tokenizer
    files, or tokenizer.json for WordPiece / BPE); checks that every id it can produce
    indexes the model's embedding table (vocab_size)."""
    settings = tokenizer_settings(directory)
    kind = families.TABLE[family].tokenizer_kind
    if kind == "wordpiece":
        path = os.path.join(directory, "vocab.txt")
        if os.path.exists(path):
            vocabulary = path
        else:
            path, data = _tokenizer_json(directory)
            vocabulary = _tokenizer_json_vocab(path, data, "WordPiece", directory, "vocab.txt")
        lowercase = bool(settings.get("do_lower_case", True))
        strip = settings.get("strip_accents")
        tokenizer = SentenceTokenizer(vocabulary, lowercase, lowercase if strip is None
                                      else bool(strip), max_seq_length, pad_to_max_length,
                                      segment_ids=family == "bert")
    elif kind == "byte_bpe":
        specials = {role: _special_token(settings[key]) for role, key in
                    (("cls", "cls_token"), ("sep", "sep_token"), ("pad", "pad_token"),
                     ("mask", "mask_token"), ("unk", "unk_token")) if key in settings}
        path = os.path.join(directory, "vocab.json")
        merges = os.path.join(directory, "merges.txt")
        if os.path.exists(path) and os.path.exists(merges):
            vocabulary = path
        else:
            path, data = _tokenizer_json(directory)
            vocabulary = _tokenizer_json_vocab(path, data, "BPE", directory,
                                               "vocab.json and merges.txt")
            merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
        tokenizer = ByteBPETokenizer(vocabulary, merges, bool(settings.get("add_prefix_space",
                                                                           False)),
                                     specials, max_seq_length, pad_to_max_length)
    else:
        path = os.path.join(directory, "sentencepiece.bpe.model")
        if not os.path.exists(path):
            raise InputError("no sentencepiece.bpe.model (an XLM-R checkpoint's tokenizer "
                             "model; tokenizer.json alone is not enough for tfsent)",
                             path=directory)
        tokenizer = SentencePieceTokenizer(path, max_seq_length, pad_to_max_length)
    top_id = tokenizer.vocabulary_size - 1
    if top_id >= vocab_size:
        raise InputError(f"the tokenizer has {tokenizer.vocabulary_size} ids but config.json's "
                         f"vocab_size is {vocab_size}: the files do not belong together",
                         path=path)
    return tokenizer


def _tokenizer_json_vocab(path, data, model_type, directory, classic):
    if data is None:
        raise InputError(f"no tokenizer files: expected {classic} or tokenizer.json",
                         path=directory)
    model = data.get("model") or {}
    if model.get("type") != model_type or not isinstance(model.get("vocab"), dict):
        raise InputError(f"tokenizer.json holds no {model_type} vocabulary", path=path)
    vocab = model["vocab"]
    if model_type == "BPE":
        return vocab
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise InputError("vocabulary ids are not 0..N-1", path=path)
    return [tok for tok, _ in by_id]


# --------------------------------------------------------------------------------------
# sentence-transformers directories
# --------------------------------------------------------------------------------------

_ST_POOLING = {"pooling_mode_cls_token": "cls_before_pooler",
               "pooling_mode_mean_tokens": "mean"}
_ST_OTHER_POOLING = ("pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                     "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")


def read_sentence_transformers(directory):
    """Settings of a sentence-transformers model directory (modules.json):
    {"transformer_dir", "pooling" (a tfsent pooling, or None with "pooling_error"),
     "max_seq_length", "normalize", "do_lower_case"} (absent keys: not declared)."""
    path = os.path.join(directory, "modules.json")
    modules = read_json(path)
    if not isinstance(modules, list) or not modules:
        raise InputError("expected a list of modules", path=path)
    out = {"normalize": False}
    for module in sorted(modules, key=lambda m: m.get("idx", 0)):
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        sub = os.path.join(directory, module.get("path", ""))
        if kind == "Transformer":
            out["transformer_dir"] = sub
            config = os.path.join(sub, "sentence_bert_config.json")
            if os.path.exists(config):
                st = read_json(config)
                if st.get("max_seq_length") is not None:
                    out["max_seq_length"] = int(st["max_seq_length"])
                out["do_lower_case"] = bool(st.get("do_lower_case", False))
        elif kind == "Pooling":
            config_path = os.path.join(sub, "config.json")
            config = read_json(config_path)
            modes = [k for k in (*_ST_POOLING, *_ST_OTHER_POOLING) if config.get(k)]
            if len(modes) == 1 and modes[0] in _ST_POOLING:
                out["pooling"] = _ST_POOLING[modes[0]]
            else:
                out["pooling"] = None
                out["pooling_error"] = InputError(
                    f"pooling {' + '.join(modes) or 'none'} is not supported (tfsent runs "
                    "CLS or mean pooling); pass pooling= to override it", path=config_path)
        elif kind == "Normalize":
            out["normalize"] = True
        elif kind == "Dense" and _is_bert_pooler_dense(sub, out):
            out["pooling"] = "cls"  # CLS token + the checkpoint's own pooler: tfsent's `cls`
        else:
            raise InputError(f"module {module.get('type')!r} is not supported (tfsent runs "
                             "Transformer, Pooling and Normalize modules, and a Dense module "
                             "that is the checkpoint's own BERT pooler after CLS pooling)",
                             path=path)
    if "transformer_dir" not in out:
        raise InputError("no sentence_transformers.models.Transformer module", path=path)
    return out


def _is_bert_pooler_dense(module_dir, settings):
    """True when a sentence-transformers Dense module (after CLS-token pooling) is exactly
    the transformer's pooler: tanh, square, and the same weights as `pooler.dense.*` of the
    checkpoint (what tfsent's own export writes for `cls` pooling). Anything else is a head
    tfsent's encoder does not run, so the caller refuses it."""
    if settings.get("pooling") != "cls_before_pooler" or "transformer_dir" not in settings:
        return False
    config = read_json(os.path.join(module_dir, "config.json"))
    if not str(config.get("activation_function", "")).endswith("Tanh"):
        return False
    dense_path = os.path.join(module_dir, "model.safetensors")
    model_path = os.path.join(settings["transformer_dir"], "model.safetensors")
    if not (os.path.exists(dense_path) and os.path.exists(model_path)):
        return False
    dense = load_file(dense_path)
    model = load_file(model_path)
    pooler = {name.rsplit("pooler.dense.", 1)[1]: value for name, value in model.items()
              if "pooler.dense." in name}
    return (set(pooler) == {"weight", "bias"} and "linear.weight" in dense
            and dense["linear.weight"].shape == pooler["weight"].shape
            and np.array_equal(dense["linear.weight"], pooler["weight"])
            and np.array_equal(dense.get("linear.bias"), pooler["bias"]))


# --------------------------------------------------------------------------------------
# Writing: a backbone under Hugging Face's names
# --------------------------------------------------------------------------------------

def checked_family(backbone):
    """The family of a keras-hub backbone; ConfigError for other classes."""
    family = family_of(backbone)
    if family is None:
        names = families.backbone_class_names()
        raise ConfigError(f"cannot publish a {type(backbone).__name__}: supported backbones "
                          f"are {', '.join(sorted(names))} (families {', '.join(FAMILIES)})")
    return family


def _relative_path(backbone, variable):
    root = backbone.name + "/"
    return variable.path[len(root):] if variable.path.startswith(root) else variable.path


def hf_state_dict(backbone, pad_token_id=None, prefix=True):
    """{Hugging Face tensor name: float32 array} of a keras-hub backbone's weights, the
    inverse of `load_weights`.

    Names carry the family's base-model prefix (`bert.`, `roberta.`, `distilbert.`; none
    with `prefix=False`), as hub checkpoints of *ForMaskedLM do. Every backbone variable
    must be named by the family's map (an unmapped variable means a variant tfsent does not
    know: ConfigError, rather than a model missing a weight). `pad_token_id` places
    RoBERTa's position rows (default 1, fairseq's); tensors keras-hub has no counterpart of
    (RoBERTa's token-type row) are zeros."""
    family = checked_family(backbone)
    names = families.TABLE[family]
    offset = names.position_offset(1 if pad_token_id is None else pad_token_id)
    base = names.base_prefix if prefix else ""
    try:
        specs = weight_specs(family, backbone) + pooler_specs(backbone)
    except AttributeError as e:
        raise ConfigError(f"{type(backbone).__name__} lacks a sublayer tfsent reads ({e}): "
                          "not the layout tfsent can publish") from None
    out = {}
    for name, variable, kind in specs:
        out[base + name] = np.ascontiguousarray(
            _to_hf(kind, np.asarray(variable.numpy(), np.float32), offset))
    for name, rows in names.zero_tensors.items():
        out[base + name] = np.zeros((rows, backbone.hidden_dim), np.float32)
    used = {id(variable) for _, variable, _ in specs}
    unmapped = sorted(_relative_path(backbone, v) for v in backbone.weights
                      if id(v) not in used)
    if unmapped:
        raise ConfigError(f"{type(backbone).__name__} has variables tfsent cannot name in "
                          f"Hugging Face's layout: {', '.join(unmapped)}")
    return out


def hf_config(backbone, activation=None, pad_token_id=None):
    """config.json of a keras-hub backbone under Hugging Face's field names (a base model).

    `activation`: the feed-forward activation the weights were trained with (tfsent's
    `encoder.activation`; default: the one keras-hub builds the family with)."""
    family = checked_family(backbone)
    names = families.TABLE[family]
    activation = activation or names.activation
    if activation not in HF_ACTIVATIONS:
        raise ConfigError(f"activation {activation!r} has no Hugging Face equivalent; "
                          f"supported: {', '.join(sorted(HF_ACTIVATIONS))}")
    act = HF_ACTIVATIONS[activation]
    dropout = float(getattr(backbone, "dropout", 0.1))
    common = {"architectures": [names.hf_model_class], "model_type": family,
              "vocab_size": int(backbone.vocabulary_size), "initializer_range": 0.02,
              "dtype": "float32"}
    if family == "distilbert":
        return {**common, "dim": backbone.hidden_dim, "n_layers": backbone.num_layers,
                "n_heads": backbone.num_heads, "hidden_dim": backbone.intermediate_dim,
                "activation": act, "dropout": dropout, "attention_dropout": dropout,
                "max_position_embeddings": int(backbone.max_sequence_length),
                "sinusoidal_pos_embds": False,
                "pad_token_id": 0 if pad_token_id is None else int(pad_token_id)}
    config = {**common, "hidden_size": backbone.hidden_dim,
              "num_hidden_layers": backbone.num_layers,
              "num_attention_heads": backbone.num_heads,
              "intermediate_size": backbone.intermediate_dim, "hidden_act": act,
              "hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout,
              "layer_norm_eps": names.layer_norm_epsilon,
              "position_embedding_type": "absolute"}
    if family == "bert":
        config.update(max_position_embeddings=int(backbone.max_sequence_length),
                      type_vocab_size=int(backbone.num_segments),
                      pad_token_id=0 if pad_token_id is None else int(pad_token_id))
    else:
        pad = 1 if pad_token_id is None else int(pad_token_id)
        config.update(max_position_embeddings=int(backbone.max_sequence_length)
                      + names.position_offset(pad), type_vocab_size=1, pad_token_id=pad,
                      bos_token_id=0, eos_token_id=2)
    return config
