"""tf.data pipelines: strings -> shuffled, batched, tokenized (in-graph) features.

Batches have a static shape (batch, max_seq_length) and drop the remainder, so XLA
compiles once and every replica gets an equal slice of the global batch. Tokenization
runs after batching (vectorised) and is prefetched. `skip_batches` fast-forwards a
deterministic stream when a run resumes, without tokenizing the skipped batches.
"""

import itertools
import math

import numpy as np
import tensorflow as tf

from tfsent.data.grouping import (duplicate_free_batches, duplicate_free_stream, epoch_stream,
                                  grouped_batches, premise_groups, shuffled_stream)
from tfsent.errors import ConfigError

AUTOTUNE = tf.data.AUTOTUNE


def _check_batch(n_examples, batch_size, what):
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    if n_examples < batch_size:
        raise ConfigError(f"{what} has {n_examples} examples, fewer than one batch "
                          f"({batch_size}); lower batch_size")


def _strings_dataset(columns, batch_size, seed, shuffle, repeat, skip_batches):
    ds = tf.data.Dataset.from_tensor_slices(tuple(tf.constant(c, tf.string) for c in columns))
    return _shuffled_batches(ds, len(columns[0]), batch_size, seed, shuffle, repeat,
                             skip_batches)


def _shuffled_batches(ds, n, batch_size, seed, shuffle, repeat, skip_batches):
    """`ds` (n examples) shuffled, repeated, batched (remainder dropped), fast-forwarded."""
    if shuffle:
        ds = ds.shuffle(n, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=True)
    if skip_batches:
        ds = ds.skip(skip_batches)
    return ds


def sentence_dataset(sentences, tokenizer, batch_size, seed=0, shuffle=True, repeat=True,
                     skip_batches=0, mlm_mask_rate=None):
    """Unlabelled sentences -> batches of `{"token_ids", "padding_mask", "segment_ids"}`.

    With `mlm_mask_rate` the batch also carries the MLM inputs of `mask_tokens`.
    """
    _check_batch(len(sentences), batch_size, "the training data")
    ds = _strings_dataset([sentences], batch_size, seed, shuffle, repeat, skip_batches)
    ds = ds.map(lambda s: tokenizer(s), num_parallel_calls=AUTOTUNE)
    if mlm_mask_rate is not None:
        ds = ds.enumerate(start=skip_batches).map(
            lambda i, f: mask_tokens(f, tokenizer, mlm_mask_rate, seed=(seed, i)),
            num_parallel_calls=AUTOTUNE)
    return ds.prefetch(AUTOTUNE)


def triplet_dataset(triplets, tokenizer, batch_size, seed=0, shuffle=True, repeat=True,
                    skip_batches=0, duplicate_free=False):
    """(anchor, positive, negative) strings -> `{"anchor": f, "positive": f, "negative": f}`.

    Rows (anchor, positive, neg1..negN) of one width N + 2 give N hard negatives per
    anchor: "negative" then holds batch * N rows, anchor-major (row i * N + j is the j-th
    negative of anchor i).

    `duplicate_free=True`: no text occurs in two rows of one batch (the global batch), so
    no anchor meets its own positive, or a copy of itself, as an in-batch negative; rows
    that would repeat a text are deferred to a later batch
    (`tfsent.data.grouping.duplicate_free_batches`; the log counts them).
    """
    _check_batch(len(triplets), batch_size, "the NLI triplets")
    return pair_dataset(triplets, tokenizer, batch_size, seed, shuffle=shuffle, repeat=repeat,
                        skip_batches=skip_batches, duplicate_free=duplicate_free)


