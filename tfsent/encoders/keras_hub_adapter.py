"""Every access tfsent makes to keras-hub internals: backbone, tokenizer and task classes per
family (their names are `families.TABLE`'s) and the sublayers tfsent's forward, loading and
publishing read, including the ones keras-hub keeps in private attributes.

tfsent runs its own transformer forward over the weights of keras-hub backbones (see
`tfsent.encoders.model`), so it reads sublayers keras-hub keeps in private attributes. What
this relies on (checked against keras-hub 0.32; `setup.py` pins the tested range):
  - BertBackbone: `token_embedding`, `position_embedding`, `segment_embedding`,
    `embeddings_add`, `embeddings_layer_norm`, `pooled_dense`, `transformer_layers`;
  - RobertaBackbone / XLMRobertaBackbone / DistilBertBackbone: `embeddings` (a
    TokenAndPositionEmbedding with `token_embedding` and `position_embedding`),
    `embeddings_layer_norm`, `transformer_layers`; no token types, no pooler;
  - `TransformerEncoder` keeps its sublayers as `_self_attention_layer` (a
    `CachedMultiHeadAttention` with `_query_dense`, `_key_dense`, `_value_dense`,
    `_output_dense`: EinsumDense layers, q/k/v shaped (B, L, heads, head_dim)),
    `_self_attention_layer_norm`, `_feedforward_intermediate_dense`,
    `_feedforward_output_dense` and `_feedforward_layer_norm`;
  - publishing a keras-hub preset of EmbeddingGemma (`tfsent.formats.keras_hub_preset`):
    Gemma3Backbone's `is_embedding_model` config and the layer names of its head
    (`pooling_dense_1`, `embedding_projection`), Gemma3Tokenizer's `has_vision_tokens`
    (tests/test_export_decoders.py checks both).
If an upgrade of keras-hub renames any of these, this module is the only one to change,
and tests/test_pooling.py::test_forward_equals_keras_hub_backbone and
tests/test_families_encoders.py::test_forward_equals_keras_hub_backbone say so.
"""

import inspect
from typing import NamedTuple

import keras_hub

import tfsent.encoders.families as families


def backbone_class(family):
    """The keras-hub backbone class of `family`."""
    return getattr(keras_hub.models, families.TABLE[family].keras_hub_backbone)


def tokenizer_class(family):
    """The keras-hub tokenizer class of `family`."""
    return getattr(keras_hub.models, families.TABLE[family].keras_hub_tokenizer)


def text_embedder_class(family):
    """The keras-hub `TextEmbedder` task class of `family`, or None where keras-hub has
    none."""
    name = families.TABLE[family].keras_hub_text_embedder
    return None if name is None else getattr(keras_hub.models, name)


def make_backbone(family, config, dtype=None):
    """A freshly initialised backbone of `family` from a keras-hub config dict."""
    kwargs = dict(config)
    if dtype:
        kwargs["dtype"] = dtype
    return backbone_class(family)(**kwargs)


class EmbeddingParts(NamedTuple):
    """The embedding sublayers of a backbone, by role (`segment`, `add`: None when the
    family has no token types)."""

    token: object  # keras ReversibleEmbedding: (B, L) ids -> (B, L, H)
    position: object  # keras-hub PositionEmbedding, table `position_embeddings` (P, H)
    segment: object
    add: object  # BERT's Add layer (tokens, positions, segments)
    norm: object


def embedding_parts(backbone):
    """The embedding sublayers of a BERT / RoBERTa / XLM-R / DistilBERT backbone: keras-hub
    keeps those of a family with token types (BertBackbone) as separate layers summed by an
    Add, the others' token and position tables in one TokenAndPositionEmbedding."""
    if families.TABLE[families.family_of(backbone)].has_segments:
        return EmbeddingParts(backbone.token_embedding, backbone.position_embedding,
                              backbone.segment_embedding, backbone.embeddings_add,
                              backbone.embeddings_layer_norm)
    emb = backbone.embeddings  # TokenAndPositionEmbedding
    return EmbeddingParts(emb.token_embedding, emb.position_embedding, None, None,
                          backbone.embeddings_layer_norm)


def token_embedding(backbone):
    """The token embedding layer (a ReversibleEmbedding) of a backbone of any family."""
    if families.TABLE[families.family_of(backbone)].runs_own_forward:
        return embedding_parts(backbone).token
    return backbone.token_embedding


def load_hf_backbone(directory, dtype=None, overrides=None):
    """A backbone of a family whose weights keras-hub's own Hugging Face converter loads
    (`keras_hub.models.Backbone.from_preset` on a local Hugging Face folder), with
    `overrides` of the converter's settings (`huggingface.keras_hub_overrides`)."""
    kwargs = {"dtype": dtype} if dtype else {}
    kwargs.update(overrides or {})
    return keras_hub.models.Backbone.from_preset(directory, **kwargs)


def pooler_dense(backbone):
    """BERT's pooler Dense(H, tanh); None for families without a pooler."""
    return backbone.pooled_dense if families.TABLE[families.family_of(backbone)].has_pooler \
        else None


class BlockParts(NamedTuple):
    """The sublayers of one keras-hub `TransformerEncoder` block, by role."""

    query: object
    key: object
    value: object
    attention_output: object
    attention_norm: object
    ffn_inner: object
    ffn_output: object
    ffn_norm: object


