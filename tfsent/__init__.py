"""tfsent: contrastive sentence-embedding objectives as Keras 3 / TensorFlow models.

Importing tfsent registers every method, layer, callback, schedule and optimizer with Keras
(package "tfsent"), so `keras.saving.load_model` restores them.

The seven stages and where each lives (read data, build the encoder, method loss, train
loop, select, export, serve): docs/architecture.md.
"""

__version__ = "0.1.0"

from tfsent import _moved  # noqa: E402

_moved.install()  # old module names (tfsent._moved.MOVED) keep importing

from tfsent import _startup  # noqa: E402
from tfsent import cpu_settings  # noqa: E402

# oneDNN on or off, measured for this machine (or overridden), must be chosen before
# TensorFlow is imported (TF_ENABLE_ONEDNN_OPTS); threads right after.
cpu_settings.choose_before_tensorflow()

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
