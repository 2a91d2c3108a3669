"""Evaluates a sentence encoder with the SentEval / SimCSE protocol.

    python -m tfsent.evaluate --model=NAME_OR_DIR --pooling=mean --data_dir=DIR \
        --tasks=STS12,STSBenchmark,SICKRelatedness [--mode=test|fasttest] \
        [--output_json=FILE] [--plots_dir=DIR [--compare_model=NAME_OR_DIR]]

`--model` is anything `tfsent.encoders.load_encoder` takes (preset, checkpoint directory,
tfsent directory, `minilm-l6`) or an exported SavedModel directory (a version directory or
an export directory, whose newest version is used). Task names: STS12..STS16, STSBenchmark,
SICKRelatedness, MR, CR, SUBJ, MPQA, SST2, TREC, MRPC, and the groups `sts` and `transfer`.
Prints a table like the papers' (with Avg.) and writes JSON mapping each task to an object
whose "spearman" (x100) or "acc" is the reported figure.

Smaller and quantized embeddings (same tasks, one table each, and in the JSON each task
gets an object per variant with its "spearman"/"acc" and its "retention", the percentage of
the full float figure it keeps):
  --truncate_dim=64              evaluate the first 64 dimensions only (truncated before
                                 normalisation: a Matryoshka model)
  --dims=384,128,64,32           one row per size (the JSON's main figure is the first size)
  --quantize=int8,binary         also the int8 codes (cosine on the codes; ranges from
                                 --calibration_file, or the ones stored in an export made
                                 with --quantize=int8) and the packed sign bits (Hamming)

Retrieval tasks `beir:DIR[:SPLIT]` (a BEIR-layout folder: corpus.jsonl, queries.jsonl,
qrels/SPLIT.tsv; SPLIT defaults to test), beside the others or alone (then --data_dir is
not needed): exact cosine search of the split's queries over the whole corpus, reported as
nDCG@10 (the primary figure), MRR@10, Recall@10, Recall@100 and MAP@100, x100, with
trec_eval's definitions; results under the label `beir:<folder name>:<split>`, with every
query's figures under "per_query" in the JSON. The size and quantization variants apply
to them too (the search runs on the truncated / quantized vectors: cosine on int8 codes,
Hamming on the binary ones).
  --run_file=PATH                the top 100 of each query of --model (its first variant)
                                 as a TREC run (`qid Q0 docid rank score tag`), or as
                                 {qid: {docid: score}} JSON when PATH ends with .json; with
                                 several beir tasks one file per task, the folder name and
                                 split put before the extension (run.climate-fever.test.trec)
  --query_prompt, --document_prompt   text put before each query / document (E5: "query: ");
                                 without either, an exported SavedModel's own prompts
                                 (those it was trained and exported with) apply

`--plots_dir` (needs the `plots` extra, matplotlib) writes PNGs: per STS task a scatter
of gold score vs cosine (`sts_TASK.png`, one panel per model), a histogram of the cosines
of random sentence pairs (`random_pair_cosines.png`), and the alignment/uniformity plane
(`align_uniform.png`, STS-B test). `--compare_model` adds a second model to every picture
(and prints its table too), e.g. the pretrained encoder next to a trained export.
"""

import json
import os

import numpy as np
from absl import app, flags, logging

from tfsent import cli, fsio, plots
from tfsent.formats import quantize
from tfsent.errors import ConfigError
from tfsent.evaluation import (align_uniform, format_table, random_pair_cosines,
                               resolve_tasks, retrieval_table)
from tfsent.evaluation.retrieval import check_tasks, is_retrieval_task, run_file_paths
from tfsent.evaluation.runner import (MemoEncoder, TransformedEncoder,  # noqa: F401
                                      run_tasks, variant_table, variants, with_retention)
from tfsent.evaluation.sts import (STS_TASKS, _pair_cosines, _read_task, _task_path,
                                   correlations)
