"""tfsent: contrastive sentence-embedding objectives as Keras 3 / TensorFlow models.

Importing tfsent registers every method, layer and callback with Keras (package "tfsent"),
so `keras.saving.load_model` restores them.

The seven stages and where each lives (read data, build the encoder, method loss, train
loop, select, export, serve): docs/architecture.md.
"""

__version__ = "0.1.0"

from tfsent import _moved  # noqa: E402

_moved.install()  # old module names (tfsent._moved.MOVED) keep importing

from tfsent import callbacks, encoders, layers, methods  # noqa: E402,F401
# The output formats; importing them also installs SentenceEncoder.export's writer (the
# exporter hook of tfsent.encoders.model).
from tfsent import formats  # noqa: E402,F401
