"""Evaluates a sentence encoder with the SentEval / SimCSE protocol.

    python -m tfsent.evaluate --model=NAME_OR_DIR --pooling=mean --data_dir=DIR \
        --tasks=STS12,STSBenchmark,SICKRelatedness [--mode=test|fasttest] \
        [--output_json=FILE]

`--model` is anything `tfsent.encoders.load_encoder` takes (preset, checkpoint directory,
tfsent directory, `minilm-l6`) or an exported SavedModel directory (a version directory or
an export directory, whose newest version is used). Task names: STS12..STS16, STSBenchmark,
SICKRelatedness, MR, CR, SUBJ, MPQA, SST2, TREC, MRPC, and the groups `sts` and `transfer`.
Prints a table like the papers' (with Avg.) and writes JSON mapping each task to an object
whose "spearman" (x100) or "acc" is the reported figure.
"""

import json
import os
import sys

from absl import app, flags, logging


def load_any(model, pooling="mean", max_seq_length=512):
    """An object with `.encode(sentences, batch_size, normalize)`: a SentenceEncoder or an
    exported SavedModel."""
    from tfsent.encoders import load_encoder
    from tfsent.export import SavedModelEncoder, resolve_savedmodel_dir

    if os.path.isdir(model) and resolve_savedmodel_dir(model) is not None:
        return SavedModelEncoder(model)
    return load_encoder(model, pooling=pooling, max_seq_length=max_seq_length,
                        pad_to_max_length=False)


def run_tasks(encoder, data_dir, tasks, mode="test", batch_size=64, max_seq_length=None,
              skip_missing=False):
    """Runs the named tasks; returns {task: {...}} with "spearman" or "acc" per task."""
    from tfsent.evaluation import TRANSFER_TASKS, resolve_tasks
    from tfsent.evaluation.sts import evaluate_sts
    from tfsent.evaluation.transfer import evaluate_transfer

    names = resolve_tasks(tasks) if isinstance(tasks, str) else list(tasks)

    def encode_fn(sentences):
        return encoder.encode(sentences, batch_size=batch_size, normalize=False,
                              max_seq_length=max_seq_length)

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

    FLAGS = flags.FLAGS
    try:
        encoder = load_any(FLAGS.model, FLAGS.pooling, FLAGS.max_seq_length)
        results = run_tasks(encoder, FLAGS.data_dir, FLAGS.tasks, FLAGS.mode, FLAGS.batch_size,
                            skip_missing=FLAGS.skip_missing)
    except TfsentError as e:
        logging.error("%s", e)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(format_table(results))
    if FLAGS.output_json:
        tmp = FLAGS.output_json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f, indent=2, sort_keys=True)
        os.replace(tmp, FLAGS.output_json)


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
    app.run(main)
