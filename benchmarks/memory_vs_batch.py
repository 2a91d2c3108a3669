"""Peak memory and training throughput of tfsent's SimCSE against the batch size.

    python benchmarks/memory_vs_batch.py --json=FILE [--batch_sizes=16,32,64,128 --steps=8
        --warmup_steps=3 --max_seq_length=32 --data=... --tfsent_config=FIELD=VALUE ...
        --with_peer]

For each batch size a fresh process (tfsent_worker.py --mode=train, the same training path
as train_throughput.py) trains minilm-l6 for `steps` steps and reports:

  peak_rss_mb        its resident-set high-water mark, resource.getrusage(RUSAGE_SELF)
                     .ru_maxrss at the end: weights, optimizer slots, activations kept for
                     the backward pass, XLA's compilation and buffers, TF's runtime;
  rss_after_load_mb  its resident set once the model and optimizer are built, before the
                     first step (the part that does not grow with the batch);
  sent_per_s         sentences/s after `warmup_steps` (as in train_throughput.py).

--tfsent_config passes run-config overrides (e.g. mixed_precision=mixed_bfloat16) to every
run; --grad_cache_chunk=N trains the batch sizes above N with GradCache in chunks of N and
the others plain, and reports each tfsent row's peak RSS over the smallest plain batch's
(`rss_vs_smallest_plain`); --with_peer measures sentence-transformers (Trainer) the same
way in its venv.
"""

import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import peer_env  # noqa: E402  (defines --peer_venv, --peer_python)

FLAGS = flags.FLAGS
flags.DEFINE_list("batch_sizes", ["16", "32", "64", "128"], "Batch sizes to measure.")
flags.DEFINE_integer("steps", 8, "Optimizer steps per batch size (warmup included).")
flags.DEFINE_integer("warmup_steps", 3, "First steps left out of the throughput.")
flags.DEFINE_integer("max_seq_length", 32, "Truncation length.")
flags.DEFINE_string("data", common.DEFAULT_WIKI, "Sentence file, one a line (default: the "
                    "wiki prefix; the demo corpus when ../shared/data is absent).")
flags.DEFINE_integer("max_sentences", 0, "Use only the first N sentences (0: all).")
flags.DEFINE_multi_string("tfsent_config", [], "FIELD=VALUE overrides of tfsent's run config.")
flags.DEFINE_integer("grad_cache_chunk", 0, "GradCache chunk for batch sizes above it (smaller "
                     "batches train plain, so one run compares plain and cached; 0: off).")
flags.DEFINE_bool("with_peer", False, "Also measure sentence-transformers (its own venv).")
flags.DEFINE_string("json", None, "Where to write the results (JSON).")


def parse_batch_sizes(values):
    """--batch_sizes -> sorted unique positive ints; raises app.UsageError naming the flag."""
    try:
        sizes = sorted({int(v) for v in values})
    except ValueError:
        raise app.UsageError(f"--batch_sizes must be integers, got {','.join(values)}")
    if not sizes or sizes[0] < 1:
        raise app.UsageError(f"--batch_sizes must be positive integers, got {','.join(values)}")
    return sizes


