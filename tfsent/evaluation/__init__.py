"""Evaluation of sentence embeddings with the SentEval / SimCSE protocol.

- `evaluate_sts`: STS12-16, STS Benchmark, SICK-Relatedness (cosine vs gold, Spearman).
- `evaluate_transfer`: MR, CR, SUBJ, MPQA, SST2, TREC, MRPC (logistic regression).
- `align_uniform`: alignment and uniformity (Wang and Isola, 2020) on STS Benchmark.
- `resolve_tasks` turns "sts,MR" into task names; `format_table` prints results.
- `retrieval.evaluate_retrieval`: `beir:DIR[:SPLIT]` tasks, exact cosine search scored
  with trec_eval's measures (nDCG@10, MRR@10, Recall@10/@100, MAP@100).

The SentEval ones take an `encode_fn` (list of str -> array (N, D)) and a SentEval
`data/downstream` folder; none needs TensorFlow.
"""

import math

from tfsent.data.sources import BEIR
from tfsent.errors import ConfigError
from tfsent.evaluation.geometry import (align_uniform, alignment, pair_geometry,
                                        random_pair_cosines, uniformity)
from tfsent.evaluation.sts import STS_TASKS, evaluate_sts, sts_from_pairs
from tfsent.evaluation.transfer import TRANSFER_TASKS, LogisticRegression, evaluate_transfer

TASK_GROUPS = {"sts": STS_TASKS, "transfer": TRANSFER_TASKS,
               "all": STS_TASKS + TRANSFER_TASKS}
_ALIASES = {"stsb": "STSBenchmark", "sts-b": "STSBenchmark", "sickr": "SICKRelatedness",
            "sick-r": "SICKRelatedness", "sst": "SST2", "sst-2": "SST2"}
_SHORT_NAMES = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R"}
RETRIEVAL_PREFIX = BEIR  # retrieval task names: beir:DIR[:SPLIT] (tfsent.data.sources)
RETRIEVAL_MEASURES = ("ndcg@10", "mrr@10", "recall@10", "recall@100", "map@100")


def resolve_tasks(spec):
    """Task names from a comma-separated string (or a list) of tasks and groups.

    Groups: "sts" (the seven STS tasks), "transfer" (the seven transfer tasks), "all".
    Names are case-insensitive; "STS-B"/"stsb", "SICK-R"/"sickr" and "SST"/"SST-2" are
    accepted too; retrieval tasks `beir:DIR[:SPLIT]` are kept as given (their folders are
    checked by `retrieval.check_tasks`). Returns canonical names without duplicates, in
    the order given.
    Raises ConfigError, listing the valid names, on an unknown or empty spec.
    """
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    canonical = {t.lower(): t for t in STS_TASKS + TRANSFER_TASKS}
    canonical.update(_ALIASES)
    out = []
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        key = item.lower()
        if item.startswith(RETRIEVAL_PREFIX):
            out.append(item)
        elif key in TASK_GROUPS:
            out += TASK_GROUPS[key]
        elif key in canonical:
            out.append(canonical[key])
        else:
            raise ConfigError(
                f"unknown task {item!r}; valid: {', '.join(TASK_GROUPS)} (groups), "
                f"{', '.join(STS_TASKS + TRANSFER_TASKS)}, {RETRIEVAL_PREFIX}DIR[:SPLIT]")
    if not out:
        raise ConfigError(f"no task given (got {spec!r}); valid: {', '.join(TASK_GROUPS)}"
                          f", {', '.join(STS_TASKS + TRANSFER_TASKS)}")
    return list(dict.fromkeys(out))


def score(result):
    """The reported figure of one task's result: its "spearman", else its "acc", else its
    "ndcg@10" (retrieval; nan if none)."""
    value = result.get("spearman", result.get("acc", result.get("ndcg@10")))
    return float("nan") if value is None else float(value)


def short_name(task):
    """A task's column name in tables: STS-B and SICK-R for the long ones."""
    return _SHORT_NAMES.get(task, task)


def format_table(results):
    """A papers-style text table of results (task -> {"spearman": x} or {"acc": x}).

    Tasks are columns in the standard order, with an "Avg." column; STS tasks, transfer
    tasks and any others each get their own table (header line + score line), values
    with two decimals; retrieval tasks (`beir:`) get `retrieval_table`'s rows. Returns
    the text; print it.
    """
    known = STS_TASKS + TRANSFER_TASKS
    retrieval = {t: r for t, r in results.items() if t.startswith(RETRIEVAL_PREFIX)}
    groups = [[t for t in STS_TASKS if t in results],
              [t for t in TRANSFER_TASKS if t in results],
              [t for t in results if t not in known and t not in retrieval]]
    blocks = [retrieval_table(retrieval)] if retrieval else []
    for tasks in (g for g in groups if g):
        scores = [score(results[t]) for t in tasks]
        names = [short_name(t) for t in tasks] + ["Avg."]
        scores.append(sum(scores) / len(scores))
        cells = ["nan" if math.isnan(s) else f"{s:.2f}" for s in scores]
        widths = [max(len(n), len(c)) for n, c in zip(names, cells)]
        blocks.append("\n".join(
            " | ".join(v.rjust(w) for v, w in zip(row, widths)) for row in (names, cells)))
    return "\n\n".join(blocks)


def retrieval_table(results):
    """Text table of retrieval results ({row label: result}): one row each, the
    RETRIEVAL_MEASURES as columns (x100, two decimals)."""
    rows = [["", *RETRIEVAL_MEASURES]] + [
        [label, *("nan" if math.isnan(res[m]) else f"{res[m]:.2f}" for m in RETRIEVAL_MEASURES)]
        for label, res in results.items()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(" | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                for i, (c, w) in enumerate(zip(row, widths)))
                     for row in rows)


__all__ = ["STS_TASKS", "TRANSFER_TASKS", "TASK_GROUPS", "evaluate_sts", "sts_from_pairs",
           "evaluate_transfer", "LogisticRegression", "align_uniform", "alignment",
           "uniformity", "pair_geometry", "random_pair_cosines", "resolve_tasks",
           "format_table", "retrieval_table", "score", "short_name", "RETRIEVAL_PREFIX",
           "RETRIEVAL_MEASURES"]