def pair_dataset(rows, tokenizer, batch_size, seed=0, shuffle=True, repeat=True,
                 skip_batches=0, duplicate_free=True, query_prompt="", document_prompt="",
                 joint=False):
    """Retrieval rows (anchor, positive, neg1..negN), N >= 0 and the same on every row ->
    `{"anchor": f, "positive": f}`, plus `"negative": f` (batch * N rows, anchor-major)
    when N > 0. `joint` (cross-encoders; N >= 1): `{"pairs": f, "labels": (batch, 1 + N)}`,
    f the (query, document) pair features (`tokenizer.tokenize_pairs`) of each query with
    its positive then its negatives (batch * (1 + N) rows, query-major), labels 1 on the
    positive.

    `query_prompt` is put before every anchor, `document_prompt` before every positive and
    negative (the run's prompts, which the export's encode_query / encode_document and the
    retrieval evaluation put before queries and documents). `duplicate_free`: no query and
    no document twice in one (global) batch, as `triplet_dataset`'s.
    """
    _check_batch(len(rows), batch_size, "the training pairs")
    width = len(rows[0])
    if width < 2 or any(len(row) != width for row in rows):
        raise ConfigError(f"training pairs need rows of one width >= 2 (anchor, positive, "
                          f"negatives), got widths {sorted({len(r) for r in rows})}")
    if joint and width < 3:
        raise ConfigError("a cross-encoder trains on rows with negatives (anchor, positive, "
                          "negative_1..N): mine them (python -m tfsent.mine) or give a "
                          "pairs file with negative columns")
    if query_prompt or document_prompt:
        rows = [(query_prompt + row[0],) + tuple(document_prompt + t for t in row[1:])
                for row in rows]
    columns = [list(c) for c in zip(*rows)]
    if duplicate_free:
        ds = _duplicate_free_strings(rows, columns, batch_size, seed, shuffle, repeat,
                                     skip_batches)
    else:
        ds = _strings_dataset(columns, batch_size, seed, shuffle, repeat, skip_batches)

    def tokenize(anchor, positive, *negatives):
        if joint:
            documents = tf.reshape(tf.stack((positive,) + negatives, axis=1), [-1])
            queries = tf.repeat(anchor, 1 + len(negatives))  # query-major, as documents
            labels = tf.one_hot(tf.zeros_like(anchor, tf.int32), 1 + len(negatives))
            return {"pairs": tokenizer.tokenize_pairs(queries, documents), "labels": labels}
        features = {"anchor": tokenizer(anchor), "positive": tokenizer(positive)}
        if negatives:
            flat = tf.reshape(tf.stack(negatives, axis=1), [-1])  # (B * N,), anchor-major
            features["negative"] = tokenizer(flat)
        return features

    return ds.map(tokenize, num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)


def _duplicate_free_strings(rows, columns, batch_size, seed, shuffle, repeat, skip_batches):
    """Batches of the columns' strings (a tuple of (B,) string tensors), drawn by
    `duplicate_free_stream`; one epoch when not `repeat`."""
    texts = [frozenset(row) for row in rows]
    if repeat:
        def stream():
            return duplicate_free_stream(texts, batch_size, seed, skip_batches, shuffle)
    else:  # one epoch per iteration of the dataset, reshuffled each time (as Keras
        epochs = itertools.count()  # iterates it once per fit epoch)

        def stream():
            epoch = next(epochs)
            order = (np.random.default_rng(seed + epoch).permutation(len(texts)) if shuffle
                     else np.arange(len(texts)))
            batches = duplicate_free_batches(texts, batch_size, order)[0]
            return itertools.islice(iter(batches), skip_batches, None)
    tables = [tf.constant(c, tf.string) for c in columns]
    ds = tf.data.Dataset.from_generator(
        stream, output_signature=tf.TensorSpec([batch_size], tf.int64))
    return ds.map(lambda idx: tuple(tf.gather(t, idx) for t in tables))


def max_predictions(max_seq_length, rate):
    """Static number of MLM prediction slots per sequence for `rate` (>= 1)."""
    return max(1, math.ceil((max_seq_length - 2) * rate))


