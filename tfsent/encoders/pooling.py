"""Pooling: pure functions of (hidden states, padding mask) -> sentence embedding."""

import tensorflow as tf

from tfsent.errors import ConfigError

POOLINGS = ("cls", "cls_before_pooler", "mean", "mean_no_cls", "first_last_avg",
            "emb_last_avg", "last2_avg", "last_token")
# Poolings that read layers other than the last (`hidden_states[0]`, `[1]`, `[-2]`).
LAYERWISE_POOLINGS = ("first_last_avg", "emb_last_avg", "last2_avg")


def masked_mean(x, mask):
    """Mean of `x` (B, L, H) over positions where `mask` (B, L) is non-zero."""
    # expand_dims, not [:, :, None]: a strided slice with a new axis on a dynamic shape
    # has no TFLite builtin kernel (tfsent.formats.litert converts this graph).
    mask = tf.expand_dims(tf.cast(mask, x.dtype), -1)
    total = tf.reduce_sum(x * mask, axis=1)
    count = tf.maximum(tf.reduce_sum(mask, axis=1), tf.cast(1.0, x.dtype))
    return total / count


def last_token(x, mask):
    """The state of the last real token of each row of `x` (B, L, H): the last position
    whose `mask` (B, L) is non-zero and whose right neighbour is not (or which ends the
    row); right and left padding both work."""
    mask = tf.cast(mask, x.dtype)
    after = tf.concat([mask[:, 1:], tf.zeros_like(mask[:, :1])], axis=1)
    return tf.reduce_sum(x * tf.expand_dims(mask * (1.0 - after), -1), axis=1)


# A cross-encoder's token on a decoder with Hugging Face's *ForSequenceClassification head
# (`families.CLASSIFICATION_HEADS["score"]`); no sentence-embedding pooling.
LAST_NON_PAD = "last_non_pad"


def last_non_pad(x, token_ids, padding_mask, pad_id):
    """The state of each row of `x` (B, L, H) at the position Hugging Face's decoder
    sequence classifiers read (`GenericForSequenceClassification`): the rightmost real
    token whose id is not `pad_id` (position 0 when there is none). A pair template that
    closes with the pad token itself (Qwen3's `<|endoftext|>`) is read at the token
    before it."""
    keep = tf.logical_and(tf.cast(padding_mask, tf.bool), tf.not_equal(token_ids, pad_id))
    positions = tf.range(tf.shape(token_ids)[1], dtype=tf.int32)
    rightmost = tf.reduce_max(tf.where(keep, tf.expand_dims(positions, 0), 0), axis=1)
    select = tf.cast(tf.equal(tf.expand_dims(positions, 0), tf.expand_dims(rightmost, 1)),
                     x.dtype)
    return tf.reduce_sum(x * tf.expand_dims(select, -1), axis=1)


def pair_state(encoder, features, pooling, training=False):
    """(B, H): the state of the token a cross-encoder's head reads on `encoder`'s output
    for pair `features`: a pooling (`cls`, `last_token`) or LAST_NON_PAD (the encoder's
    tokenizer's pad id)."""
    if pooling != LAST_NON_PAD:
        return encoder(features, training=training, pooling=pooling)["embedding"]
    hidden = encoder(features, training=training, pooling="last_token")["sequence_output"]
    return last_non_pad(hidden, features["token_ids"], features["padding_mask"],
                        encoder.tokenizer.pad_id)


def pool(pooling, hidden_states, padding_mask, pooler_dense=None):
    """Applies the named pooler (docs/methods.md "Poolings") and returns (B, H).

    `hidden_states[0]` is the embedding-layer output, `hidden_states[i]` transformer
    layer i's output. `pooler_dense` is the Dense(H, tanh) used by `cls`; None for a family
    without a pooler (RoBERTa, XLM-R, DistilBERT), where `cls` is the first token's state.
    """
    last = hidden_states[-1]
    if pooling in ("cls", "cls_before_pooler"):
        # The first token's state; a sum over the first position (not `last[:, 0]`) so
        # that an empty batch, padded to width 0 (a SavedModel's serving signature), gives
        # (0, H) as every other pooling does.
        first = tf.reduce_sum(last[:, :1], axis=1)
        return first if pooling == "cls_before_pooler" or pooler_dense is None \
            else pooler_dense(first)
    if pooling == "mean":
        return masked_mean(last, padding_mask)
    if pooling == "mean_no_cls":
        mask = tf.cast(padding_mask, tf.int32)
        not_first = tf.concat([tf.zeros_like(mask[:, :1]), tf.ones_like(mask[:, 1:])], 1)
        return masked_mean(last, mask * not_first)
    if pooling == "last_token":
        return last_token(last, padding_mask)
    if pooling == "first_last_avg":
        return masked_mean((hidden_states[1] + last) / 2.0, padding_mask)
    if pooling == "emb_last_avg":
        return masked_mean((hidden_states[0] + last) / 2.0, padding_mask)
    if pooling == "last2_avg":
        return masked_mean((hidden_states[-2] + last) / 2.0, padding_mask)
    raise ConfigError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")


def check_pooling(pooling):
    """Raises ConfigError unless `pooling` is a known pooler name."""
    if pooling not in POOLINGS:
        raise ConfigError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
    return pooling
