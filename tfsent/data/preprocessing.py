"""Raw examples -> a method's training batches, for `fit(x=...)` / `evaluate(x=...)`.

keras-hub tasks take raw strings because their preprocessor is attached to the task; a
tfsent method's preprocessor is its encoder's tokenizer plus the batch layout of its
`input_kind`:

  sentences        a list of strings                          -> token features
  sentences_mlm    a list of strings                          -> token features + MLM masks
  triplets         (anchor, positive, negative) string tuples -> {"anchor", "positive", "negative"}
                   (or (anchor, positive, neg1..negN): N hard negatives per anchor)
  pairs            (anchor, positive[, neg1..negN]) string tuples, N >= 0
                                                              -> {"anchor", "positive"[, "negative"]}
                   (the method's query_prompt / document_prompt put before anchors /
                   the other columns)
  nli_pairs        (premise, hypothesis, label) tuples, label in entailment / neutral /
                   contradiction (or 0 / 1 / 2)               -> premise-grouped NLI batches
  scored_pairs     (sentence1, sentence2, score) rows, score a number in the method's
                   [score_min, score_max]             -> {"sentence1", "sentence2", "score"}
  embedding_pairs  (sentence_a, sentence_b) positive pairs    -> the frozen encoder's
                                                                 embeddings {"a", "b"}
  distill_sentences a list of strings                         -> token features + the
                                                                 teacher's embeddings

Rows may also be dicts (anchor/positive/negative, anchor/positive/negative_1..negative_N
for pairs, premise/hypothesis/label,
sentence_a/sentence_b). A tf.data Dataset of such elements (strings, tuples or dicts of
strings; an NLI label may be an integer), batched or not, is raw too: it is read whole
and goes through the same pipeline as a list. Batches drop the remainder (static shapes
for XLA and replicas); tokenization runs after batching, inside the pipeline
(`tfsent.data.kinds.dataset_for_kind`, the run's pipeline).
"""

import numpy as np
import tensorflow as tf

from tfsent.data import kinds, pipelines
from tfsent.data.pairs import column_names as pair_column_names
from tfsent.errors import ConfigError, InputError
from tfsent.matryoshka import FULL_DIM

_LABELS = {0: "entailment", 1: "neutral", 2: "contradiction"}


# The columns of a row given as a dict, per kind (pairs: then negative_1..negative_N,
# `_row`), and what to pass: the kinds' records.
ROW_KEYS = {name: kind.row_keys for name, kind in kinds.KINDS.items() if kind.row_keys}
WHAT_TO_PASS = {name: kind.accepts for name, kind in kinds.KINDS.items()}


def _is_text(value):
    return isinstance(value, (str, bytes))


def _dataset_specs(x):
    """The flat TensorSpecs of a Dataset's elements (None if any is not a TensorSpec)."""
    specs = tf.nest.flatten(x.element_spec)
    if not specs or not all(isinstance(s, tf.TensorSpec) for s in specs):
        return None
    return specs


def is_raw(x):
    """True for raw examples: a list/tuple/array of strings or of string rows (tuples or
    dicts), or a tf.data Dataset, batched or not, whose elements are strings or rows of
    strings (an NLI label may be an integer, a score a number)."""
    if isinstance(x, tf.data.Dataset):
        specs = _dataset_specs(x)
        if specs is None or not any(s.dtype == tf.string for s in specs):
            return False
        ranks = {s.shape.rank for s in specs}
        return len(ranks) == 1 and ranks.pop() in (0, 1) and all(
            s.dtype == tf.string or s.dtype.is_integer or s.dtype.is_floating
            for s in specs)
    if isinstance(x, np.ndarray):
        return x.dtype.kind in "USO" and x.size > 0 and _is_text(x.flat[0])
    if isinstance(x, (list, tuple)) and x:
        first = x[0]
        if isinstance(first, dict):
            return any(_is_text(v) for v in first.values())
        return _is_text(first) or (isinstance(first, (list, tuple)) and bool(first)
                                   and _is_text(first[0]))
    return False


