"""Small trainable heads on top of sentence embeddings."""

import keras


@keras.saving.register_keras_serializable(package="tfsent")
class MLPEncoder(keras.layers.Layer):
    """CLSR's encoder e: Dense(hidden_dim, ReLU) -> Dense(output_dim), on (B, D) embeddings.

    Args:
        hidden_dim: width of the hidden layer.
        output_dim: size of the representation (the paper: 768 = BERT's H).
    """

    def __init__(self, hidden_dim, output_dim, **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = int(hidden_dim)
        self.output_dim = int(output_dim)
        self.hidden = keras.layers.Dense(self.hidden_dim, activation="relu", name="hidden",
                                         dtype=self.dtype_policy)
        self.out = keras.layers.Dense(self.output_dim, name="out", dtype=self.dtype_policy)

    def build(self, input_shape):
        self.hidden.build(input_shape)
        self.out.build((input_shape[0], self.hidden_dim))
        self.built = True

    def call(self, x):
        return self.out(self.hidden(x))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.output_dim)

    def get_config(self):
        config = super().get_config()
        config.update({"hidden_dim": self.hidden_dim, "output_dim": self.output_dim})
        return config
