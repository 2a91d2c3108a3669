"""ConSERT's view augmentations on the embedding-layer output (docs/methods.md "ConSERT").

Every augmentation acts on `x`, the embedding-layer output (B, L, H) after its LayerNorm and
dropout, through the encoder's `embedding_fn` / `position_ids` hooks. They are pure
functions of (x or padding_mask, seed), XLA-traceable with static shapes; randomness comes
from a counter-based hash keyed by `seed`, an int32 tensor of shape [2] (same seed, same
output). `padding_mask` is (B, L), non-zero on real tokens ([CLS] and [SEP] included).

- `shuffle_position_ids`: a random permutation of the position ids over each row's real
  tokens; padding positions keep their own index; token ids are not touched.
- `token_cutoff`: zero int(n_real * r) whole token rows chosen among each row's real tokens.
- `feature_cutoff`: zero int(H * r) whole hidden columns, the same columns at every real
  position of a row; padding positions untouched.
- `dropout_augment`: zero each element of the real-token rows with probability r, with NO
  1/(1-r) rescale (unlike nn dropout).
- `fgv_perturbation`: FGV adversarial delta: the gradient (of the supervised CE w.r.t. x)
  L2-normalised per token, times epsilon (ConSERT's `adversarial`, supervised only).
- `none`: identity.

`int(n * r)` is Python's truncation of the float64 product, as in the reference code; for a
static sequence length it is read from a table built in Python (exact, and no float64 op in
the graph); for a dynamic length the product is computed in float64.
"""

import keras
import tensorflow as tf

from tfsent.errors import ConfigError

AUGMENTATIONS = ("none", "shuffle", "token_cutoff", "feature_cutoff", "dropout", "adversarial")
RATE_AUGMENTATIONS = ("token_cutoff", "feature_cutoff", "dropout")


def _real(padding_mask):
    return tf.cast(padding_mask, tf.bool)


def _seed(seed):
    return tf.cast(tf.convert_to_tensor(seed), tf.int32)


def _truncated_count(n, rate, max_n=None):
    """int(n * rate) per row for an int32 tensor n, as Python computes it."""
    rate = float(rate)
    if max_n is not None:
        table = tf.constant([int(i * rate) for i in range(int(max_n) + 1)], tf.int32)
        return tf.gather(table, n)
    return tf.cast(tf.floor(tf.cast(n, tf.float64) * rate), tf.int32)


def _fmix32(h):
    """MurmurHash3's 32-bit finaliser (uint32 -> uint32)."""
    h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(16, tf.uint32)))
    h = h * tf.constant(0x85EBCA6B, tf.uint32)
    h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(13, tf.uint32)))
    h = h * tf.constant(0xC2B2AE35, tf.uint32)
    return tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(16, tf.uint32)))


def _uniform(shape, seed):
    """Counter-based uniform [0, 1) floats from an int32 [2] seed (a hash of the element
    index and the seed). Not tf.random.stateless_uniform: its values differ between an
    XLA-compiled and an uncompiled step, and a view must not depend on compilation."""
    seed = tf.bitcast(_seed(seed), tf.uint32)
    idx = tf.bitcast(tf.range(tf.reduce_prod(shape), dtype=tf.int32), tf.uint32)
    key = _fmix32(tf.bitwise.bitwise_xor(_fmix32(seed[0] + tf.constant(0x9E3779B9, tf.uint32)),
                                         seed[1]))
    h = _fmix32(_fmix32(tf.bitwise.bitwise_xor(idx, key)) + key)
    u = tf.cast(tf.bitwise.right_shift(h, tf.constant(8, tf.uint32)), tf.float32)
    return tf.reshape(u * (1.0 / 16777216.0), shape)


def _rank_within_row(keys):
    """rank[b, j] = position of keys[b, j] in row b sorted descending (0 = largest)."""
    order = tf.argsort(keys, axis=1, direction="DESCENDING", stable=True)
    return tf.argsort(order, axis=1, stable=True)


def shuffle_position_ids(padding_mask, seed):
    """(B, L) int32 position ids: a random permutation of each row's real positions placed
    on its real positions; padding positions keep their own index."""
    real = _real(padding_mask)
    shape = tf.shape(real)
    length = shape[1]
    positions = tf.broadcast_to(tf.range(length)[None, :], shape)
    big = tf.cast(length, tf.float32) + 2.0
    # Real positions in increasing order first (then padding): rank k -> real position.
    real_sorted = tf.argsort(tf.where(real, tf.cast(positions, tf.float32),
                                      big + tf.cast(positions, tf.float32)), axis=1,
                             stable=True)
    # The same real positions in a random order (padding last).
    keys = _uniform(shape, seed)
    permuted = tf.argsort(tf.where(real, keys, 2.0 + tf.cast(positions, tf.float32)), axis=1,
                          stable=True)
    rank = tf.argsort(real_sorted, axis=1, stable=True)  # position -> its rank among reals
    shuffled = tf.gather(permuted, rank, batch_dims=1)
    return tf.cast(tf.where(real, shuffled, positions), tf.int32)


def token_cutoff_mask(padding_mask, rate, seed):
    """(B, L) bool: True on the int(n_real * rate) real tokens of each row to zero."""
    real = _real(padding_mask)
    n_real = tf.reduce_sum(tf.cast(real, tf.int32), axis=1)
    count = _truncated_count(n_real, rate, real.shape[1])
    keys = _uniform(tf.shape(real), seed)
    keys = tf.where(real, keys, -1.0)  # padding ranks after every real token
    return tf.logical_and(real, _rank_within_row(keys) < count[:, None])


