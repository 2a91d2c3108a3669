"""Retrieval measures before and after a cross-encoder reranks a retriever's top hits: the
library behind `python -m tfsent.evaluate --rerank=CE --rerank_top=N` (docs/search.md,
"Reranking with a cross-encoder").

`check_rerank` refuses bad settings before any model is loaded; `check_retriever` refuses
a cross-encoder where a bi-encoder is expected; `load_reranker` opens a cross-encoder
export (or a CrossEncoder `.keras` file); `evaluate_reranked` scores one BEIR split before
and after, `evaluate_reranked_tasks` every task of a command with its printed table.
"""

import json
import os
import time

import keras
from absl import flags, logging

from tfsent.errors import ConfigError, InputError
from tfsent.evaluation import retrieval_table
from tfsent.evaluation.retrieval import (RUN_DEPTH, Ranking, evaluate_ranking,
                                         is_retrieval_task, rerank, search_split, write_run)
from tfsent.data import beir
from tfsent.data.textio import open_bytes
from tfsent.formats.metadata import export_format, read_metadata
from tfsent.encoders import families
from tfsent.encoders.pair_prompts import PROMPT_NAMES, get_prompt
from tfsent.formats.model_paths import (check_bi_encoder, check_cross_encoder,
                                        cross_encoder_kind, json_object,
                                        keras_class_name)
from tfsent.serving import ServedCrossEncoder

RERANKED = "reranked"  # the key of the reranked measures inside a task's result
CROSS_ENCODER_FORMAT = "cross_encoder"  # the export format whose metadata marks one


def define_reranker_flags(name, what, flag_values=None):
    """Defines --NAME (a cross-encoder that `load_reranker` opens; `what` it does) and
    --NAME_prompt, --NAME_instruction, --NAME_max_seq_length (for a checkpoint folder)."""
    fv = {"flag_values": flags.FLAGS if flag_values is None else flag_values}
    flags.DEFINE_string(name, None, "A cross-encoder (its SavedModel export folder, its "
                        "training run's folder, a CrossEncoder .keras file or a Hugging Face "
                        f"reranker checkpoint folder) {what}", **fv)
    flags.DEFINE_enum(f"{name}_prompt", "", ["", *PROMPT_NAMES], "A checkpoint folder's "
                      "prompt: qwen3_reranker for a Qwen3-Reranker (a causal LM answering "
                      "yes / no); \"\": none (a sequence-classification head).", **fv)
    flags.DEFINE_string(f"{name}_instruction", "", f"With --{name}_prompt: the task "
                        "description in the prompt (\"\": its web-search default).", **fv)
    flags.DEFINE_integer(f"{name}_max_seq_length", 0, "A checkpoint folder's pair length "
                         "limit in tokens (0: the one a tfsent-published folder records, "
                         "else 512; an export keeps its own).", lower_bound=0, **fv)


def define_rerank_flags(flag_values=None):
    """The --rerank flags of `python -m tfsent.evaluate`."""
    define_reranker_flags("rerank", "that reorders each beir: task's top --rerank_top: "
                          "before and after.", flag_values)
    flags.DEFINE_integer("rerank_top", 100, "Documents per query --rerank reorders.",
                         flag_values=flags.FLAGS if flag_values is None else flag_values)


def check_retriever(model, flag="--model"):
    """Refuses (ConfigError) a cross-encoder given as the retriever `flag`: it has no
    sentence embeddings to search with (cheap: reads files only,
    `formats.model_paths.check_bi_encoder`)."""
    check_bi_encoder(model, flag, hint="; a cross-encoder goes to --rerank"
                     if flag == "--model" else "")


