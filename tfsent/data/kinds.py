"""The training-data kinds: one `DataKind` record each, the one home of what a kind is.

A method's `MethodSpec.data_kind` names one. The record says how a run reads a source as
that kind (`read`, what `read_training_examples` calls), how its examples become batches
(`pipeline`, what `dataset_for_kind` calls, for the run and for `fit` on raw examples),
the keys of a row given as a dict (`row_keys`), whether the rows end in hard-negative
columns, whether the pipeline needs an embedder (CLSR's frozen encoder, distill's
teacher), and what to pass as raw examples. A new kind is one record here plus its reader
and pipeline functions.
"""

from tfsent.data import pairs, pipelines, readers
from tfsent.data.sources import DEMO_NAMES
from tfsent.errors import ConfigError

_STRINGS = "strings (a list, or a tf.data.Dataset of strings, batched or not)"


class DataKind:
    """One kind of training data.

    Args:
        name: the kind's name (`MethodSpec.data_kind`).
        doc: one line.
        read: `fn(source, config) -> examples` (a run's reader of one source).
        pipeline: `fn(examples, tokenizer, batch_size, seed, shuffle, repeat, skip_batches,
            options) -> tf.data.Dataset`; `options` is a dict of the keyword arguments of
            `dataset_for_kind` after skip_batches.
        accepts: what to pass as raw examples (for errors).
        row_keys: the keys of a row given as a dict, in column order (None: strings).
        negative_columns: rows are (anchor, positive, negative_1..negative_N).
        embedder: None, or what `embed` must be: "frozen encoder" (the base encoder's
            cached embeddings of the sentences) or "teacher" (the teacher's embeddings).
    """

    def __init__(self, name, doc, read, pipeline, accepts, row_keys=None,
                 negative_columns=False, embedder=None):
        self.name, self.doc, self.read, self.pipeline = name, doc, read, pipeline
        self.accepts = accepts
        self.row_keys = row_keys
        self.negative_columns = negative_columns
        self.embedder = embedder


def _read_sentences(source, config):
    return readers.read_training_sentences(source)


def _read_triplets(source, config):
    source = "demo" if source in DEMO_NAMES else source
    return readers.read_nli_triplets(source, config.train_split)


def _read_pairs(source, config):
    return pairs.read_training_pairs(source, config.train_split,
                                     config.get("hard_negatives", True))


def _read_cross_pairs(source, config):
    """Rows with negatives: a cross-encoder learns to score a passage against the
    retriever's near misses. Rows without (a BEIR folder's (query, relevant document)
    pairs, a two-column pairs file) are refused, naming the command that mines them: a
    mined file is computed once, seen whole before training and reused by every rerun."""
    rows = pairs.read_training_pairs(source, config.train_split, True)
    if rows and len(rows[0]) < 3:
        hint = (f"--beir={source[len('beir:'):]}" if source.startswith("beir:")
                else f"--pairs={source}")
        miner = config.get("retriever") or config.encoder
        raise ConfigError(
            f"train_data {source!r}: rows (query, positive) without negatives; a "
            f"cross-encoder trains on (query, positive, negative_1..N) rows. Mine them "
            f"first: python -m tfsent.mine --model={miner} {hint} --num_negatives=3 "
            f"--range_min=2 --output_format=n-tuple --out=mined.jsonl, then "
            f"--config.train_data=mined.jsonl")
    return rows


def _read_nli_pairs(source, config):
    return readers.read_nli_pairs(source, config.train_split)


def _read_embedding_pairs(source, config):
    return readers.read_positive_pairs(source, config.eval_data_dir,
                                       config.positive_threshold, config.train_split)


def _read_scored_pairs(source, config):
    rows = readers.read_scored_training_pairs(source, config.eval_data_dir,
                                              config.train_split)
    readers.check_score_range(rows, config.score_min, config.score_max,
                              f"train_data {source!r}")
    return rows


def _sentences(examples, tokenizer, batch_size, seed, shuffle, repeat, skip, options,
               mlm=False):
    return pipelines.sentence_dataset(
        examples, tokenizer, batch_size, seed, shuffle=shuffle, repeat=repeat,
        skip_batches=skip, mlm_mask_rate=options["mask_rate"] if mlm else None)


def _sentences_mlm(*args):
    return _sentences(*args, mlm=True)


def _triplets(examples, tokenizer, batch_size, seed, shuffle, repeat, skip, options):
    return pipelines.triplet_dataset(examples, tokenizer, batch_size, seed, shuffle=shuffle,
                                     repeat=repeat, skip_batches=skip,
                                     duplicate_free=options["duplicate_free"])


def _pairs(examples, tokenizer, batch_size, seed, shuffle, repeat, skip, options):
    return pipelines.pair_dataset(examples, tokenizer, batch_size, seed, shuffle=shuffle,
                                  repeat=repeat, skip_batches=skip,
                                  duplicate_free=options["duplicate_free"],
                                  query_prompt=options["query_prompt"],
                                  document_prompt=options["document_prompt"])


def _cross_pairs(examples, tokenizer, batch_size, seed, shuffle, repeat, skip, options):
    return pipelines.pair_dataset(examples, tokenizer, batch_size, seed, shuffle=shuffle,
                                  repeat=repeat, skip_batches=skip, joint=True,
                                  # a text may recur in a batch: no in-batch negatives
                                  duplicate_free=False)


def _nli_pairs(examples, tokenizer, batch_size, seed, shuffle, repeat, skip, options):
    # NLI batches are always shuffled (grouping draws the order).
    return pipelines.nli_pair_dataset(examples, tokenizer, batch_size, seed,
                                      skip_batches=skip,
                                      group_premises=options["premise_grouped"],
                                      repeat=repeat)