from tfsent.matryoshka import check_dims
from tfsent.serving import ServedQuantizedEncoder, load_any  # noqa: F401


def write_plots(encode_fns, data_dir, tasks, plots_dir, n_random_pairs=2000):
    """Writes the diagnostic PNGs for one or more models; returns the paths written.

    Args:
        encode_fns: dict label -> encode_fn (list of str -> array), in panel order.
        data_dir: SentEval `downstream` folder.
        tasks: task names; the STS ones present under data_dir get a scatter each.
        plots_dir: output folder.
    """
    plots.require_matplotlib()
    written = []
    sts = [t for t in tasks if t in STS_TASKS and os.path.isdir(_task_path(data_dir, t))]
    sentences = []
    for task in sts:
        subsets = _read_task(data_dir, task, "test")
        s1 = [s for a, _, _ in subsets.values() for s in a]
        s2 = [s for _, b, _ in subsets.values() for s in b]
        gold = np.concatenate([g for _, _, g in subsets.values()])
        cos = {label: _pair_cosines(fn, [(s1, s2)])[0] for label, fn in encode_fns.items()}
        rho = {label: correlations(c, gold)["spearman"] for label, c in cos.items()}
        written.append(plots.sts_scatter(os.path.join(plots_dir, f"sts_{task}.png"), task,
                                         gold, cos, rho))
        sentences += s1 + s2
    if sentences:
        sentences = list(dict.fromkeys(sentences))
        cos = {label: random_pair_cosines(fn(sentences), n_random_pairs)
               for label, fn in encode_fns.items()}
        written.append(plots.cosine_histogram(
            os.path.join(plots_dir, "random_pair_cosines.png"), cos,
            title=f"cosine of {n_random_pairs} random pairs of STS test sentences"))
    if os.path.isdir(_task_path(data_dir, "STSBenchmark")):
        points = {label: align_uniform(fn, data_dir) for label, fn in encode_fns.items()}
        written.append(plots.align_uniform_plot(os.path.join(plots_dir, "align_uniform.png"),
                                                points))
    else:
        logging.warning("no STSBenchmark under %s: skipping the alignment/uniformity plot",
                        data_dir)
    if not written:
        logging.warning("no STS task data under %s: no plot written", data_dir)
    for path in written:
        logging.info("wrote %s", path)
    return written