def check_rerank(reranker, top, tasks, retrieval, variants=False, prompt="",
                 instruction="", max_seq_length=0):
    """Checks `--rerank=reranker --rerank_top=top [--rerank_prompt=prompt
    --rerank_instruction=instruction --rerank_max_seq_length=max_seq_length]` against the
    resolved `tasks` (names; `retrieval`: their checked RetrievalTasks), before any model
    is loaded: every task a `beir:` one, no size / quantization `variants`, 1 <= top <=
    each task's corpus size (its non-blank corpus.jsonl lines), and `check_reranker`.
    ConfigError / InputError naming the flag otherwise."""
    if not reranker:
        check_reranker(reranker, "--rerank", prompt, instruction, max_seq_length)
        return
    other = [t for t in tasks if not is_retrieval_task(t)]
    if other:
        raise ConfigError(f"--rerank reorders retrieval results: --tasks has "
                          f"{', '.join(other)}, not beir:DIR[:SPLIT]; evaluate it in a run "
                          f"without --rerank")
    if variants:
        raise ConfigError("--rerank does not combine with --truncate_dim, --dims or "
                          "--quantize: evaluate those in a run without --rerank")
    if top < 1:
        raise ConfigError(f"--rerank_top must be >= 1, got {top}")
    for task in retrieval:
        size = count_documents(task.directory)
        if top > size:
            raise ConfigError(f"--rerank_top={top} is above the corpus size of "
                              f"{task.source} ({size} documents)")
    check_reranker(reranker, "--rerank", prompt, instruction, max_seq_length)


def check_reranker(reranker, option="--rerank", prompt="", instruction="",
                   max_seq_length=0):
    """Checks, before any model is loaded, that `option`=`reranker` names a cross-encoder
    `load_reranker` opens: an export folder (a version, or a folder of versions: the
    newest), a cross-encoder training run's folder (its export/), a CrossEncoder `.keras`
    file or a Hugging Face checkpoint folder with a score (`checkpoint_reranker`);
    `prompt`, `instruction` and `max_seq_length` (`OPTION_prompt`, ...) only with such a
    folder (`instruction` with a prompt: given, or recorded by tfsent's
    `cross_encoder_hf` export). An empty `reranker` takes none of them. ConfigError
    naming the flag otherwise."""
    given = [name for name, value in (("prompt", prompt), ("instruction", instruction),
                                      ("max_seq_length", max_seq_length)) if value]
    if max_seq_length and max_seq_length < 0:
        raise ConfigError(f"{option}_max_seq_length must be >= 0, got {max_seq_length}")
    if not reranker:
        if given:
            raise ConfigError(f"{option}_{given[0]} goes with {option} (a Hugging Face "
                              "checkpoint folder)")
        return
    reranker = reranker_export(reranker)
    if checkpoint_reranker(reranker, prompt, option):
        if instruction and not (prompt or read_metadata(reranker, required=False).get(
                "prompt")):
            raise ConfigError(f"{option}_instruction: {option}={reranker} reads no prompt "
                              "(a sequence-classification head); only a prompted reranker "
                              f"({option}_prompt) takes an instruction")
        return
    if given:
        raise ConfigError(f"{option}_{given[0]}: {option}={reranker} is no Hugging Face "
                          "checkpoint folder (an export or .keras file keeps its own "
                          "prompt and length)")
    if os.path.isfile(reranker) and reranker.endswith(".keras"):
        name = keras_class_name(reranker)
        if name != "CrossEncoder":
            raise ConfigError(f"{option}={reranker} holds a {name or 'unreadable'} model, "
                              f"not a CrossEncoder")
        return
    found = export_format(reranker)
    if found is None:
        check_cross_encoder(reranker, option)  # a bi-encoder's folder says so
        raise ConfigError(f"{option}={reranker} is neither a SavedModel export (a folder "
                          f"with saved_model.pb or version subfolders) nor a .keras file")
    if found and found != CROSS_ENCODER_FORMAT:
        raise ConfigError(f"{option}={reranker} is a {found} export (sentence embeddings, "
                          f"no score signature): give a cross-encoder export "
                          f"(CrossEncoder.export)")


def reranker_export(path):
    """The cross-encoder export a `--rerank` value names: a training run's folder
    (`python -m tfsent.train --method=cross_encoder`: config.json beside export/) stands
    for its export/; anything else is itself."""
    if path and os.path.isfile(os.path.join(path, "config.json")) and os.path.isdir(
            os.path.join(path, "export")):
        return os.path.join(path, "export")
    return path


