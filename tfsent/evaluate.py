r"""Evaluates a sentence encoder with the SentEval / SimCSE protocol (docs/evaluation.md).

    python -m tfsent.evaluate --model=NAME_OR_DIR --data_dir=DIR \
        --tasks=STS12,STSBenchmark,SICKRelatedness [--mode=test|fasttest] \
        [--output_json=FILE] [--plots_dir=DIR [--compare_model=NAME_OR_DIR]]

`--model` is anything `tfsent.encoders.load_encoder` takes or an exported SavedModel
directory (a version directory, or an export directory: its newest version); --pooling and
--max_seq_length default to the model's own (minilm-l6: mean, 256). Task names: STS12..STS16,
STSBenchmark, SICKRelatedness, MR, CR, SUBJ, MPQA, SST2, TREC, MRPC, the groups `sts` and
`transfer`, and retrieval tasks `beir:DIR[:SPLIT]` (a BEIR folder; split default test:
nDCG@10, MRR@10, Recall@10/@100, MAP@100, x100, trec_eval's definitions; --run_file writes
the top 100 of each query as a TREC run, or JSON when it ends with .json). Prints a table
like the papers' (with Avg.) and writes JSON mapping each task to an object whose
"spearman" (x100), "acc" or "ndcg@10" is the reported figure. --output_json and --run_file
are new files unless --overwrite, and never a file the evaluation reads.

--rerank=CE --rerank_top=N (beir: tasks only): the top N of the retriever's search
reordered by a cross-encoder (an export folder, as --model takes, a CrossEncoder .keras
file, or a Hugging Face reranker checkpoint folder: --rerank_prompt=qwen3_reranker for
Qwen3-Reranker); one more table row per task and its measures under "reranked" in the
JSON; the --run_file is the reranked run.

Smaller and quantized embeddings, one table row each, and in the JSON an object per variant
with its figure and its "retention" (% of the full float figure): --truncate_dim=64 (the
first 64 dimensions, before normalisation; without it a model's own truncate_dim applies,
0: none), --dims=384,128,64,32, --quantize=int8,binary (int8 ranges from --calibration_file
or those stored in an export made with --quantize=int8; binary: packed sign bits,
Hamming). --query_prompt / --document_prompt: text before each retrieval query / document
(default: an export's own prompts; empty for none). --plots_dir (the `plots` extra) writes
STS scatters, a random-pair cosine histogram and the alignment/uniformity plane;
--compare_model adds a second model to every picture and prints its table too.
"""

import json

from absl import flags

from tfsent import cli, fsio, plots
from tfsent.evaluation import resolve_tasks
from tfsent.evaluation.rerank import (check_rerank, check_retriever, define_rerank_flags,
                                      evaluate_reranked_tasks, load_reranker)
from tfsent.evaluation.retrieval import check_tasks
from tfsent.evaluation.runner import (MemoEncoder, check_evaluation_files,
                                      evaluate_encoder, evaluation_next_steps,
                                      evaluation_prompts,
                                      full_width_for, model_label, parse_variants)
from tfsent.serving import load_any


def main(argv):
    """CLI entry point: every flag is checked before a model is loaded; a bad flag or
    input prints `error: ...` and exits with status 2."""
    cli.run_command(_evaluate_from_flags, argv)


