"""Index batches: premise-grouped NLI pairs (SupCon-SBERT), plainly shuffled, or
duplicate-free (no text twice in one batch, for in-batch-negative objectives).

Premise-grouped batching (SupCon-SBERT needs every hypothesis of a premise
in the same batch, or anchors have almost no positives).

Each epoch: the premise groups are shuffled, then packed first-fit into batches of at most
`batch_size` examples without splitting a group (a group larger than a batch is split into
batch-sized pieces, with a warning); batches are shuffled. A batch shorter than
`batch_size` is padded with index -1, and the pipeline turns those slots into `valid = 0`
rows, so every example is seen exactly once per epoch and shapes stay static.
"""

import numpy as np
from absl import logging

from tfsent.errors import ConfigError

OPEN_WINDOW = 16  # partially filled batches considered per group (keeps packing O(n))


def premise_groups(premises):
    """Indices of the rows of each distinct premise, in first-appearance order."""
    groups = {}
    for i, p in enumerate(premises):
        groups.setdefault(p, []).append(i)
    return list(groups.values())


def grouped_batches(groups, batch_size, rng):
    """One epoch of batches: a list of int arrays of length `batch_size` (-1 = padding)."""
    pieces = []
    for g in groups:
        if len(g) > batch_size:
            logging.warning("a premise has %d hypotheses, more than a batch (%d): split",
                            len(g), batch_size)
        pieces += [g[i:i + batch_size] for i in range(0, len(g), batch_size)]
    order = rng.permutation(len(pieces))
    batches, open_batches = [], []  # open: indices of batches with room, newest last
    for k in order:  # first fit over the (at most OPEN_WINDOW) most recent open batches
        piece = pieces[k]
        for b in open_batches[-OPEN_WINDOW:]:
            if len(batches[b]) + len(piece) <= batch_size:
                batches[b].extend(piece)
                if len(batches[b]) == batch_size:
                    open_batches.remove(b)
                break
        else:
            batches.append(list(piece))
            if len(piece) < batch_size:
                open_batches.append(len(batches) - 1)
    rng.shuffle(batches)
    out = np.full((len(batches), batch_size), -1, np.int64)
    for b, rows in enumerate(batches):
        out[b, :len(rows)] = rows
    return out


def epoch_stream(groups, batch_size, seed, skip_batches=0):
    """Yields index batches forever, epoch after epoch (epoch e uses seed + e)."""
    epoch, skipped = 0, 0
    while True:
        for batch in grouped_batches(groups, batch_size, np.random.default_rng(seed + epoch)):
            if skipped < skip_batches:
                skipped += 1
                continue
            yield batch
        epoch += 1


def shuffled_stream(n_examples, batch_size, seed, skip_batches=0):
    """Yields index batches forever: epoch e is a permutation of the examples (seed + e)
    cut into n_examples // batch_size full batches (the remainder is dropped), as a
    shuffled DataLoader with drop_last. The first `skip_batches` are skipped."""
    per_epoch = n_examples // batch_size
    epoch, skipped = skip_batches // per_epoch, (skip_batches // per_epoch) * per_epoch
    while True:
        order = np.random.default_rng(seed + epoch).permutation(n_examples)
        for b in range(per_epoch):
            if skipped < skip_batches:
                skipped += 1
                continue
            yield order[b * batch_size:(b + 1) * batch_size].astype(np.int64)
        epoch += 1


def duplicate_free_batches(texts, batch_size, order):
    """One epoch of full batches in which no text occurs in two examples.

    `texts[i]` is the set of texts of example i (anchor, positive, negatives); examples
    are taken in `order`, and one that shares a text with the batch being filled is
    deferred: it goes into the first later batch that has none of its texts (deferred
    examples are tried first). Returns (int64 array (n_batches, batch_size), number of
    examples deferred at least once, number left over at the end of the epoch: the last
    incomplete batch plus deferred examples no batch could take).
    """
    batches, batch, seen = [], [], set()
    pending, deferred = [], set()

    def fits(i):
        return seen.isdisjoint(texts[i])

    def add(i):
        batch.append(i)
        seen.update(texts[i])

    for i in order:
        if fits(i):
            add(i)
        else:
            pending.append(i)
            deferred.add(i)
        while len(batch) == batch_size:
            batches.append(batch)
            batch, seen = [], set()
            still = []
            for j in pending:  # the oldest deferred examples first
                if len(batch) < batch_size and fits(j):
                    add(j)
                else:
                    still.append(j)
            pending = still
    left_over = len(batch) + len(pending)
    out = np.asarray(batches, np.int64).reshape(len(batches), batch_size)
    return out, len(deferred), left_over


def duplicate_free_stream(texts, batch_size, seed, skip_batches=0, shuffle=True):
    """Yields duplicate-free index batches forever (`duplicate_free_batches`; epoch e
    shuffles with seed + e, or keeps the file order when not `shuffle`) and logs each
    epoch's deferred count once. The first `skip_batches` are skipped (a resumed run
    continues the same stream)."""
    epoch, skipped = 0, 0
    while True:
        order = (np.random.default_rng(seed + epoch).permutation(len(texts)) if shuffle
                 else np.arange(len(texts)))
        batches, deferred, left_over = duplicate_free_batches(texts, batch_size, order)
        if epoch == 0 or skipped >= skip_batches:
            logging.info("duplicate-free batches, epoch %d: %d of %d examples deferred to a "
                         "later batch (a text of theirs was already in the batch), %d left "
                         "for the next epoch", epoch, deferred, len(texts), left_over)
        if not len(batches):
            raise ConfigError(f"no duplicate-free batch of {batch_size} examples exists in "
                              f"the training data ({len(texts)} examples); lower batch_size")
        for batch in batches:
            if skipped < skip_batches:
                skipped += 1
                continue
            yield batch
        epoch += 1