def _has_dict(structure):
    if isinstance(structure, dict):
        return True
    if isinstance(structure, (list, tuple)):
        return any(_has_dict(s) for s in structure)
    return False


def check_input(method, x, argument="x"):
    """InputError saying what to pass when `x` is neither raw examples (`is_raw`) nor
    tokenized batches (feature dicts, as `tfsent.data.pipelines` makes): e.g. a list of
    numbers, a Dataset of plain tensors, or strings nested in a way no kind reads. None
    and Python generators / Keras PyDatasets pass through to Keras."""
    what = WHAT_TO_PASS.get(method.input_kind, "raw examples")
    name = type(method).__name__
    hint = (f"{name} takes {what}, or batches of tokenized feature dicts from "
            "tfsent.data.pipelines")
    if isinstance(x, tf.data.Dataset):
        if not _has_dict(x.element_spec) or any(
                s.dtype == tf.string for s in tf.nest.flatten(x.element_spec)
                if isinstance(s, tf.TensorSpec)):
            raise InputError(f"{argument}: a tf.data.Dataset of {x.element_spec} is neither "
                             f"raw examples nor tokenized batches; {hint}")
    elif isinstance(x, (list, tuple, np.ndarray)) and len(x):
        raise InputError(f"{argument}: a {type(x).__name__} of {type(x[0]).__name__} "
                         f"({x[0]!r:.60}) is not raw examples; {hint}")


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _row(element, keys):
    """A string, or a row (tuple) from a tuple / list / dict element (`keys`: dict order)."""
    if isinstance(element, dict):
        if keys == ROW_KEYS["pairs"] and set(keys) <= set(element):
            negatives = sorted((k for k in element if k.startswith("negative_")),
                               key=lambda k: (len(k), k))  # negative_2 before negative_10
            return tuple(_text(element[k]) for k in (*keys, *negatives))
        if keys is not None and set(keys) <= set(element):
            return tuple(_text(element[k]) for k in keys)
        return tuple(_text(v) for v in element.values())
    if isinstance(element, (list, tuple, np.ndarray)):
        return tuple(_text(v) for v in element)
    return _text(element)


def _materialize(x, kind):
    """Raw examples -> a list of str / row tuples. A Dataset (batched or not) is read
    whole: its batches are split into rows, dict elements become rows in `ROW_KEYS`
    order."""
    keys = ROW_KEYS.get(kind)
    if not isinstance(x, tf.data.Dataset):
        return [_row(e, keys) for e in x]
    if tf.nest.flatten(x.element_spec)[0].shape.rank == 1:
        x = x.unbatch()
    rows = []
    for element in x.as_numpy_iterator():
        row = _row(element, keys)
        rows.append(tuple(v.item() if isinstance(v, np.generic) else v for v in row)
                    if isinstance(row, tuple) else row)
    return rows


def _first_batch_size(x):
    """The number of rows in a batched Dataset's first batch (None if not batched)."""
    if not isinstance(x, tf.data.Dataset) or \
            tf.nest.flatten(x.element_spec)[0].shape.rank != 1:
        return None
    for batch in x.take(1):
        return int(tf.shape(tf.nest.flatten(batch)[0])[0])
    return None


def _check_rows(rows, width, what, argument):
    for i, row in enumerate(rows):
        if width is None:
            if not isinstance(row, (str, bytes)):
                raise InputError(f"{argument}[{i}] is {type(row).__name__}; {what}")
        elif not (isinstance(row, tuple) and len(row) == width):
            raise InputError(f"{argument}[{i}] = {row!r:.80}: {what}")


def default_batch_size(x, fallback=32):
    """A batched Dataset's own batch size, else `fallback`."""
    return _first_batch_size(x) or fallback


