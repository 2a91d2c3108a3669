"""An export head (a layer on the pooled embedding, e.g. CLSR's MLP) as plain Dense layers:
what sentence-transformers' Dense modules (`sentence_transformers.py`) and the ONNX graph
(`onnx.py`) express."""

import keras
import numpy as np

from tfsent.encoders.dense_head import DenseHead
from tfsent.errors import ConfigError
from tfsent.layers.heads import MLPEncoder

# keras activation name -> torch.nn module class sentence-transformers' Dense instantiates.
ST_ACTIVATIONS = {"linear": "torch.nn.modules.linear.Identity",
                  "relu": "torch.nn.modules.activation.ReLU",
                  "tanh": "torch.nn.modules.activation.Tanh",
                  "sigmoid": "torch.nn.modules.activation.Sigmoid",
                  "gelu": "torch.nn.modules.activation.GELU"}  # keras gelu: exact, as torch's


def _activation_name(layer):
    return keras.activations.serialize(layer.activation)


def dense_stack(head):
    """A method's export head as [(kernel (in, out), bias or None, keras activation name)].

    Expressible heads: a keras Dense, a keras Sequential of Dense layers, tfsent's
    MLPEncoder (CLSR's e), an encoder's DenseHead (a sentence-transformers folder's Dense
    modules); Dense activations must be in ST_ACTIVATIONS."""
    if head is None:
        return []
    if isinstance(head, DenseHead):
        layers = list(head.dense)
    elif isinstance(head, MLPEncoder):
        layers = [head.hidden, head.out]
    elif isinstance(head, keras.Sequential):
        layers = list(head.layers)
    else:
        layers = [head]
    out = []
    for layer in layers:
        if type(layer) is not keras.layers.Dense:
            raise ConfigError(
                f"export head layer {layer.name!r} ({type(layer).__name__}) has no "
                "sentence-transformers equivalent: expressible heads are keras Dense layers, "
                "a keras Sequential of them, or tfsent's MLPEncoder")
        if getattr(layer, "lora_enabled", False) or getattr(layer, "quantization_mode", None):
            raise ConfigError(f"export head layer {layer.name!r} is LoRA-enabled or quantized; "
                              "merge or dequantize it first")
        act = _activation_name(layer)
        if act not in ST_ACTIVATIONS:
            raise ConfigError(f"export head layer {layer.name!r} has activation {act!r}, which "
                              "sentence-transformers' Dense cannot express; expressible: "
                              f"{', '.join(ST_ACTIVATIONS)}")
        kernel = np.asarray(layer.kernel.numpy(), np.float32)
        bias = np.asarray(layer.bias.numpy(), np.float32) if layer.use_bias else None
        out.append((kernel, bias, act))
    return out