def transformer_block_parts(layer):
    """Sublayers of a keras-hub `TransformerEncoder` (post-LayerNorm block)."""
    mha = layer._self_attention_layer
    return BlockParts(
        query=mha._query_dense, key=mha._key_dense, value=mha._value_dense,
        attention_output=mha._output_dense, attention_norm=layer._self_attention_layer_norm,
        ffn_inner=layer._feedforward_intermediate_dense,
        ffn_output=layer._feedforward_output_dense, ffn_norm=layer._feedforward_layer_norm)


def preset_names():
    """The names of every preset keras-hub registers (its own and Kaggle's models)."""
    return list(keras_hub.models.Backbone.presets)


def preset_family(name):
    """The family whose keras-hub backbone class registers the preset `name` (None: no
    family's, or not a registered preset name), read from keras-hub's registry without
    loading anything."""
    for family, record in families.TABLE.items():
        backbone = getattr(keras_hub.models, record.keras_hub_backbone, None)
        if backbone is not None and name in getattr(backbone, "presets", {}):
            return family
    return None


def load_preset(name, family=None, dtype=None):
    """(family, backbone, keras-hub tokenizer) of a keras-hub preset name or preset
    directory (keras-hub's own format; names download from Kaggle / the HF hub)."""
    kwargs = {"dtype": dtype} if dtype else {}
    if family is None:
        backbone = keras_hub.models.Backbone.from_preset(name, **kwargs)
        family = families.family_of(backbone)
        if family is None:
            return type(backbone).__name__, None, None
    else:
        backbone = backbone_class(family).from_preset(name, **kwargs)
    tokenizer = tokenizer_class(family).from_preset(name)
    return family, backbone, tokenizer


def sentencepiece_tokenizer(family, proto):
    """The keras-hub SentencePiece tokenizer of `family` on the serialized model `proto`.
    A tokenizer class with a `has_vision_tokens` switch (Gemma3Tokenizer) gets it on only
    when the vocabulary holds the image tokens (as keras-hub's converter decides: a text
    model such as EmbeddingGemma may lack them, and keras-hub refuses a missing one)."""
    cls = tokenizer_class(family)
    if "has_vision_tokens" not in inspect.signature(cls.__init__).parameters:
        return cls(proto=proto)
    tokenizer = cls(proto=proto, has_vision_tokens=False)
    if set(_VISION_TOKENS) <= set(tokenizer.get_vocabulary()):
        tokenizer = cls(proto=proto, has_vision_tokens=True)
    return tokenizer


_VISION_TOKENS = ("<img>", "<start_of_image>", "<end_of_image>")
# The layers keras-hub's Gemma3Backbone(is_embedding_model=True) adds after its mean
# pooling: Dense(pooling_intermediate_dim) and Dense(embedding_dim), both without bias or
# activation, then an L2 norm.
_EMBEDDING_HEAD_LAYERS = ("pooling_dense_1", "embedding_projection")


def builds_embedding_head(backbone):
    """True when the backbone's class can be built as keras-hub's embedding model (a mean
    pooling, two bias-free Dense layers and an L2 norm inside the backbone:
    Gemma3Backbone's `is_embedding_model`)."""
    return "is_embedding_model" in backbone.get_config()


def embedding_model_backbone(backbone, kernels):
    """A copy of `backbone` built as keras-hub's embedding model (`is_embedding_model=True`,
    see `builds_embedding_head`) with the same weights, its two Dense layers holding
    `kernels` ((hidden, intermediate) and (intermediate, embedding) arrays)."""
    first, second = kernels
    config = dict(backbone.get_config(), is_embedding_model=True,
                  pooling_intermediate_dim=int(first.shape[1]),
                  embedding_dim=int(second.shape[1]))
    copy = type(backbone).from_config(config)
    for layer in backbone.layers:
        if layer.weights:
            copy.get_layer(layer.name).set_weights(layer.get_weights())
    for name, kernel in zip(_EMBEDDING_HEAD_LAYERS, kernels):
        copy.get_layer(name).set_weights([kernel])
    return copy


def embedding_head_kernels(backbone):
    """The kernels of the two Dense layers of a keras-hub embedding-model backbone (see
    `embedding_model_backbone`), as numpy arrays."""
    return [backbone.get_layer(name).get_weights()[0] for name in _EMBEDDING_HEAD_LAYERS]


def tokenizer_files(family, kh_tokenizer):
    """What tfsent's tokenizers are built from, read off a keras-hub tokenizer:
    WordPiece -> {"vocabulary": list, "lowercase": bool, "strip_accents": bool}; byte-level
    BPE -> {"vocabulary": dict, "merges": list}; SentencePiece -> {"model": proto bytes}."""
    kind = families.TABLE[family].tokenizer_kind
    if kind == "wordpiece":
        return {"vocabulary": list(kh_tokenizer.get_vocabulary()),
                "lowercase": bool(kh_tokenizer.lowercase),
                "strip_accents": bool(getattr(kh_tokenizer, "strip_accents", False))}
    if kind == "byte_bpe":
        return {"vocabulary": dict(kh_tokenizer.vocabulary), "merges": list(kh_tokenizer.merges)}
    proto = kh_tokenizer.proto
    if isinstance(proto, str):  # a path
        with open(proto, "rb") as f:
            proto = f.read()
    return {"model": bytes(proto)}
