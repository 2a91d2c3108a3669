"""Mixtures of training sources: several `train_data` sources sampled into one stream.

`train_data` names several sources (comma-separated on the command line, a list in a
recipe); every source is read as the method's data kind by the reader one source uses,
and gets its own pipeline (`kinds.dataset_for_kind`, seed `seed + i` for source i).
A seeded stream of source indices (`SourceSampler`) says which source each batch
(`batch_per_source=True`) or each example (False) comes from, and
`tf.data.Dataset.choose_from_datasets` follows it, so the mixture is an ordinary
tf.data pipeline: it runs under any tf.distribute strategy (the global batch is drawn,
then split over the replicas; with `batch_per_source` every replica's slice comes from
the same source) and is deterministic given the seed.

Sampling (`mixture_sampling`):
  proportional  each draw picks source i with probability w_i / sum(w), w = source_weights
                or, by default, the sources' sizes (sentence-transformers'
                ProportionalBatchSampler);
  round_robin   the sources take turns, 0, 1, ..., n-1, 0, ... (sentence-transformers'
                RoundRobinBatchSampler). ST's sampler stops when its smallest dataset is
                exhausted; here every source repeats (a new shuffle each pass), so none
                runs out and the turns go on for the run's `steps`: a small source is
                seen more often than once per pass of a large one.

Resuming at step k replays the first k draws of the choice stream (cheap: integers only),
counts how many batches or examples each source gave, and starts each source's pipeline
that far in (its `skip_batches`), so the run continues exactly the stream it would have
drawn. The per-source counts recorded in metrics.json come from the same replay over
the optimizer steps taken, so they are exact whatever steps_per_execution, prefetching or
the replica count (one global batch counts once, however many replicas share it).
"""

import math
import numbers

import numpy as np
import tensorflow as tf
from absl import logging

from tfsent.data import kinds, pipelines
from tfsent.data.sources import parse_sources
from tfsent.errors import ConfigError, InputError

SAMPLINGS = ("proportional", "round_robin")
_BLOCK = 4096  # choices drawn per numpy call (block i: its own seeded generator)
_CHOICE_SALT = 0x5EED  # keeps the choice stream apart from the sources' shuffles
# Kinds whose rows are (anchor, positive, negative_1..negative_N): N is the row width - 2.
ROW_KINDS = tuple(name for name, kind in kinds.KINDS.items() if kind.negative_columns)


def parse_weights(source_weights, n_sources):
    """`source_weights` ("" / None: none given; "2,1" or a list of numbers) -> a list of
    n_sources positive floats, or None. ConfigError naming the field on anything else."""
    if source_weights in (None, "", (), []):
        return None
    if isinstance(source_weights, str):
        items = [w.strip() for w in source_weights.split(",")]
    elif isinstance(source_weights, (list, tuple)):
        items = list(source_weights)
    elif isinstance(source_weights, numbers.Real) and not isinstance(source_weights, bool):
        items = [source_weights]
    else:
        raise ConfigError(f"source_weights must be comma-separated numbers, got "
                          f"{source_weights!r}")
    weights = []
    for item in items:
        try:
            if isinstance(item, bool):
                raise ValueError
            value = float(item)
        except (TypeError, ValueError):
            raise ConfigError(f"source_weights: {item!r} is not a number") from None
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(f"source_weights: every weight must be a finite number > 0, "
                              f"got {item!r}")
        weights.append(value)
    if len(weights) != n_sources:
        raise ConfigError(f"source_weights gives {len(weights)} weight(s) for "
                          f"{n_sources} train_data source(s); give one per source, in order")
    return weights


def check_config(config, data_kind=None, duplicate_free=False, premise_grouped=False):
    """Checks the mixture fields of a run config (sources, weights, sampling) against
    each other and, when `data_kind` is given, against the method's batches. Raises
    ConfigError naming the field; called by `tfsent.training.config.validate`, before any
    data is read or model loaded."""
    sources = parse_sources(config["train_data"])
    weights = parse_weights(config.get("source_weights"), len(sources))
    if weights is not None and config.get("mixture_sampling") == "round_robin":
        raise ConfigError("source_weights apply to mixture_sampling=proportional; "
                          "round_robin takes the sources in turn")
    if len(sources) < 2 or config.get("batch_per_source", True) or data_kind is None:
        return
    why = None
    if duplicate_free:
        why = ("duplicate_free_batches (mixing re-cuts the batches, so a text could "
               "occur twice in one; set duplicate_free_batches=false to mix anyway)")
    elif premise_grouped:
        why = "premise-grouped batches (every hypothesis of a premise in one batch)"
    if why:
        raise ConfigError(f"batch_per_source=false mixes examples of the train_data "
                          f"sources within a batch, which cannot keep the method's {why}; "
                          f"set batch_per_source=true")


