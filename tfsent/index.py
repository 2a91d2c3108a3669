"""Builds a top-k search SavedModel from the command line (the library:
`tfsent.search_index`).

    python -m tfsent.index --model=NAME_OR_DIR --corpus=BEIR_DIR_or_corpus.jsonl
        --export_dir=DIR [--quantize=int8|binary] [--truncate_dim=N] [--batch_size=64]
        [--max_seq_length=N] [--pooling=mean] [--query_prompt=...] [--document_prompt=...]
        [--rescore_multiplier=4]

Writes the next integer version under --export_dir (atomically: nothing half-written).
The corpus, --quantize, --truncate_dim and the numbers are checked before the model is
loaded; a bad flag or input prints `error: ...` on stderr and exits with status 2.
"""

import os

from absl import app, flags, logging

from tfsent import cli
from tfsent.data import beir
from tfsent.encoders import check_pooling, load_encoder
from tfsent.errors import ConfigError
from tfsent.search_index import DEFAULT_RESCORE_MULTIPLIER, check_index_kind, \
    export_search_index


def main(argv):
    """CLI entry point: index --corpus with --model into --export_dir; prints the path."""
    print(cli.run_command(_index_from_flags, argv))


def _index_from_flags():
    """Checks the flags and the corpus, loads --model, writes the search export."""
    FLAGS = flags.FLAGS
    kind = check_index_kind(FLAGS.quantize)
    if FLAGS.truncate_dim is not None and FLAGS.truncate_dim < 1:
        raise ConfigError(f"--truncate_dim must be >= 1, got {FLAGS.truncate_dim}")
    for name in ("batch_size", "rescore_multiplier"):
        if getattr(FLAGS, name) < 1:
            raise ConfigError(f"--{name} must be >= 1, got {getattr(FLAGS, name)}")
    if FLAGS.max_seq_length is not None and FLAGS.max_seq_length < 1:
        raise ConfigError(f"--max_seq_length must be >= 1, got {FLAGS.max_seq_length}")
    if FLAGS.rescore_multiplier != DEFAULT_RESCORE_MULTIPLIER and kind != "binary":
        raise ConfigError("--rescore_multiplier applies to --quantize=binary only")
    check_pooling(FLAGS.pooling)
    if os.path.exists(FLAGS.export_dir) and not os.path.isdir(FLAGS.export_dir):
        raise ConfigError(f"--export_dir={FLAGS.export_dir} exists and is not a folder")
    corpus = beir.read_corpus(FLAGS.corpus)  # missing, empty, malformed, duplicate ids
    logging.info("%d documents in %s", len(corpus), FLAGS.corpus)
    encoder = load_encoder(FLAGS.model, pooling=FLAGS.pooling,
                           max_seq_length=FLAGS.max_seq_length)
    path = export_search_index(
        encoder, corpus, FLAGS.export_dir, quantize_index=kind, pooling=FLAGS.pooling,
        truncate_dim=FLAGS.truncate_dim, max_seq_length=FLAGS.max_seq_length,
        query_prompt=FLAGS.query_prompt, document_prompt=FLAGS.document_prompt,
        batch_size=FLAGS.batch_size, rescore_multiplier=FLAGS.rescore_multiplier,
        metadata={"model": FLAGS.model, "corpus": os.path.abspath(FLAGS.corpus)})
    logging.info("indexed %d documents of %s with %s (%s) to %s", len(corpus), FLAGS.corpus,
                 FLAGS.model, kind, path)
    return path


def _define_flags():
    """The command's flags (defined only when it runs as a command)."""
    flags.DEFINE_string("model", "minilm-l6", "Encoder: preset name, checkpoint dir or "
                        "minilm-l6 (anything tfsent.encoders.load_encoder takes).")
    flags.DEFINE_string("corpus", None, "A BEIR folder or its corpus.jsonl (one JSON object "
                        "a line: _id, text, optional title).")
    flags.DEFINE_string("export_dir", None, "Directory of versioned SavedModels; the index "
                        "is written as the next version.")
    flags.DEFINE_string("quantize", "", "Index kind: empty (float32), int8 (per-dimension "
                        "min/max over the corpus) or binary (sign bits, Hamming search, "
                        "rescored with the float query).")
    flags.DEFINE_integer("truncate_dim", None, "Keep the first N dimensions of the "
                         "embedding (before normalisation; a Matryoshka-trained model).")
    flags.DEFINE_integer("batch_size", 64, "Documents per batch when encoding the corpus.")
    flags.DEFINE_integer("max_seq_length", None, "Tokenizer truncation length (default: the "
                         "model's).")
    flags.DEFINE_string("pooling", "mean", "Pooling of the token embeddings.")
    flags.DEFINE_string("query_prompt", "", "Prepended to each query before tokenizing (in "
                        "the graph: the search signature takes raw queries).")
    flags.DEFINE_string("document_prompt", "", "Prepended to each document before "
                        "tokenizing.")
    flags.DEFINE_integer("rescore_multiplier", DEFAULT_RESCORE_MULTIPLIER,
                         "--quantize=binary: rescore rescore_multiplier * k Hamming "
                         "candidates with the float query.")
    flags.mark_flag_as_required("corpus")
    flags.mark_flag_as_required("export_dir")


if __name__ == "__main__":
    _define_flags()
    app.run(main)
