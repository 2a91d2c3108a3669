"""LoRA (low-rank adapters) on a `SentenceEncoder`'s backbone, and their merge.

    enable_lora(encoder, rank, alpha=None)   adapters on the family's targets, the rest frozen
    lora_layers(encoder)                     the LoRA-enabled layers of its backbone
    merged_kernel(layer)                     W + (alpha / rank) * A @ B, float32
    merge_lora(encoder)                      a plain copy: merged kernels, no LoRA variables
    parameter_counts(model)                  (trainable, total) parameters

`enable_lora` is keras-hub's `Backbone.enable_lora(rank, target_layer_names)` on the
family's `lora_targets` (`families.Family`: the query and value projections of every
attention block, in every family), then the adapter scale: keras' LoRA layer computes
x W + (alpha / rank) x A B, with A (W's axes but the last, rank) he-uniform and B (rank,
W's last axis) zero at the start (so the adapted encoder starts equal to the original),
both float32 whatever the dtype policy. keras-hub freezes every other backbone layer and
each adapted layer's kernel; tfsent also freezes the adapted layers' biases (only A and B
train, PEFT's `bias="none"`). What is outside the backbone stays trainable: a sentence-transformers
folder's Dense head (EmbeddingGemma's), which sentence-transformers' own adapters leave
trainable too, and every method's own layers (projectors, heads).

`merge_lora` is what leaves a run (every export format, the encoder directory): a new
backbone of the same config whose adapted kernels hold the merged W + (alpha / rank) A B,
so an export has plain kernels and computes what the adapted encoder's `encode` does.
"""

import keras
import numpy as np
from absl import logging

import tfsent.encoders.families as families
from tfsent.errors import ConfigError


def lora_layers(encoder):
    """The LoRA-enabled layers of `encoder`'s backbone (empty: LoRA is off)."""
    return [layer for layer in encoder.backbone._flatten_layers(include_self=False)
            if getattr(layer, "lora_enabled", False)]


def enable_lora(encoder, rank, alpha=None):
    """Adds rank-`rank` adapters to the family's LoRA targets of `encoder.backbone` and
    freezes the backbone's other weights (module docstring); `alpha` (default: `rank`,
    scale 1) sets the adapters' scale alpha / rank. Returns the adapted layers."""
    rank = int(rank)
    if rank < 1:
        raise ConfigError(f"lora_rank must be >= 1 to enable LoRA, got {rank}")
    targets = families.TABLE[encoder.family].lora_targets
    if not targets:
        raise ConfigError(f"lora_rank: the {encoder.family} family has no LoRA targets")
    if lora_layers(encoder):
        raise ConfigError("LoRA is already enabled on this encoder")
    encoder.backbone.enable_lora(rank, target_layer_names=list(targets))
    layers = lora_layers(encoder)
    if not layers:
        raise ConfigError(f"lora_rank: no layer of the {encoder.family} backbone is named "
                          f"{' or '.join(targets)} (keras-hub renamed them?)")
    alpha = float(rank if alpha is None else alpha)
    for layer in layers:
        layer.lora_alpha = alpha
        if getattr(layer, "bias", None) is not None:
            layer.bias.trainable = False
    return layers


def merged_kernel(layer):
    """The kernel a LoRA-enabled layer computes with, W + (alpha / rank) * A @ B, as a
    float32 array of W's shape: A has W's axes but the last, then the rank (attention
    kernels (hidden, heads, head_dim): A (hidden, heads, rank)), B (rank, W's last)."""
    w = np.asarray(keras.ops.convert_to_numpy(layer._kernel), np.float32)
    a = np.asarray(keras.ops.convert_to_numpy(layer.lora_kernel_a), np.float32)
    b = np.asarray(keras.ops.convert_to_numpy(layer.lora_kernel_b), np.float32)
    delta = (a.reshape(-1, a.shape[-1]) @ b).reshape(w.shape)
    return w + (layer.lora_alpha / layer.lora_rank) * delta


def merge_lora(encoder):
    """`encoder` itself when LoRA is off; else a new `SentenceEncoder` with the same
    tokenizer, pooling, head and settings on a new backbone of the same config whose
    weights are the adapted backbone's, each adapted kernel replaced by `merged_kernel`
    (no LoRA variables). The adapted encoder is left as it was."""
    if not hasattr(encoder, "backbone") or not lora_layers(encoder):
        return encoder
    old = encoder.backbone
    plain = type(old).from_config(old.get_config())
    sources = [lyr for lyr in old._flatten_layers(include_self=False)]
    targets = [lyr for lyr in plain._flatten_layers(include_self=False)]
    if [type(s) for s in sources] != [type(t) for t in targets]:
        raise ConfigError(f"cannot merge LoRA: a {type(old).__name__} rebuilt from its "
                          "config has other layers")
    for source, target in zip(sources, targets):
        if getattr(source, "lora_enabled", False):
            target.kernel.assign(merged_kernel(source).astype(target.kernel.dtype))
            if source.bias is not None:
                target.bias.assign(source.bias)
        else:
            store = {}
            source.save_own_variables(store)
            if store:
                target.load_own_variables(store)
    merged = type(encoder)(plain, encoder.tokenizer, pooling=encoder.pooling,
                           activation=encoder.activation, seed=encoder.seed,
                           normalize=encoder.normalize, mlm_head=encoder.mlm_head,
                           dense_head=encoder.dense_head,
                           truncate_dim=getattr(encoder, "truncate_dim", None), name=encoder.name)
    if getattr(encoder, "prompts", None) is not None:
        merged.prompts = encoder.prompts
    return merged


def parameter_counts(model):
    """(trainable, total) parameter counts of a Keras model (each variable once)."""
    seen, trainable, total = set(), 0, 0
    trainable_ids = {id(v) for v in model.trainable_variables}
    for v in model.variables:
        if id(v) in seen:
            continue
        seen.add(id(v))
        size = int(np.prod(v.shape))
        total += size
        trainable += size if id(v) in trainable_ids else 0
    return trainable, total


def log_parameter_counts(model, what="the method model"):
    """Logs `parameter_counts(model)` (trainable vs total, and the share)."""
    trainable, total = parameter_counts(model)
    logging.info("%s: %s trainable of %s parameters (%.2f%%)", what, f"{trainable:,}",
                 f"{total:,}", 100.0 * trainable / max(total, 1))
    return trainable, total