class SourceSampler:
    """A seeded, endless stream of source indices (which source the next batch or example
    comes from) that can start anywhere and count what any prefix drew.

    Args:
        weights: one positive number per source (proportional sampling; normalised here).
        sampling: "proportional" or "round_robin" (weights unused).
        seed: the run's seed.
    """

    def __init__(self, weights, sampling="proportional", seed=0):
        if sampling not in SAMPLINGS:
            raise ConfigError(f"mixture_sampling must be one of {', '.join(SAMPLINGS)}, "
                              f"got {sampling!r}")
        weights = np.asarray(weights, np.float64)
        self.n_sources = len(weights)
        self.probabilities = weights / weights.sum()
        self.sampling = sampling
        self.seed = int(seed)

    def block(self, index):
        """Draws index * _BLOCK ... (index + 1) * _BLOCK - 1 of the stream as an int64 array:
        a pure function of (seed, index), so any number of readers (Keras' iterators,
        tf.distribute's replicas) see the same stream without sharing a generator."""
        index = int(index)
        if self.sampling == "round_robin":
            return (np.arange(_BLOCK, dtype=np.int64) + index * _BLOCK) % self.n_sources
        rng = np.random.default_rng([self.seed, _CHOICE_SALT, index])
        return rng.choice(self.n_sources, size=_BLOCK, p=self.probabilities).astype(np.int64)

    def blocks(self, start=0):
        """The stream from draw `start` on, in int64 arrays, forever."""
        index, offset = divmod(start, _BLOCK)
        yield self.block(index)[offset:]
        while True:
            index += 1
            yield self.block(index)

    def choices(self, count, start=0):
        """The `count` draws from draw `start` on, as an int64 array."""
        out, total = [], 0
        for block in self.blocks(start):
            if total >= count:
                break
            out.append(block[:count - total])
            total += len(out[-1])
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    def counts(self, count):
        """How many of the first `count` draws went to each source (a list of ints)."""
        counts = np.zeros(self.n_sources, np.int64)
        for block in self.blocks():
            if count <= 0:
                break
            counts += np.bincount(block[:count], minlength=self.n_sources)
            count -= len(block)
        return [int(c) for c in counts]

    def dataset(self, start=0):
        """The stream from draw `start` on as a tf.data.Dataset of int64 scalars (each block
        computed from its index, no Python generator state)."""
        index, offset = divmod(start, _BLOCK)

        def block(i):
            out = tf.numpy_function(self.block, [i], tf.int64, stateful=False)
            return tf.ensure_shape(out, [_BLOCK])

        return (tf.data.Dataset.range(index, 2 ** 62).map(block).unbatch().skip(offset))


