"""Running evaluation tasks on any encoder, with memoised embeddings and size /
quantization variants (the library behind `python -m tfsent.evaluate` and the run's
`test_tasks`).

`run_tasks` runs STS, transfer and retrieval (`beir:DIR[:SPLIT]`) tasks on anything with
`encode(sentences, batch_size, normalize, max_seq_length)`; `MemoEncoder` embeds each
distinct sentence once across tasks; `variants` gives an encoder's truncated and quantized
versions, `with_retention` and `variant_table` compare them with the float figures.
`evaluate_encoder` is one model's whole evaluation (tasks, variants, the printed table);
`parse_variants`, `check_run_files`, `evaluation_prompts` and `model_label` turn the
command's settings into its arguments.
"""

import math
import os

import numpy as np
from absl import logging

from tfsent import fsio
from tfsent.formats import quantize
from tfsent.data import beir
from tfsent.errors import ConfigError
from tfsent.evaluation import (TRANSFER_TASKS, format_table, resolve_tasks, retrieval_table,
                               score, short_name)
from tfsent.evaluation.retrieval import (check_tasks, encode_kwargs, evaluate_retrieval,
                                         is_retrieval_task, run_file_paths)
from tfsent.matryoshka import FULL_DIM, check_dims
from tfsent.evaluation.sts import evaluate_sts
from tfsent.evaluation.transfer import evaluate_transfer
from tfsent.serving import SavedModelEncoder, ServedQuantizedEncoder, resolve_savedmodel_dir


class MemoEncoder:
    """Wraps an encoder so each distinct sentence is embedded once across tasks and plots.
    `truncate_dim` goes to the encoder's `encode` when set (0: the whole embedding, not
    the size the model declares for itself; `full_width_for`)."""

    def __init__(self, encoder, batch_size=64, max_seq_length=None, truncate_dim=None):
        self.encoder = encoder
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.truncate_dim = truncate_dim
        self.memo = {}

    def __call__(self, sentences, verbose=None):
        """list of str -> float array (N, D), unnormalised (`verbose` goes to the wrapped
        encoder when it takes one)."""
        missing = [s for s in dict.fromkeys(sentences) if s not in self.memo]
        if missing:
            size = {} if self.truncate_dim is None else {"truncate_dim": self.truncate_dim}
            emb = self.encoder.encode(missing, batch_size=self.batch_size, normalize=False,
                                      max_seq_length=self.max_seq_length,
                                      **encode_kwargs(self.encoder, verbose), **size)
            self.memo.update(zip(missing, emb))
        return np.stack([self.memo[s] for s in sentences])

    def encode(self, sentences, batch_size=None, normalize=False, max_seq_length=None,
               verbose=None):
        """The `encode` signature of SentenceEncoder (batch size and length are fixed)."""
        del batch_size, max_seq_length
        emb = self(list(sentences), verbose)
        if normalize:
            emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
        return emb


class TransformedEncoder:
    """The `encode` of another encoder's float embeddings passed through `transform`
    (array -> array): truncation, quantization."""

    def __init__(self, base, transform):
        self.base = base
        self.transform = transform

    def encode(self, sentences, batch_size=64, normalize=False, max_seq_length=None,
               verbose=None):
        """`transform` of the base encoder's unnormalised embeddings."""
        emb = self.base.encode(sentences, batch_size=batch_size, normalize=False,
                               max_seq_length=max_seq_length,
                               **encode_kwargs(self.base, verbose))
        return self.transform(emb)


def variants(memo, dims=(None,), quantizations=(), calibration=None):
    """{label: encoder} of `memo`'s embeddings at each size in `dims` (None: the full
    width) and each quantization ("" label suffix: float). Labels: "float", "int8",
    "dim_64", "dim_64/int8", ... `calibration` is a list of sentences for int8 ranges;
    None uses the ranges stored in an exported SavedModel (memo.encoder)."""
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
    if "/" in label:
        return label.split("/")[0]
    return "float" if label in quantize.QUANTIZATIONS else label


def with_retention(results_by_variant):
    """{variant: {task: result}} -> {task: {**the first variant's result, variant: {its
    result, "retention"}}}; retention is 100 x the variant's figure over the figure of
    the float variant of the same size (100 for a float variant)."""
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


