"""Semantic textual similarity: cosine of two embeddings vs gold, Spearman/Pearson x100.

The protocol is SimCSE's use of SentEval (no training on any STS data): STS12-16 report
"all" (one correlation over all subsets concatenated, the number papers print), "mean"
and "wmean" (subset correlations averaged, plain and weighted by subset size) and each
subset; STS Benchmark and SICK-Relatedness report their test split (dev selectable).

`encode_fn` is any callable mapping a list of str to an array (N, D); each distinct
sentence is encoded once. Non-finite embedding values are replaced by 0 (as SentEval
does, so a diverged model scores low instead of crashing) and a warning is logged.
"""

import os

import numpy as np
from absl import logging
from scipy.stats import pearsonr, spearmanr

from tfsent.errors import ConfigError, InputError
from tfsent.data import senteval as senteval_data


STS_YEARS = ("STS12", "STS13", "STS14", "STS15", "STS16")
STS_TASKS = list(STS_YEARS) + ["STSBenchmark", "SICKRelatedness"]


def embed(encode_fn, sentences):
    """Embeds `sentences` with one `encode_fn` call on the distinct ones.

    Returns a float array (len(sentences), D) in input order. Raises ConfigError when
    `encode_fn` does not return one row per sentence.
    """
    sentences = list(sentences)
    unique = list(dict.fromkeys(sentences))
    if not unique:
        raise InputError("no sentences to encode")
    emb = np.asarray(encode_fn(unique))
    if emb.ndim != 2 or emb.shape[0] != len(unique):
        raise ConfigError(f"encode_fn returned an array of shape {emb.shape} for "
                          f"{len(unique)} sentences; expected ({len(unique)}, D)")
    if not np.issubdtype(emb.dtype, np.floating):
        emb = emb.astype(np.float32)
    if not np.all(np.isfinite(emb)):
        logging.warning("encode_fn returned non-finite values; replacing them by 0")
        emb = np.nan_to_num(emb, nan=0.0, posinf=0.0, neginf=0.0)
    index = {s: i for i, s in enumerate(unique)}
    return emb[[index[s] for s in sentences]]


