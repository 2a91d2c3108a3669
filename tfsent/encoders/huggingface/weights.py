"""model.safetensors of a Hugging Face checkpoint, both ways: reading (a single file or a
sharded index) into a keras-hub backbone after checking every name and shape against the
backbone config.json implies, the MLM head when the checkpoint has one, and a backbone's
weights under Hugging Face's names (`hf_state_dict`, as `tfsent.formats` writes them).

tfsent reads the tensors itself rather than through keras-hub's converters, so that
  - every weight is checked before anything is assigned (a missing or mis-shaped weight is
    an `InputError` naming the file and the weight),
  - a base-model prefix (`bert.`, `roberta.`, `distilbert.`, or none, as sentence-transformers
    saves them) is found the same way for every family,
  - the position tables of families whose positions start after the padding id (RoBERTa,
    XLM-R: `Family.positions_after_padding`) drop their first `pad_token_id + 1` rows
    (tfsent's, like keras-hub's, start at 0), and a non-zero token-type row of a family
    without token types (always zero in converted fairseq checkpoints) is folded into them,
  - the MLM head is available to CMLM-CSE (`read_mlm_head`).
The names are `families.TABLE`'s weight maps; the keras-hub sublayers they name come from
`keras_hub_adapter`.
"""

import os

import numpy as np
from absl import logging
from safetensors import safe_open

import tfsent.encoders.families as families
import tfsent.encoders.keras_hub_adapter as kh
from tfsent.encoders.families import family_of
from tfsent.encoders.huggingface.config import checked_family, position_offset, read_json
from tfsent.errors import ConfigError, InputError

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
# Word embeddings name without prefix, used to find the base-model prefix.
_ANCHOR = "embeddings.word_embeddings.weight"


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
    dense = kh.pooler_dense(backbone)  # None unless the family has_pooler
    return [] if dense is None else _dense(families.TABLE[family_of(backbone)].pooler, dense)


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
    offset = position_offset(family, config)
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

def read_classification_head(family, directory, hidden_dim):
    """The *ForSequenceClassification head of a checkpoint (`families.TABLE[family]`'s
    kind) as {"inner": (kernel (H, H), bias) or None, "classifier": (kernel (H, labels),
    bias, None for a head without one)} in Keras' layout, or None when the checkpoint has
    no classifier (a base or MLM checkpoint). InputError for a head with a missing part or
    the wrong shapes."""
    head = families.TABLE[family].classification_head
    if head is None:
        return None
    ckpt = SafetensorsCheckpoint(directory)
    modules = {"classifier": head.classifier, "inner": head.inner}
    found = {}
    for role, module in modules.items():
        biased = head.bias or role == "inner"
        names = ((f"{module}.weight",) + ((f"{module}.bias",) if biased else ())
                 if module else ())
        present = [n for n in names if n in ckpt.names]
        if role == "classifier" and not present:
            return None
        if module and len(present) != len(names):
            raise InputError(f"incomplete classification head: {module}.weight and "
                             f"{module}.bias go together (a {family} "
                             "*ForSequenceClassification checkpoint has both)", path=ckpt.path)
        if module and not biased and f"{module}.bias" in ckpt.names:
            raise InputError(f"{module}.bias: a {family} *ForSequenceClassification head "
                             f"has no bias ({module} is a Linear without one)", path=ckpt.path)
        found[role] = None if not module else (
            ckpt.get(names[0]).T, ckpt.get(names[1]) if biased else None)
    kernel, bias = found["classifier"]
    if kernel.ndim != 2 or kernel.shape[0] != hidden_dim or (
            bias is not None and bias.shape != kernel.shape[1:]):
        raise InputError(f"weight {head.classifier}.weight has shape {kernel.T.shape}, "
                         f"expected (labels, {hidden_dim})", path=ckpt.path)
    if found["inner"] is not None and (found["inner"][0].shape != (hidden_dim, hidden_dim)
                                       or found["inner"][1].shape != (hidden_dim,)):
        raise InputError(f"weight {head.inner}.weight has shape {found['inner'][0].T.shape}, "
                         f"expected ({hidden_dim}, {hidden_dim})", path=ckpt.path)
    return found

# --------------------------------------------------------------------------------------
# Writing: a backbone's weights under Hugging Face's names
# --------------------------------------------------------------------------------------

def _relative_path(backbone, variable):
    root = backbone.name + "/"
    return variable.path[len(root):] if variable.path.startswith(root) else variable.path


def hf_state_dict(backbone, pad_token_id=None, prefix=True):
    """{Hugging Face tensor name: float32 array} of a keras-hub backbone's weights, the
    inverse of `load_weights`.

    Names carry the family's base-model prefix (`bert.`, `roberta.`, `distilbert.`; none
    with `prefix=False`), as hub checkpoints of *ForMaskedLM do. Every backbone variable
    must be named by the family's map (an unmapped variable means a variant tfsent does not
    know: ConfigError, rather than a model missing a weight). `pad_token_id` places the
    position rows of families whose positions start after it (default: the family's,
    fairseq's 1 for RoBERTa); tensors keras-hub has no counterpart of (RoBERTa's token-type
    row) are zeros."""
    family = checked_family(backbone)
    names = families.TABLE[family]
    offset = names.position_offset(pad_token_id)
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
