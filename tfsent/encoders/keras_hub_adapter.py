"""Every access tfsent makes to keras-hub internals, in one place.

tfsent runs its own transformer forward over the weights of keras-hub backbones (see
`tfsent.encoders.model`), so it reads sublayers keras-hub keeps in private attributes. What
this relies on (checked against keras-hub 0.32; `setup.py` pins the tested range):
  - `keras_hub.src.tokenizers.word_piece_tokenizer.pretokenize`: the graph function behind
    `WordPieceTokenizer` (lowercasing, accent stripping, splitting on whitespace,
    punctuation and CJK characters);
  - `TransformerEncoder` keeps its sublayers as `_self_attention_layer` (a
    `CachedMultiHeadAttention` with `_query_dense`, `_key_dense`, `_value_dense`,
    `_output_dense`: EinsumDense layers, q/k/v shaped (B, L, heads, head_dim)),
    `_self_attention_layer_norm`, `_feedforward_intermediate_dense`,
    `_feedforward_output_dense` and `_feedforward_layer_norm`.
If an upgrade of keras-hub renames any of these, this module is the only one to change,
and `tests/test_pooling.py::test_forward_equals_keras_hub_backbone` says so.
"""

from typing import NamedTuple

from keras_hub.src.tokenizers.word_piece_tokenizer import pretokenize  # noqa: F401


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