def _label(model):
    """A short name for a model in plots: RUN for RUN/export or RUN/export/3."""
    parts = os.path.normpath(model).split(os.sep)
    while len(parts) > 1 and (parts[-1].isdigit() or parts[-1] in ("export", "encoder")):
        parts.pop()
    return parts[-1] or model


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
    run_files = _run_file_flags(retrieval)
    if FLAGS.plots_dir:
        plots.require_matplotlib()  # fail before any encoding when the extra is missing
    if len(retrieval) < len(tasks) and not os.path.isdir(FLAGS.data_dir):
        raise ConfigError(f"--data_dir={FLAGS.data_dir} is not a folder (the SentEval "
                          f"data/downstream folder; tools/download_data.py fetches it)")
    dims, quantizations, calibration = _variant_flags()
    if FLAGS.output_json:
        fsio.check_new_file(FLAGS.output_json, "--output_json", overwrite=True,
                            inputs=[FLAGS.model, FLAGS.compare_model])
    models = [FLAGS.model] + ([FLAGS.compare_model] if FLAGS.compare_model else [])
    encoders = {}
    for i, name in enumerate(models):
        pooling = FLAGS.compare_pooling if i and FLAGS.compare_pooling else FLAGS.pooling
        label = _label(name) if _label(name) not in encoders else f"{_label(name)} ({i})"
        encoders[label] = MemoEncoder(load_any(name, pooling, FLAGS.max_seq_length),
                                      FLAGS.batch_size)
    all_results, tables = {}, {}
    for i, (label, enc) in enumerate(encoders.items()):
        prompts = _prompts(enc.encoder, label, bool(retrieval))
        runs = run_files if i == 0 else None  # --run_file: --model's (first variant's) run
        if dims == (None,) and not quantizations:
            all_results[label] = _checked(run_tasks(enc, FLAGS.data_dir, tasks, FLAGS.mode,
                                                    skip_missing=FLAGS.skip_missing,
                                                    run_files=runs, **prompts))
            continue
        if dims != (None,):  # now that the width is known
            width = getattr(enc.encoder, "embedding_dim", None) or enc.encoder.hidden_dim
            check_dims(dims, width, "--truncate_dim" if FLAGS.truncate_dim else "--dims")
        by_variant = {
            name: _checked(run_tasks(MemoEncoder(variant, FLAGS.batch_size), FLAGS.data_dir,
                                     tasks, FLAGS.mode, skip_missing=FLAGS.skip_missing,
                                     run_files=runs if j == 0 else None, **prompts))
            for j, (name, variant) in enumerate(
                variants(enc, dims, quantizations, calibration).items())}
        tables[label] = variant_table(by_variant)
        if retrieval:
            tables[label] += "\n\n" + retrieval_table({
                f"{task} {name}": res[task] for name, res in by_variant.items()
                for task in res if is_retrieval_task(task)})
        all_results[label] = with_retention(by_variant)
    if FLAGS.plots_dir:
        write_plots(encoders, FLAGS.data_dir, tasks, FLAGS.plots_dir)
    for label, res in all_results.items():
        if len(all_results) > 1:
            print(label)
        print(tables[label] if label in tables else format_table(res))
    results = next(iter(all_results.values()))
    if FLAGS.output_json:
        fsio.write_file_atomic(FLAGS.output_json,
                               json.dumps(results, indent=2, sort_keys=True))


def _checked(results):
    """`results`, or a ConfigError when --skip_missing skipped every task (a wrong
    --data_dir would otherwise report nothing and exit 0)."""
    if not results:
        raise ConfigError(f"no task could be run: none of --tasks={flags.FLAGS.tasks} has "
                          f"its data under --data_dir={flags.FLAGS.data_dir}")
    return results


def _run_file_flags(retrieval):
    """{task label: path} of --run_file (empty without it), checked before any model is
    loaded: it needs a beir: task, its folder must exist, it is never an input."""
    FLAGS = flags.FLAGS
    if not FLAGS.run_file:
        return {}
    if not retrieval:
        raise ConfigError("--run_file writes a retrieval run: give a beir:DIR[:SPLIT] task "
                          "in --tasks")
    paths = run_file_paths(FLAGS.run_file, retrieval)
    inputs = [FLAGS.model, FLAGS.compare_model] + [
        os.path.join(t.directory, name) for t in retrieval
        for name in ("corpus.jsonl", "queries.jsonl", os.path.join("qrels", f"{t.split}.tsv"))]
    for path in paths.values():
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise ConfigError(f"--run_file={FLAGS.run_file}: the folder {folder} does not "
                              f"exist")
        fsio.check_new_file(path, "--run_file", overwrite=True, inputs=inputs)
        if FLAGS.output_json and os.path.abspath(path) == os.path.abspath(FLAGS.output_json):
            raise ConfigError(f"--run_file and --output_json both name {path}")
    return paths


def _prompts(encoder, label, retrieval):
    """The retrieval prompts of one model: --query_prompt / --document_prompt when either is
    given (an empty value included), else those an export was written with (logged)."""
    given = flags.FLAGS
    if given["query_prompt"].present or given["document_prompt"].present:
        return {"query_prompt": given.query_prompt, "document_prompt": given.document_prompt}
    stored = getattr(encoder, "prompts", None) or {}
    if retrieval and any(stored.values()):
        logging.info("%s: using the prompts it was exported with (query %r, document %r); "
                     "--query_prompt= --document_prompt= evaluates without them", label,
                     stored["query_prompt"], stored["document_prompt"])
        return dict(stored)
    return {"query_prompt": "", "document_prompt": ""}


