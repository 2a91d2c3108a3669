"""tfsent: contrastive sentence-embedding objectives as Keras 3 / TensorFlow models.

Importing tfsent registers every method, layer and callback with Keras (package "tfsent"),
so `keras.saving.load_model` restores them.

The seven stages and where each lives (read data, build the encoder, method loss, train
loop, select, export, serve): docs/architecture.md.
"""

__version__ = "0.1.0"

from tfsent import _moved  # noqa: E402

_moved.install()  # old module names (tfsent._moved.MOVED) keep importing

from tfsent import _startup  # noqa: E402

# Under `python -m tfsent.<command>`: TensorFlow's native start-up notices filtered.
with _startup.native_notices_filtered(_startup.quiet_wanted()):
    import tensorflow as _tf  # noqa: E402

    _tf.config.list_physical_devices("GPU")  # the CUDA probe, inside the filter
    from tfsent import callbacks, encoders, layers, methods  # noqa: E402,F401
