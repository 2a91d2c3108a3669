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

`--plots_dir` (needs the `plots` extra, matplotlib) writes PNGs: per STS task a scatter
of gold score vs cosine (`sts_TASK.png`, one panel per model), a histogram of the cosines
of random sentence pairs (`random_pair_cosines.png`), and the alignment/uniformity plane
(`align_uniform.png`, STS-B test). `--compare_model` adds a second model to every picture
(and prints its table too), e.g. the pretrained encoder next to a trained export.
"""

import json
import os
import sys

from absl import app, flags, logging

from tfsent.errors import ConfigError


def load_any(model, pooling="mean", max_seq_length=512):
    """An object with `.encode(sentences, batch_size, normalize)`: a SentenceEncoder or an
    exported SavedModel."""
    from tfsent.encoders import load_encoder
    from tfsent.export import SavedModelEncoder, resolve_savedmodel_dir

    if os.path.isdir(model) and resolve_savedmodel_dir(model) is not None:
        return SavedModelEncoder(model)
    return load_encoder(model, pooling=pooling, max_seq_length=max_seq_length,
                        pad_to_max_length=False)


class MemoEncoder:
    """Wraps an encoder so each distinct sentence is embedded once across tasks and plots."""

    def __init__(self, encoder, batch_size=64, max_seq_length=None):
        self.encoder = encoder
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.memo = {}

    def __call__(self, sentences):
        """list of str -> float array (N, D), unnormalised."""
        import numpy as np

        missing = [s for s in dict.fromkeys(sentences) if s not in self.memo]
        if missing:
            emb = self.encoder.encode(missing, batch_size=self.batch_size, normalize=False,
                                      max_seq_length=self.max_seq_length)
            self.memo.update(zip(missing, emb))
        return np.stack([self.memo[s] for s in sentences])

    def encode(self, sentences, batch_size=None, normalize=False, max_seq_length=None):
        """The `encode` signature of SentenceEncoder (batch size and length are fixed)."""
        del batch_size, max_seq_length
        emb = self(list(sentences))
        if normalize:
            import numpy as np
            emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
        return emb


class TransformedEncoder:
    """The `encode` of another encoder's float embeddings passed through `transform`
    (array -> array): truncation, quantization."""

    def __init__(self, base, transform):
        self.base = base
        self.transform = transform

    def encode(self, sentences, batch_size=64, normalize=False, max_seq_length=None):
        """`transform` of the base encoder's unnormalised embeddings."""
        emb = self.base.encode(sentences, batch_size=batch_size, normalize=False,
                               max_seq_length=max_seq_length)
        return self.transform(emb)


class ServedQuantizedEncoder:
    """`encode` returning an export's own quantized codes as float vectors whose cosine is
    the quantized similarity (int8 codes as numbers, binary bits as +-1)."""

    def __init__(self, saved_model_encoder, quantization):
        self.model = saved_model_encoder
        self.quantization = quantization

    def encode(self, sentences, batch_size=64, normalize=False, max_seq_length=None):
        """Float (N, D) vectors of the export's `embedding_<quantization>` codes."""
        import numpy as np

        from tfsent.quantize import binary_as_signs

        del normalize, max_seq_length
        codes = self.model.encode_quantized(sentences, self.quantization, batch_size)
        if self.quantization == "binary":
            return binary_as_signs(codes, self.model.embedding_dim)
        return codes.astype(np.float32)