def _variant_flags():
    """(dims, quantizations, calibration sentences or None) from --truncate_dim, --dims,
    --quantize and --calibration_file, checked before any model is loaded."""
    FLAGS = flags.FLAGS
    if FLAGS.truncate_dim is not None and FLAGS.dims:
        raise ConfigError("give --truncate_dim (one size) or --dims (a table over sizes), "
                          "not both")
    dims = (None,)
    if FLAGS.truncate_dim is not None:
        dims = check_dims([FLAGS.truncate_dim], None, "--truncate_dim")
    elif FLAGS.dims:
        dims = check_dims(FLAGS.dims, None, "--dims")
    quantizations = quantize.parse_quantize(FLAGS.quantize)
    if FLAGS.calibration_file and "int8" not in quantizations:
        raise ConfigError("--calibration_file sets the int8 ranges: use it with "
                          "--quantize=int8")
    calibration = (quantize.read_calibration_sentences(FLAGS.calibration_file)
                   if FLAGS.calibration_file else None)
    return dims, quantizations, calibration


def _define_flags():
    """The command's flags (defined only when it runs as a command)."""
    flags.DEFINE_string("model", "minilm-l6", "Encoder name/dir or exported SavedModel dir.")
    flags.DEFINE_string("pooling", "mean", "Pooling (ignored for SavedModels: they carry theirs).")
    flags.DEFINE_integer("max_seq_length", 512, "Tokenizer truncation length.")
    flags.DEFINE_string("data_dir", "../shared/data", "SentEval data/downstream directory.")
    flags.DEFINE_string("tasks", "sts", "Comma-separated task names or groups (sts, "
                        "transfer), and retrieval tasks beir:DIR[:SPLIT] (split default test).")
    flags.DEFINE_enum("mode", "test", ["test", "fasttest"], "Transfer protocol: 10 or 5 folds.")
    flags.DEFINE_integer("batch_size", 64, "Encoding batch size.")
    flags.DEFINE_string("output_json", None, "Where to write the results.")
    flags.DEFINE_bool("skip_missing", False, "Skip (with a warning) tasks whose data folder "
                      "is absent, e.g. --tasks=sts on a copy without STS13-16.")
    flags.DEFINE_string("plots_dir", None, "Write diagnostic PNGs here (needs tfsent[plots]).")
    flags.DEFINE_string("compare_model", None, "A second model shown next to --model in the "
                        "plots (its table is printed too; --output_json holds --model's).")
    flags.DEFINE_string("compare_pooling", None, "Pooling of --compare_model (default: "
                        "--pooling).")
    flags.DEFINE_integer("truncate_dim", None, "Evaluate the first D dimensions of the "
                         "embedding (truncated before normalisation).")
    flags.DEFINE_string("dims", "", "Comma-separated sizes, largest first (e.g. "
                        "384,128,64,32): one table row per truncation.")
    flags.DEFINE_string("quantize", "", "Also evaluate quantized embeddings: int8, binary or "
                        "int8,binary, with their retention of the float figures.")
    flags.DEFINE_string("run_file", None, "Write the top 100 of each query of the beir: "
                        "tasks here (TREC run; JSON if it ends with .json); several beir "
                        "tasks: one file each, e.g. run.climate-fever.test.trec.")
    flags.DEFINE_string("query_prompt", "", "Text put before each retrieval query.")
    flags.DEFINE_string("document_prompt", "", "Text put before each retrieval document.")
    flags.DEFINE_string("calibration_file", None, "Sentences (one per line) whose embeddings "
                        "set the int8 ranges (not needed for an export made with "
                        "--quantize=int8).")


if __name__ == "__main__":
    _define_flags()
    app.run(main)
