"""Publishing an encoder to other ecosystems: sentence-transformers, Hugging Face
transformers and keras-hub directories, beside TF Serving's SavedModel (`tfsent.export`).

    export_encoder_as(encoder, DIR, "sentence_transformers", head=None, pooling=None,
                      normalize=False)

Formats (`FORMATS`):
  saved_model            `tfsent.export.export_encoder`: versioned SavedModels under DIR.
  sentence_transformers  `SentenceTransformer(DIR)` loads it offline: the transformer in
                         Hugging Face's layout at the top level, then modules.json's
                         Pooling, Dense (a `cls` pooler, a method's export head) and Normalize
                         (only with `normalize=True`) modules.
  huggingface            the bare transformer (`AutoModel.from_pretrained(DIR)` + its
                         tokenizer), for users who pool themselves; `tfsent_export.json`
                         records the pooling and head it was trained with.
  keras_hub              a keras-hub preset: `keras_hub.models.Backbone.from_preset(DIR)`,
                         the tokenizer, and a `TextEmbedder` task where keras-hub has one for
                         the family and it expresses the pooling (BERT / XLM-R, `mean` or
                         `cls_before_pooler`, no head).

Every format but saved_model writes a temporary sibling directory and renames it into place
when complete; an existing non-empty DIR is refused before anything is written. A format
that cannot express the embedding (a pooling, a head layer, an activation) is refused with
an error that says what it can express: nothing is written that embeds differently.

Weight names are the inverse of keras-hub's Hugging Face converters
(keras_hub/src/utils/transformers/convert_{bert,roberta,xlm_roberta,distilbert}.py), kept
as data in `WEIGHT_MAPS`. Names carry the base-model prefix (`bert.`, `roberta.`,
`distilbert.`), as hub checkpoints of *ForMaskedLM do: transformers strips it when loading a
base model, and keras-hub's RoBERTa / DistilBERT converters need it.
"""

import json
import os
import shutil

import numpy as np
from absl import logging

from tfsent.errors import ConfigError

FORMATS = ("saved_model", "sentence_transformers", "huggingface", "keras_hub")
FAMILIES = ("bert", "roberta", "xlm-roberta", "distilbert")
EXPORT_INFO_FILE = "tfsent_export.json"
SAFETENSORS_FILE = "model.safetensors"

# keras-hub backbone class -> Hugging Face model_type.
BACKBONE_FAMILIES = {"XLMRobertaBackbone": "xlm-roberta", "RobertaBackbone": "roberta",
                     "DistilBertBackbone": "distilbert", "BertBackbone": "bert"}

# --------------------------------------------------------------------------------------
# Weight maps: (Hugging Face name without prefix, keras variable path, transform);
# "{i}" entries repeat for every transformer layer. Transforms (keras -> Hugging Face):
#   same        copied
#   transpose   Dense kernel (in, out) -> torch Linear weight (out, in)
#   heads_in    EinsumDense q/k/v kernel (H, heads, head_dim) -> (heads * head_dim, H)
#   heads_bias  (heads, head_dim) -> (heads * head_dim,)
#   heads_out   EinsumDense output kernel (heads, head_dim, H) -> (H, heads * head_dim)
#   positions   (P, H) -> (offset + P, H): RoBERTa's position ids start at padding_idx + 1,
#               keras-hub's at 0, so `offset` rows (zeros, never used) come first.
# --------------------------------------------------------------------------------------

def _layer_norm(hf, keras_path):
    return ((f"{hf}.weight", f"{keras_path}/gamma", "same"),
            (f"{hf}.bias", f"{keras_path}/beta", "same"))


def _linear(hf, keras_path, kernel="transpose", bias="same"):
    return ((f"{hf}.weight", f"{keras_path}/kernel", kernel),
            (f"{hf}.bias", f"{keras_path}/bias", bias))


_BLOCK = "transformer_layer_{i}"
_ATTN = _BLOCK + "/self_attention_layer"

