"""The sentence-transformers format: `SentenceTransformer(DIR)` loads it offline. The
transformer in Hugging Face's layout at the top level (`huggingface.write_transformer`), then
modules.json's WeightedLayerPooling (layer-averaging poolings), Pooling, Dense (a `cls`
pooler, a method's export head) and Normalize (only with `normalize=True`) modules."""

import os

import keras
import numpy as np

from tfsent.encoders.hf_format import SAFETENSORS_FILE
from tfsent.errors import ConfigError
from tfsent.layers.heads import MLPEncoder
from tfsent.publish.huggingface import write_transformer
from tfsent.publish.staging import write_json, write_safetensors

# Poolings sentence-transformers expresses, and how: (Pooling mode, extra modules).
ST_POOLINGS = {
    "mean": "Pooling mean",
    "cls_before_pooler": "Pooling cls",
    "cls": "Pooling cls + Dense(H, H, Tanh) with the pooler's weights",
    "first_last_avg": "WeightedLayerPooling (layers 1 and L, weight 1; others 0) + Pooling mean",
    "emb_last_avg": "WeightedLayerPooling (embeddings and layer L) + Pooling mean",
    "last2_avg": "WeightedLayerPooling (layers L-1 and L) + Pooling mean",
}
# keras activation name -> torch.nn module class sentence-transformers' Dense instantiates.
ST_ACTIVATIONS = {"linear": "torch.nn.modules.linear.Identity",
                  "relu": "torch.nn.modules.activation.ReLU",
                  "tanh": "torch.nn.modules.activation.Tanh",
                  "sigmoid": "torch.nn.modules.activation.Sigmoid",
                  "gelu": "torch.nn.modules.activation.GELU"}  # keras gelu: exact, as torch's


def _layer_weights(pooling, num_layers):
    """(layer_start, weights) of sentence-transformers' WeightedLayerPooling that averages
    the same hidden states as tfsent's `pooling` (index 0 = the embedding output)."""
    n = num_layers
    if pooling == "last2_avg":
        return n - 1, [1.0, 1.0]
    if pooling == "first_last_avg":
        return (1, [1.0]) if n == 1 else (1, [1.0] + [0.0] * (n - 2) + [1.0])
    if pooling == "emb_last_avg":
        return 0, [1.0] + [0.0] * (n - 1) + [1.0]
    raise ValueError(pooling)


def _activation_name(layer):
    return keras.activations.serialize(layer.activation)


def dense_stack(head):
    """A method's export head as [(kernel (in, out), bias or None, keras activation name)].

    Expressible heads: a keras Dense, a keras Sequential of Dense layers, tfsent's
    MLPEncoder (CLSR's e); Dense activations must be in ST_ACTIVATIONS."""
    if head is None:
        return []
    if isinstance(head, MLPEncoder):
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


def check_sentence_transformers_pooling(pooling):
    """Raises ConfigError (listing what it can express) unless sentence-transformers can
    express tfsent's `pooling` faithfully."""
    if pooling not in ST_POOLINGS:
        lines = "\n".join(f"  {name}: {how}" for name, how in ST_POOLINGS.items())
        raise ConfigError(f"--pooling={pooling} cannot be expressed by sentence-transformers' "
                          f"modules; the format expresses these poolings:\n{lines}")


def _write_st_dense(directory, kernel, bias, activation):
    os.makedirs(directory)
    tensors = {"linear.weight": np.ascontiguousarray(kernel.T)}
    if bias is not None:
        tensors["linear.bias"] = np.ascontiguousarray(bias)
    write_safetensors(os.path.join(directory, SAFETENSORS_FILE), tensors)
    write_json(os.path.join(directory, "config.json"),
               {"in_features": int(kernel.shape[0]), "out_features": int(kernel.shape[1]),
                "bias": bias is not None, "activation_function": ST_ACTIVATIONS[activation]})


def check(pooling, head):
    """Refuses (ConfigError) a pooling or head the format cannot express, before anything is
    written."""
    check_sentence_transformers_pooling(pooling)
    dense_stack(head)


def write(encoder, directory, pooling, head, normalize, max_seq_length, prompts=None):
    """The sentence_transformers format into the existing `directory`; returns the details
    `tfsent_export.json` records. `prompts` ({"query": ..., "document": ...}) go into
    config_sentence_transformers.json, where `encode_query` / `encode_document` find them."""
    check_sentence_transformers_pooling(pooling)
    dense_layers = dense_stack(head)  # refuses inexpressible heads before anything is written
    backbone = encoder.backbone
    pooler = None
    if pooling == "cls":
        pooler = getattr(encoder, "pooler_dense", None)
        if pooler is None:
            pooler = getattr(backbone, "pooled_dense", None)
        if pooler is None:
            raise ConfigError(f"--pooling=cls needs a pooler Dense, which this {encoder.family} "
                              "encoder has not; use cls_before_pooler")
        dense_layers = [(np.asarray(pooler.kernel.numpy(), np.float32),
                         np.asarray(pooler.bias.numpy(), np.float32), "tanh")] + dense_layers
    layered = pooling in ("first_last_avg", "emb_last_avg", "last2_avg")
    write_transformer(encoder, directory, max_seq_length,
                      config_extra={"output_hidden_states": True} if layered else None)
    write_json(os.path.join(directory, "sentence_bert_config.json"),
               {"max_seq_length": int(max_seq_length), "do_lower_case": False})
    modules = [{"idx": 0, "name": "0", "path": "",
                "type": "sentence_transformers.models.Transformer"}]

    def add(kind, folder):
        idx = len(modules)
        path = f"{idx}_{folder}"
        modules.append({"idx": idx, "name": str(idx), "path": path,
                        "type": f"sentence_transformers.models.{kind}"})
        return os.path.join(directory, path)

    hidden = int(backbone.hidden_dim)
    if layered:
        start, weights = _layer_weights(pooling, backbone.num_layers)
        path = add("WeightedLayerPooling", "WeightedLayerPooling")
        os.makedirs(path)
        write_json(os.path.join(path, "config.json"),
                   {"word_embedding_dimension": hidden, "layer_start": start,
                    "num_hidden_layers": int(backbone.num_layers)})
        write_safetensors(os.path.join(path, SAFETENSORS_FILE),
                          {"layer_weights": np.asarray(weights, np.float32)})
    path = add("Pooling", "Pooling")
    os.makedirs(path)
    mode = "cls" if pooling in ("cls", "cls_before_pooler") else "mean"
    write_json(os.path.join(path, "config.json"),
               {"word_embedding_dimension": hidden,
                "pooling_mode_cls_token": mode == "cls",
                "pooling_mode_mean_tokens": mode == "mean",
                "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False,
                "pooling_mode_weightedmean_tokens": False,
                "pooling_mode_lasttoken": False,
                "include_prompt": True})
    for kernel, bias, activation in dense_layers:
        _write_st_dense(add("Dense", "Dense"), kernel, bias, activation)
    if normalize:
        os.makedirs(add("Normalize", "Normalize"))
    write_json(os.path.join(directory, "modules.json"), modules)
    write_json(os.path.join(directory, "config_sentence_transformers.json"),
               {"prompts": dict(prompts or {}), "default_prompt_name": None,
                "similarity_fn_name": "cosine"})
    dim = dense_layers[-1][0].shape[1] if dense_layers else hidden
    return {"embedding_dim": int(dim), "modules": [m["type"].rsplit(".", 1)[1]
                                                   for m in modules]}
