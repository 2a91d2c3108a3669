"""Raw examples -> a method's training batches, for `fit(x=...)` / `evaluate(x=...)`.

keras-hub tasks take raw strings because their preprocessor is attached to the task; a
tfsent method's preprocessor is its encoder's tokenizer plus the batch layout of its
`input_kind`:

  sentences        a list of strings                          -> token features
  sentences_mlm    a list of strings                          -> token features + MLM masks
  triplets         (anchor, positive, negative) string tuples -> {"anchor", "positive", "negative"}
                   (or (anchor, positive, neg1..negN): N hard negatives per anchor)
  nli_pairs        (premise, hypothesis, label) tuples, label in entailment / neutral /
                   contradiction (or 0 / 1 / 2)               -> premise-grouped NLI batches
  embedding_pairs  (sentence_a, sentence_b) positive pairs    -> the frozen encoder's
                                                                 embeddings {"a", "b"}

A tf.data Dataset of unbatched string elements (a scalar string, or a tuple of strings)
is raw too. Batches drop the remainder (static shapes for XLA and replicas); tokenization
runs after batching, inside the pipeline, as in `tfsent.data.pipelines`.
"""

import numpy as np
import tensorflow as tf

from tfsent.data import pipelines
from tfsent.errors import ConfigError, InputError

_LABELS = {0: "entailment", 1: "neutral", 2: "contradiction"}


def is_raw(x):
    """True for raw examples: a list/tuple/array of strings or of string tuples, or a
    tf.data Dataset whose elements are (tuples of) scalar strings."""
    if isinstance(x, tf.data.Dataset):
        specs = tf.nest.flatten(x.element_spec)
        return bool(specs) and all(isinstance(s, tf.TensorSpec) and s.dtype == tf.string
                                   and s.shape.rank == 0 for s in specs)
    if isinstance(x, np.ndarray):
        return x.dtype.kind in "USO" and x.size > 0 and isinstance(x.flat[0], (str, bytes))
    if isinstance(x, (list, tuple)) and x:
        first = x[0]
        return isinstance(first, str) or (isinstance(first, (list, tuple)) and bool(first)
                                           and isinstance(first[0], str))
    return False


def _materialize(x):
    """A Dataset of string elements -> a list of str / tuples of str."""
    if not isinstance(x, tf.data.Dataset):
        return [tuple(e) if isinstance(e, (list, tuple, np.ndarray)) else e for e in x]
    rows = []
    for element in x.as_numpy_iterator():
        if isinstance(element, tuple):
            rows.append(tuple(v.decode("utf-8", "replace") for v in element))
        else:
            rows.append(element.decode("utf-8", "replace"))
    return rows


def _check_rows(rows, width, what, argument):
    for i, row in enumerate(rows):
        if width is None:
            if not isinstance(row, (str, bytes)):
                raise InputError(f"{argument}[{i}] is {type(row).__name__}; {what}")
        elif not (isinstance(row, tuple) and len(row) == width):
            raise InputError(f"{argument}[{i}] = {row!r:.80}: {what}")


def dataset_for(method, x, batch_size, shuffle=True, seed=0, argument="x"):
    """The batched, tokenized tf.data pipeline of `method` over raw examples `x`."""
    kind = method.input_kind
    tokenizer = method.encoder.tokenizer
    if tokenizer is None:
        raise ConfigError(f"{argument}: raw examples need the encoder's tokenizer, and this "
                          "encoder has none; pass tokenized batches")
    rows = _materialize(x)
    if len(rows) < batch_size:
        raise ConfigError(f"{argument} has {len(rows)} examples, fewer than one batch "
                          f"(batch_size={batch_size}); lower the batch size")
    if kind in ("sentences", "sentences_mlm"):
        _check_rows(rows, None, "expected a string (one sentence per example)", argument)
        rate = getattr(method, "mask_rate", None) if kind == "sentences_mlm" else None
        return pipelines.sentence_dataset(rows, tokenizer, batch_size, seed, shuffle=shuffle,
                                          repeat=False, mlm_mask_rate=rate)
    if kind == "triplets":
        width = len(rows[0]) if isinstance(rows[0], tuple) and len(rows[0]) > 3 else 3
        _check_rows(rows, width, "expected (anchor, positive, negative) strings, or "
                    "(anchor, positive, neg1..negN) all of the first row's width", argument)
        # Training batches (shuffled) are duplicate-free unless the method says otherwise.
        dedupe = shuffle and getattr(method, "duplicate_free_batches", True)
        return pipelines.triplet_dataset(rows, tokenizer, batch_size, seed, shuffle=shuffle,
                                         repeat=False, duplicate_free=dedupe)
    if kind == "nli_pairs":
        _check_rows(rows, 3, "expected (premise, hypothesis, label) rows", argument)
        rows = [(p, h, _label(label, i, argument)) for i, (p, h, label) in enumerate(rows)]
        return pipelines.nli_pair_dataset(rows, tokenizer, batch_size, seed, repeat=False,
                                          group_premises=method.premise_grouped)
    if kind == "embedding_pairs":
        _check_rows(rows, 2, "expected (sentence_a, sentence_b) positive pairs", argument)
        a = method.encoder.encode([r[0] for r in rows], verbose=0)
        b = method.encoder.encode([r[1] for r in rows], verbose=0)
        ds = tf.data.Dataset.from_tensor_slices({"a": a, "b": b})
        if shuffle:
            ds = ds.shuffle(len(rows), seed=seed)
        return ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    raise ConfigError(f"{type(method).__name__}.input_kind {kind!r} has no raw-example "
                      "pipeline")


def _label(label, i, argument):
    if isinstance(label, bytes):
        label = label.decode("utf-8")
    if isinstance(label, (int, np.integer)) and int(label) in _LABELS:
        return _LABELS[int(label)]
    label = str(label).strip().lower()
    if label in pipelines.NLI_LABEL_IDS:
        return label
    if label in ("0", "1", "2"):
        return _LABELS[int(label)]
    raise InputError(f"{argument}[{i}]: NLI label {label!r} is not entailment, neutral or "
                     "contradiction (or 0/1/2)")