_ENCODER_LAYER = (  # BERT, RoBERTa, XLM-R
    _linear("encoder.layer.{i}.attention.self.query", f"{_ATTN}/query", "heads_in", "heads_bias")
    + _linear("encoder.layer.{i}.attention.self.key", f"{_ATTN}/key", "heads_in", "heads_bias")
    + _linear("encoder.layer.{i}.attention.self.value", f"{_ATTN}/value", "heads_in",
              "heads_bias")
    + _linear("encoder.layer.{i}.attention.output.dense", f"{_ATTN}/attention_output",
              "heads_out")
    + _layer_norm("encoder.layer.{i}.attention.output.LayerNorm",
                  f"{_BLOCK}/self_attention_layer_norm")
    + _linear("encoder.layer.{i}.intermediate.dense", f"{_BLOCK}/feedforward_intermediate_dense")
    + _linear("encoder.layer.{i}.output.dense", f"{_BLOCK}/feedforward_output_dense")
    + _layer_norm("encoder.layer.{i}.output.LayerNorm", f"{_BLOCK}/feedforward_layer_norm"))

_DISTILBERT_LAYER = (
    _linear("transformer.layer.{i}.attention.q_lin", f"{_ATTN}/query", "heads_in", "heads_bias")
    + _linear("transformer.layer.{i}.attention.k_lin", f"{_ATTN}/key", "heads_in", "heads_bias")
    + _linear("transformer.layer.{i}.attention.v_lin", f"{_ATTN}/value", "heads_in",
              "heads_bias")
    + _linear("transformer.layer.{i}.attention.out_lin", f"{_ATTN}/attention_output",
              "heads_out")
    + _layer_norm("transformer.layer.{i}.sa_layer_norm", f"{_BLOCK}/self_attention_layer_norm")
    + _linear("transformer.layer.{i}.ffn.lin1", f"{_BLOCK}/feedforward_intermediate_dense")
    + _linear("transformer.layer.{i}.ffn.lin2", f"{_BLOCK}/feedforward_output_dense")
    + _layer_norm("transformer.layer.{i}.output_layer_norm", f"{_BLOCK}/feedforward_layer_norm"))

_ROBERTA_MAP = ((("embeddings.word_embeddings.weight", "embeddings/token_embedding/embeddings",
                  "same"),
                 ("embeddings.position_embeddings.weight",
                  "embeddings/position_embedding/embeddings", "positions"))
                + _layer_norm("embeddings.LayerNorm", "embeddings_layer_norm") + _ENCODER_LAYER)

WEIGHT_MAPS = {
    "bert": ((("embeddings.word_embeddings.weight", "token_embedding/embeddings", "same"),
              ("embeddings.position_embeddings.weight", "position_embedding/embeddings", "same"),
              ("embeddings.token_type_embeddings.weight", "segment_embedding/embeddings",
               "same"))
             + _layer_norm("embeddings.LayerNorm", "embeddings_layer_norm") + _ENCODER_LAYER
             + _linear("pooler.dense", "pooled_dense")),
    "roberta": _ROBERTA_MAP,
    "xlm-roberta": _ROBERTA_MAP,
    "distilbert": ((("embeddings.word_embeddings.weight",
                     "token_and_position_embedding/token_embedding/embeddings", "same"),
                    ("embeddings.position_embeddings.weight",
                     "token_and_position_embedding/position_embedding/embeddings", "same"))
                   + _layer_norm("embeddings.LayerNorm", "embeddings_layer_norm")
                   + _DISTILBERT_LAYER),
}
# Hugging Face tensors with no keras-hub counterpart, written as zeros: RoBERTa's single
# token-type row (keras-hub's RoBERTa has no token types; HF adds row 0 to every token).
ZERO_TENSORS = {"roberta": {"embeddings.token_type_embeddings.weight": 1},
                "xlm-roberta": {"embeddings.token_type_embeddings.weight": 1}}
BASE_PREFIX = {"bert": "bert.", "roberta": "roberta.", "xlm-roberta": "roberta.",
               "distilbert": "distilbert."}
# keras-hub fixes these LayerNorm epsilons per backbone class.
LAYER_NORM_EPSILON = {"bert": 1e-12, "roberta": 1e-5, "xlm-roberta": 1e-5, "distilbert": 1e-12}
HF_MODEL_CLASS = {"bert": "BertModel", "roberta": "RobertaModel",
                  "xlm-roberta": "XLMRobertaModel", "distilbert": "DistilBertModel"}
# tfsent / keras activation name -> Hugging Face `hidden_act` (gelu_new: the tanh form).
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_new", "gelu_new": "gelu_new",
                  "relu": "relu"}
# The feed-forward activation keras-hub's backbone classes are built with.
KERAS_HUB_ACTIVATIONS = {"bert": "gelu_approximate", "roberta": "gelu", "xlm-roberta": "gelu",
                         "distilbert": "gelu"}


