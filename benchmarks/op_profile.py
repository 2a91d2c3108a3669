"""Where the time goes, op by op: tfsent's SimCSE training step and `encode` against
sentence-transformers', each under its own profiler.

    python benchmarks/op_profile.py --json=FILE [--steps=5 --encode_sentences=512
        --views=default,avx2 --skip_peer]

For each view, in fresh processes:
  tfsent  `tfsent_worker.py --mode=op_profile`: `--steps` SimCSE steps through `model.fit`
          (minilm-l6, batch 64, length 32, built as `python -m tfsent.train` builds them)
          and one `encode` of `--encode_sentences` wiki sentences (batch 64, truncation
          256), traced by `tf.profiler.experimental`; self time per op kind from the
          trace's host threads (common.xplane_self_times: TF executor ops by type, e.g.
          `_MklMatMul`, XLA:CPU thunks by HLO name, e.g. `fusion`, `dot`).
  torch   `peer_worker.py --mode=op_profile`: the same steps in a bare PyTorch loop over
          sentence-transformers' model and MultipleNegativesRankingLoss, and one `encode`,
          under `torch.profiler`; self CPU time per aten op.

Views (the environment each side's processes get):
  default  this machine as it is: TF's and torch's own choices (tfsent's CPU settings at
           their defaults, TFSENT_CPU_SETTINGS=default).
  avx2     the part of an AVX2 machine's view that can be forced on an AVX-512 one: TF with
           oneDNN's ops off (TF 2.21's default without AVX512_VNNI / BF16 / AMX), Eigen's
           matrix products (oneDNN's run-time sgemm) limited to AVX2
           (ONEDNN_MAX_CPU_ISA=AVX2) and XLA:CPU too (XLA_FLAGS=--xla_cpu_max_isa=AVX2);
           torch with its kernels dispatched at AVX2 (ATEN_CPU_CAPABILITY=avx2) and oneDNN
           / MKL limited to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2).
           Not emulated: cache sizes, clocks, core counts of a real AVX2 part (Eigen's
           elementwise code is built for AVX on every kind).
  avx2_onednn  the avx2 view with TF's oneDNN ops on, limited to AVX2 code: what tfsent's
           calibration chose on such a view (benchmarks/README.md, "Machine C,
           2026-11-27"); tfsent only.
  measured tfsent with its measured CPU settings (tfsent.cpu_settings, from the cache).

Self times are thread-seconds (two threads busy for 1 s count 2 s); shares are of each
trace's op total, so the sides compare by share, and by wall time. TF's runtime events
(dispatching a function and waiting for it on the calling thread) are one separate figure,
not an op.
"""

import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import peer_env  # noqa: E402  (defines --peer_venv, --peer_python)

FLAGS = flags.FLAGS
flags.DEFINE_integer("steps", 5, "Traced training steps per side (after 2 untraced).")
flags.DEFINE_integer("encode_sentences", 512, "Sentences encoded in the encode trace.")
flags.DEFINE_list("views", ["default", "avx2"], "Environments to profile: default, avx2, "
                  "avx2_onednn, measured.")
flags.DEFINE_string("data", common.DEFAULT_WIKI, "Sentence file, one a line (default: the "
                    "wiki prefix; the demo corpus when ../shared/data is absent).")
flags.DEFINE_integer("top", 12, "Ops per table.")
flags.DEFINE_string("json", None, "Where to write the results (JSON).")
flags.DEFINE_bool("skip_peer", False, "Profile tfsent only (no PyTorch venv).")

_TF_AVX2 = {"TFSENT_CPU_SETTINGS": "default", "ONEDNN_MAX_CPU_ISA": "AVX2",
            "XLA_FLAGS": "--xla_cpu_max_isa=AVX2"}
VIEWS = {
    "default": ({"TFSENT_CPU_SETTINGS": "default"}, {}),
    "avx2": (dict(_TF_AVX2, TF_ENABLE_ONEDNN_OPTS="0"),
             {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
              "MKL_ENABLE_INSTRUCTIONS": "AVX2"}),
    "avx2_onednn": (dict(_TF_AVX2, TF_ENABLE_ONEDNN_OPTS="1"), None),
    "measured": ({"TFSENT_CPU_SETTINGS": "measure"}, None),
}


def table(name, side_results, top):
    """Markdown: the `top` ops of each side's `name` trace with their shares."""
    lines = [f"| {name}: {' | '.join(side_results)} |",
             "|" + "---|" * len(side_results)]
    columns = [[f"{r['op']} {100 * r['share']:.1f}%" for r in res[name]["top"][:top]]
               for res in side_results.values()]
    for i in range(top):
        lines.append("| " + " | ".join(c[i] if i < len(c) else "" for c in columns) + " |")
    lines.append("| " + " | ".join(
        f"wall {res[name]['wall_s']} s; ops {res[name]['total_s']} thread-s"
        + (f", runtime {res[name]['runtime_s']}" if res[name].get("runtime_s") else "")
        for res in side_results.values()) + " |")
    return "\n".join(lines)


def main(argv):
    """Runs the workers of every view, writes --json, prints one table per trace."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS.json:
        raise app.UsageError("--json is required (where to write the results)")
    unknown = sorted(set(FLAGS.views) - set(VIEWS))
    if unknown:
        raise app.UsageError(f"--views: unknown {unknown}; known: {sorted(VIEWS)}")
    if FLAGS.steps < 1 or FLAGS.encode_sentences < 1:
        raise app.UsageError("--steps and --encode_sentences must be >= 1")
    data, note = common.data_or_usage_error(FLAGS.data)
    busy, warning = common.check_busy()
    peer_python = None if FLAGS.skip_peer else peer_env.ensure_peer_env(FLAGS.peer_venv,
                                                                         FLAGS.peer_python)
    shared = [f"--data={data}", "--batch_size=64", "--max_seq_length=32",
              f"--steps={FLAGS.steps}", "--warmup_steps=2"]
    results = {}
    for view in FLAGS.views:
        tf_env, torch_env = VIEWS[view]
        sides = {"tfsent": common.run_worker(
            sys.executable, "tfsent_worker.py",
            ["--mode=op_profile", f"--encode_sentences={FLAGS.encode_sentences}",
             "--max_sentences=5000"] + shared, env=tf_env, what=f"tfsent op profile ({view})")}
        if peer_python and torch_env is not None:
            sides["sentence-transformers"] = common.run_worker(
                peer_python, "peer_worker.py",
                ["--mode=op_profile", f"--max_sentences={FLAGS.encode_sentences}"] + shared,
                env=dict(peer_env.worker_env(), **torch_env),
                what=f"sentence-transformers op profile ({view})")
        results[view] = {"env": {"tfsent": tf_env, "torch": torch_env}, "sides": sides}
        for trace in ("train", "encode"):
            print(f"\n{view}, {trace}:\n" + table(trace, sides, FLAGS.top))
    result = common.write_result(FLAGS.json, {
        "views": results, "data": data, "data_note": note, "busy": busy,
        "busy_warning": warning, "steps": FLAGS.steps,
        "encode_sentences": FLAGS.encode_sentences}, peer_python)
    del result


if __name__ == "__main__":
    app.run(main)
