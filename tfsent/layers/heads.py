"""Small trainable heads on top of sentence embeddings."""

import keras
import numpy as np


@keras.saving.register_keras_serializable(package="tfsent")
class MLPEncoder(keras.layers.Layer):
    """CLSR's encoder e: Dense(hidden_dim, ReLU) -> Dense(output_dim), on (B, D) embeddings.

    Args:
        hidden_dim: width of the hidden layer.
        output_dim: size of the representation (the paper: 768 = BERT's H).
        initializer: "random" (Keras' Dense defaults, the paper) or "identity": e starts as
            the identity map, so training starts from the base encoder's embeddings. Hidden
            units 0..D-1 carry relu(x), D..2D-1 carry relu(-x) and the output layer takes
            their difference (relu(x) - relu(-x) = x); any further hidden units start with
            random inputs and zero outputs. Needs hidden_dim >= 2 D and output_dim == D.
    """

    INITIALIZERS = ("random", "identity")

    def __init__(self, hidden_dim, output_dim, initializer="random", **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = int(hidden_dim)
        self.output_dim = int(output_dim)
        if initializer not in self.INITIALIZERS:
            raise ValueError(f"initializer must be one of {self.INITIALIZERS}, "
                             f"got {initializer!r}")
        self.initializer = initializer
        self.hidden = keras.layers.Dense(self.hidden_dim, activation="relu", name="hidden",
                                         dtype=self.dtype_policy)
        self.out = keras.layers.Dense(self.output_dim, name="out", dtype=self.dtype_policy)

    def build(self, input_shape):
        self.hidden.build(input_shape)
        self.out.build((input_shape[0], self.hidden_dim))
        if self.initializer == "identity":
            self._set_identity(int(input_shape[-1]))
        self.built = True

    @staticmethod
    def identity_fits(dim, hidden_dim, output_dim):
        """Whether e on `dim`-wide inputs can start as the identity: hidden_dim >= 2 dim
        and output_dim == dim."""
        return int(hidden_dim) >= 2 * int(dim) and int(output_dim) == int(dim)

    def _set_identity(self, dim):
        """Weights with e(x) = x for every x (see the class docstring)."""
        if not self.identity_fits(dim, self.hidden_dim, self.output_dim):
            raise ValueError(
                f"initializer='identity' needs hidden_dim >= 2 x the input size ({2 * dim}) "
                f"and output_dim == the input size ({dim}); got hidden_dim "
                f"{self.hidden_dim}, output_dim {self.output_dim}")
        eye = np.eye(dim, dtype=np.float32)
        hidden_kernel = np.array(self.hidden.kernel.numpy(), np.float32)
        hidden_kernel[:, :2 * dim] = np.concatenate([eye, -eye], axis=1)
        out_kernel = np.zeros((self.hidden_dim, dim), np.float32)
        out_kernel[:2 * dim] = np.concatenate([eye, -eye], axis=0)
        self.hidden.kernel.assign(hidden_kernel)
        self.hidden.bias.assign(np.zeros(self.hidden_dim, np.float32))
        self.out.kernel.assign(out_kernel)
        self.out.bias.assign(np.zeros(dim, np.float32))

    def call(self, x):
        return self.out(self.hidden(x))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.output_dim)

    def get_config(self):
        config = super().get_config()
        config.update({"hidden_dim": self.hidden_dim, "output_dim": self.output_dim,
                       "initializer": self.initializer})
        return config