def family_of(backbone):
    """Hugging Face model_type of a keras-hub backbone; ConfigError for other classes."""
    for cls in type(backbone).__mro__:
        if cls.__name__ in BACKBONE_FAMILIES:
            return BACKBONE_FAMILIES[cls.__name__]
    raise ConfigError(f"cannot publish a {type(backbone).__name__}: supported backbones are "
                      f"{', '.join(sorted(BACKBONE_FAMILIES))} (families {', '.join(FAMILIES)})")


def _to_hf(transform, value, offset):
    if transform == "same":
        return value
    if transform == "transpose":
        return value.T
    if transform == "heads_in":
        return value.reshape(value.shape[0], -1).T
    if transform == "heads_bias":
        return value.reshape(-1)
    if transform == "heads_out":
        return value.reshape(-1, value.shape[-1]).T
    if transform == "positions":
        return np.concatenate([np.zeros((offset, value.shape[1]), value.dtype), value])
    raise ValueError(f"unknown transform {transform!r}")


def _variables_by_path(backbone):
    """{variable path relative to the backbone: variable}."""
    out = {}
    root = backbone.name + "/"
    for variable in backbone.weights:
        path = variable.path
        out[path[len(root):] if path.startswith(root) else path] = variable
    return out


def position_offset(family, pad_token_id):
    """Rows of the Hugging Face position table before position 0 (RoBERTa: pad id + 1)."""
    return int(pad_token_id) + 1 if family in ("roberta", "xlm-roberta") else 0


def hf_state_dict(backbone, pad_token_id=None, prefix=True):
    """{Hugging Face tensor name: float32 array} of a keras-hub backbone's weights.

    Every backbone variable must be named by the family's map (an unmapped variable means a
    variant this module does not know: ConfigError, rather than a model missing a weight).
    `pad_token_id` places RoBERTa's position rows (default 1, fairseq's)."""
    family = family_of(backbone)
    variables = _variables_by_path(backbone)
    pad = 1 if pad_token_id is None else pad_token_id
    offset = position_offset(family, pad)
    base = BASE_PREFIX[family] if prefix else ""
    out, used = {}, set()
    for hf_name, keras_path, transform in WEIGHT_MAPS[family]:
        for i in range(backbone.num_layers) if "{i}" in hf_name else [None]:
            key = keras_path.format(i=i)
            if key not in variables:
                raise ConfigError(f"{type(backbone).__name__} has no variable {key!r} (for "
                                  f"{hf_name.format(i=i)}): not the layout tfsent can publish")
            value = np.asarray(variables[key].numpy(), np.float32)
            out[base + hf_name.format(i=i)] = np.ascontiguousarray(
                _to_hf(transform, value, offset))
            used.add(key)
    for hf_name, rows in ZERO_TENSORS.get(family, {}).items():
        out[base + hf_name] = np.zeros((rows, backbone.hidden_dim), np.float32)
    unmapped = sorted(set(variables) - used)
    if unmapped:
        raise ConfigError(f"{type(backbone).__name__} has variables tfsent cannot name in "
                          f"Hugging Face's layout: {', '.join(unmapped)}")
    return out


def hf_config(backbone, activation=None, pad_token_id=None):
    """config.json of a keras-hub backbone under Hugging Face's field names.

    `activation`: the feed-forward activation the weights were trained with (tfsent's
    `encoder.activation`; default: the one keras-hub builds the family with)."""
    family = family_of(backbone)
    activation = activation or KERAS_HUB_ACTIVATIONS[family]
    if activation not in HF_ACTIVATIONS:
        raise ConfigError(f"activation {activation!r} has no Hugging Face equivalent; "
                          f"supported: {', '.join(sorted(HF_ACTIVATIONS))}")
    act = HF_ACTIVATIONS[activation]
    dropout = float(getattr(backbone, "dropout", 0.1))
    common = {"architectures": [HF_MODEL_CLASS[family]], "model_type": family,
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
              "layer_norm_eps": LAYER_NORM_EPSILON[family],
              "position_embedding_type": "absolute"}
    if family == "bert":
        config.update(max_position_embeddings=int(backbone.max_sequence_length),
                      type_vocab_size=int(backbone.num_segments),
                      pad_token_id=0 if pad_token_id is None else int(pad_token_id))
    else:
        pad = 1 if pad_token_id is None else int(pad_token_id)
        config.update(max_position_embeddings=int(backbone.max_sequence_length)
                      + position_offset(family, pad), type_vocab_size=1, pad_token_id=pad,
                      bos_token_id=0, eos_token_id=2)
    return config


