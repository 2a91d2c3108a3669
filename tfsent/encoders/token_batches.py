"""Texts tokenized once, then batched by token count.

`SentenceEncoder.encode` and `CrossEncoder.score` tokenize every text (sentence or pair)
before they run the model, sort the texts by token count, most first, and pad each batch
to its own longest text. Sorting by characters instead (sentence-transformers' order)
leaves batches wider than they need be: on 2,000 wiki sentences at batch 64 the token
slots fall from 72,544 to 55,424 (-24%; benchmarks/README.md, "Machine C, 2026-11-28:
`encode` batches by token count").
"""

import numpy as np
import tensorflow as tf

from tfsent.errors import ConfigError

# Texts per tokenizer call when everything is tokenized first: big enough that the calls
# cost little (2,000 wiki sentences tokenize in ~0.03 s), small enough that a chunk padded
# to its longest text stays small.
TOKENIZE_CHUNK = 1024


class TokenizedTexts:
    """Tokenizer features of N texts, unpadded: `features` {name: the real tokens' values of
    every text, concatenated (int32)}, `lengths` (N,) real tokens per text, `pad_values`
    {name: the value of padded positions}. `batch(rows)` pads the chosen texts as the
    tokenizer pads (on the right) to their own longest."""

    def __init__(self, features, lengths, pad_values):
        self.features = {name: np.asarray(v, np.int32) for name, v in features.items()}
        self.lengths = np.asarray(lengths, np.int64)
        self.starts = np.cumsum(self.lengths) - self.lengths
        self.pad_values = {name: int(pad_values.get(name, 0)) for name in self.features}

    def __len__(self):
        return len(self.lengths)

    def longest_first(self):
        """Row indices sorted by token count, most first (ties in input order)."""
        return np.argsort(-self.lengths, kind="stable")

    def batch(self, rows):
        """{name: int32 (len(rows), longest of them), "padding_mask": 1 on real tokens}."""
        lengths = self.lengths[rows]
        mask = np.arange(int(lengths.max())) < lengths[:, None]
        # The k-th real token of the batch (row-major) is token k - (tokens of the rows
        # before it) of its row, which starts at `starts[row]` in the features.
        before = np.cumsum(lengths) - lengths
        source = (np.repeat(self.starts[rows] - before, lengths)
                  + np.arange(int(lengths.sum())))
        out = {}
        for name, values in self.features.items():
            padded = np.full(mask.shape, self.pad_values[name], np.int32)
            padded[mask] = values[source]
            out[name] = padded
        out["padding_mask"] = mask.astype(np.int32)
        return out


def longest_first_batches(count, batch_size, lengths):
    """Row indices of `count` texts, one array per batch of `batch_size`: in input order
    when one batch holds them all, else longest first by `lengths()` (a callable, so one
    batch costs no count; ties in input order). ConfigError when batch_size < 1."""
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    if count <= batch_size:
        order = np.arange(count)
    else:
        order = np.argsort(-np.asarray(lengths()), kind="stable")
    return [order[start:start + batch_size] for start in range(0, count, batch_size)]


def utf8_bytes(text):
    """`text` as a string tensor's element: str UTF-8 encoded (invalid code points
    replaced), bytes as they are."""
    return text if isinstance(text, bytes) else text.encode("utf-8", "replace")


def string_chunks(texts):
    """1-D string tensors of `TOKENIZE_CHUNK` consecutive texts (`utf8_bytes` of each)."""
    for start in range(0, len(texts), TOKENIZE_CHUNK):
        yield tf.constant([utf8_bytes(s) for s in texts[start:start + TOKENIZE_CHUNK]])


def tokenize_in_chunks(tokenize, columns, pad_values, keep=None):
    """`tokenize(*string_tensors)` -> a features dict with "padding_mask" (right-padded),
    called on `TOKENIZE_CHUNK` rows of `columns` (lists of str or bytes of one length: one
    column for sentences, two for pairs) at a time; the features named in `keep` (None:
    all but the mask; empty: none, the lengths alone) gathered into a `TokenizedTexts`."""
    parts, lengths = {name: [] for name in keep or ()}, []
    for chunk in zip(*(string_chunks(column) for column in columns)):
        features = tokenize(*chunk)
        mask = features["padding_mask"].numpy().astype(bool)
        lengths.append(mask.sum(axis=1))
        names = [k for k in features if k != "padding_mask"] if keep is None else keep
        for name in names:
            parts.setdefault(name, []).append(features[name].numpy()[mask])  # row by row
    return TokenizedTexts({name: np.concatenate(v) if v else [] for name, v in parts.items()},
                          np.concatenate(lengths) if lengths else [], pad_values)