def mask_tokens(features, tokenizer, rate, seed):
    """BERT masking of a tokenized batch for MLM.

    Selects round(rate * n) of each sequence's n real, non-special tokens (at least one
    when n > 0); of those, 80% become [MASK], 10% a random wordpiece, 10% stay unchanged.
    Special and padding tokens are never selected. Deterministic for a given `seed`
    (a pair of ints / int tensors).

    Adds to `features`: `masked_token_ids` (B, L), `mask_positions` (B, P) int32,
    `mask_labels` (B, P) original ids, `mask_weights` (B, P) float32 (1 for a real
    prediction slot, 0 for an unused slot), with P = max_predictions(L, rate).
    """
    if not 0.0 < rate < 1.0:
        raise ConfigError(f"mask_rate must be in (0, 1), got {rate}")
    ids = features["token_ids"]
    shape = tf.shape(ids)
    length = ids.shape[1] if ids.shape[1] is not None else tokenizer.max_seq_length
    n_slots = max_predictions(length, rate)
    seed = tf.cast(tf.stack(seed), tf.int64)
    seeds = tf.random.experimental.stateless_split(seed, 4)
    special = tf.reduce_any(
        tf.equal(ids[:, :, None], tf.constant(tokenizer.special_ids, tf.int32)), axis=-1)
    candidate = tf.logical_and(tf.cast(features["padding_mask"], tf.bool),
                               tf.logical_not(special))
    n_candidates = tf.reduce_sum(tf.cast(candidate, tf.int32), axis=1)
    n_mask = tf.cast(tf.round(tf.cast(n_candidates, tf.float32) * rate), tf.int32)
    n_mask = tf.minimum(tf.maximum(n_mask, tf.minimum(n_candidates, 1)), n_slots)
    # Random order of candidates first; non-candidates get -1 so they sort last.
    scores = tf.random.stateless_uniform(shape, seeds[0])
    scores = tf.where(candidate, scores, -1.0)
    positions = tf.math.top_k(scores, k=n_slots, sorted=True).indices  # (B, P)
    slot = tf.range(n_slots)[None, :]
    weights = tf.cast(slot < n_mask[:, None], tf.float32)
    labels = tf.gather(ids, positions, batch_dims=1)
    # 80 / 10 / 10 replacement.
    u = tf.random.stateless_uniform(tf.shape(positions), seeds[1])
    random_ids = tf.random.stateless_uniform(tf.shape(positions), seeds[2], minval=0,
                                             maxval=tokenizer.vocabulary_size, dtype=tf.int32)
    replacement = tf.where(u < 0.8, tokenizer.mask_id, tf.where(u < 0.9, random_ids, labels))
    replacement = tf.where(weights > 0, replacement, labels)
    batch_index = tf.broadcast_to(tf.range(shape[0])[:, None], tf.shape(positions))
    scatter_idx = tf.stack([batch_index, positions], axis=-1)
    # Only real slots are written (unused slots would write the original id back anyway).
    masked = tf.tensor_scatter_nd_update(
        ids, tf.boolean_mask(scatter_idx, weights > 0), tf.boolean_mask(replacement, weights > 0))
    out = dict(features)
    out.update({"masked_token_ids": masked, "mask_positions": positions,
                "mask_labels": labels, "mask_weights": weights})
    return out


NLI_LABEL_IDS = {"entailment": 0, "neutral": 1, "contradiction": 2}