def write_hf_model(backbone, directory, activation=None, pad_token_id=None, config_extra=None):
    """Writes config.json and model.safetensors (Hugging Face names) of a keras-hub backbone
    into the existing `directory`."""
    from safetensors.numpy import save_file

    config = hf_config(backbone, activation, pad_token_id)
    config.update(config_extra or {})
    tensors = hf_state_dict(backbone, pad_token_id)
    save_file(tensors, os.path.join(directory, SAFETENSORS_FILE), metadata={"format": "pt"})
    _write_json(os.path.join(directory, "config.json"), config)


# --------------------------------------------------------------------------------------
# Tokenizer files
# --------------------------------------------------------------------------------------

_WORDPIECE_SPECIALS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                       "cls_token": "[CLS]", "mask_token": "[MASK]"}


def _tokenizer_kind(tokenizer):
    name = type(tokenizer).__name__
    kinds = {"SentenceTokenizer": "wordpiece", "ByteBPETokenizer": "bpe",
             "SentencePieceTokenizer": "sentencepiece"}
    if name not in kinds:
        raise ConfigError(f"cannot write Hugging Face tokenizer files for a {name}; "
                          f"supported: {', '.join(kinds)}")
    return kinds[name]


def wordpiece_tokenizer_json(tokenizer):
    """tokenizer.json (the `tokenizers` library's format) of a tfsent WordPiece tokenizer:
    Hugging Face's BERT pipeline with the tokenizer's casing and accent settings."""
    vocab = {token: i for i, token in enumerate(tokenizer.vocabulary)}
    specials = sorted(vocab[t] for t in _WORDPIECE_SPECIALS.values())
    cls_id, sep_id = tokenizer.cls_id, tokenizer.sep_id
    cls, sep = tokenizer.vocabulary[cls_id], tokenizer.vocabulary[sep_id]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, "content": tokenizer.vocabulary[i], "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False,
                          "special": True} for i in specials],
        "normalizer": {"type": "BertNormalizer", "clean_text": True,
                       "handle_chinese_chars": True,
                       "strip_accents": bool(tokenizer.strip_accents),
                       "lowercase": bool(tokenizer.lowercase)},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": cls, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": sep, "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": cls, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": sep, "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": sep, "type_id": 1}}],
            "special_tokens": {cls: {"id": cls, "ids": [cls_id], "tokens": [cls]},
                               sep: {"id": sep, "ids": [sep_id], "tokens": [sep]}}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab},
    }


def write_tokenizer_files(tokenizer, directory, family, max_seq_length):
    """Hugging Face tokenizer files of a tfsent tokenizer: the vocabulary files,
    tokenizer_config.json (casing / accents as the tfsent tokenizer applies them) and
    special_tokens_map.json; tokenizer.json for WordPiece."""
    kind = _tokenizer_kind(tokenizer)
    if kind == "wordpiece":
        if family not in ("bert", "distilbert"):
            raise ConfigError(f"a WordPiece tokenizer does not belong to a {family} model")
        with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("".join(token + "\n" for token in tokenizer.vocabulary))
        _write_json(os.path.join(directory, "tokenizer.json"),
                    wordpiece_tokenizer_json(tokenizer))
        specials = dict(_WORDPIECE_SPECIALS)
        config = {"tokenizer_class": ("DistilBertTokenizer" if family == "distilbert"
                                      else "BertTokenizer"),
                  "do_lower_case": bool(tokenizer.lowercase),
                  "strip_accents": bool(tokenizer.strip_accents),
                  "tokenize_chinese_chars": True, "do_basic_tokenize": True,
                  "clean_up_tokenization_spaces": True, **specials}
    elif kind == "bpe":
        if family != "roberta":
            raise ConfigError(f"a byte-level BPE tokenizer does not belong to a {family} model")
        tokenizer.save_files(directory)
        specials = {f"{role}_token": tok for role, tok in tokenizer.special_tokens.items()
                    if role in ("bos", "eos", "unk", "sep", "pad", "cls", "mask")}
        config = {"tokenizer_class": "RobertaTokenizer",
                  "add_prefix_space": bool(tokenizer.add_prefix_space),
                  "trim_offsets": True, "errors": "replace", **specials}
    else:
        if family != "xlm-roberta":
            raise ConfigError(f"a SentencePiece tokenizer does not belong to a {family} model")
        tokenizer.save_files(directory)
        logging.warning("XLM-R export: sentencepiece.bpe.model without a tokenizer.json; "
                        "transformers builds the tokenizer from it, which needs the "
                        "`sentencepiece` and `protobuf` packages where the model is loaded")
        specials = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>",
                    "cls_token": "<s>", "unk_token": "<unk>", "pad_token": "<pad>",
                    "mask_token": "<mask>"}
        config = {"tokenizer_class": "XLMRobertaTokenizer", **specials}
    config["model_max_length"] = int(max_seq_length)
    _write_json(os.path.join(directory, "tokenizer_config.json"), config)
    _write_json(os.path.join(directory, "special_tokens_map.json"), specials)