def run_tasks(encoder, data_dir, tasks, mode="test", batch_size=64, max_seq_length=None,
              skip_missing=False, run_files=None, query_prompt="", document_prompt=""):
    """Runs the named tasks; returns {task: {...}} with "spearman" or "acc" per task, and
    for each retrieval task `beir:DIR[:SPLIT]` (never skipped: its folder is named
    explicitly) its measures under the label `beir:<folder name>:<split>`
    (`tfsent.evaluation.retrieval`). `run_files` ({label: path}) writes those tasks' runs;
    `query_prompt` / `document_prompt` are put before their queries / documents."""
    names = resolve_tasks(tasks) if isinstance(tasks, str) else list(tasks)

    encode_fn = encoder if isinstance(encoder, MemoEncoder) else MemoEncoder(
        encoder, batch_size, max_seq_length)
    results = {}
    retrieval = check_tasks(names)
    sts = [t for t in names if t not in TRANSFER_TASKS and not is_retrieval_task(t)]
    transfer = [t for t in names if t in TRANSFER_TASKS]
    if sts:
        results.update(evaluate_sts(encode_fn, data_dir, sts, skip_missing=skip_missing))
    if transfer:
        results.update(evaluate_transfer(encode_fn, data_dir, transfer, mode=mode,
                                         skip_missing=skip_missing))
    for task in retrieval:
        split = beir.read_split(task.directory, task.split)
        results[task.label] = evaluate_retrieval(
            encode_fn, split, batch_size=encode_fn.batch_size,
            max_seq_length=encode_fn.max_seq_length, query_prompt=query_prompt,
            document_prompt=document_prompt, run_file=(run_files or {}).get(task.label))
    return results


def evaluate_encoder(memo, data_dir, tasks, mode="test", skip_missing=False, run_files=None,
                     prompts=None, dims=(None,), quantizations=(), calibration=None,
                     dims_flag="--dims"):
    """(results, text table) of one model (a `MemoEncoder`) on `tasks`: {task: result} as
    `run_tasks` gives it, or with `dims` / `quantizations` (see `variants`) every variant's
    figures merged by `with_retention`, the table one row per variant. `run_files` are
    written for the first variant; `prompts`: {"query_prompt", "document_prompt"}.
    ConfigError when `skip_missing` left no task to run (a wrong data_dir would otherwise
    report nothing), or when a size in `dims` (named `dims_flag`) exceeds the width."""
    def run(encoder, runs):
        results = run_tasks(encoder, data_dir, tasks, mode, skip_missing=skip_missing,
                            run_files=runs, **(prompts or {}))
        if not results:
            raise ConfigError(f"no task could be run: none of --tasks={','.join(tasks)} has "
                              f"its data under --data_dir={data_dir}")
        return results

    own = getattr(memo.encoder, "truncate_dim", None)
    if own and memo.truncate_dim is None:
        logging.info("evaluating the first %d dimensions, the model's own truncate_dim "
                     "(--truncate_dim=0: all of them)", own)
    if dims == (None,) and not quantizations:
        results = run(memo, run_files)
        return results, format_table(results)
    if dims != (None,):  # now that the width is known
        width = getattr(memo.encoder, "embedding_dim", None) or memo.encoder.hidden_dim
        check_dims(dims, width, dims_flag)
    by_variant = {
        name: run(MemoEncoder(variant, memo.batch_size), run_files if j == 0 else None)
        for j, (name, variant) in enumerate(
            variants(memo, dims, quantizations, calibration).items())}
    table = variant_table(by_variant)
    retrieval = {f"{task} {name}": res[task] for name, res in by_variant.items()
                 for task in res if is_retrieval_task(task)}
    if retrieval:
        table += "\n\n" + retrieval_table(retrieval)
    return with_retention(by_variant), table


def full_width_for(truncate_dim=None, dims=""):
    """The `truncate_dim` a MemoEncoder passes to the model's `encode`: 0 (the whole
    embedding) when evaluate's --truncate_dim or --dims name sizes of it, so that a model
    with a truncate_dim of its own is cut where the flags say; None (its own size) else."""
    return FULL_DIM if truncate_dim is not None or dims else None


def parse_variants(truncate_dim=None, dims="", quantizations="", calibration_file=None):
    """(dims, quantizations, calibration sentences or None) of evaluate's --truncate_dim
    (one size; 0: the whole embedding), --dims (a table over sizes), --quantize and
    --calibration_file, checked (ConfigError) before any model is loaded. dims (None,):
    the full width only (the model's own truncate_dim unless --truncate_dim=0)."""
    if truncate_dim is not None and dims:
        raise ConfigError("give --truncate_dim (one size) or --dims (a table over sizes), "
                          "not both")
    sizes = (None,)
    if truncate_dim is not None and truncate_dim != FULL_DIM:
        sizes = check_dims([truncate_dim], None, "--truncate_dim")
    elif dims:
        sizes = check_dims(dims, None, "--dims")
    kinds = quantize.parse_quantize(quantizations)
    if calibration_file and "int8" not in kinds:
        raise ConfigError("--calibration_file sets the int8 ranges: use it with "
                          "--quantize=int8")
    calibration = (quantize.read_calibration_sentences(calibration_file)
                   if calibration_file else None)
    return sizes, kinds, calibration


