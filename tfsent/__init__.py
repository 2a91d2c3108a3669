"""tfsent: contrastive sentence-embedding objectives as Keras 3 / TensorFlow models.

Importing tfsent registers every method, layer and callback with Keras (package "tfsent"),
so `keras.saving.load_model` restores them.
"""

__version__ = "0.1.0"

from tfsent import callbacks, encoders, layers, methods  # noqa: E402,F401