def main(argv):
    """Measures each batch size in a fresh process, writes --json, prints the table."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS.json:
        raise app.UsageError("--json is required (where to write the results)")
    if FLAGS.grad_cache_chunk < 0:
        raise app.UsageError(f"--grad_cache_chunk must be >= 0, got {FLAGS.grad_cache_chunk}")
    if FLAGS.warmup_steps < 1 or FLAGS.steps <= FLAGS.warmup_steps:
        raise app.UsageError(f"--steps ({FLAGS.steps}) must exceed --warmup_steps "
                             f"({FLAGS.warmup_steps}), which must be >= 1")
    sizes = parse_batch_sizes(FLAGS.batch_sizes)
    data, note = common.data_or_usage_error(FLAGS.data)
    n = len(common.read_sentences(data, FLAGS.max_sentences))
    if n < sizes[-1]:
        raise app.UsageError(f"--data has {n} sentences, fewer than the largest of "
                             f"--batch_sizes ({sizes[-1]})")
    peer_env.worker_env()  # checks --peer_env
    busy, warning = common.check_busy()
    peer_python = (peer_env.ensure_peer_env(FLAGS.peer_venv, FLAGS.peer_python)
                   if FLAGS.with_peer else None)
    rows = []
    for size in sizes:
        args = [f"--data={data}", f"--max_sentences={FLAGS.max_sentences}",
                f"--batch_size={size}", f"--max_seq_length={FLAGS.max_seq_length}",
                f"--steps={FLAGS.steps}", f"--warmup_steps={FLAGS.warmup_steps}"]
        chunk = FLAGS.grad_cache_chunk if 0 < FLAGS.grad_cache_chunk < size else 0
        config = list(FLAGS.tfsent_config) + ([f"grad_cache_chunk={chunk}"] if chunk else [])
        sides = [("tfsent", sys.executable, "tfsent_worker.py",
                  ["--mode=train"] + [f"--tfsent_config={c}" for c in config], None)]
        if peer_python:
            sides.append(("sentence-transformers", peer_python, "peer_worker.py",
                          ["--mode=train", "--loop=trainer"], peer_env.worker_env()))
        for side, python, script, extra, env in sides:
            r = common.run_worker(python, script, extra + args, env=env,
                                  what=f"{side} training, batch {size}")
            rows.append({"side": side, "batch_size": size,
                         "grad_cache_chunk": chunk if side == "tfsent" else 0,
                         "peak_rss_mb": r["max_rss_mb"],
                         "rss_after_load_mb": r["rss_after_load_mb"],
                         "sent_per_s": r["sent_per_s"], "median_step_s": r["median_step_s"],
                         "losses_finite": r["losses_finite"], "load_average": r["load_average"]})
    plain = [r for r in rows if r["side"] == "tfsent" and not r["grad_cache_chunk"]]
    for r in rows:
        if r["side"] == "tfsent" and plain:
            r["rss_vs_smallest_plain"] = r["peak_rss_mb"] / plain[0]["peak_rss_mb"]
    result = {"rows": rows,
              "settings": {"batch_sizes": sizes, "steps": FLAGS.steps,
                           "warmup_steps": FLAGS.warmup_steps,
                           "max_seq_length": FLAGS.max_seq_length, "data": data,
                           "max_sentences": FLAGS.max_sentences,
                           "tfsent_config": list(FLAGS.tfsent_config),
                           "grad_cache_chunk": FLAGS.grad_cache_chunk,
                           "peer_env": list(FLAGS.peer_env) if FLAGS.with_peer else [],
                           "cpu_count": os.cpu_count()},
              "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])}
    result["cpu_busy_before"] = busy
    if warning:
        result["warning"] = warning
    if note:
        result["note"] = note
    result = common.write_result(FLAGS.json, result, peer_python)
    common.print_table(
        ["side", "batch", "GradCache chunk", "peak RSS MiB", "vs smallest plain",
         "RSS after load MiB", "sent/s", "median step s"],
        [[r["side"], r["batch_size"], r["grad_cache_chunk"] or "-",
          common.fmt(r["peak_rss_mb"], 0),
          common.fmt(r["rss_vs_smallest_plain"], 2) if "rss_vs_smallest_plain" in r else "-",
          common.fmt(r["rss_after_load_mb"], 0), common.fmt(r["sent_per_s"]),
          common.fmt(r["median_step_s"], 3)] for r in rows],
        title=f"memory and throughput vs batch size: minilm-l6, max_seq_length "
              f"{FLAGS.max_seq_length}, {FLAGS.steps} steps ({FLAGS.warmup_steps} warmup)")
    if warning:
        print(f"warning: {warning}")
    print(f"wrote {FLAGS.json}")
    if not all(r["losses_finite"] for r in rows):
        sys.exit("error: a training run had a non-finite loss (see rows in the JSON)")


if __name__ == "__main__":
    app.run(main)
