r"""Random vs mined hard negatives for `simcse_sup` on SNLI-dev pairs (the table in docs/training.md).

    python tools/mining_experiment.py --data_dir=../shared/data --work_dir=/tmp/mining \
        [--model=minilm-l6] [--steps=80] [--seeds=0,1]

1. Pairs: every SNLI dev (premise, hypothesis) labelled entailment -> `pairs.tsv`.
2. Mined: `python -m tfsent.mine --pairs=pairs.tsv --num_negatives=1
   --relative_margin=0.05` (candidates: every hypothesis of the pairs; NV-Retriever's 95%
   filter) -> `mined.tsv`. Pairs the filter leaves without a negative are not written.
3. Random: the same (anchor, positive) rows as `mined.tsv`, each with a negative drawn
   uniformly (seed 0) from the same candidates, never the anchor's text or one of its
   positives -> `random.tsv`. Only the negative differs between the two files.
4. For each file and seed: `python -m tfsent.train --method=simcse_sup` from `--model` for
   `--steps` steps (the same for both), exporting the final model, then `python -m
   tfsent.evaluate` on STS-B test and SICK-R test. The base model is evaluated too.

Prints a Markdown table (mean over seeds, and each seed) and writes `results.json`.
Every command runs as a subprocess exactly as a user would type it; logs are kept in
`--work_dir`.
"""

import json
import os
import random
import subprocess
import sys

from absl import app, flags, logging

FLAGS = flags.FLAGS


def define_flags():
    """The command line (defined only when run as a script, so tests can import it)."""
    flags.DEFINE_string("data_dir", None, "SentEval-layout data with SNLI/ and STS/, SICK/.")
    flags.DEFINE_string("work_dir", None, "Where the TSVs, runs and logs go.")
    flags.DEFINE_string("model", "minilm-l6", "Starting encoder (anything --config.encoder "
                        "takes).")
    flags.DEFINE_integer("steps", 80, "Training steps of each run.")
    flags.DEFINE_string("seeds", "0", "Comma-separated training seeds.")
    flags.DEFINE_string("tasks", "STSBenchmark,SICKRelatedness", "Evaluation tasks.")


def snli_entailment_pairs(data_dir, split="dev"):
    """(premise, hypothesis) of every entailment row of SNLI `split`, in file order."""
    folder = os.path.join(data_dir, "SNLI")
    columns = []
    for name in ("s1", "s2", "labels"):
        path = os.path.join(folder, f"{name}.{split}")
        if not os.path.exists(path):
            raise SystemExit(f"{path} not found: --data_dir must hold SNLI/s1.{split}, "
                             f"s2.{split}, labels.{split}")
        with open(path, encoding="utf-8") as f:
            columns.append([line.strip() for line in f])
    if len({len(c) for c in columns}) != 1:
        raise SystemExit(f"{folder}: s1/s2/labels.{split} have different line counts")
    return [(p, h) for p, h, label in zip(*columns) if label == "entailment" and p and h]


def write_tsv(path, rows):
    """One tab-separated line per row."""
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write("\t".join(row) + "\n")


def read_tsv(path):
    """The rows of a tab-separated file (blank lines skipped)."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip()]


def random_negatives(mined_rows, pairs, seed=0):
    """`mined_rows`' (anchor, positive) with a uniform negative from the pairs' positives."""
    candidates = sorted({h for _, h in pairs})
    positives = {}
    for p, h in pairs:
        positives.setdefault(p, set()).add(h)
    rng = random.Random(seed)
    rows = []
    for anchor, positive, *_ in mined_rows:
        while True:
            negative = rng.choice(candidates)
            if negative != anchor and negative not in positives.get(anchor, ()):
                break
        rows.append((anchor, positive, negative))
    return rows


def run(cmd, log_path):
    """Runs a tfsent CLI command, its output to `log_path`; exits on failure."""
    logging.info("%s  (log: %s)", " ".join(cmd[2:]), log_path)
    with open(log_path, "w") as log:
        code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    if code:
        raise SystemExit(f"failed ({code}): {' '.join(cmd)}; see {log_path}")


def evaluate(model, out_json, log_path):
    run([sys.executable, "-m", "tfsent.evaluate", f"--model={model}",
         f"--data_dir={FLAGS.data_dir}", f"--tasks={FLAGS.tasks}",
         f"--output_json={out_json}"], log_path)
    with open(out_json) as f:
        return {task: result["spearman"] for task, result in json.load(f).items()}


def main(argv):
    del argv
    if not FLAGS.data_dir or not FLAGS.work_dir:
        raise SystemExit("--data_dir and --work_dir are required")
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    w = lambda name: os.path.join(FLAGS.work_dir, name)  # noqa: E731
    pairs = snli_entailment_pairs(FLAGS.data_dir)
    write_tsv(w("pairs.tsv"), pairs)
    logging.info("%d SNLI dev entailment pairs", len(pairs))
    if not os.path.exists(w("mined.tsv")):
        run([sys.executable, "-m", "tfsent.mine", f"--model={FLAGS.model}",
             f"--pairs={w('pairs.tsv')}", f"--out={w('mined.tsv')}", "--num_negatives=1",
             "--relative_margin=0.05", "--noprogress"], w("mine.log"))
    mined = read_tsv(w("mined.tsv"))
    write_tsv(w("random.tsv"), random_negatives(mined, pairs))
    logging.info("%d triplets each in mined.tsv and random.tsv", len(mined))

    results = {"base": evaluate(FLAGS.model, w("eval_base.json"), w("eval_base.log")),
               "pairs": len(pairs), "triplets": len(mined), "steps": FLAGS.steps, "runs": {}}
    seeds = [int(s) for s in FLAGS.seeds.split(",")]
    for kind in ("random", "mined"):
        for seed in seeds:
            name = f"{kind}_seed{seed}"
            run([sys.executable, "-m", "tfsent.train", "--method=simcse_sup",
                 f"--output_dir={w('run_' + name)}", f"--config.encoder={FLAGS.model}",
                 f"--config.train_data={w(kind + '.tsv')}", f"--config.seed={seed}",
                 f"--config.steps={FLAGS.steps}", f"--config.eval_every={FLAGS.steps}",
                 "--config.first_eval_step=0", "--config.export_if_worse=true",
                 "--config.divergence_drop=0"],  # same steps for every run
                w(f"train_{name}.log"))
            results["runs"][name] = evaluate(w(f"run_{name}/export"),
                                             w(f"eval_{name}.json"), w(f"eval_{name}.log"))
    with open(w("results.json"), "w") as f:
        json.dump(results, f, indent=2)

    tasks = FLAGS.tasks.split(",")
    lines = [f"| negatives | {' | '.join(tasks)} |", "|---" * (len(tasks) + 1) + "|",
             f"| none ({FLAGS.model}) | " + " | ".join(f"{results['base'][t]:.2f}" for t in tasks)
             + " |"]
    for kind in ("random", "mined"):
        runs = [results["runs"][f"{kind}_seed{s}"] for s in seeds]
        cells = []
        for t in tasks:
            values = [r[t] for r in runs]
            mean = sum(values) / len(values)
            cells.append(f"{mean:.2f}" + (" (" + " / ".join(f"{v:.2f}" for v in values) + ")"
                                          if len(values) > 1 else ""))
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    print("\n".join(lines))


if __name__ == "__main__":
    define_flags()
    app.run(main)
