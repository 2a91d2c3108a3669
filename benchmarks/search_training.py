"""Training for search, measured on a BEIR folder: what fine-tuning on its train pairs, mined
hard negatives, a mixture with NLI pairs and a distilled student give, on the folder's test
split and on STS.

    python benchmarks/search_training.py --work_dir=W --json=search_training.json \
        [--beir=../shared/data/retrieval/climate-fever --data_dir=../shared/data \
         --parts=base,finetune,mined,snli,mixture,distill --seeds=0,1 --epochs=1]

Every number comes from tfsent's own commands, run one after another in fresh processes
(the commands are printed and kept in the JSON, so any row can be re-run by hand):

  base       minilm-l6 as it is: `tfsent.evaluate --tasks=beir:DIR:test,STSBenchmark,
             SICKRelatedness`.
  finetune   `tfsent.train --method=retrieval --config.train_data=beir:DIR:train
             --config.eval_data=beir:DIR:dev` (the export is the best dev nDCG@10 step),
             then the same evaluation; one run per seed.
  mined      `tfsent.mine --beir=DIR:train` (minilm-l6, --num_negatives=1, relative
             margin 0.05, ranks below 200) once, then the retrieval method on the mined
             (query, positive, negative) rows; one run per seed.
  snli       the mixture's other source alone: SNLI's (premise, entailment) pairs (the
             dev split), --mixture_steps steps; first seed only.
  mixture    the folder's train pairs mixed with SNLI's (premise, entailment) pairs
             (`train_data=beir:DIR:train,SNLI`, one source per batch, sampled in
             proportion to size), for the same number of steps as finetune
             (--mixture_steps); first seed only. Compare with finetune and snli.
  distill    a 3-layer student cut from minilm-l6 (`--method=distill`, layers 0,3,5)
             distilled on the demo sentences and the wiki prefix; its retention of the
             teacher's figures (the base row).

Seeds vary the data order, dropout and any new weights; the JSON keeps each run's figures,
the commands, the wall times and the machine (common.machine_description).
"""

import json
import os
import subprocess
import sys
import time

from absl import app, flags, logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared", "data")
PARTS = ("base", "finetune", "mined", "snli", "mixture", "distill")
STS_TASKS = ("STSBenchmark", "SICKRelatedness")

FLAGS = flags.FLAGS
flags.DEFINE_string("work_dir", None, "Folder for the runs, the mined file and the "
                    "evaluations (a new or empty folder; kept afterwards).")
flags.DEFINE_string("json", None, "Where to write the results (JSON).")
flags.DEFINE_string("beir", os.path.join(SHARED, "retrieval", "climate-fever"),
                    "BEIR folder with qrels/train.tsv, dev.tsv and test.tsv.")
flags.DEFINE_string("data_dir", SHARED, "SentEval data folder (STS-B, SICK-R, SNLI, wiki).")
flags.DEFINE_list("parts", list(PARTS), "Which parts to run: " + ", ".join(PARTS))
flags.DEFINE_list("seeds", ["0", "1"], "Seeds of the finetune and mined runs.")
flags.DEFINE_integer("epochs", 2, "Passes over the training pairs per retrieval run.")
flags.DEFINE_float("learning_rate", 2e-5, "Peak learning rate of the retrieval runs (10% "
                   "warm-up).")
flags.DEFINE_integer("max_seq_length", 64, "Training truncation length of the retrieval "
                     "runs (evaluation: 256).")
flags.DEFINE_integer("eval_every", 42, "Steps between dev evaluations of the retrieval runs "
                     "(42: once per epoch of Climate-FEVER's 1,350 train pairs at batch 32).")
flags.DEFINE_integer("mixture_steps", 126, "Steps of the mixture and SNLI-alone runs (the "
                     "same optimizer steps as the finetune runs: 2 epochs of Climate-FEVER, "
                     "rounded up to a multiple of --eval_every).")
flags.DEFINE_integer("distill_steps", 600, "Training steps of the distilled student.")
flags.DEFINE_string("model", "minilm-l6", "The starting encoder (and the teacher).")


def run(args, what):
    """Runs `python -m ...args` from the repository; returns (stdout, seconds)."""
    command = [sys.executable, "-m", *args]
    logging.info("%s: %s", what, " ".join(command))
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    logging.info("%s: %.0f s", what, seconds)
    return done.stdout, seconds


def evaluate(model, name, work_dir, tasks):
    """{task: primary figure} of `model` on `tasks` (nDCG@10 x100 for beir tasks, Spearman
    x100 for STS), with the command and its time."""
    out = os.path.join(work_dir, "eval", f"{name}.json")
    args = ["tfsent.evaluate", f"--model={model}", f"--tasks={','.join(tasks)}",
            f"--data_dir={FLAGS.data_dir}", f"--output_json={out}"]
    _, seconds = run(args, f"evaluate {name}")
    with open(out, encoding="utf-8") as f:
        results = json.load(f)
    figures = {}
    for task, value in results.items():
        if not isinstance(value, dict):
            continue
        if "ndcg@10" in value:
            figures[task] = value["ndcg@10"]
        elif "spearman" in value:
            figures[task] = value["spearman"]
    return {"figures": figures, "command": "python -m " + " ".join(args),
            "seconds": round(seconds, 1)}