# --------------------------------------------------------------------------------------
# sentence-transformers modules
# --------------------------------------------------------------------------------------

# Poolings sentence-transformers expresses, and how: (Pooling mode, extra modules).
ST_POOLINGS = {
    "mean": "Pooling mean",
    "cls_before_pooler": "Pooling cls",
    "cls": "Pooling cls + Dense(H, H, Tanh) with the pooler's weights",
    "first_last_avg": "WeightedLayerPooling (layers 1 and L, weight 1; others 0) + Pooling mean",
    "emb_last_avg": "WeightedLayerPooling (embeddings and layer L) + Pooling mean",
    "last2_avg": "WeightedLayerPooling (layers L-1 and L) + Pooling mean",
}
# keras activation name -> torch.nn module class sentence-transformers' Dense instantiates.
ST_ACTIVATIONS = {"linear": "torch.nn.modules.linear.Identity",
                  "relu": "torch.nn.modules.activation.ReLU",
                  "tanh": "torch.nn.modules.activation.Tanh",
                  "sigmoid": "torch.nn.modules.activation.Sigmoid",
                  "gelu": "torch.nn.modules.activation.GELU"}  # keras gelu: exact, as torch's


def _layer_weights(pooling, num_layers):
    """(layer_start, weights) of sentence-transformers' WeightedLayerPooling that averages
    the same hidden states as tfsent's `pooling` (index 0 = the embedding output)."""
    n = num_layers
    if pooling == "last2_avg":
        return n - 1, [1.0, 1.0]
    if pooling == "first_last_avg":
        return (1, [1.0]) if n == 1 else (1, [1.0] + [0.0] * (n - 2) + [1.0])
    if pooling == "emb_last_avg":
        return 0, [1.0] + [0.0] * (n - 1) + [1.0]
    raise ValueError(pooling)


def _activation_name(layer):
    import keras

    return keras.activations.serialize(layer.activation)


def dense_stack(head):
    """A method's export head as [(kernel (in, out), bias or None, keras activation name)].

    Expressible heads: a keras Dense, a keras Sequential of Dense layers, tfsent's
    MLPEncoder (CLSR's e); Dense activations must be in ST_ACTIVATIONS."""
    import keras

    from tfsent.layers.heads import MLPEncoder

    if head is None:
        return []
    if isinstance(head, MLPEncoder):
        layers = [head.hidden, head.out]
    elif isinstance(head, keras.Sequential):
        layers = list(head.layers)
    else:
        layers = [head]
    out = []
    for layer in layers:
        if type(layer) is not keras.layers.Dense:
            raise ConfigError(
                f"export head layer {layer.name!r} ({type(layer).__name__}) has no "
                "sentence-transformers equivalent: expressible heads are keras Dense layers, "
                "a keras Sequential of them, or tfsent's MLPEncoder")
        if getattr(layer, "lora_enabled", False) or getattr(layer, "quantization_mode", None):
            raise ConfigError(f"export head layer {layer.name!r} is LoRA-enabled or quantized; "
                              "merge or dequantize it first")
        act = _activation_name(layer)
        if act not in ST_ACTIVATIONS:
            raise ConfigError(f"export head layer {layer.name!r} has activation {act!r}, which "
                              "sentence-transformers' Dense cannot express; expressible: "
                              f"{', '.join(ST_ACTIVATIONS)}")
        kernel = np.asarray(layer.kernel.numpy(), np.float32)
        bias = np.asarray(layer.bias.numpy(), np.float32) if layer.use_bias else None
        out.append((kernel, bias, act))
    return out


