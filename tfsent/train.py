"""Trains a sentence encoder with one of tfsent's objectives.

    python -m tfsent.train --method=NAME [--config=configs/RECIPE.py]
        [--config.FIELD=VALUE ...] [--output_dir=DIR]

With no other flag it trains `minilm-l6` on the demo corpus shipped in the package for a
few minutes on a CPU, selects the best checkpoint on the demo dev pairs, exports it to
DIR/export/<version>/ and writes DIR/metrics.json. Running the same command again after an
interruption resumes from the last checkpoint. See `tfsent.training.config` for every
field; the run itself is `tfsent.training.run`.
"""

import os
import sys

from absl import flags

from tfsent import cli, training
from tfsent.methods import help_text as methods_help_text

FLAGS = flags.FLAGS
flags.DEFINE_string("method", None, methods_help_text())
flags.DEFINE_string("config", None, "Recipe file (configs/*.py) defining get_config().")
flags.DEFINE_string("output_dir", None, "Run directory (default: runs/<method>). A folder "
                    "holding an unfinished run with the same config resumes it; one with "
                    "another config, or not a tfsent run, is refused.")
flags.DEFINE_bool("overwrite", False, "Discard the earlier run in --output_dir (its "
                  "checkpoints, exports and metrics) and train anew.")
flags.DEFINE_multi_string("config_override", [], "FIELD=VALUE (same as --config.FIELD=VALUE).")
cli.define_cpu_flags()


def main(argv):
    """absl entry point: a bad flag, field or input prints `error: ...`, exit status 2."""
    def body():
        overrides = list(FLAGS.config_override) + _OVERRIDES
        config = training.resolve_config(FLAGS.method, FLAGS.config, overrides)
        output_dir = FLAGS.output_dir or os.path.join("runs", FLAGS.method)
        training.run(FLAGS.method, config, output_dir, overwrite=FLAGS.overwrite)

    cli.run_command(body, argv, required=[
        (FLAGS.method, "--method is required, e.g. --method=cmlm_cse")],
        interrupt_hint=RESUME_HINT)


RESUME_HINT = "run the same command again to resume from the last checkpoint"


_OVERRIDES = []


def entry():
    """Console entry: separates --config.FIELD=VALUE overrides, then runs absl."""
    global _OVERRIDES
    argv, _OVERRIDES = training.split_config_overrides(sys.argv)
    cli.start(main, argv=argv, interrupt_hint=RESUME_HINT)


if __name__ == "__main__":
    entry()
