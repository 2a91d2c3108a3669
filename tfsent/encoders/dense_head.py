"""The Dense modules of a sentence-transformers folder (EmbeddingGemma's 2_Dense / 3_Dense),
run after pooling as part of the encoder and trained with it:

    head = read_dense_modules([dir_2, dir_3], input_dim)   # a DenseHead with the weights
    head(pooled)                                            # (B, units of the last module)

Each module folder is sentence-transformers' own: config.json (in_features, out_features,
bias, activation_function) and model.safetensors (`linear.weight` (out, in), `linear.bias`)
or pytorch_model.bin (not read: an error names it).
"""

import os

import keras
import numpy as np

from tfsent.encoders.huggingface.config import read_json
from tfsent.errors import InputError

# sentence-transformers' activation_function (a torch.nn class path) -> Keras activation.
ACTIVATIONS = {"torch.nn.modules.linear.Identity": None,
               "torch.nn.modules.activation.Tanh": "tanh",
               "torch.nn.modules.activation.ReLU": "relu",
               "torch.nn.modules.activation.Sigmoid": "sigmoid",
               "torch.nn.modules.activation.GELU": "gelu"}


@keras.saving.register_keras_serializable(package="tfsent")
class DenseHead(keras.layers.Layer):
    """Dense layers applied in order to the pooled vector.

    Args:
        modules: list of {"units": int, "use_bias": bool, "activation": str or None}.
    """

    def __init__(self, modules, **kwargs):
        super().__init__(**kwargs)
        self.modules = [dict(units=int(m["units"]), use_bias=bool(m["use_bias"]),
                             activation=m.get("activation")) for m in modules]
        self.dense = [keras.layers.Dense(m["units"], use_bias=m["use_bias"],
                                         activation=m["activation"], dtype=self.dtype_policy,
                                         name=f"dense_{i}")
                      for i, m in enumerate(self.modules)]

    @property
    def output_dim(self):
        return self.modules[-1]["units"]

    def build(self, input_shape):
        dim = input_shape[-1]
        for layer, module in zip(self.dense, self.modules):
            layer.build((None, dim))
            dim = module["units"]
        self.built = True

    def call(self, x):
        for layer in self.dense:
            x = layer(x)
        return x

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.output_dim)

    def get_config(self):
        config = super().get_config()
        config["modules"] = [dict(m) for m in self.modules]
        return config


def read_dense_modules(directories, input_dim):
    """A built `DenseHead` holding the weights of sentence-transformers Dense module
    folders (in order) that follow a pooled vector of `input_dim`; InputError naming the
    file on a missing weight, a shape that does not chain, or an activation tfsent lacks."""
    from safetensors.numpy import load_file

    modules, weights = [], []
    dim = int(input_dim)
    for directory in directories:
        config_path = os.path.join(directory, "config.json")
        config = read_json(config_path)
        activation = config.get("activation_function", "torch.nn.modules.activation.Tanh")
        if activation not in ACTIVATIONS:
            raise InputError(f"activation_function {activation!r} is not supported (tfsent "
                             f"runs {', '.join(sorted(ACTIVATIONS))})", path=config_path)
        path = os.path.join(directory, "model.safetensors")
        if not os.path.exists(path):
            raise InputError("no model.safetensors (tfsent reads a Dense module's weights "
                             "from safetensors only)", path=directory)
        tensors = load_file(path)
        kernel = tensors.get("linear.weight")
        use_bias = bool(config.get("bias", True))
        if kernel is None or kernel.ndim != 2 or kernel.shape[1] != dim:
            raise InputError(f"linear.weight has shape "
                             f"{None if kernel is None else kernel.shape}, expected "
                             f"(out_features, {dim})", path=path)
        if use_bias and tensors.get("linear.bias") is None:
            raise InputError("config.json sets bias but linear.bias is missing", path=path)
        modules.append({"units": int(kernel.shape[0]), "use_bias": use_bias,
                        "activation": ACTIVATIONS[activation]})
        weights.append(np.ascontiguousarray(kernel.T, np.float32))
        if use_bias:
            weights.append(tensors["linear.bias"].astype(np.float32))
        dim = int(kernel.shape[0])
    head = DenseHead(modules)
    head.build((None, int(input_dim)))
    head.set_weights(weights)
    return head
