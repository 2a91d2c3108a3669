"""SCD's projector: the MLP that maps sentence embeddings to the decorrelation space."""

import keras


@keras.saving.register_keras_serializable(package="tfsent")
class Projector(keras.layers.Layer):
    """Linear(H->W) + BN + ReLU, Linear(W->W, no bias) + BN + ReLU, Linear(W->W, no bias).

    The layout of SCD's reference code (projector "4096-4096-4096" after Barlow Twins): only
    the first linear layer has a bias; the BatchNorms carry a learned scale and offset. The
    final affine-free standardisation of SCD's cross-correlation is not part of this layer:
    it is inside `tfsent.losses.scd_loss`.

    BatchNorm follows PyTorch's `BatchNorm1d` defaults, which the reference uses: in training
    mode each feature is normalised with the statistics of the batch it is called on, biased
    variance, epsilon 1e-5; the moving averages are updated with PyTorch momentum 0.1, i.e.
    Keras `momentum=0.9` (moving = 0.9 * moving + 0.1 * batch). The moving averages matter
    only for inference-mode calls, which SCD never makes (the projector is a training-only
    head: it is not exported).

    Batch statistics are those of the tensor passed in. `tfsent.methods.SCD` calls the
    projector on the embeddings gathered from all replicas, so under tf.distribute the
    statistics are global-batch statistics, identical on every replica, and so are the
    moving-average updates (no synchronised BatchNorm and no extra collective needed).

    Args:
        width: W, the output size of every linear layer (4096 in the paper/reference).
        momentum: Keras BatchNormalization momentum for the moving statistics (0.9).
        epsilon: BatchNorm epsilon (1e-5).
    """

    def __init__(self, width=4096, momentum=0.9, epsilon=1e-5, **kwargs):
        super().__init__(**kwargs)
        self.width = int(width)
        if self.width < 1:
            raise ValueError(f"projector width must be >= 1, got {width}")
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        dt = self.dtype_policy
        bn = dict(momentum=self.momentum, epsilon=self.epsilon, dtype=dt)
        self.dense_1 = keras.layers.Dense(self.width, use_bias=True, name="dense_1", dtype=dt)
        self.bn_1 = keras.layers.BatchNormalization(name="bn_1", **bn)
        self.dense_2 = keras.layers.Dense(self.width, use_bias=False, name="dense_2", dtype=dt)
        self.bn_2 = keras.layers.BatchNormalization(name="bn_2", **bn)
        self.dense_3 = keras.layers.Dense(self.width, use_bias=False, name="dense_3", dtype=dt)

    def build(self, input_shape):
        hidden = (input_shape[0], self.width)
        self.dense_1.build(input_shape)
        self.bn_1.build(hidden)
        self.dense_2.build(hidden)
        self.bn_2.build(hidden)
        self.dense_3.build(hidden)
        self.built = True

    def call(self, x, training=False):
        x = keras.activations.relu(self.bn_1(self.dense_1(x), training=training))
        x = keras.activations.relu(self.bn_2(self.dense_2(x), training=training))
        return self.dense_3(x)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.width)

    def get_config(self):
        config = super().get_config()
        config.update({"width": self.width, "momentum": self.momentum,
                       "epsilon": self.epsilon})
        return config
