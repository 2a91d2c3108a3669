"""Builds a top-k search SavedModel from the command line: the `search_index` format of
`tfsent.formats` (`tfsent.formats.search_index`).

    python -m tfsent.index --model=NAME_OR_DIR --corpus=BEIR_DIR_or_corpus.jsonl
        --export_dir=DIR [--quantize=int8|binary] [--truncate_dim=N] [--batch_size=64]
        [--max_seq_length=N] [--pooling=mean] [--query_prompt=...] [--document_prompt=...]
        [--rescore_multiplier=4] [--reranker=CROSS_ENCODER [--reranker_prompt=...]]

Writes the next integer version under --export_dir (atomically: nothing half-written).
The corpus, --quantize, --truncate_dim and the numbers are checked before the model is
loaded; a bad flag or input prints `error: ...` on stderr and exits with status 2.
"""

import os

from absl import flags, logging

from tfsent import cli, formats
from tfsent.data import beir
from tfsent.encoders import check_pooling, load_encoder
from tfsent.errors import ConfigError
from tfsent.evaluation.rerank import check_reranker, define_reranker_flags, reranker_for_export
from tfsent.formats.model_paths import check_bi_encoder
from tfsent.formats.search_index import DEFAULT_RESCORE_MULTIPLIER, check_index_kind


def main(argv):
    """CLI entry point: index --corpus with --model into --export_dir; prints the path."""
    path = cli.run_command(_index_from_flags, argv)
    print(path)
    cli.print_next_steps(formats.next_step_lines("search_index", path))


def _index_from_flags():
    """Checks the flags and the corpus, loads --model, writes the search export."""
    FLAGS = flags.FLAGS
    check_bi_encoder(FLAGS.model, "--model", hint="; a cross-encoder goes to --reranker")
    kind = check_index_kind(FLAGS.quantize)
    for name, least in (("truncate_dim", 0), ("rescore_multiplier", 1)):  # 0: all dims
        if getattr(FLAGS, name) is not None and getattr(FLAGS, name) < least:
            raise ConfigError(f"--{name} must be >= {least}, got {getattr(FLAGS, name)}")
    if FLAGS.rescore_multiplier != DEFAULT_RESCORE_MULTIPLIER and kind != "binary":
        raise ConfigError("--rescore_multiplier applies to --quantize=binary only")
    if FLAGS.pooling is not None:
        check_pooling(FLAGS.pooling)
    quantize = () if kind == "float32" else (kind,)
    options = {"pooling": FLAGS.pooling, "truncate_dim": FLAGS.truncate_dim,
               "max_seq_length": FLAGS.max_seq_length, "query_prompt": FLAGS.query_prompt,
               "document_prompt": FLAGS.document_prompt, "batch_size": FLAGS.batch_size,
               "rescore_multiplier": FLAGS.rescore_multiplier, "reranker": FLAGS.reranker}
    reranker_flags = (FLAGS.reranker, FLAGS.reranker_prompt, FLAGS.reranker_instruction,
                      FLAGS.reranker_max_seq_length)
    check_reranker(reranker_flags[0], "--reranker", *reranker_flags[1:])  # before loading
    formats.check_export("search_index", FLAGS.export_dir, quantize,
                         {"corpus": FLAGS.corpus, **options})
    corpus = beir.read_corpus(FLAGS.corpus)  # missing, empty, malformed, duplicate ids
    logging.info("%d documents in %s", len(corpus), FLAGS.corpus)
    encoder = load_encoder(FLAGS.model, pooling=FLAGS.pooling,
                           max_seq_length=FLAGS.max_seq_length)
    if FLAGS.reranker:  # an export's path, or a CrossEncoder (.keras, a checkpoint folder)
        options["reranker"] = reranker_for_export(*reranker_flags)
    path = formats.export(
        encoder, FLAGS.export_dir, format="search_index", quantize=quantize, corpus=corpus,
        metadata={"model": FLAGS.model, "corpus": os.path.abspath(FLAGS.corpus),
                  **({"reranker": FLAGS.reranker} if FLAGS.reranker else {})}, **options)
    logging.info("indexed %d documents of %s with %s (%s) to %s", len(corpus), FLAGS.corpus,
                 FLAGS.model, kind, path)
    return path


def _define_flags():
    """The command's flags (defined only when it runs as a command)."""
    cli.define_model_flags()
    flags.DEFINE_string("corpus", None, "A BEIR folder or its corpus.jsonl (one JSON object "
                        "a line: _id, text, optional title).")
    flags.DEFINE_string("export_dir", None, "Directory of versioned SavedModels; the index "
                        "is written as the next version.")
    flags.DEFINE_string("quantize", "", "Index kind: empty (float32), int8 (per-dimension "
                        "min/max over the corpus) or binary (sign bits, Hamming search, "
                        "rescored with the float query).")
    flags.DEFINE_integer("truncate_dim", None, "Keep the first N dimensions of the "
                         "embedding (before normalisation; a Matryoshka-trained model; "
                         "default: the model's own truncate_dim; 0: all).")
    flags.DEFINE_integer("rescore_multiplier", DEFAULT_RESCORE_MULTIPLIER,
                         "--quantize=binary: rescore rescore_multiplier * k Hamming "
                         "candidates with the float query.")
    define_reranker_flags("reranker", "stored with the index: adds the signature "
                          "search_reranked(queries, k, rerank_top) (two stages in one call).")
    flags.mark_flag_as_required("corpus")
    flags.mark_flag_as_required("export_dir")


if __name__ == "__main__":
    _define_flags()
    cli.start(main)