def check_sentence_transformers_pooling(pooling):
    """Raises ConfigError (listing what it can express) unless sentence-transformers can
    express tfsent's `pooling` faithfully."""
    if pooling not in ST_POOLINGS:
        lines = "\n".join(f"  {name}: {how}" for name, how in ST_POOLINGS.items())
        raise ConfigError(f"--pooling={pooling} cannot be expressed by sentence-transformers' "
                          f"modules; the format expresses these poolings:\n{lines}")


def _write_st_dense(directory, kernel, bias, activation):
    from safetensors.numpy import save_file

    os.makedirs(directory)
    tensors = {"linear.weight": np.ascontiguousarray(kernel.T)}
    if bias is not None:
        tensors["linear.bias"] = np.ascontiguousarray(bias)
    save_file(tensors, os.path.join(directory, SAFETENSORS_FILE), metadata={"format": "pt"})
    _write_json(os.path.join(directory, "config.json"),
                {"in_features": int(kernel.shape[0]), "out_features": int(kernel.shape[1]),
                 "bias": bias is not None, "activation_function": ST_ACTIVATIONS[activation]})


def _write_sentence_transformers(encoder, directory, pooling, head, normalize, max_seq_length):
    from safetensors.numpy import save_file

    check_sentence_transformers_pooling(pooling)
    dense_layers = dense_stack(head)  # refuses inexpressible heads before anything is written
    backbone = encoder.backbone
    family = family_of(backbone)
    pooler = None
    if pooling == "cls":
        pooler = getattr(encoder, "pooler_dense", None)
        if pooler is None:
            pooler = getattr(backbone, "pooled_dense", None)
        if pooler is None:
            raise ConfigError(f"--pooling=cls needs a pooler Dense, which this {family} "
                              "encoder has not; use cls_before_pooler")
        dense_layers = [(np.asarray(pooler.kernel.numpy(), np.float32),
                         np.asarray(pooler.bias.numpy(), np.float32), "tanh")] + dense_layers
    layered = pooling in ("first_last_avg", "emb_last_avg", "last2_avg")
    _write_transformer(encoder, directory, family, max_seq_length,
                       config_extra={"output_hidden_states": True} if layered else None)
    _write_json(os.path.join(directory, "sentence_bert_config.json"),
                {"max_seq_length": int(max_seq_length), "do_lower_case": False})
    modules = [{"idx": 0, "name": "0", "path": "",
                "type": "sentence_transformers.models.Transformer"}]

    def add(kind, folder):
        idx = len(modules)
        path = f"{idx}_{folder}"
        modules.append({"idx": idx, "name": str(idx), "path": path,
                        "type": f"sentence_transformers.models.{kind}"})
        return os.path.join(directory, path)

    hidden = int(backbone.hidden_dim)
    if layered:
        start, weights = _layer_weights(pooling, backbone.num_layers)
        path = add("WeightedLayerPooling", "WeightedLayerPooling")
        os.makedirs(path)
        _write_json(os.path.join(path, "config.json"),
                    {"word_embedding_dimension": hidden, "layer_start": start,
                     "num_hidden_layers": int(backbone.num_layers)})
        save_file({"layer_weights": np.asarray(weights, np.float32)},
                  os.path.join(path, SAFETENSORS_FILE), metadata={"format": "pt"})
    path = add("Pooling", "Pooling")
    os.makedirs(path)
    mode = "cls" if pooling in ("cls", "cls_before_pooler") else "mean"
    _write_json(os.path.join(path, "config.json"),
                {"word_embedding_dimension": hidden,
                 "pooling_mode_cls_token": mode == "cls",
                 "pooling_mode_mean_tokens": mode == "mean",
                 "pooling_mode_max_tokens": False,
                 "pooling_mode_mean_sqrt_len_tokens": False,
                 "pooling_mode_weightedmean_tokens": False,
                 "pooling_mode_lasttoken": False,
                 "include_prompt": True})
    for kernel, bias, activation in dense_layers:
        _write_st_dense(add("Dense", "Dense"), kernel, bias, activation)
    if normalize:
        os.makedirs(add("Normalize", "Normalize"))
    _write_json(os.path.join(directory, "modules.json"), modules)
    _write_json(os.path.join(directory, "config_sentence_transformers.json"),
                {"prompts": {}, "default_prompt_name": None, "similarity_fn_name": "cosine"})
    dim = dense_layers[-1][0].shape[1] if dense_layers else hidden
    return {"embedding_dim": int(dim), "modules": [m["type"].rsplit(".", 1)[1]
                                                   for m in modules]}