def variants(memo, dims=(None,), quantizations=(), calibration=None):
    """{label: encoder} of `memo`'s embeddings at each size in `dims` (None: the full
    width) and each quantization ("" label suffix: float). Labels: "float", "int8",
    "dim_64", "dim_64/int8", ... `calibration` is a list of sentences for int8 ranges;
    None uses the ranges stored in an exported SavedModel (memo.encoder)."""
    from tfsent import quantize
    from tfsent.export import SavedModelEncoder

    out = {}
    for dim in dims:
        def cut(emb, dim=dim):
            return emb if dim is None else emb[:, :dim]

        prefix = "" if dim is None else f"dim_{dim}"
        out[prefix or "float"] = TransformedEncoder(memo, cut)
        for q in quantizations:
            label = f"{prefix}/{q}" if prefix else q
            if q == "int8" and calibration is None:
                if not isinstance(memo.encoder, SavedModelEncoder) or \
                        "int8" not in memo.encoder.quantized_outputs:
                    raise ConfigError("--quantize=int8 needs --calibration_file (or an export "
                                      "made with --quantize=int8, whose ranges are used)")
                if dim is not None:
                    raise ConfigError("an export's int8 ranges are for its full width; give "
                                      "--calibration_file to evaluate int8 at other sizes")
                out[label] = ServedQuantizedEncoder(memo.encoder, "int8")
                continue
            ranges = None
            if q == "int8":
                ranges = quantize.calibrate_int8(cut(memo(calibration)))

            def quantized(emb, q=q, ranges=ranges, cut=cut):
                return quantize.quantized_for_similarity(cut(emb), q, ranges)

            out[label] = TransformedEncoder(memo, quantized)
    return out


def _float_label(label):
    """The float variant a quantized one is compared with: "dim_64/int8" -> "dim_64",
    "int8" -> "float"; a float variant is its own."""
    from tfsent.quantize import QUANTIZATIONS

    if "/" in label:
        return label.split("/")[0]
    return "float" if label in QUANTIZATIONS else label


def with_retention(results_by_variant):
    """{variant: {task: result}} -> {task: {**the first variant's result, variant: {its
    result, "retention"}}}; retention is 100 x the variant's figure over the figure of
    the float variant of the same size (100 for a float variant)."""
    from tfsent.evaluation import score

    labels = list(results_by_variant)
    merged = {}
    for task, result in results_by_variant[labels[0]].items():
        merged[task] = dict(result)
        for label in labels:
            res = dict(results_by_variant[label][task])
            base = score(results_by_variant[_float_label(label)][task])
            res["retention"] = 100.0 * score(res) / base if base else float("nan")
            merged[task][label] = res
    return merged


def variant_table(results_by_variant):
    """Text table, one row per variant: each task's figure and the Avg.; a quantized row
    is followed by its retention (% of the float row of the same size)."""
    import math

    from tfsent.evaluation import score, short_name

    labels = list(results_by_variant)
    tasks = list(results_by_variant[labels[0]])
    rows = [["", *(short_name(t) for t in tasks), "Avg."]]
    for label in labels:
        figures = [score(results_by_variant[label][t]) for t in tasks]
        rows.append([label, *figures, sum(figures) / len(figures)])
        if _float_label(label) != label:
            base = [score(results_by_variant[_float_label(label)][t]) for t in tasks]
            kept = [100.0 * f / b if b else float("nan") for f, b in zip(figures, base)]
            rows.append(["  retention %", *kept, 100.0 * sum(figures) / sum(base)])
    text = [[c if isinstance(c, str) else ("nan" if math.isnan(c) else f"{c:.2f}")
             for c in row] for row in rows]
    widths = [max(len(row[i]) for row in text) for i in range(len(text[0]))]
    return "\n".join(" | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                 for i, (c, w) in enumerate(zip(row, widths)))
                      for row in text)


def write_plots(encode_fns, data_dir, tasks, plots_dir, n_random_pairs=2000):
    """Writes the diagnostic PNGs for one or more models; returns the paths written.

    Args:
        encode_fns: dict label -> encode_fn (list of str -> array), in panel order.
        data_dir: SentEval `downstream` folder.
        tasks: task names; the STS ones present under data_dir get a scatter each.
        plots_dir: output folder.
    """
    import numpy as np

    from tfsent import plots
    from tfsent.evaluation import align_uniform, random_pair_cosines
    from tfsent.evaluation.sts import STS_TASKS, _pair_cosines, _read_task, _task_path
    from tfsent.evaluation.sts import correlations

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