class SourceMixture:
    """Several training sources of one data kind, and how they are mixed.

    `len()` is the total number of examples (what `epochs` counts); `dataset` builds the
    mixed training pipeline; `drawn` counts what a number of steps took from each source.

    Args:
        names: the sources as `train_data` names them.
        examples: one list of examples per source (each non-empty).
        weights: source_weights (None: proportional to the sources' sizes).
        sampling: "proportional" | "round_robin".
        batch_per_source: every batch from one source (else examples mixed in batches).
        seed: the run's seed.
    """

    def __init__(self, names, examples, weights=None, sampling="proportional",
                 batch_per_source=True, seed=0):
        if len(names) != len(examples):
            raise ValueError("one list of examples per source")
        for name, rows in zip(names, examples):
            if not len(rows):
                raise InputError(f"train_data source {name!r} holds no training examples")
        self.names = list(names)
        self.examples = [list(rows) for rows in examples]
        self.sizes = [len(rows) for rows in self.examples]
        self.weights = list(weights) if weights is not None else [float(s) for s in self.sizes]
        self.sampling = sampling
        self.batch_per_source = bool(batch_per_source)
        self.seed = int(seed)
        self.sampler = SourceSampler(self.weights, sampling, seed)

    def __len__(self):
        return sum(self.sizes)

    @property
    def unit(self):
        """What one draw of the choice stream picks a source for: "batch" or "example"."""
        return "batch" if self.batch_per_source else "example"

    def shares(self):
        """The expected share of draws of each source."""
        if self.sampling == "round_robin":
            return [1.0 / len(self.names)] * len(self.names)
        return [float(p) for p in self.sampler.probabilities]

    def log_sources(self, data_kind):
        """Logs each source's size and share of the draws (absl, at the start of a run)."""
        logging.info("training on a mixture of %d sources (%s sampling, one source per %s)",
                     len(self.names), self.sampling, self.unit)
        units = "batches" if self.batch_per_source else "examples"
        for i, (name, size, share) in enumerate(zip(self.names, self.sizes, self.shares())):
            logging.info("  source %d %s: %d examples (%s), %.1f%% of the %s", i, name, size,
                         data_kind, 100 * share, units)

    def check_widths(self, data_kind):
        """Sources of (anchor, positive, negatives...) rows must have the same number of
        hard negatives per row (their batches must have one structure and shape)."""
        if data_kind not in ROW_KINDS:
            return
        widths = {name: len(rows[0]) - 2 for name, rows in zip(self.names, self.examples)}
        if len(set(widths.values())) > 1:
            listed = ", ".join(f"{name}: {n}" for name, n in widths.items())
            hint = ("; --config.hard_negatives=false trains on every source's (anchor, "
                    "positive) columns" if data_kind == "pairs" else "")
            raise InputError(f"the train_data sources have different numbers of hard "
                             f"negatives per row ({listed}): one batch structure is needed, "
                             f"so mix sources of one width{hint}")

    def drawn(self, steps, batch_size):
        """{"source_examples": {name: n}, and with batch_per_source "source_batches":
        {name: n}} for the first `steps` global batches of the stream."""
        if self.batch_per_source:
            batches = self.sampler.counts(steps)
            return {"source_batches": dict(zip(self.names, batches)),
                    "source_examples": {n: b * batch_size for n, b in zip(self.names, batches)}}
        return {"source_examples": dict(zip(self.names,
                                            self.sampler.counts(steps * batch_size)))}

    def dataset(self, data_kind, tokenizer, batch_size, skip_batches=0, **kind_args):
        """The mixed training pipeline (endless), from global batch `skip_batches` on.

        `kind_args` go to `kinds.dataset_for_kind` (mask_rate, duplicate_free,
        premise_grouped, embed)."""
        def source_dataset(i, skip):
            return kinds.dataset_for_kind(
                data_kind, self.examples[i], tokenizer, batch_size, self.seed + i,
                repeat=True, skip_batches=skip, **kind_args)

        if self.batch_per_source:
            skips = self.sampler.counts(skip_batches)
            sources = [source_dataset(i, skips[i]) for i in range(len(self.names))]
            mixed = tf.data.Dataset.choose_from_datasets(
                sources, self.sampler.dataset(skip_batches))
            return mixed.prefetch(pipelines.AUTOTUNE)
        start = skip_batches * batch_size
        skips = self.sampler.counts(start)
        negatives = len(self.examples[0][0]) - 2 if data_kind in ROW_KINDS else 0
        sources = []
        for i in range(len(self.names)):
            ds = source_dataset(i, skips[i] // batch_size)
            ds = ds.map(lambda b, i=i: _per_example(b, negatives, i, len(self.names)))
            sources.append(ds.unbatch().skip(skips[i] % batch_size))
        mixed = tf.data.Dataset.choose_from_datasets(sources, self.sampler.dataset(start))
        mixed = mixed.batch(batch_size, drop_remainder=True)
        mixed = mixed.map(lambda b: _per_batch(b, negatives))
        return mixed.prefetch(pipelines.AUTOTUNE)


def _per_example(batch, negatives, source, n_sources):
    """A source's batch made unbatchable row by row: N hard negatives per anchor as one
    (B, N, L) entry; NLI premise ids made distinct across sources."""
    batch = dict(batch)
    if negatives:
        batch["negative"] = {k: tf.reshape(v, [-1, negatives, *v.shape[1:]])
                             for k, v in batch["negative"].items()}
    if "premise_id" in batch:
        batch["premise_id"] = batch["premise_id"] * n_sources + source
    return batch


def _per_batch(batch, negatives):
    """The inverse of `_per_example`'s reshape on a re-cut batch (negatives anchor-major)."""
    if not negatives:
        return batch
    batch = dict(batch)
    batch["negative"] = {k: tf.reshape(v, [-1, *v.shape[2:]])
                         for k, v in batch["negative"].items()}
    return batch