def _embedding_pairs(examples, tokenizer, batch_size, seed, shuffle, repeat, skip, options):
    return pipelines.embedding_pair_dataset(examples, options["embed"], batch_size, seed,
                                            shuffle=shuffle, repeat=repeat,
                                            skip_batches=skip)


def _scored_pairs(examples, tokenizer, batch_size, seed, shuffle, repeat, skip, options):
    return pipelines.scored_pair_dataset(examples, tokenizer, batch_size, seed,
                                         shuffle=shuffle, repeat=repeat, skip_batches=skip)


def _distill_sentences(examples, tokenizer, batch_size, seed, shuffle, repeat, skip,
                       options):
    return pipelines.distill_dataset(examples, tokenizer, options["embed"], batch_size, seed,
                                     shuffle=shuffle, repeat=repeat, skip_batches=skip)


KINDS = {kind.name: kind for kind in (
    DataKind("sentences", "unlabelled sentences -> token features", _read_sentences,
             _sentences, _STRINGS),
    DataKind("sentences_mlm", "unlabelled sentences -> token features + MLM masks "
             "(mask_rate)", _read_sentences, _sentences_mlm, _STRINGS),
    DataKind("triplets", "(anchor, positive, negative[s]) rows (NLI triplets, mined "
             "n-tuples); duplicate_free batches", _read_triplets, _triplets,
             "(anchor, positive, negative) string rows, as tuples or dicts with keys "
             "anchor/positive/negative (a list or a tf.data.Dataset, batched or not)",
             row_keys=("anchor", "positive", "negative"), negative_columns=True),
    DataKind("pairs", "retrieval rows (anchor, positive, negative_1..N), N >= 0; "
             "query_prompt / document_prompt put before them", _read_pairs, _pairs,
             "(anchor, positive[, negative_1..negative_N]) string rows, as tuples or dicts "
             "with those keys (a list or a tf.data.Dataset, batched or not)",
             row_keys=("anchor", "positive"), negative_columns=True),
    DataKind("cross_pairs", "retrieval rows (anchor, positive, negative_1..N), N >= 1, "
             "as joint (query, document) pair inputs with labels (cross-encoders)",
             _read_cross_pairs, _cross_pairs,
             "(anchor, positive, negative_1[, ..negative_N]) string rows, as tuples or "
             "dicts with those keys (a list or a tf.data.Dataset, batched or not)",
             row_keys=("anchor", "positive"), negative_columns=True),
    DataKind("nli_pairs", "(premise, hypothesis, label) rows; premise-grouped batches "
             "when the method asks", _read_nli_pairs, _nli_pairs,
             "(premise, hypothesis, label) rows, as tuples or dicts with keys "
             "premise/hypothesis/label (a list or a tf.data.Dataset, batched or not)",
             row_keys=("premise", "hypothesis", "label")),
    DataKind("embedding_pairs", "positive (sentence_a, sentence_b) pairs -> a frozen "
             "encoder's embeddings (CLSR)", _read_embedding_pairs, _embedding_pairs,
             "(sentence_a, sentence_b) string rows (a list or a tf.data.Dataset, batched "
             "or not)", row_keys=("sentence_a", "sentence_b"), embedder="frozen encoder"),
    DataKind("scored_pairs", "(sentence1, sentence2, score) rows: STS-B, SICK, "
             "sentence1<TAB>sentence2<TAB>score files", _read_scored_pairs, _scored_pairs,
             "(sentence1, sentence2, score) rows, score a number, as tuples or dicts with "
             "keys sentence1/sentence2/score (a list or a tf.data.Dataset, batched or not)",
             row_keys=("sentence1", "sentence2", "score")),
    DataKind("distill_sentences", "sentences -> token features + the teacher's "
             "embeddings", _read_sentences, _distill_sentences, _STRINGS,
             embedder="teacher"),
)}
DATA_KINDS = tuple(KINDS)


def get_kind(kind):
    """The DataKind of a name (a DataKind passes through); ConfigError for an unknown one."""
    if isinstance(kind, DataKind):
        return kind
    if kind not in KINDS:
        raise ConfigError(f"unknown data kind {kind!r}; one of {', '.join(DATA_KINDS)}")
    return KINDS[kind]


def read_training_examples(kind, source, config):
    """One training source (a name of the source grammar, `tfsent.data.sources`) read as
    `kind` with the run config's reading fields (train_split, hard_negatives,
    eval_data_dir, positive_threshold, score_min / score_max); returns its examples."""
    return get_kind(kind).read(source, config)


def dataset_for_kind(kind, examples, tokenizer, batch_size, seed=0, shuffle=True, repeat=True,
                     skip_batches=0, mask_rate=None, duplicate_free=False,
                     premise_grouped=False, embed=None, query_prompt="", document_prompt=""):
    """The training pipeline of a data kind (its record's `pipeline`), used by the run
    and by `fit` / `evaluate` on raw examples (`tfsent.data.preprocessing`).

    mask_rate: sentences_mlm's; duplicate_free: triplets' and pairs' batches hold no text
    twice; query_prompt / document_prompt: put before pairs' anchors / other columns;
    premise_grouped: nli_pairs' batches; embed: `fn(sentences) -> (N, D)`, the embedder
    of embedding_pairs and distill_sentences. `repeat=False`: one epoch per iteration
    (Keras' epochs); `skip_batches` fast-forwards a resumed run."""
    options = {"mask_rate": mask_rate, "duplicate_free": duplicate_free,
               "premise_grouped": premise_grouped, "embed": embed,
               "query_prompt": query_prompt, "document_prompt": document_prompt}
    return get_kind(kind).pipeline(examples, tokenizer, batch_size, seed, shuffle, repeat,
                                   skip_batches, options)