def nli_pair_dataset(rows, tokenizer, batch_size, seed=0, skip_batches=0,
                     group_premises=True, repeat=True):
    """(premise, hypothesis, label) rows -> batches of
    `{"premise": f, "hypothesis": f, "label", "premise_id", "valid"}`.

    `group_premises=True` (SupCon-SBERT): premise-grouped batches (see
    `tfsent.data.grouping`; `valid` is 0 on the padding slots of a short batch).
    False: ordinary shuffled batches (a new permutation every epoch, remainder dropped,
    `valid` all 1), as ConSERT's reference reads NLI pairs. `premise_id` numbers the
    distinct premise texts in both. `repeat=False`: one epoch."""
    _check_batch(len(rows), batch_size, "the NLI pairs")
    premises = [r[0] for r in rows]
    groups = premise_groups(premises)
    group_of = [0] * len(rows)
    for g, members in enumerate(groups):
        for i in members:
            group_of[i] = g
    table_p = tf.constant(premises)
    table_h = tf.constant([r[1] for r in rows])
    table_y = tf.constant([NLI_LABEL_IDS[r[2]] for r in rows], tf.int32)
    table_g = tf.constant(group_of, tf.int32)
    if group_premises:
        def stream():
            if not repeat:
                return iter(grouped_batches(groups, batch_size, np.random.default_rng(seed)))
            return epoch_stream(groups, batch_size, seed, skip_batches)
    else:
        def stream():
            batches = shuffled_stream(len(rows), batch_size, seed, skip_batches)
            return batches if repeat else itertools.islice(batches, len(rows) // batch_size)
    ds = tf.data.Dataset.from_generator(
        stream, output_signature=tf.TensorSpec([batch_size], tf.int64))

    def load(idx):
        safe = tf.maximum(idx, 0)
        return {"premise": tokenizer(tf.gather(table_p, safe)),
                "hypothesis": tokenizer(tf.gather(table_h, safe)),
                "label": tf.gather(table_y, safe), "premise_id": tf.gather(table_g, safe),
                "valid": tf.cast(idx >= 0, tf.float32)}

    return ds.map(load, num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)


def embedding_pair_dataset(pairs, embed, batch_size, seed=0, shuffle=True, repeat=True,
                           skip_batches=0):
    """Positive (sentence_a, sentence_b) pairs -> batches of the frozen encoder's
    embeddings `{"a": (B, D), "b": (B, D)}` (CLSR).

    `embed(sentences) -> (N, D)` embeds each distinct sentence once (the CLI's embeds
    through the on-disk cache of `tfsent.data.cache`). Repeating: whole batches gathered
    from a new stateless permutation per epoch (per-example tf.data work would cost more
    than the MLP step itself); not repeating: one epoch per iteration of the dataset."""
    _check_batch(len(pairs), batch_size, "the positive pairs")
    sentences = list(dict.fromkeys(s for pair in pairs for s in pair))
    emb = np.asarray(embed(sentences), np.float32)
    index = {s: i for i, s in enumerate(sentences)}
    table_a = tf.constant(emb[np.array([index[p[0]] for p in pairs])])
    table_b = tf.constant(emb[np.array([index[p[1]] for p in pairs])])
    n = len(pairs)
    per_epoch = n // batch_size
    if repeat:
        def epoch_batches(epoch):
            perm = tf.range(n)
            if shuffle:
                perm = tf.random.experimental.stateless_shuffle(
                    perm, seed=tf.stack([tf.cast(seed, tf.int64), epoch]))
            return tf.data.Dataset.from_tensor_slices(
                tf.reshape(perm[:per_epoch * batch_size], [per_epoch, batch_size]))

        ds = tf.data.Dataset.range(2 ** 62).flat_map(epoch_batches).skip(skip_batches)
    else:
        ds = tf.data.Dataset.range(n)
        if shuffle:
            ds = ds.shuffle(n, seed=seed, reshuffle_each_iteration=True)
        ds = ds.batch(batch_size, drop_remainder=True).skip(skip_batches)
    ds = ds.map(lambda idx: {"a": tf.gather(table_a, idx), "b": tf.gather(table_b, idx)},
                num_parallel_calls=AUTOTUNE)
    return ds.prefetch(AUTOTUNE)


def distill_dataset(sentences, tokenizer, targets, batch_size, seed=0, shuffle=True,
                    repeat=True, skip_batches=0):
    """Sentences and their teacher embeddings -> batches of `{"features": token features,
    "target": (B, D) float32}` (distillation). `targets(sentences) -> (N, D)` is called
    once (the CLI's goes through the on-disk cache of `tfsent.data.cache`)."""
    _check_batch(len(sentences), batch_size, "the training sentences")
    table = np.asarray(targets(sentences), np.float32)
    if table.shape[0] != len(sentences):
        raise ConfigError(f"distill: {table.shape[0]} teacher embeddings for "
                          f"{len(sentences)} sentences")
    ds = tf.data.Dataset.from_tensor_slices((tf.constant(sentences, tf.string),
                                             tf.constant(table)))
    ds = _shuffled_batches(ds, len(sentences), batch_size, seed, shuffle, repeat,
                           skip_batches)
    ds = ds.map(lambda s, t: {"features": tokenizer(s), "target": t},
                num_parallel_calls=AUTOTUNE)
    return ds.prefetch(AUTOTUNE)


def scored_pair_dataset(rows, tokenizer, batch_size, seed=0, shuffle=True, repeat=True,
                        skip_batches=0):
    """(sentence1, sentence2, score) rows -> `{"sentence1": f, "sentence2": f,
    "score": (B,) float32}`."""
    _check_batch(len(rows), batch_size, "the scored pairs")
    s1, s2, scores = (list(c) for c in zip(*rows))
    ds = tf.data.Dataset.from_tensor_slices((tf.constant(s1, tf.string),
                                             tf.constant(s2, tf.string),
                                             tf.constant(scores, tf.float32)))
    ds = _shuffled_batches(ds, len(rows), batch_size, seed, shuffle, repeat, skip_batches)
    return ds.map(lambda a, b, y: {"sentence1": tokenizer(a), "sentence2": tokenizer(b),
                                   "score": y},
                  num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)