def cosine_rows(a, b):
    """Row-wise cosine similarity of two arrays (N, D); a zero row gives 0."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.sum(a * b, axis=1) / np.maximum(norms, 1e-12)


def correlations(predicted, gold):
    """{"spearman", "pearson"} x100 of two score vectors (nan when one is constant)."""
    predicted = np.asarray(predicted, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.float64)
    if len(predicted) != len(gold):
        raise InputError(f"{len(predicted)} predicted scores for {len(gold)} gold scores")
    if len(gold) < 2:
        raise InputError(f"need at least 2 scored pairs, got {len(gold)}")
    if np.ptp(predicted) == 0 or np.ptp(gold) == 0:
        return {"spearman": float("nan"), "pearson": float("nan")}
    return {"spearman": 100.0 * float(spearmanr(predicted, gold)[0]),
            "pearson": 100.0 * float(pearsonr(predicted, gold)[0])}


def _pair_cosines(encode_fn, pairs):
    """Cosines for several (sents1, sents2) lists with a single embed call."""
    sentences = [s for s1, s2 in pairs for s in list(s1) + list(s2)]
    emb = embed(encode_fn, sentences)
    out, start = [], 0
    for s1, s2 in pairs:
        n = len(s1)
        if len(s2) != n:
            raise InputError(f"{n} first sentences for {len(s2)} second sentences")
        out.append(cosine_rows(emb[start:start + n], emb[start + n:start + 2 * n]))
        start += 2 * n
    return out


def sts_from_pairs(encode_fn, sents1, sents2, gold):
    """Cosine vs gold on one list of pairs: {"spearman", "pearson"} x100 and "n".

    Used for dev evaluation (model selection) during training.
    """
    gold = np.asarray(gold, dtype=np.float64)
    if len(gold) != len(sents1):
        raise InputError(f"{len(gold)} gold scores for {len(sents1)} pairs")
    (cos,) = _pair_cosines(encode_fn, [(sents1, sents2)])
    return {**correlations(cos, gold), "n": int(len(gold))}


def _task_path(data_dir, task):
    if task in STS_YEARS:
        return os.path.join(data_dir, "STS", f"{task}-en-test")
    if task == "STSBenchmark":
        return os.path.join(data_dir, "STS", "STSBenchmark")
    return os.path.join(data_dir, "SICK")


def _read_task(data_dir, task, split):
    """task -> dict subset -> (sents1, sents2, gold); one subset for STS-B and SICK-R."""
    if task in STS_YEARS:
        return senteval_data.read_sts_year(data_dir, task)
    if task == "STSBenchmark":
        return {split: senteval_data.read_stsbenchmark(data_dir, split)}
    return {split: senteval_data.read_sick(data_dir, split)}


def evaluate_sts(encode_fn, data_dir, tasks=None, split="test", skip_missing=False):
    """Evaluates `encode_fn` on STS tasks of a SentEval `data/downstream` folder.

    Args:
        encode_fn: list of str -> array (N, D).
        data_dir: the SentEval `downstream` folder (holding `STS/` and `SICK/`).
        tasks: names from `STS_TASKS` (default: all seven).
        split: split of STSBenchmark and SICKRelatedness: "test" (default), "dev" or
            "train". STS12-16 only have a test set.
        skip_missing: skip (with a warning) tasks whose folder is absent instead of
            raising InputError.

    Returns:
        dict task -> result. Every result has "spearman" and "pearson" (x100) and "n"
        (pairs). For STS12-16 these are the "all" figures (one correlation over all
        subsets concatenated), and the result also has "mean" and "wmean" (dicts with
        "spearman" and "pearson") and "subsets" (subset -> {"spearman", "pearson", "n"}).
        STSBenchmark and SICKRelatedness results also have "split".
    """
    tasks = list(STS_TASKS if tasks is None else tasks)
    unknown = [t for t in tasks if t not in STS_TASKS]
    if unknown:
        raise ConfigError(f"unknown STS task(s) {', '.join(map(repr, unknown))}; "
                          f"valid: {', '.join(STS_TASKS)}")
    if split not in senteval_data.SPLITS:
        raise ConfigError(f"unknown split {split!r}; expected one of "
                          f"{', '.join(senteval_data.SPLITS)}")
    data_dir = os.fspath(data_dir)
    data = {}
    for task in dict.fromkeys(tasks):
        if skip_missing and not os.path.isdir(_task_path(data_dir, task)):
            logging.warning("skipping %s: %s not found", task, _task_path(data_dir, task))
            continue
        data[task] = _read_task(data_dir, task, split)
    if not data:
        return {}

    keys = [(task, subset) for task, subsets in data.items() for subset in subsets]
    cosines = _pair_cosines(encode_fn, [data[t][s][:2] for t, s in keys])
    cos = dict(zip(keys, cosines))

    results = {}
    for task, subsets in data.items():
        if task not in STS_YEARS:
            gold = subsets[split][2]
            results[task] = {**correlations(cos[task, split], gold), "n": len(gold),
                             "split": split}
            logging.info("%s %s: spearman %.2f", task, split, results[task]["spearman"])
            continue
        per = {name: {**correlations(cos[task, name], gold), "n": len(gold)}
               for name, (_, _, gold) in subsets.items()}
        sizes = np.array([r["n"] for r in per.values()], dtype=np.float64)
        summary = {}
        for how, weights in (("mean", None), ("wmean", sizes)):
            summary[how] = {m: float(np.average([r[m] for r in per.values()],
                                                weights=weights))
                            for m in ("spearman", "pearson")}
        all_cos = np.concatenate([cos[task, name] for name in subsets])
        all_gold = np.concatenate([gold for _, _, gold in subsets.values()])
        results[task] = {**correlations(all_cos, all_gold), "n": int(len(all_gold)),
                         **summary, "subsets": per}
        logging.info("%s: spearman all %.2f, mean %.2f, wmean %.2f", task,
                 results[task]["spearman"], summary["mean"]["spearman"],
                 summary["wmean"]["spearman"])
    return results
