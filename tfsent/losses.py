"""Contrastive and auxiliary losses as pure functions of tensors (no model inside).

All losses compute in float32 whatever the input dtype (mixed precision safe).
Notation: B batch, H hidden, tau temperature; z1, z2 two views of the same sentences.
"""

import tensorflow as tf


def _l2n(x):
    return tf.math.l2_normalize(tf.cast(x, tf.float32), axis=-1)


def cosine_matrix(a, b):
    """cos(a_i, b_j) for all i, j: (N, H) x (M, H) -> (N, M), float32."""
    return tf.matmul(_l2n(a), _l2n(b), transpose_b=True)


def info_nce(z1, z2, z3=None, temperature=0.05, hard_negative_weight=0.0):
    """SimCSE's InfoNCE, one direction (z1 anchors), mean over anchors.

    logits[i, j] = cos(z1_i, z2_j) / tau (B x B); with hard negatives z3 the matrix gains
    cos(z1_i, z3_j) / tau (B x 2B), and `hard_negative_weight` w adds w to the logit of
    each anchor's own hard negative (SimCSE's `hard_negative_weight`, 0 in the paper).
    Labels are the diagonal. Returns a scalar float32.
    """
    logits = cosine_matrix(z1, z2) / temperature
    if z3 is not None:
        neg = cosine_matrix(z1, z3) / temperature
        if hard_negative_weight:
            neg += hard_negative_weight * tf.eye(tf.shape(neg)[0], tf.shape(neg)[1])
        logits = tf.concat([logits, neg], axis=1)
    labels = tf.range(tf.shape(z1)[0])
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def nt_xent(z1, z2, temperature=0.1, direction_reduction="mean"):
    """Symmetric NT-Xent (SimCLR) over 2B vectors, self-similarity masked.

    For each of the 2B vectors the positive is its partner view and the candidates are
    the other 2B - 1 vectors. `direction_reduction="mean"` averages over all 2B anchors
    (SimCLR, CLSR); "sum" adds the two directions' means (ConSERT's reference code), i.e.
    twice the "mean" value.
    """
    if direction_reduction not in ("mean", "sum"):
        raise ValueError(f"direction_reduction must be 'mean' or 'sum', got {direction_reduction!r}")
    z = tf.concat([z1, z2], axis=0)
    n = tf.shape(z1)[0]
    sim = cosine_matrix(z, z) / temperature
    sim = sim - tf.eye(2 * n) * 1e9  # mask self-similarity
    labels = tf.concat([tf.range(n, 2 * n), tf.range(0, n)], axis=0)
    per_anchor = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=sim)
    loss = tf.reduce_mean(per_anchor)
    return 2.0 * loss if direction_reduction == "sum" else loss


def masked_lm_loss(logits, labels, weights):
    """Cross-entropy at masked positions only.

    Args:
        logits: (B, P, V) predictions at the P selected positions.
        labels: (B, P) original token ids.
        weights: (B, P) 1.0 where a position was really masked, 0.0 for padding slots.
    Returns:
        (sum of weighted CE, sum of weights, number of correct argmax predictions among
        masked positions); the caller divides (globally, under tf.distribute).
    """
    weights = tf.cast(weights, tf.float32)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.int32), logits=tf.cast(logits, tf.float32))
    correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32),
                               tf.cast(labels, tf.int32)), tf.float32)
    return tf.reduce_sum(ce * weights), tf.reduce_sum(weights), tf.reduce_sum(correct * weights)