def _write_transformer(encoder, directory, family, max_seq_length, config_extra=None):
    tokenizer = encoder.tokenizer
    pad = getattr(tokenizer, "pad_id", None)
    write_hf_model(encoder.backbone, directory, encoder.activation, pad, config_extra)
    write_tokenizer_files(tokenizer, directory, family, max_seq_length)


# --------------------------------------------------------------------------------------
# keras-hub presets
# --------------------------------------------------------------------------------------

# Families with a keras-hub TextEmbedder, and the tfsent poolings it expresses.
KERAS_HUB_EMBEDDERS = {"bert": "BertTextEmbedder", "xlm-roberta": "XLMRobertaTextEmbedder"}
KERAS_HUB_EMBEDDER_POOLINGS = {"mean": "mean", "cls_before_pooler": "cls"}
KERAS_HUB_TOKENIZERS = {"bert": "BertTokenizer", "distilbert": "DistilBertTokenizer",
                        "roberta": "RobertaTokenizer", "xlm-roberta": "XLMRobertaTokenizer"}


def _keras_hub_tokenizer(tokenizer, family):
    import keras_hub

    kind = _tokenizer_kind(tokenizer)
    cls = getattr(keras_hub.models, KERAS_HUB_TOKENIZERS[family])
    if kind == "wordpiece":
        return cls(vocabulary=list(tokenizer.vocabulary), lowercase=bool(tokenizer.lowercase),
                   strip_accents=bool(tokenizer.strip_accents))
    if kind == "bpe":
        return cls(vocabulary=dict(tokenizer.vocabulary), merges=list(tokenizer.merges))
    return cls(proto=bytes(tokenizer.model))


def _write_keras_hub(encoder, directory, pooling, normalize, max_seq_length):
    import keras_hub

    backbone = encoder.backbone
    family = family_of(backbone)
    native = KERAS_HUB_ACTIVATIONS[family]
    if HF_ACTIVATIONS.get(encoder.activation) != HF_ACTIVATIONS[native]:
        logging.warning("keras-hub's %s runs %s in its feed-forward layers; this encoder was "
                        "trained with %s, so keras-hub's outputs differ slightly from tfsent's "
                        "(see the README's 'Export and serve' for the measured difference)",
                        type(backbone).__name__, native, encoder.activation)
    tokenizer = _keras_hub_tokenizer(encoder.tokenizer, family)
    embedder = KERAS_HUB_EMBEDDERS.get(family)
    reason = None
    if embedder is None:
        reason = f"keras-hub has no TextEmbedder for {family}"
    elif pooling not in KERAS_HUB_EMBEDDER_POOLINGS:
        reason = (f"keras-hub's TextEmbedder cannot pool {pooling!r} (it expresses "
                  f"{', '.join(KERAS_HUB_EMBEDDER_POOLINGS)})")
    if reason is None:
        cls = getattr(keras_hub.models, embedder)
        preprocessor = cls.preprocessor_cls(tokenizer, sequence_length=int(max_seq_length))
        task = cls(backbone, preprocessor=preprocessor,
                   pooling_mode=KERAS_HUB_EMBEDDER_POOLINGS[pooling], normalize=bool(normalize))
        task.save_to_preset(directory)
    else:
        logging.info("keras_hub export without a TextEmbedder task: %s (the backbone and the "
                     "tokenizer are written)", reason)
        backbone.save_to_preset(directory)
        tokenizer.save_to_preset(directory)
    return {"text_embedder": embedder if reason is None else None,
            "text_embedder_missing_because": reason,
            "keras_hub_activation": native}


# --------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------