def token_cutoff(x, padding_mask, rate, seed):
    """Zeroes int(n_real * rate) whole token rows of x among each row's real tokens."""
    cut = token_cutoff_mask(padding_mask, rate, seed)
    return x * tf.cast(tf.logical_not(cut), x.dtype)[:, :, None]


def feature_cutoff_mask(batch_size, hidden_dim, rate, seed):
    """(B, H) bool: True on the int(H * rate) columns of each row to zero."""
    count = int(int(hidden_dim) * float(rate))
    keys = _uniform([batch_size, hidden_dim], seed)
    return _rank_within_row(keys) < count


def feature_cutoff(x, padding_mask, rate, seed):
    """Zeroes int(H * rate) whole hidden columns of x, the same columns at every real
    position of a row; padding positions are untouched."""
    real = _real(padding_mask)
    cols = feature_cutoff_mask(tf.shape(x)[0], x.shape[-1], rate, seed)
    cut = tf.logical_and(real[:, :, None], cols[:, None, :])
    return x * tf.cast(tf.logical_not(cut), x.dtype)


def dropout_augment(x, padding_mask, rate, seed):
    """Zeroes each element of the real-token rows with probability `rate`; no rescale."""
    real = _real(padding_mask)
    drop = _uniform(tf.shape(x), seed) < float(rate)
    cut = tf.logical_and(real[:, :, None], drop)
    return x * tf.cast(tf.logical_not(cut), x.dtype)


def fgv_perturbation(grad, padding_mask, epsilon):
    """epsilon * grad / ||grad|| per token (L2 over H), zero at padding and where the
    gradient vanishes. Returned without gradient, in grad's dtype."""
    g = tf.cast(tf.stop_gradient(grad), tf.float32)
    norm = tf.norm(g, axis=-1, keepdims=True)
    d = tf.math.divide_no_nan(g, norm)
    d = d * tf.cast(_real(padding_mask), tf.float32)[:, :, None]
    return tf.cast(float(epsilon) * d, grad.dtype)


def check_augmentation(kind, supervised):
    """Raises ConfigError for an unknown name or for `adversarial` without supervision."""
    if kind not in AUGMENTATIONS:
        raise ConfigError(f"unknown augmentation {kind!r}; choose one of "
                          f"{', '.join(AUGMENTATIONS)}")
    if kind == "adversarial" and not supervised:
        raise ConfigError("augmentation 'adversarial' needs the supervised CE loss (FGV on its "
                          "gradient): use it with the joint mode (consert_joint), not unsup")
    return kind


@keras.saving.register_keras_serializable(package="tfsent")
class Augmentation(keras.layers.Layer):
    """One view's augmentation as a config object (no weights).

    `apply(x, padding_mask, seed, delta=None)` transforms the embedding output;
    `position_ids(padding_mask, seed)` returns shuffled ids for `shuffle`, else None.
    `adversarial` adds `delta` (from `fgv_perturbation`), which the caller computes.

    Args:
        kind: one of AUGMENTATIONS.
        rate: r of token_cutoff / feature_cutoff / dropout (ignored otherwise).
        epsilon: FGV step of `adversarial`.
    """

    def __init__(self, kind="none", rate=0.0, epsilon=1.0, **kwargs):
        super().__init__(**kwargs)
        if kind not in AUGMENTATIONS:
            check_augmentation(kind, True)
        if kind in RATE_AUGMENTATIONS and not 0.0 <= float(rate) < 1.0:
            raise ConfigError(f"{kind} rate must be in [0, 1), got {rate!r}")
        self.kind = kind
        self.rate = float(rate)
        self.epsilon = float(epsilon)
        self.built = True

    def apply(self, x, padding_mask, seed, delta=None):
        if self.kind == "token_cutoff":
            return token_cutoff(x, padding_mask, self.rate, seed)
        if self.kind == "feature_cutoff":
            return feature_cutoff(x, padding_mask, self.rate, seed)
        if self.kind == "dropout":
            return dropout_augment(x, padding_mask, self.rate, seed)
        if self.kind == "adversarial":
            if delta is None:
                raise ConfigError("adversarial augmentation called without its FGV delta")
            return x + tf.cast(delta, x.dtype)
        return x  # none, shuffle

    def position_ids(self, padding_mask, seed):
        if self.kind == "shuffle":
            return shuffle_position_ids(padding_mask, seed)
        return None

    def call(self, x, padding_mask, seed, delta=None):
        return self.apply(x, padding_mask, seed, delta)

    def get_config(self):
        config = super().get_config()
        config.update({"kind": self.kind, "rate": self.rate, "epsilon": self.epsilon})
        return config


def identity_position_ids(padding_mask):
    """(B, L) int32 0..L-1 for every row."""
    shape = tf.shape(padding_mask)
    return tf.broadcast_to(tf.range(shape[1], dtype=tf.int32)[None, :], shape)


__all__ = ["AUGMENTATIONS", "Augmentation", "check_augmentation", "dropout_augment",
           "feature_cutoff", "feature_cutoff_mask", "fgv_perturbation",
           "identity_position_ids", "shuffle_position_ids", "token_cutoff",
           "token_cutoff_mask"]
