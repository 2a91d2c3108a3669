"""Bucketed shapes for XLA-compiled encoding (`encode(jit_compile=True)`, the XLA export)."""

import tensorflow as tf


# Padded widths of XLA-compiled encoding (`jit_compile=True` in `encode` and the export):
# each batch is padded up to the next of these (capped at the truncation length) and its
# row count up to the next power of two, so XLA compiles a bounded set of shapes (at most
# 32 widths per batch size) while padding at most 7 tokens below 128, 15 below 256.
# Coarser buckets waste what XLA gains: with multiples of 16 `encode` was no faster than
# without XLA on the wiki sentences, with multiples of 8 it was 1.11x faster.
WIDTH_BUCKETS = (tuple(range(8, 129, 8)) + tuple(range(144, 257, 16))
                 + tuple(range(288, 513, 32)))


def bucket_widths(max_seq_length):
    """The padded widths of XLA-compiled encoding at truncation length `max_seq_length`
    (WIDTH_BUCKETS capped there, and the length itself), ascending."""
    return sorted({min(w, max_seq_length) for w in WIDTH_BUCKETS} | {max_seq_length})


def bucket_width(length, max_seq_length):
    """The width a batch of `length` tokens is padded to (the next bucket; `length` itself
    above the largest)."""
    return next((w for w in bucket_widths(max_seq_length) if w >= length), length)


def call_in_buckets(fn, features, max_seq_length):
    """`fn(token_ids, padding_mask)` -> dict of (B', ...) tensors, called on `features`
    (B, L) padded to a bucketed shape (B', W) (see WIDTH_BUCKETS); returns the first B rows
    of each output. Runs in a graph: L and B may be dynamic."""
    ids, mask = features["token_ids"], tf.cast(features["padding_mask"], tf.int32)
    rows, length = tf.shape(ids)[0], tf.shape(ids)[1]
    widths = tf.constant(bucket_widths(max_seq_length), tf.int32)
    width = tf.gather(widths, tf.minimum(tf.searchsorted(widths, [length])[0],
                                         len(widths) - 1))
    width = tf.maximum(width, length)
    sizes = tf.constant([2 ** k for k in range(21)], tf.int32)
    size = tf.maximum(tf.gather(sizes, tf.minimum(tf.searchsorted(sizes, [rows])[0], 20)),
                      rows)
    pad = [[0, size - rows], [0, width - length]]
    out = fn(tf.pad(ids, pad), tf.pad(mask, pad))
    return {key: value[:rows] for key, value in out.items()}
