"""Matryoshka representation learning (Kusupati et al., 2022) and truncated embeddings.

A Matryoshka objective applies a loss to nested prefixes of the embedding and sums them,
`L = sum_k w_k * loss(z[:, :d_k], ...)`, so that the first d_k dimensions alone are a good
embedding; truncation happens before the loss's own normalisation. At inference the
embedding is cut to a size (`truncate_dim`) and then normalised.

`MatryoshkaLoss` wraps any loss of sentence embeddings (as sentence-transformers'
MatryoshkaLoss wraps any loss): every `SentenceMethod` takes `matryoshka_dims` /
`matryoshka_weights` and applies the wrapper to its embedding loss (`embedding_loss`);
a method whose loss is not computed from the embeddings alone raises ConfigError.
"""

import tensorflow as tf

from tfsent.checks import Field
from tfsent.errors import ConfigError


def check_dims(dims, embedding_dim, option):
    """Nested sizes as a tuple of ints, largest first.

    `dims` is a sequence of ints or a comma-separated string ("384,128,64");
    `embedding_dim` the embedding width (None: not known yet, not checked); `option`
    names the setting in errors (`--dims`, `matryoshka_dims`, ...). Raises ConfigError for
    an empty list, a value that is not a positive integer, a repeated size, sizes not in
    decreasing order, or a size larger than the embedding.
    """
    items = dims.split(",") if isinstance(dims, str) else list(dims)
    out = []
    for item in items:
        text = str(item).strip()
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(f"{option}: {text!r} is not an integer") from None
        if value < 1:
            raise ConfigError(f"{option}: sizes must be >= 1, got {value}")
        out.append(value)
    if not out:
        raise ConfigError(f"{option}: no size given")
    repeated = sorted({d for d in out if out.count(d) > 1})
    if repeated:
        raise ConfigError(f"{option}: size {repeated[0]} is repeated ({dims_text(out)})")
    if out != sorted(out, reverse=True):
        raise ConfigError(f"{option}: sizes must be in decreasing order, largest first "
                          f"(got {dims_text(out)}; e.g. {dims_text(sorted(out, reverse=True))})")
    if embedding_dim is not None and out[0] > embedding_dim:
        raise ConfigError(f"{option}: size {out[0]} is larger than the embedding "
                          f"({embedding_dim} dimensions)")
    return tuple(out)


# The `truncate_dim` that asks for the whole embedding, whatever size the model declares
# for itself (`encode(truncate_dim=0)`, `--truncate_dim=0`); the full width says the same.
FULL_DIM = 0


def resolve_truncate_dim(truncate_dim, own, embedding_dim, option="truncate_dim"):
    """The number of leading dimensions to keep, or None for all of them.

    `truncate_dim` is what the caller asked for: None (the model's `own` size, None when it
    declares none), FULL_DIM (0: all `embedding_dim`) or a size 1..embedding_dim (the full
    width itself gives None). ConfigError naming `option` for anything else."""
    if truncate_dim is None:
        truncate_dim = own
    if truncate_dim is None or (not isinstance(truncate_dim, bool)
                                and truncate_dim == FULL_DIM):
        return None
    if isinstance(truncate_dim, bool):
        raise ConfigError(f"{option}: {truncate_dim!r} is not an integer")
    (size,) = check_dims([truncate_dim], embedding_dim, option)
    return None if size == embedding_dim else size


def dims_text(dims):
    """"384,128,64" for (384, 128, 64)."""
    return ",".join(str(d) for d in dims)


def parse_weights(weights, n_dims, option="matryoshka_weights"):
    """Loss weights per size: None / "" -> n_dims ones; else a sequence or a comma-separated
    string of n_dims non-negative floats, not all zero (ConfigError naming `option`)."""
    if weights is None or (isinstance(weights, str) and not weights.strip()):
        return (1.0,) * n_dims
    items = weights.split(",") if isinstance(weights, str) else list(weights)
    try:
        out = tuple(float(str(w).strip()) for w in items)
    except ValueError:
        raise ConfigError(f"{option}: {weights!r} is not a list of numbers") from None
    if len(out) != n_dims:
        raise ConfigError(f"{option}: {len(out)} weights for {n_dims} sizes")
    if any(w < 0 for w in out) or not any(out):
        raise ConfigError(f"{option}: weights must be >= 0 and not all 0, got {out}")
    return out


def nested_loss(loss_fn, embeddings, dims, weights):
    """sum_k weights[k] * loss_fn(*[z[:, :dims[k]] for z in embeddings]).

    `loss_fn` maps the truncated embeddings (each (N_i, d_k)) to a scalar; it normalises
    them itself if it needs to (truncation comes first)."""
    total = 0.0
    for dim, weight in zip(dims, weights):
        if weight:
            total += weight * loss_fn(*[z[:, :dim] for z in embeddings])
    return tf.convert_to_tensor(total, tf.float32)


class MatryoshkaLoss:
    """A loss of sentence embeddings applied to nested prefixes and summed:
    `loss(loss_fn, embeddings) = sum_k w_k * loss_fn(*[z[:, :d_k] for z in embeddings])`.

    Args:
        dims: nested sizes, largest first (a sequence or "384,128,64"; `check_dims`).
        weights: a weight per size (None / "": all 1; `parse_weights`).
        embedding_dim: the embedding width the sizes must fit (None: not checked).
    """

    def __init__(self, dims, weights=None, embedding_dim=None):
        self.dims = check_dims(dims, embedding_dim, "matryoshka_dims")
        self.weights = parse_weights(weights, len(self.dims))

    @classmethod
    def from_args(cls, dims, weights, embedding_dim):
        """The wrapper of a method's `matryoshka_dims` / `matryoshka_weights` arguments, or
        None when `dims` is unset (weights without sizes are a ConfigError)."""
        if dims:
            return cls(dims, weights, embedding_dim)
        if weights:
            raise ConfigError("matryoshka_weights is set but matryoshka_dims is not")
        return None

    def __call__(self, loss_fn, embeddings):
        """The weighted sum of `loss_fn` over the prefixes of `embeddings` (a list)."""
        return nested_loss(loss_fn, embeddings, self.dims, self.weights)


def _check_dims_field(name, value):
    if value:
        check_dims(value, None, name)


def _check_weights_field(name, value):
    if value:
        items = value.split(",") if isinstance(value, str) else list(value)
        parse_weights(value, len(items), name)


def config_fields():
    """The run-config fields of the wrapper, for the specs of methods that take it:
    matryoshka_dims "" (off) or nested sizes, largest first ("384,256,128,64,32");
    matryoshka_weights "" (all 1) or one weight per size."""
    return [Field("matryoshka_dims", "", _check_dims_field, types=(str, tuple),
                  arg="matryoshka_dims", doc="Matryoshka sizes, largest first (\"\": off)"),
            Field("matryoshka_weights", "", _check_weights_field, types=(str, tuple),
                  arg="matryoshka_weights", doc="a loss weight per Matryoshka size")]
