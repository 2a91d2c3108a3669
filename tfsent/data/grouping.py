"""Index batches for NLI pairs: premise-grouped (SupCon-SBERT) or plainly shuffled.

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
