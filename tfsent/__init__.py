"""tfsent: contrastive sentence-embedding objectives as Keras 3 / TensorFlow models."""

__version__ = "0.1.0"

from tfsent import methods  # noqa: E402,F401  (tfsent.methods.SimCSE, ...)