def _evaluate_from_flags():
    """Checks the flags, loads the model(s), runs the tasks, prints and writes results."""
    FLAGS = flags.FLAGS
    # Everything that can be refused is refused before any model is loaded.
    tasks = resolve_tasks(FLAGS.tasks)
    retrieval = check_tasks(tasks)
    check_rerank(FLAGS.rerank, FLAGS.rerank_top, tasks, retrieval,
                 FLAGS.truncate_dim is not None or bool(FLAGS.dims or FLAGS.quantize),
                 FLAGS.rerank_prompt, FLAGS.rerank_instruction, FLAGS.rerank_max_seq_length)
    run_files = check_evaluation_files(
        FLAGS.output_json, FLAGS.run_file, FLAGS.overwrite,
        [FLAGS.model, FLAGS.compare_model, FLAGS.rerank], FLAGS.calibration_file,
        FLAGS.data_dir, tasks, retrieval)
    if FLAGS.plots_dir:
        plots.check_plots_dir(FLAGS.plots_dir)
        plots.require_matplotlib()  # fail before any encoding when the extra is missing
    dims, quantizations, calibration = parse_variants(
        FLAGS.truncate_dim, FLAGS.dims, FLAGS.quantize, FLAGS.calibration_file)
    full_width = full_width_for(FLAGS.truncate_dim, FLAGS.dims)  # the flags' sizes: of all
    models = [FLAGS.model] + ([FLAGS.compare_model] if FLAGS.compare_model else [])
    for name, flag in zip(models, ("--model", "--compare_model")):
        check_retriever(name, flag)
    encoders = {}
    for i, name in enumerate(models):
        pooling = FLAGS.compare_pooling if i and FLAGS.compare_pooling else FLAGS.pooling
        label = model_label(name)
        label = label if label not in encoders else f"{label} ({i})"
        encoders[label] = MemoEncoder(load_any(name, pooling, FLAGS.max_seq_length),
                                      FLAGS.batch_size, truncate_dim=full_width)
    reranker = load_reranker(FLAGS.rerank, FLAGS.rerank_prompt, FLAGS.rerank_instruction,
                             FLAGS.rerank_max_seq_length) if FLAGS.rerank else None
    all_results, tables = {}, {}
    for i, (label, memo) in enumerate(encoders.items()):
        prompts = evaluation_prompts(memo.encoder, label, bool(retrieval),
                                     FLAGS.query_prompt, FLAGS.document_prompt)
        if reranker is not None:
            all_results[label], tables[label] = evaluate_reranked_tasks(
                memo, retrieval, reranker, FLAGS.rerank_top, prompts,
                run_files if i == 0 else None)
            continue
        all_results[label], tables[label] = evaluate_encoder(
            memo, FLAGS.data_dir, tasks, FLAGS.mode, FLAGS.skip_missing,
            run_files if i == 0 else None,  # --run_file: --model's (first variant's) run
            prompts, dims, quantizations, calibration,
            "--truncate_dim" if FLAGS.truncate_dim else "--dims")
    for label in all_results:
        if len(all_results) > 1:
            print(label)
        print(tables[label])
    if FLAGS.output_json:  # the results are kept before the plots are drawn
        fsio.write_file_atomic(FLAGS.output_json, json.dumps(
            next(iter(all_results.values())), indent=2, sort_keys=True))
    if FLAGS.plots_dir:
        plots.write_plots(encoders, FLAGS.data_dir, tasks, FLAGS.plots_dir)
    cli.print_next_steps(evaluation_next_steps(FLAGS.model, retrieval, FLAGS.rerank,
                                               FLAGS.output_json))


def _define_flags():
    """The command's flags (defined only when it runs as a command)."""
    cli.define_model_flags(what="Encoder to evaluate", savedmodel=True)
    flags.DEFINE_string("data_dir", "../shared/data", "SentEval data/downstream directory.")
    flags.DEFINE_string("tasks", "sts", "Comma-separated task names or groups (sts, "
                        "transfer), and retrieval tasks beir:DIR[:SPLIT] (split default test).")
    flags.DEFINE_enum("mode", "test", ["test", "fasttest"], "Transfer protocol: 10 or 5 folds.")
    flags.DEFINE_string("output_json", None, "Where to write the results (a new file, "
                        "unless --overwrite).")
    flags.DEFINE_bool("overwrite", False, "Replace an existing --output_json / --run_file "
                      "(never a file the evaluation reads).")
    flags.DEFINE_bool("skip_missing", False, "Skip (with a warning) tasks whose data folder "
                      "is absent, e.g. --tasks=sts on a copy without STS13-16.")
    flags.DEFINE_string("plots_dir", None, "Write diagnostic PNGs here (needs tfsent[plots]).")
    flags.DEFINE_string("compare_model", None, "A second model shown next to --model in the "
                        "plots (its table is printed too; --output_json holds --model's).")
    flags.DEFINE_string("compare_pooling", None, "Pooling of --compare_model (default: "
                        "--pooling).")
    flags.DEFINE_integer("truncate_dim", None, "Evaluate the first D dimensions (cut before "
                         "normalising; 0: all, not the model's own truncate_dim).")
    flags.DEFINE_string("dims", "", "Comma-separated sizes, largest first (e.g. "
                        "384,128,64,32): one table row per truncation.")
    flags.DEFINE_string("quantize", "", "Also evaluate quantized embeddings: int8, binary or "
                        "int8,binary, with their retention of the float figures.")
    flags.DEFINE_string("run_file", None, "Write the top 100 of each query of the beir: "
                        "tasks here (TREC run; JSON if it ends with .json); several beir "
                        "tasks: one file each, e.g. run.climate-fever.test.trec.")
    flags.DEFINE_string("calibration_file", None, "Sentences (one per line) whose embeddings "
                        "set the int8 ranges (not needed for an export made with "
                        "--quantize=int8).")
    define_rerank_flags()


if __name__ == "__main__":
    _define_flags()
    cli.start(main)
