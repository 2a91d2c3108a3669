r"""Writes the unlabeled sentences of the STS tasks to a text file (ConSERT's setting).

    python tools/sts_text.py --data_dir=../shared/data --out=sts_text.txt \
        [--tasks=STS12,STS13,STS14,STS15,STS16,STSBenchmark,SICKRelatedness]

ConSERT's unsupervised runs train on the sentences (never the scores) of STS12-16,
STS Benchmark and SICK, every split. This collects them in task order, first occurrence
kept, one sentence a line, ready for `--config.train_data=sts_text.txt`. Tasks whose
folder is missing are skipped with a warning (the shared data here has only STS12, STS-B
and SICK); a task list that yields no sentence is an error.
"""

import os
import sys

from absl import app, flags, logging

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tfsent import cli  # noqa: E402
from tfsent.errors import InputError  # noqa: E402
from tfsent.evaluation import resolve_tasks  # noqa: E402
from tfsent.data import senteval as senteval_data  # noqa: E402
from tfsent.evaluation.sts import STS_TASKS, STS_YEARS  # noqa: E402

FLAGS = flags.FLAGS


def task_pairs(data_dir, task):
    """(sents1, sents2) lists of every split of one STS task."""
    if task in STS_YEARS:
        subsets = senteval_data.read_sts_year(data_dir, task).values()
    elif task == "STSBenchmark":
        subsets = [senteval_data.read_stsbenchmark(data_dir, s) for s in senteval_data.SPLITS]
    else:
        subsets = [senteval_data.read_sick(data_dir, s) for s in senteval_data.SPLITS]
    return [(s1, s2) for s1, s2, _ in subsets]


def collect_sentences(data_dir, tasks=STS_TASKS, skip_missing=True):
    """Unique sentences of `tasks` in reading order; returns (sentences, counts per task)."""
    seen, counts = {}, {}
    for task in tasks:
        try:
            pairs = task_pairs(data_dir, task)
        except (InputError, FileNotFoundError) as e:
            if not skip_missing:
                raise
            logging.warning("skipping %s: %s", task, e)
            continue
        before = len(seen)
        for s1, s2 in pairs:
            for s in s1 + s2:
                if s.strip():
                    seen.setdefault(s, None)
        counts[task] = len(seen) - before
    return list(seen), counts


def main(argv):
    del argv
    tasks = resolve_tasks(FLAGS.tasks)
    not_sts = [t for t in tasks if t not in STS_TASKS]
    if not_sts:
        raise app.UsageError(f"--tasks: not STS tasks: {', '.join(not_sts)}")
    sentences, counts = collect_sentences(FLAGS.data_dir, tasks)
    if not sentences:
        raise app.UsageError(f"--data_dir={FLAGS.data_dir}: none of {', '.join(tasks)} found")
    tmp = FLAGS.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(s + "\n" for s in sentences)
    os.replace(tmp, FLAGS.out)
    for task, n in counts.items():
        logging.info("%s: %d new sentences", task, n)
    logging.info("wrote %d unique sentences to %s", len(sentences), FLAGS.out)


if __name__ == "__main__":
    flags.DEFINE_string("data_dir", None, "SentEval data/downstream folder.", required=True)
    flags.DEFINE_string("out", None, "Output text file.", required=True)
    flags.DEFINE_string("tasks", "sts", "STS tasks to read (comma-separated; default all).")
    cli.start(main)