def checkpoint_reranker(path, prompt="", option="--rerank"):
    """Whether `path` is a Hugging Face checkpoint folder (config.json with a model_type,
    no tfsent training run or SavedModel) that reranks as it is: a one-label
    *ForSequenceClassification one, a `cross_encoder_hf` export, or any with a `prompt`
    (a causal LM reranker, Qwen3-Reranker). A checkpoint with no score (a base or MLM
    model, without a prompt) is refused here, before it loads (ConfigError); False for
    anything else (a sentence-transformers folder among them: a bi-encoder)."""
    config = json_object(os.path.join(path, "config.json"))
    if ("model_type" not in config or "method" in config
            or export_format(path) is not None):
        return False
    family = families.family_of_model_type(config["model_type"])
    architectures = config.get("architectures") or ["no architecture named"]
    what = f"{option}={path} is a {config['model_type']} checkpoint ({architectures[0]})"
    if prompt:
        get_prompt(prompt, f"{option}_prompt")
        if family is None or prompt not in families.TABLE[family].pair_prompts:
            owners = [name for name, record in families.TABLE.items()
                      if prompt in record.pair_prompts]
            raise ConfigError(f"{option}_prompt={prompt}: {what}; the prompt reads a "
                              f"{', '.join(owners)} causal LM's checkpoint")
        return True
    kind = cross_encoder_kind(path)
    if kind and "ForSequenceClassification" in architectures[0]:
        labels = len(config.get("id2label") or {}) or config.get("num_labels", 1)
        if labels != 1:
            raise ConfigError(f"{what} with {labels} labels; a reranker scores with one "
                              "(a 2- or 3-label head is a classifier, e.g. NLI)")
        if family is None or families.TABLE[family].classification_head is None:
            readable = [record.hf_sequence_classification[0] for record
                        in families.TABLE.values() if record.classification_head is not None]
            raise ConfigError(f"{what}: tfsent reads no sequence-classification head of "
                              f"model type {config['model_type']} (it reads "
                              f"{', '.join(readable)})")
        return True
    if kind:
        return True  # tfsent's own cross_encoder_hf export
    modules = _module_types(path)
    if modules and not any(".cross_encoder." in m for m in modules):
        return False  # a sentence-transformers bi-encoder: check_cross_encoder says so
    hint = (f"; a causal LM that answers through a prompt (Qwen3-Reranker) needs "
            f"{option}_prompt ({', '.join(PROMPT_NAMES)})"
            if str(architectures[0]).endswith("ForCausalLM") else "")
    raise ConfigError(f"{what} without a one-label sequence-classification "
                      f"head: it has no relevance score{hint}; to train a reranker from it: "
                      f"python -m tfsent.train --method=cross_encoder --config.encoder={path}")


def _module_types(path):
    """The module types a sentence-transformers folder's modules.json lists ([] without
    one)."""
    try:
        with open(os.path.join(path, "modules.json"), encoding="utf-8") as f:
            modules = json.load(f)
    except (OSError, ValueError):
        return []
    return [str(m.get("type", "")) for m in modules if isinstance(m, dict)] \
        if isinstance(modules, list) else []


def count_documents(directory):
    """The number of non-blank lines of a BEIR folder's corpus.jsonl (its documents,
    without parsing them)."""
    with open_bytes(beir.data_file(directory, "corpus.jsonl")) as f:
        return sum(1 for line in f if line.strip())


def load_reranker(path, prompt="", instruction="", max_seq_length=None, option="--rerank"):
    """An object with `score(queries, passages, batch_size)`: a ServedCrossEncoder for a
    cross-encoder export (or a training run's: `reranker_export`), the CrossEncoder of
    a `.keras` file, or one built on a Hugging Face checkpoint folder
    (`methods.cross_encoder.reranker_from_checkpoint`, with `prompt`, `instruction` and
    `max_seq_length`; errors name `option`)."""
    path = reranker_export(path)
    if checkpoint_reranker(path, prompt, option):
        from tfsent.methods.cross_encoder import reranker_from_checkpoint  # noqa: PLC0415

        return reranker_from_checkpoint(path, prompt or None, instruction or None,
                                        max_seq_length or None, option)
    if os.path.isfile(path) and path.endswith(".keras"):
        model = keras.saving.load_model(path)
        if not callable(getattr(model, "score", None)):
            raise InputError(f"a {type(model).__name__}, not a CrossEncoder", path=path)
        return model
    return ServedCrossEncoder(path)


