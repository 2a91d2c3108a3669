"""tfsent: contrastive sentence-embedding objectives as Keras 3 / TensorFlow models.

Importing tfsent registers every method, layer, callback, schedule and optimizer with Keras
(package "tfsent"), so `keras.saving.load_model` restores them.

The seven stages and where each lives (read data, build the encoder, method loss, train
loop, select, export, serve): docs/architecture.md.
"""

__version__ = "0.1.0"

import sys  # noqa: E402

from tfsent import _moved  # noqa: E402

_moved.install()  # old module names (tfsent._moved.MOVED) keep importing

from tfsent import _startup  # noqa: E402
from tfsent import cpu_settings  # noqa: E402

# oneDNN on or off, measured for this machine (or overridden), must be chosen before
# TensorFlow is imported (TF_ENABLE_ONEDNN_OPTS); threads right after.
try:
    cpu_settings.choose_before_tensorflow()
except Exception as _error:  # a bad --cpu_* flag or TFSENT_* value: a ConfigError
    if type(_error).__name__ != "ConfigError" or sys.argv[:1] != ["-m"]:
        raise
    # Under `python -m tfsent.<command>`: one error line and status 2, as every command's
    # bad input (tfsent.cli.fail), before TensorFlow is imported.
    sys.stderr.write(f"error: {_error}\n")
    sys.exit(2)

# Under `python -m tfsent.<command>`: TensorFlow's native start-up notices filtered.
with _startup.native_notices_filtered(_startup.quiet_wanted()):
    import tensorflow as _tf  # noqa: E402

    cpu_settings.apply_after_tensorflow()
    _tf.config.list_physical_devices("GPU")  # the CUDA probe, inside the filter
    from tfsent import encoders, layers, methods, training  # noqa: E402,F401
    # The output formats; importing them also installs SentenceEncoder.export's writer
    # (the exporter hook of tfsent.encoders.model).
    from tfsent import formats  # noqa: E402,F401


def __getattr__(name):
    """`tfsent.<old module name>` (`tfsent.callbacks.STSDevEvaluation` after `import tfsent`)
    resolves through `_moved.MOVED`: the new module, with the old name's FutureWarning."""
    if f"tfsent.{name}" in _moved.MOVED:
        import importlib

        return importlib.import_module(f"tfsent.{name}")
    raise AttributeError(f"module 'tfsent' has no attribute {name!r}")
