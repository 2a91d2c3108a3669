r"""Hard-negative mining: (anchor, positive) pairs -> (anchor, positive, negative) triplets.

    python -m tfsent.mine --model=NAME_OR_DIR --pairs=PAIRS.tsv [--corpus=SENTENCES.txt] \
        --out=TRIPLETS.tsv [--num_negatives=3] [--range_min=0] [--range_max=N] \
        [--max_score=S] [--margin=M] [--relative_margin=R] [--output_format=triplet|n-tuple]
    python -m tfsent.mine --model=NAME_OR_DIR --beir=DIR[:SPLIT] --out=ROWS.jsonl \
        [--query_prompt=...] [--document_prompt=...] [the options above]
        [--cross_encoder=CE [--cross_encoder_prompt=qwen3_reranker]]

`--pairs` has two tab-separated columns per line (anchor, positive); candidates are the
lines of `--corpus`, else every positive of the pairs file. `--beir` mines a BEIR folder's
(query, relevant document) rows instead, the corpus's documents as candidates. The
encoder is anything `tfsent.encoders.load_encoder` takes, or an exported SavedModel
directory (whose prompts are the default of --query_prompt / --document_prompt).
--cross_encoder (anything `tfsent.evaluate --rerank` takes) scores the candidates found
again; its scores then rank and filter them (a reranker's view of "too close to the
positive" keeps false negatives out). What is
mined and how (the exclusions, the rank window, the filters): `tfsent/search/mining.py`;
the checks made before the model loads and the output rows:
`tfsent/search/mined_files.py`.
"""

import functools

from absl import flags

from tfsent import cli
from tfsent.evaluation.rerank import check_reranker, define_reranker_flags, load_reranker
from tfsent.data.sources import parse_beir
from tfsent.formats.model_paths import check_bi_encoder
from tfsent.search.mined_files import mine_to_file
from tfsent.search.mining import OUTPUT_FORMATS
from tfsent.serving import load_any

_OPTIONS = ("pairs", "corpus", "beir", "overwrite", "output_format", "num_negatives",
            "range_min", "range_max", "max_score", "margin", "relative_margin",
            "query_prompt", "document_prompt", "batch_size", "query_chunk",
            "candidate_chunk")


def _mine_from_flags(FLAGS=None):  # noqa: N803  (absl's name for the flag values)
    """`mine_to_file` on the flags (of `FLAGS`, absl's global flag values by default);
    returns the rows written."""
    FLAGS = flags.FLAGS if FLAGS is None else FLAGS
    check_bi_encoder(FLAGS.model, "--model")  # mining ranks by sentence embeddings
    options = (FLAGS.cross_encoder, FLAGS.cross_encoder_prompt,
               FLAGS.cross_encoder_instruction, FLAGS.cross_encoder_max_seq_length)
    check_reranker(options[0], "--cross_encoder", *options[1:])
    load_rescorer = functools.partial(load_reranker, *options, option="--cross_encoder") \
        if FLAGS.cross_encoder else None
    return mine_to_file(
        FLAGS.out, lambda: load_any(FLAGS.model, FLAGS.pooling, FLAGS.max_seq_length),
        verbose=1 if FLAGS.progress else 0, load_rescorer=load_rescorer,
        **{name: FLAGS[name].value for name in _OPTIONS})


def main(argv):
    """CLI entry point: mine, write --out, print a one-line summary (a bad flag or input:
    `error: ...` on stderr, exit status 2)."""
    rows = cli.run_command(_mine_from_flags, argv)
    FLAGS = flags.FLAGS
    print(f"wrote {len(rows)} {FLAGS.output_format} rows to {FLAGS.out}")
    dev = ""
    if FLAGS.beir:  # the folder's dev split selects, when it has one
        directory, _ = parse_beir(FLAGS.beir, "train", bare=True)
        dev = f" --config.eval_data=beir:{directory}:dev"
    cli.print_next_steps([
        "next:", "  train: python -m tfsent.train --method=retrieval "
        f"--config=configs/retrieval_beir_minilm_cpu.py --config.train_data={FLAGS.out}"
        f"{dev} --output_dir=runs/search  (README: Search)"])


def _define_flags(flag_values=None):
    """The command's flags (defined only when it runs as a command)."""
    fv = {"flag_values": flags.FLAGS if flag_values is None else flag_values}
    cli.define_model_flags(fv["flag_values"], savedmodel=True)
    flags.DEFINE_string("pairs", None, "anchor<TAB>positive per line (or --beir).", **fv)
    flags.DEFINE_string("beir", None, "A BEIR folder DIR[:SPLIT] (split train by default): "
                        "its queries with a qrel score > 0 are the anchors, those documents "
                        "their positives, every document of corpus.jsonl a candidate.", **fv)
    flags.DEFINE_string("corpus", None, "Candidate sentences, one per line (default: the "
                        "positives of --pairs).", **fv)
    flags.DEFINE_string("out", None, "Output .tsv, or .jsonl (one object a line: anchor, "
                        "positive, negative_1..N); a new file, never one of the inputs.", **fv)
    flags.DEFINE_bool("overwrite", False, "Replace --out if it exists (never --pairs, "
                      "--corpus or the --beir folder's files).", **fv)
    flags.DEFINE_integer("num_negatives", 3, "Negatives per pair.", **fv)
    flags.DEFINE_integer("range_min", 0, "Skip this many of the most similar candidates.",
                         **fv)
    flags.DEFINE_integer("range_max", None, "Consider only candidates ranked below this "
                         "(default: range_min + 10 * num_negatives).", **fv)
    flags.DEFINE_float("max_score", None, "Keep only negatives with score <= this (the "
                       "cosine; with --cross_encoder, its score).", **fv)
    flags.DEFINE_float("margin", None, "Keep only negatives with score < score(anchor, "
                       "positive) - margin (cosines, or --cross_encoder's scores).", **fv)
    flags.DEFINE_float("relative_margin", None, "Keep only negatives with score < "
                       "score(anchor, positive) - |score(anchor, positive)| * relative_margin "
                       "(cosines, or --cross_encoder's scores); NV-Retriever: 0.05.", **fv)
    flags.DEFINE_enum("output_format", "triplet", list(OUTPUT_FORMATS),
                      "triplet: anchor, positive, negative per row (one row per negative); "
                      "n-tuple: anchor, positive, neg1..negN per row.", **fv)
    define_reranker_flags("cross_encoder", "that scores the candidates found again: its "
                          "scores rank them and --max_score / --margin / --relative_margin "
                          "apply to them.", fv["flag_values"])
    flags.DEFINE_integer("query_chunk", 256, "Anchors per similarity block (and per "
                         "--cross_encoder call).", **fv)
    flags.DEFINE_integer("candidate_chunk", 16384, "Candidates per similarity block.", **fv)
    flags.DEFINE_bool("progress", True, "Show progress bars.", **fv)


if __name__ == "__main__":
    _define_flags()
    cli.start(main)