def reranker_for_export(path, prompt="", instruction="", max_seq_length=None,
                        option="--reranker"):
    """What an export that stores a reranker takes (`formats.search_index`'s `reranker`):
    the path of a cross-encoder export (a training run's: its export/) as it is, the
    CrossEncoder of a `.keras` file or of a Hugging Face checkpoint folder
    (`load_reranker`)."""
    path = reranker_export(path)
    if export_format(path) is not None:
        return path
    return load_reranker(path, prompt, instruction, max_seq_length, option)


def _scorer(reranker, total, batch_size, verbose):
    """`score(queries, passages)` of `reranker` with a progress bar over `total` pairs."""
    bar = keras.utils.Progbar(total, unit_name="pair") if verbose and total else None

    def score(queries, passages):
        out = reranker.score(queries, passages, batch_size=batch_size)
        if bar is not None:
            bar.add(len(queries))
        return out
    return score


def evaluate_reranked(encoder, split, reranker, top=100, batch_size=64, max_seq_length=None,
                      query_prompt="", document_prompt="", run_file=None, verbose=1):
    """The measures of `encoder`'s exact cosine search over the BEIR `split` (a
    RetrievalSplit), and under RERANKED those of the same ranking with each query's top
    `top` reordered by `reranker.score(queries, passages, batch_size)` (raw query and
    document texts, no prompts). The search keeps max(100, top) documents per query.
    `run_file`: the reranked top 100 written there (`retrieval.write_run`).

    Returns `evaluate_ranking`'s result of the retriever with "documents" and
    RERANKED: {measure: mean, "queries", "per_query", "rerank_top"}."""
    if not 1 <= top <= len(split.corpus):
        raise ConfigError(f"rerank top must be in [1, {len(split.corpus)}] (the corpus "
                          f"size), got {top}")
    ranking = search_split(encoder, split, batch_size, max_seq_length, query_prompt,
                           document_prompt, max(RUN_DEPTH, top), verbose=verbose)
    result = evaluate_ranking(ranking.as_dict(), split.qrels, split.query_ids)
    result["documents"] = len(split.corpus)
    pairs = sum(min(len(d), top) for d in ranking.doc_ids)
    start = time.perf_counter()
    reranked = rerank(ranking, split, _scorer(reranker, pairs, batch_size, verbose), top,
                      batch_size)
    seconds = time.perf_counter() - start
    logging.info("reranked the top %d of %d queries (%d pairs) in %.1f s (%.0f pairs per "
                 "second)", top, len(ranking.query_ids), pairs, seconds,
                 pairs / max(seconds, 1e-9))
    after = evaluate_ranking(reranked.as_dict(), split.qrels, split.query_ids)
    after["rerank_top"] = top
    result[RERANKED] = after
    if run_file:
        write_run(run_file, Ranking(reranked.query_ids,
                                    [d[:RUN_DEPTH] for d in reranked.doc_ids],
                                    [s[:RUN_DEPTH] for s in reranked.scores]))
    return result


def evaluate_reranked_tasks(memo, tasks, reranker, top=100, prompts=None, run_files=None,
                            verbose=1):
    """(results, text table) of `evaluate_reranked` on each RetrievalTask in `tasks` with
    the encoder `memo` (a runner.MemoEncoder): {task label: result}, and a table with one
    row per task and one for it reranked ("beir:NAME:SPLIT reranked@N")."""
    results, rows = {}, {}
    for task in tasks:
        split = beir.read_split(task.directory, task.split)
        results[task.label] = res = evaluate_reranked(
            memo, split, reranker, top, memo.batch_size, memo.max_seq_length,
            run_file=(run_files or {}).get(task.label), verbose=verbose, **(prompts or {}))
        rows[task.label] = res
        rows[f"{task.label} {RERANKED}@{top}"] = res[RERANKED]
    return results, retrieval_table(rows)