def export_encoder_as(encoder, directory, format="sentence_transformers", head=None,
                      pooling=None, normalize=False, max_seq_length=None, metadata=None):
    """Writes `encoder` (+ `head`, a layer on the pooled embedding, e.g. a method's
    `export_head`) in `format` (one of FORMATS) to `directory`; returns the path written.

    Args:
        encoder: a `tfsent.encoders.SentenceEncoder`.
        directory: target directory; must not exist or be empty (saved_model: the
            directory of versioned SavedModels, as `tfsent.export.export_encoder`).
        format: saved_model | sentence_transformers | huggingface | keras_hub.
        head: layer applied to the pooled embedding (sentence_transformers: Dense modules).
        pooling: the embedding's pooling (default: the encoder's).
        normalize: L2-normalise the embedding (a Normalize module; keras-hub's TextEmbedder
            `normalize`; recorded for the others).
        max_seq_length: truncation length, special tokens included (default: the
            tokenizer's, clamped to the position table).
        metadata: extra entries for tfsent_export.json (e.g. method, step).
    """
    if format not in FORMATS:
        raise ConfigError(f"--format={format!r} is not a format; choose one of "
                          f"{', '.join(FORMATS)}")
    from tfsent.encoders import check_pooling

    pooling = check_pooling(pooling or encoder.pooling)
    if format == "saved_model":
        from tfsent.export import export_encoder

        meta = dict(metadata or {}, normalize=bool(normalize))
        return export_encoder(encoder, directory, pooling=pooling, metadata=meta,
                              max_seq_length=max_seq_length, head=head)
    if encoder.tokenizer is None:
        raise ConfigError("cannot export an encoder without a tokenizer")
    family = family_of(encoder.backbone)  # refuses unknown backbones before writing
    _tokenizer_kind(encoder.tokenizer)
    directory = check_export_target(directory)
    length = encoder.clamp_length(max_seq_length)
    if head is not None and format in ("huggingface", "keras_hub"):
        raise ConfigError(f"format {format} cannot carry the export head (a layer on the "
                          "pooled embedding, e.g. CLSR's MLP); use --format="
                          "sentence_transformers (Dense modules) or saved_model")
    if format == "sentence_transformers":  # fail fast, before the temporary directory
        check_sentence_transformers_pooling(pooling)
        dense_stack(head)
    parent = os.path.dirname(directory)
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(directory)}.tmp-{os.getpid()}")
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    try:
        if format == "sentence_transformers":
            details = _write_sentence_transformers(encoder, tmp, pooling, head, normalize,
                                                   length)
        elif format == "huggingface":
            _write_transformer(encoder, tmp, family, length)
            details = {"embedding_dim": int(encoder.backbone.hidden_dim)}
        else:
            details = _write_keras_hub(encoder, tmp, pooling, normalize, length)
        info = {"format": format, "family": family, "pooling": pooling,
                "normalize": bool(normalize), "max_seq_length": int(length),
                "activation": encoder.activation,
                "head": None if head is None else type(head).__name__, **details}
        info.update(metadata or {})
        _write_json(os.path.join(tmp, EXPORT_INFO_FILE), info)
        if os.path.isdir(directory):  # empty (checked above)
            os.rmdir(directory)
        os.rename(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    logging.info("exported a %s encoder as %s to %s", family, format, directory)
    return directory


def check_export_target(directory):
    """The absolute path of `directory`; ConfigError unless it is absent or an empty
    directory (an export never overwrites another)."""
    directory = os.path.abspath(os.fspath(directory))
    if os.path.exists(directory) and (not os.path.isdir(directory) or os.listdir(directory)):
        raise ConfigError(f"--export_dir={directory} exists and is not an empty directory; "
                          "choose a new directory (an export never overwrites another)")
    return directory


def export_formats(spec):
    """Parses a comma-separated format list (`--config.export_formats`); ConfigError names
    an unknown format."""
    names = [s.strip() for s in str(spec).split(",") if s.strip()]
    for name in names:
        if name not in FORMATS:
            raise ConfigError(f"export_formats: {name!r} is not a format; choose from "
                              f"{', '.join(FORMATS)}")
    return names


def export_run_formats(encoder, output_dir, formats, pooling=None, head=None,
                       max_seq_length=None, metadata=None):
    """The training CLI's exports besides its SavedModel: every format named in `formats`
    (`--config.export_formats`) other than saved_model, each to
    OUTPUT_DIR/export_<format>/<version> (the next integer, as SavedModel versions), so a
    second run into the same directory adds a version. Returns {format: path}."""
    paths = {}
    for name in export_formats(formats):
        if name == "saved_model":
            continue
        parent = os.path.join(output_dir, f"export_{name}")
        versions = [int(v) for v in os.listdir(parent) if v.isdigit()] if os.path.isdir(
            parent) else []
        target = os.path.join(parent, str(max(versions, default=0) + 1))
        paths[name] = export_encoder_as(encoder, target, name, head=head, pooling=pooling,
                                        max_seq_length=max_seq_length, metadata=metadata)
    return paths


def _write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")