def dataset_for(method, x, batch_size, shuffle=True, seed=0, argument="x"):
    """The batched, tokenized tf.data pipeline of `method` over raw examples `x`
    (`tfsent.data.kinds.dataset_for_kind`, the run's pipeline, one epoch per
    iteration)."""
    kind = method.input_kind
    tokenizer = method.encoder.tokenizer
    if tokenizer is None:
        raise ConfigError(f"{argument}: raw examples need the encoder's tokenizer, and this "
                          "encoder has none; pass tokenized batches")
    rows = _materialize(x, kind)
    if len(rows) < batch_size:
        raise ConfigError(f"{argument} has {len(rows)} examples, fewer than one batch "
                          f"(batch_size={batch_size}); lower the batch size")
    embed = None
    if kind in ("sentences", "sentences_mlm", "distill_sentences"):
        _check_rows(rows, None, "expected a string (one sentence per example)", argument)
        if kind == "distill_sentences":
            embed = method.teacher_embeddings
    elif kind == "triplets":
        width = len(rows[0]) if isinstance(rows[0], tuple) and len(rows[0]) > 3 else 3
        _check_rows(rows, width, "expected (anchor, positive, negative) strings, or "
                    "(anchor, positive, neg1..negN) all of the first row's width", argument)
    elif kind in ("pairs", "cross_pairs"):
        least = 3 if kind == "cross_pairs" else 2
        width = len(rows[0]) if isinstance(rows[0], tuple) and len(rows[0]) >= least else least
        _check_rows(rows, width, "expected (anchor, positive, neg1..negN) strings, N >= 1 "
                    "(a cross-encoder needs negatives), all of the first row's width"
                    if kind == "cross_pairs" else "expected (anchor, positive) strings, or "
                    "(anchor, positive, neg1..negN), all of the first row's width", argument)
        _check_non_empty(rows, argument)
    elif kind == "nli_pairs":
        _check_rows(rows, 3, "expected (premise, hypothesis, label) rows", argument)
        rows = [(p, h, _label(label, i, argument)) for i, (p, h, label) in enumerate(rows)]
    elif kind == "scored_pairs":
        _check_rows(rows, 3, "expected (sentence1, sentence2, score) rows", argument)
        rows = _scored_rows(rows, method, argument)
    elif kind == "embedding_pairs":
        _check_rows(rows, 2, "expected (sentence_a, sentence_b) positive pairs", argument)

        def embed(sentences):
            return method.encoder.encode(sentences, verbose=0, normalize=False,
                                         pooling=method.train_pooling, truncate_dim=FULL_DIM)
    else:
        raise ConfigError(f"{type(method).__name__}.input_kind {kind!r} has no raw-example "
                          "pipeline")
    # Training batches (shuffled) are duplicate-free unless the method says otherwise.
    duplicate_free = shuffle and getattr(method, "duplicate_free_batches", True)
    return kinds.dataset_for_kind(
        kind, rows, tokenizer, batch_size, seed, shuffle=shuffle, repeat=False,
        mask_rate=getattr(method, "mask_rate", None), duplicate_free=duplicate_free,
        premise_grouped=method.premise_grouped, embed=embed,
        query_prompt=getattr(method, "query_prompt", ""),
        document_prompt=getattr(method, "document_prompt", ""))


def _scored_rows(rows, method, argument):
    """(sentence1, sentence2, float score) rows; InputError naming the row of a
    non-numeric score or one outside the method's [score_min, score_max]."""
    out = []
    for i, (a, b, score) in enumerate(rows):
        try:
            score = float(score)
        except (TypeError, ValueError):
            raise InputError(f"{argument}[{i}]: score {score!r:.40} is not a number") from None
        if not method.score_min <= score <= method.score_max:
            raise InputError(f"{argument}[{i}]: score {score} is outside the declared range "
                             f"[{method.score_min}, {method.score_max}] (score_min / "
                             f"score_max)")
        out.append((a, b, score))
    return out


def _check_non_empty(rows, argument):
    """InputError naming the row and column of an empty (or non-string) side."""
    for i, row in enumerate(rows):
        for name, text in zip(pair_column_names(len(row)), row):
            if not isinstance(text, str) or not text.strip():
                raise InputError(f"{argument}[{i}]: {name} is empty or not a string "
                                 f"({text!r:.40})")


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