def run_tasks(encoder, data_dir, tasks, mode="test", batch_size=64, max_seq_length=None,
              skip_missing=False):
    """Runs the named tasks; returns {task: {...}} with "spearman" or "acc" per task."""
    from tfsent.evaluation import TRANSFER_TASKS, resolve_tasks
    from tfsent.evaluation.sts import evaluate_sts
    from tfsent.evaluation.transfer import evaluate_transfer

    names = resolve_tasks(tasks) if isinstance(tasks, str) else list(tasks)

    encode_fn = encoder if isinstance(encoder, MemoEncoder) else MemoEncoder(
        encoder, batch_size, max_seq_length)
    results = {}
    sts = [t for t in names if t not in TRANSFER_TASKS]
    transfer = [t for t in names if t in TRANSFER_TASKS]
    if sts:
        results.update(evaluate_sts(encode_fn, data_dir, sts, skip_missing=skip_missing))
    if transfer:
        results.update(evaluate_transfer(encode_fn, data_dir, transfer, mode=mode,
                                         skip_missing=skip_missing))
    return results


def main(argv):
    """CLI entry point."""
    del argv
    from tfsent.errors import TfsentError
    from tfsent.evaluation import format_table
    from tfsent.matryoshka import check_dims

    FLAGS = flags.FLAGS
    try:
        if FLAGS.plots_dir:
            from tfsent.plots import require_matplotlib
            require_matplotlib()  # fail before any encoding when the extra is missing
        models = [FLAGS.model] + ([FLAGS.compare_model] if FLAGS.compare_model else [])
        encoders = {}
        for i, name in enumerate(models):
            pooling = FLAGS.compare_pooling if i and FLAGS.compare_pooling else FLAGS.pooling
            label = _label(name) if _label(name) not in encoders else f"{_label(name)} ({i})"
            encoders[label] = MemoEncoder(load_any(name, pooling, FLAGS.max_seq_length),
                                          FLAGS.batch_size)
        dims, quantizations, calibration = _variant_flags()
        all_results, tables = {}, {}
        for label, enc in encoders.items():
            if dims == (None,) and not quantizations:
                all_results[label] = run_tasks(enc, FLAGS.data_dir, FLAGS.tasks, FLAGS.mode,
                                               skip_missing=FLAGS.skip_missing)
                continue
            if dims != (None,):  # now that the width is known
                width = getattr(enc.encoder, "embedding_dim", None) or enc.encoder.hidden_dim
                check_dims(dims, width, "--truncate_dim" if FLAGS.truncate_dim else "--dims")
            by_variant = {
                name: run_tasks(MemoEncoder(variant, FLAGS.batch_size), FLAGS.data_dir,
                                FLAGS.tasks, FLAGS.mode, skip_missing=FLAGS.skip_missing)
                for name, variant in variants(enc, dims, quantizations, calibration).items()}
            tables[label] = variant_table(by_variant)
            all_results[label] = with_retention(by_variant)
        if FLAGS.plots_dir:
            from tfsent.evaluation import resolve_tasks
            write_plots(encoders, FLAGS.data_dir, resolve_tasks(FLAGS.tasks), FLAGS.plots_dir)
    except TfsentError as e:
        logging.error("%s", e)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    for label, res in all_results.items():
        if len(all_results) > 1:
            print(label)
        print(tables[label] if label in tables else format_table(res))
    results = next(iter(all_results.values()))
    if FLAGS.output_json:
        tmp = FLAGS.output_json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f, indent=2, sort_keys=True)
        os.replace(tmp, FLAGS.output_json)


def _variant_flags():
    """(dims, quantizations, calibration sentences or None) from --truncate_dim, --dims,
    --quantize and --calibration_file, checked before any model is loaded."""
    from tfsent import quantize
    from tfsent.matryoshka import check_dims

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


if __name__ == "__main__":
    flags.DEFINE_string("model", "minilm-l6", "Encoder name/dir or exported SavedModel dir.")
    flags.DEFINE_string("pooling", "mean", "Pooling (ignored for SavedModels: they carry theirs).")
    flags.DEFINE_integer("max_seq_length", 512, "Tokenizer truncation length.")
    flags.DEFINE_string("data_dir", "../shared/data", "SentEval data/downstream directory.")
    flags.DEFINE_string("tasks", "sts", "Comma-separated task names or groups (sts, transfer).")
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
    flags.DEFINE_string("calibration_file", None, "Sentences (one per line) whose embeddings "
                        "set the int8 ranges (not needed for an export made with "
                        "--quantize=int8).")
    app.run(main)
