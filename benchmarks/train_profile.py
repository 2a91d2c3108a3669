"""Where a training step's time goes: tfsent's SimCSE train_step taken apart.

    python benchmarks/train_profile.py --json=FILE [--batch_size=64 --max_seq_length=32
        --repeats=10 --tfsent_config=FIELD=VALUE ...]

The model, optimizer (AdamW) and tf.data pipeline are built exactly as `python -m
tfsent.train --method=simcse_unsup` builds them (minilm-l6, the run's jit_compile); then, in
one fresh process, each part of a step is compiled alone (tf.function, XLA when the step
is) and timed on one fixed batch, best and median of `--repeats` calls:

  forward                 the loss: both dropout views through the encoder, pooling, the
                          B x B similarity and cross-entropy
  forward_backward        the loss and its gradient w.r.t. all 22.7M trainable parameters
  ..._without_embedding   the same, leaving out the 30522 x 384 token-embedding matrix
  optimizer_update        AdamW's update of every variable from precomputed gradients
  ..._without_embedding   the same, all variables but the token embedding
  train_step              the whole step as model.fit runs it (gradient, gradient norm,
                          update, metrics)
  input_pipeline          the next batch from the tf.data pipeline (tokenization included),
                          alone; fit overlaps it with the step (prefetch)

Derived: backward = forward_backward - forward; the embedding's share of the backward pass
and of the update (the differences of the pairs); the rest of the step = train_step -
forward_backward - optimizer_update (what the parts compiled separately do not account
for; negative when the whole step fuses better than its parts). MFU of forward and
backward against the fp32 matmul peak measured in the same run (model FLOPs as
train_throughput.py counts them: forward F(2B sequences), backward 2F).
"""

import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch_size", 64, "Sentences per training batch (two views each).")
flags.DEFINE_integer("max_seq_length", 32, "Tokens per sentence.")
flags.DEFINE_integer("repeats", 10, "Timed calls per part (after 3 untimed).")
flags.DEFINE_integer("matmul_size", 2048, "n of the n x n x n matmul that measures the peak.")
flags.DEFINE_string("data", None, "Sentence file (default: ../shared/data's wiki prefix, "
                    "else tfsent's demo corpus).")
flags.DEFINE_integer("max_sentences", 5000, "Read only the first N sentences (0: all).")
flags.DEFINE_multi_string("tfsent_config", [], "FIELD=VALUE run-config overrides "
                          "(as --config.FIELD=VALUE of tfsent.train).")
flags.DEFINE_string("json", None, "Where to write the results (JSON).")

def main(argv):
    """Runs the peak and the profile worker, writes --json, prints the table."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS.json:
        raise app.UsageError("--json is required (where to write the results)")
    for name in ("batch_size", "max_seq_length", "repeats", "matmul_size"):
        if getattr(FLAGS, name) < 1:
            raise app.UsageError(f"--{name} must be >= 1, got {getattr(FLAGS, name)}")
    data, note = common.data_or_usage_error(FLAGS.data)
    busy, warning = common.check_busy()
    peaks = common.measure_peak(None, FLAGS.matmul_size, 5)
    peak = max(v for v in peaks.values() if v)
    args = ["--mode=profile", f"--data={data}", f"--batch_size={FLAGS.batch_size}",
            f"--max_seq_length={FLAGS.max_seq_length}", f"--repeats={FLAGS.repeats}",
            f"--max_sentences={FLAGS.max_sentences}"]
    args += [f"--tfsent_config={c}" for c in FLAGS.tfsent_config]
    profile = common.run_worker(sys.executable, "tfsent_worker.py", args,
                                what="tfsent train_step profile")
    forward_flops = common.transformer_forward_flops(
        profile["num_layers"], profile["hidden"], profile["intermediate"],
        FLAGS.max_seq_length, 2 * FLAGS.batch_size)
    derived = common.derive_train_profile(profile["parts"], forward_flops, peak)
    result = {"profile": profile, "derived": derived, "peak_flops": peak,
              "peak_measurements": peaks, "forward_flops": forward_flops,
              "settings": {"batch_size": FLAGS.batch_size, "max_seq_length": FLAGS.max_seq_length,
                           "repeats": FLAGS.repeats, "data": data,
                           "max_sentences": FLAGS.max_sentences,
                           "tfsent_config": list(FLAGS.tfsent_config)},
              "cpu_busy_before": busy,
              "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])}
    if note:
        result["note"] = note
    if warning:
        result["warning"] = warning
    result = common.write_result(FLAGS.json, result)

    parts, step = profile["parts"], profile["parts"]["train_step"]["best_ms"]
    rows = [[name, common.fmt(parts[name]["best_ms"]), common.fmt(parts[name]["median_ms"]),
             f"{100 * parts[name]['best_ms'] / step:.0f}%"]
            for name in common.TRAIN_PROFILE_PARTS]
    for label, key in (("backward", "backward_ms"),
                       ("token-embedding gradient", "embedding_gradient_ms"),
                       ("token-embedding update", "embedding_update_ms"),
                       ("rest of the step", "rest_of_step_ms")):
        rows.append([f"{label} (derived)", common.fmt(derived[key]), "-",
                     f"{100 * derived[key] / step:.0f}%"])
    common.print_table(
        ["part", "best ms", "median ms", "of the step"], rows,
        title=f"SimCSE train_step profile, minilm-l6, batch {FLAGS.batch_size}, "
              f"len {FLAGS.max_seq_length}, jit_compile={profile['jit_compile']}, "
              f"{profile['optimizer']}")
    bw = derived["backward_mfu"]
    print(f"MFU against the {peak / 1e9:.0f} GFLOP/s peak: forward "
          f"{100 * derived['forward_mfu']:.1f}%, backward "
          f"{'-' if bw is None else f'{100 * bw:.1f}%'}, whole step "
          f"{100 * derived['step_mfu']:.1f}%")
    if note:
        print(f"note: {note}")
    if warning:
        print(f"warning: {warning}")
    print(f"wrote {FLAGS.json}")


if __name__ == "__main__":
    app.run(main)