def train(name, work_dir, method, config):
    """Trains `method` with `config` ({field: value}) into work_dir/runs/name; returns
    (its export directory, the command, seconds)."""
    output = os.path.join(work_dir, "runs", name)
    args = ["tfsent.train", f"--method={method}", f"--output_dir={output}",
            *(f"--config.{k}={v}" for k, v in config.items())]
    _, seconds = run(args, f"train {name}")
    return os.path.join(output, "export"), "python -m " + " ".join(args), round(seconds, 1)


def trained_row(name, work_dir, method, config, tasks):
    """Train then evaluate: the row of one run."""
    export, command, seconds = train(name, work_dir, method, config)
    row = evaluate(export, name, work_dir, tasks)
    row.update({"train_command": command, "train_seconds": seconds})
    return row


def main(argv):
    del argv
    unknown = set(FLAGS.parts) - set(PARTS)
    if unknown:
        raise app.UsageError(f"--parts: unknown {sorted(unknown)}; known: {', '.join(PARTS)}")
    if not FLAGS.work_dir or not FLAGS.json:
        raise app.UsageError("--work_dir and --json are required")
    if os.path.isdir(FLAGS.work_dir) and os.listdir(FLAGS.work_dir):
        raise app.UsageError(f"--work_dir={FLAGS.work_dir} is not empty")
    for path in (os.path.join(FLAGS.beir, "qrels", "train.tsv"), FLAGS.data_dir):
        if not os.path.exists(path):
            raise app.UsageError(f"{path} does not exist (--beir / --data_dir)")
    work = os.path.abspath(FLAGS.work_dir)
    os.makedirs(work, exist_ok=True)
    beir = os.path.abspath(FLAGS.beir)
    tasks = (f"beir:{beir}:test", *STS_TASKS)
    snli = os.path.join(FLAGS.data_dir, "SNLI")
    wiki = os.path.join(FLAGS.data_dir, "wiki", "wiki1m_prefix.txt")
    retrieval = {"encoder": FLAGS.model, "eval_data": f"beir:{beir}:dev",
                 "steps": 0, "epochs": FLAGS.epochs, "learning_rate": FLAGS.learning_rate,
                 "warmup_ratio": 0.1, "max_seq_length": FLAGS.max_seq_length,
                 "eval_every": FLAGS.eval_every, "first_eval_step": 0}
    rows = {}

    def save():
        common.write_result(FLAGS.json, {"benchmark": "search_training", "beir": beir,
                                         "model": FLAGS.model, "epochs": FLAGS.epochs,
                                         "learning_rate": FLAGS.learning_rate,
                                         "max_seq_length": FLAGS.max_seq_length,
                                         "rows": rows})

    if "base" in FLAGS.parts:
        rows["base"] = evaluate(FLAGS.model, "base", work, tasks)
        save()
    if "finetune" in FLAGS.parts:
        for seed in FLAGS.seeds:
            rows[f"finetune-seed{seed}"] = trained_row(
                f"finetune-seed{seed}", work, "retrieval",
                dict(retrieval, train_data=f"beir:{beir}:train", seed=seed), tasks)
            save()
    if "mined" in FLAGS.parts:
        mined = os.path.join(work, "mined.jsonl")
        args = ["tfsent.mine", f"--model={FLAGS.model}", f"--beir={beir}:train",
                f"--out={mined}", "--num_negatives=1", "--relative_margin=0.05",
                "--range_max=200", "--output_format=n-tuple"]
        _, seconds = run(args, "mine")
        rows["mine"] = {"command": "python -m " + " ".join(args), "seconds": round(seconds, 1)}
        for seed in FLAGS.seeds:
            rows[f"mined-seed{seed}"] = trained_row(
                f"mined-seed{seed}", work, "retrieval",
                dict(retrieval, train_data=mined, seed=seed), tasks)
            save()
    nli = dict(retrieval, train_data=snli, train_split="dev", hard_negatives=False,
               seed=FLAGS.seeds[0], steps=FLAGS.mixture_steps, epochs=0)
    if "snli" in FLAGS.parts:
        rows["snli-alone"] = trained_row("snli-alone", work, "retrieval", nli, tasks)
        save()
    if "mixture" in FLAGS.parts:
        rows["mixture"] = trained_row(
            "mixture", work, "retrieval",
            dict(nli, train_data=f"beir:{beir}:train,{snli}", batch_per_source=True), tasks)
        save()
    if "distill" in FLAGS.parts:
        rows["distill"] = trained_row(
            "distill", work, "distill",
            {"encoder": FLAGS.model, "student_layers": "0,3,5",
             "train_data": f"demo,{wiki}", "steps": FLAGS.distill_steps}, tasks)
        save()
    save()
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    app.run(main)
