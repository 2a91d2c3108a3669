"""tfsent: contrastive sentence-embedding objectives as Keras 3 / TensorFlow models."""

__version__ = "0.1.0"
