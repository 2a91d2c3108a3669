"""Where training time goes: the matmuls of one SimCSE training step, TF/XLA vs PyTorch.

    python benchmarks/gemm_shapes.py --json=FILE [--batch_size=64 --max_seq_length=32
        --repeats=20 --skip_peer]

A training step of unsupervised SimCSE (batch B, length L, two views) multiplies
T = 2 B L token rows by each layer's weights: three forward shapes (Q/K/V/output
projections H x H, FFN up H x I, FFN down I x H), the input gradients (dY W^T) and the weight
gradients (X^T dY). These six matmuls are ~99% of the step's model FLOPs (the attention
score/value matmuls are the rest at L = 32). This script times each alone, float32,
on random inputs, in fresh processes one after the other:

  tf_xla    tf.linalg.matmul in a tf.function(jit_compile=True): what tfsent's XLA train step
            runs (XLA:CPU's own dot emitter);
  tf_graph  the same matmul in TF's graph executor (oneDNN);
  torch     torch.matmul in the peer venv (the operands of the gradient matmuls are
            transposed views, as autograd passes them).

GFLOP/s is 2 m k n over the best of `repeats` calls, and `vs_peak` divides it by the n^3
matmul peak measured in the same run (as train_throughput.py). A step cannot run faster
than its matmuls: if XLA's matmuls reach a fraction f of torch's, tfsent's XLA step is
bounded near f x the peer's speed, whatever the rest of the step does.
"""

import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import peer_env  # noqa: E402  (defines --peer_venv, --peer_python)

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch_size", 64, "Sentences per training batch (two views each).")
flags.DEFINE_integer("max_seq_length", 32, "Tokens per sentence.")
flags.DEFINE_integer("hidden", 384, "Hidden size (minilm-l6: 384).")
flags.DEFINE_integer("intermediate", 1536, "FFN size (minilm-l6: 1536).")
flags.DEFINE_integer("repeats", 20, "Timed calls per matmul (the fastest counts).")
flags.DEFINE_integer("matmul_size", 2048, "n of the n x n x n matmul that measures the peak.")
flags.DEFINE_string("json", None, "Where to write the results (JSON).")
flags.DEFINE_bool("skip_peer", False, "Measure TF only (no PyTorch venv).")


def main(argv):
    """Times the six matmuls on each side, writes --json, prints the table."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS.json:
        raise app.UsageError("--json is required (where to write the results)")
    for name in ("batch_size", "max_seq_length", "hidden", "intermediate", "repeats",
                 "matmul_size"):
        if getattr(FLAGS, name) < 1:
            raise app.UsageError(f"--{name} must be >= 1, got {getattr(FLAGS, name)}")
    busy, warning = common.check_busy()
    peer_python = None
    if not FLAGS.skip_peer:
        peer_python = peer_env.ensure_peer_env(FLAGS.peer_venv, FLAGS.peer_python)
    tokens = 2 * FLAGS.batch_size * FLAGS.max_seq_length
    shape_args = [f"--tokens={tokens}", f"--hidden={FLAGS.hidden}",
                  f"--intermediate={FLAGS.intermediate}", f"--repeats={FLAGS.repeats}"]
    peaks = common.measure_peak(peer_python, FLAGS.matmul_size, 5,
                                peer_env.worker_env() if peer_python else None)
    peak = max(v for v in peaks.values() if v)
    ours = common.run_worker(sys.executable, "tfsent_worker.py", ["--mode=gemm"] + shape_args,
                             what="TF matmuls (XLA and graph)")["gemms"]
    theirs = None
    if peer_python:
        theirs = common.run_worker(peer_python, "peer_worker.py", ["--mode=gemm"] + shape_args,
                                   env=peer_env.worker_env(), what="PyTorch matmuls")["gemms"]
    rows = []
    for i, ours_row in enumerate(ours):
        row = {"name": ours_row["name"], "tf_xla_flops": ours_row["xla"],
               "tf_graph_flops": ours_row["graph"],
               "torch_flops": theirs[i]["torch"] if theirs else None}
        row["xla_vs_torch"] = row["tf_xla_flops"] / row["torch_flops"] if theirs else None
        rows.append(row)
    result = {"rows": rows, "peak_flops": peak, "peak_measurements": peaks,
              "settings": {"tokens": tokens, "batch_size": FLAGS.batch_size,
                           "max_seq_length": FLAGS.max_seq_length, "hidden": FLAGS.hidden,
                           "intermediate": FLAGS.intermediate, "repeats": FLAGS.repeats,
                           "cpu_count": os.cpu_count()},
              "cpu_busy_before": busy,
              "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])}
    if theirs:
        ratios = [r["xla_vs_torch"] for r in rows]
        result["xla_vs_torch_min"], result["xla_vs_torch_max"] = min(ratios), max(ratios)
    if warning:
        result["warning"] = warning
    result = common.write_result(FLAGS.json, result, peer_python)

    def cell(flops):
        return "-" if flops is None else f"{flops / 1e9:.0f} ({100 * flops / peak:.0f}%)"

    common.print_table(
        ["matmul", "TF XLA", "TF graph", "PyTorch", "XLA / PyTorch"],
        [[r["name"], cell(r["tf_xla_flops"]), cell(r["tf_graph_flops"]), cell(r["torch_flops"]),
          common.fmt(r["xla_vs_torch"], 2) if r["xla_vs_torch"] else "-"] for r in rows],
        title=f"training-step matmuls, T = {tokens} token rows, GFLOP/s (% of the "
              f"{peak / 1e9:.0f} GFLOP/s peak)")
    if warning:
        print(f"warning: {warning}")
    print(f"wrote {FLAGS.json}")


if __name__ == "__main__":
    app.run(main)