def check_run_files(run_file, retrieval, inputs=(), output_json=None, overwrite=False,
                    input_dirs=()):
    """{task label: path} of --run_file (empty without it) for the RetrievalTasks
    `retrieval`, checked before any model is loaded: it needs a beir: task, its folder must
    exist, it is never a folder, one of `inputs` (models, files read), a file of the
    tasks' folders or of `input_dirs`, nor `output_json`; an existing file only with
    `overwrite`."""
    if not run_file:
        return {}
    if not retrieval:
        raise ConfigError("--run_file writes a retrieval run: give a beir:DIR[:SPLIT] task "
                          "in --tasks")
    paths = run_file_paths(run_file, retrieval)
    input_dirs = list(input_dirs) + [t.directory for t in retrieval]
    for path in paths.values():
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise ConfigError(f"--run_file={run_file}: the folder {folder} does not exist")
        fsio.check_new_file(path, "--run_file", overwrite=overwrite, inputs=inputs,
                            input_dirs=input_dirs)
        if output_json and os.path.abspath(path) == os.path.abspath(output_json):
            raise ConfigError(f"--run_file and --output_json both name {path}")
    return paths


def check_evaluation_files(output_json, run_file, overwrite, models, calibration_file,
                           data_dir, tasks, retrieval):
    """The files of an evaluation checked before any model loads; returns
    `check_run_files`' {task label: path}. `data_dir` must be a folder when a SentEval
    task runs. No output replaces what the evaluation reads (the `models` paths,
    `calibration_file`, a file of a BEIR task folder or, when a SentEval task runs, of
    `data_dir`), names a folder, or (without `overwrite`) an existing file."""
    inputs = [m for m in models if m] + ([calibration_file] if calibration_file else [])
    input_dirs = [t.directory for t in retrieval] + (
        [data_dir] if len(retrieval) < len(tasks) else [])
    run_files = check_run_files(run_file, retrieval, inputs, output_json, overwrite,
                                input_dirs)
    if len(retrieval) < len(tasks) and not os.path.isdir(data_dir):
        raise ConfigError(f"--data_dir={data_dir} is not a folder (the SentEval "
                          f"data/downstream folder; tools/download_data.py fetches it)")
    if output_json:
        fsio.check_new_file(output_json, "--output_json", overwrite=overwrite, inputs=inputs,
                            input_dirs=input_dirs)
    return run_files


def evaluation_prompts(encoder, label, retrieval, query_prompt=None, document_prompt=None):
    """The retrieval prompts of one model: the given ones when either is given (an empty
    string included; None: not given), else those an export was written with (logged when
    `retrieval` tasks use them), else none."""
    if query_prompt is not None or document_prompt is not None:
        return {"query_prompt": query_prompt or "", "document_prompt": document_prompt or ""}
    stored = getattr(encoder, "prompts", None) or {}
    if retrieval and any(stored.values()):
        logging.info("%s: using the prompts it was exported with (query %r, document %r); "
                     "--query_prompt= --document_prompt= evaluates without them", label,
                     stored["query_prompt"], stored["document_prompt"])
        return dict(stored)
    return {"query_prompt": "", "document_prompt": ""}


def model_label(model):
    """A short name for a model in tables and plots: RUN for RUN/export or RUN/export/3."""
    parts = os.path.normpath(model).split(os.sep)
    while len(parts) > 1 and (parts[-1].isdigit() or parts[-1] in ("export", "encoder")):
        parts.pop()
    return parts[-1] or model


def evaluation_next_steps(model, retrieval, rerank=None, output_json=None):
    """The "next:" lines `python -m tfsent.evaluate` ends with: for beir: tasks, reranking
    the top 100 (without --rerank) and indexing the corpus for search (a model that is not
    an export: `tfsent.index` embeds with an encoder); keeping the figures
    (without --output_json)."""
    lines = []
    for task in retrieval[:1]:
        if not rerank:
            lines.append("  rerank:   the same command with --rerank=CROSS_ENCODER_EXPORT "
                         "--rerank_top=100 (docs/search.md, reranking)")
        if not (os.path.isdir(model) and resolve_savedmodel_dir(model) is not None):
            lines.append(f"  index:    python -m tfsent.index --model={model} "
                         f"--corpus={task.directory} --export_dir=exports/search")
    if not output_json:
        lines.append("  keep:     the same command with --output_json=results.json")
    return ["next:", *lines] if lines else []
