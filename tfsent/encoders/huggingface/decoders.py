"""config.json and model.safetensors of the decoder families keras-hub runs (qwen3: Qwen3Model,
gemma3: Gemma3TextModel), under Hugging Face's base-model names: the inverse of the maps
keras-hub's Hugging Face converters apply when tfsent loads such a folder
(`keras_hub_adapter.load_hf_backbone`). Written by `writing.write_transformer`.

    config, tensors = decoder_checkpoint(backbone, special_ids)

keras-hub's own exporter is not used: it writes Gemma3 as a causal LM with Gemma's
<bos> / <eos> ids swapped, linear rope types and keras-hub's sliding window (tfsent's loader
widens Hugging Face's bidirectional window, `huggingface.keras_hub_overrides`; this module
gives Hugging Face's back), and it has no Qwen3 exporter.
"""

import keras
import numpy as np

import tfsent.encoders.families as families
from tfsent.errors import ConfigError

# config.json's max_position_embeddings of the releases (Qwen3-Embedding, EmbeddingGemma);
# keras-hub's rotary backbones keep no such limit. A longer export length raises it.
_MAX_POSITIONS = {"Qwen3Backbone": 32768, "Gemma3Backbone": 2048}


def special_ids(tokenizer):
    """{"pad", "eos", "bos"} of a decoder family's tokenizer: the ids a writer puts in
    config.json."""
    return {"pad": int(tokenizer.pad_id), "eos": int(tokenizer.sep_id),
            "bos": int(tokenizer.cls_id)}


def _array(value):
    """A variable or tensor as float32 numpy (LoRA kernels come merged: `layer.kernel`)."""
    return np.ascontiguousarray(np.asarray(keras.ops.convert_to_numpy(value), np.float32))


def _projection_in(kernel, heads_first):
    """Hugging Face's (heads * head_dim, hidden) q/k/v weight of a keras-hub EinsumDense
    kernel: (hidden, heads, head_dim) (Qwen3) or (heads, hidden, head_dim) (Gemma3)."""
    k = _array(kernel)
    if heads_first:
        k = np.transpose(k, (0, 2, 1))  # (heads, head_dim, hidden)
        return k.reshape(-1, k.shape[-1])
    return k.reshape(k.shape[0], -1).T


def _projection_out(kernel):
    """Hugging Face's (hidden, heads * head_dim) o_proj weight of a keras-hub (heads,
    head_dim, hidden) output kernel."""
    k = _array(kernel)
    return k.reshape(-1, k.shape[-1]).T


def _max_positions(backbone, max_seq_length):
    return max(_MAX_POSITIONS[type(backbone).__name__], int(max_seq_length or 0))


def _model_type(backbone):
    """config.json's `model_type` of the backbone's family (the family table's)."""
    family = families.TABLE[families.family_of(backbone)]
    return family.hf_model_type or family.name


def qwen3_checkpoint(backbone, special_ids, max_seq_length=None):
    """(config.json dict, {Hugging Face name: array}) of a keras-hub Qwen3Backbone as a
    Qwen3Model. `special_ids`: {"eos": id, "pad": id} (`<|endoftext|>`'s)."""
    if backbone.sliding_window_size is not None:
        raise ConfigError("a Qwen3 backbone with a sliding window cannot be written yet "
                          "(Qwen3-Embedding has none; Hugging Face limits it to the layers "
                          "from max_window_layers on, keras-hub to none)")
    if float(backbone.rope_scaling_factor) != 1.0:
        raise ConfigError(f"rope_scaling_factor {backbone.rope_scaling_factor}: keras-hub's "
                          "Qwen3 converter reads no rope scaling, so tfsent writes none")
    config = {
        "architectures": ["Qwen3Model"], "model_type": _model_type(backbone),
        "vocab_size": int(backbone.vocabulary_size), "hidden_size": int(backbone.hidden_dim),
        "num_hidden_layers": int(backbone.num_layers),
        "num_attention_heads": int(backbone.num_query_heads),
        "num_key_value_heads": int(backbone.num_key_value_heads),
        "head_dim": int(backbone.head_dim), "intermediate_size": int(backbone.intermediate_dim),
        "hidden_act": "silu", "max_position_embeddings": _max_positions(backbone,
                                                                        max_seq_length),
        "rms_norm_eps": float(backbone.layer_norm_epsilon),
        "rope_theta": float(backbone.rope_max_wavelength), "rope_scaling": None,
        "attention_bias": False, "attention_dropout": 0.0,
        "tie_word_embeddings": bool(backbone.tie_word_embeddings),
        "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": int(backbone.num_layers),
        "bos_token_id": special_ids["eos"], "eos_token_id": special_ids["eos"],
        "pad_token_id": special_ids["pad"], "dtype": "float32", "initializer_range": 0.02,
        "use_cache": True}
    tensors = {"embed_tokens.weight": _array(backbone.get_layer("token_embedding").embeddings),
               "norm.weight": _array(backbone.get_layer("sequence_output_layernorm").scale)}
    for i in range(backbone.num_layers):
        layer = backbone.get_layer(f"transformer_layer_{i}")
        attention = layer._self_attention_layer
        p = f"layers.{i}."
        tensors.update({
            p + "input_layernorm.weight": _array(layer._self_attention_layernorm.scale),
            p + "post_attention_layernorm.weight": _array(layer._feedforward_layernorm.scale),
            p + "self_attn.q_proj.weight": _projection_in(attention._query_dense.kernel, False),
            p + "self_attn.k_proj.weight": _projection_in(attention._key_dense.kernel, False),
            p + "self_attn.v_proj.weight": _projection_in(attention._value_dense.kernel, False),
            p + "self_attn.o_proj.weight": _projection_out(attention._output_dense.kernel),
            p + "self_attn.q_norm.weight": _array(attention._query_dense_layer_norm.scale),
            p + "self_attn.k_norm.weight": _array(attention._key_dense_layer_norm.scale),
            p + "mlp.gate_proj.weight": _array(layer._feedforward_gate_dense.kernel).T,
            p + "mlp.up_proj.weight": _array(layer._feedforward_intermediate_dense.kernel).T,
            p + "mlp.down_proj.weight": _array(layer._feedforward_output_dense.kernel).T,
        })
    return config, {k: np.ascontiguousarray(v) for k, v in tensors.items()}


def _gemma3_window(backbone):
    """Hugging Face's sliding_window of a keras-hub Gemma3Backbone. Bidirectional: tfsent
    loaded Hugging Face's w as s = 2 * (w // 2) + 1 (`huggingface.keras_hub_overrides`),
    which sees w // 2 tokens on each side, as Hugging Face's w = s - 1 does; an even s
    sees one token fewer before than after, which Hugging Face cannot express."""
    size = int(backbone.sliding_window_size)
    if not backbone.use_bidirectional_attention:
        return size
    if size % 2 == 0:
        raise ConfigError(f"a bidirectional Gemma3 backbone with an even sliding window "
                          f"({size}) sees one token fewer before than after; Hugging Face's "
                          "window is symmetric (tfsent's loader builds odd windows)")
    return size - 1


def gemma3_query_scalar(backbone):
    """d of the 1 / sqrt(d) query scale a keras-hub Gemma3Backbone's blocks apply: head_dim
    when their attention normalises by it (keras-hub 0.32's blocks always do, whatever the
    backbone's own `query_head_dim_normalize` says), else hidden / heads."""
    if backbone.get_layer("decoder_block_0").attention.query_head_dim_normalize:
        return int(backbone.head_dim)
    return int(backbone.hidden_dim) // int(backbone.num_query_heads)


def gemma3_checkpoint(backbone, special_ids, max_seq_length=None):
    """(config.json dict, {Hugging Face name: array}) of a keras-hub Gemma3Backbone (text,
    no embedding head inside) as a Gemma3TextModel. `special_ids`: {"pad", "eos", "bos"}."""
    lacking = [name for name in ("use_post_ffw_norm", "use_post_attention_norm",
                                 "use_query_key_norm") if not getattr(backbone, name)]
    if lacking or backbone.vision_encoder is not None or backbone.is_embedding_model:
        what = (f"{', '.join(lacking)} off" if lacking else "a vision encoder"
                if backbone.vision_encoder is not None else "keras-hub's embedding head")
        raise ConfigError(f"a Gemma3 backbone with {what} has no Gemma3TextModel layout")
    layer_types, thetas = [], {}
    for i in range(backbone.num_layers):
        block = backbone.get_layer(f"decoder_block_{i}")
        kind = "sliding_attention" if block.use_sliding_window_attention else "full_attention"
        layer_types.append(kind)
        thetas[kind] = float(block.rope_wavelength)
    factors = {"sliding_attention": float(backbone.local_rope_scaling_factor),
               "full_attention": float(backbone.global_rope_scaling_factor)}
    defaults = {"sliding_attention": 10000.0, "full_attention": 1000000.0}
    rope = {}
    for kind in ("full_attention", "sliding_attention"):
        entry = {"rope_type": "default", "rope_theta": thetas.get(kind, defaults[kind])}
        if factors[kind] != 1.0:
            entry.update(rope_type="linear", factor=factors[kind])
        rope[kind] = entry
    # keras-hub passes layer_norm_epsilon to the final norm only (its blocks keep 1e-6):
    # config.json has one rms_norm_eps for both.
    epsilon = float(backbone.get_layer("decoder_block_0").pre_attention_norm.epsilon)
    if epsilon != float(backbone.layer_norm_epsilon):
        raise ConfigError(f"a Gemma3 backbone whose final norm's epsilon "
                          f"({backbone.layer_norm_epsilon:g}) differs from its blocks' "
                          f"({epsilon:g}, keras-hub's fixed value): config.json's "
                          "rms_norm_eps sets both")
    head_dim = int(backbone.head_dim)
    config = {
        "architectures": ["Gemma3TextModel"], "model_type": _model_type(backbone),
        "vocab_size": int(backbone.vocabulary_size), "hidden_size": int(backbone.hidden_dim),
        "num_hidden_layers": int(backbone.num_layers),
        "num_attention_heads": int(backbone.num_query_heads),
        "num_key_value_heads": int(backbone.num_key_value_heads), "head_dim": head_dim,
        "intermediate_size": int(backbone.intermediate_dim),
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": _max_positions(backbone, max_seq_length),
        "rms_norm_eps": float(backbone.layer_norm_epsilon),
        "query_pre_attn_scalar": gemma3_query_scalar(backbone),
        "sliding_window": _gemma3_window(backbone),
        "use_bidirectional_attention": bool(backbone.use_bidirectional_attention),
        "layer_types": layer_types, "rope_parameters": rope,
        "attention_bias": False, "attention_dropout": 0.0,
        "attn_logit_softcapping": backbone.attention_logit_soft_cap,
        "final_logit_softcapping": backbone.final_logit_soft_cap,
        "pad_token_id": special_ids["pad"], "eos_token_id": special_ids["eos"],
        "bos_token_id": special_ids["bos"], "tie_word_embeddings": True, "dtype": "float32",
        "initializer_range": 0.02, "use_cache": True}
    tensors = {"embed_tokens.weight": _array(backbone.get_layer("token_embedding").embeddings),
               "norm.weight": _array(backbone.get_layer("final_normalization").scale)}
    for i in range(backbone.num_layers):
        block = backbone.get_layer(f"decoder_block_{i}")
        attention = block.attention
        p = f"layers.{i}."
        tensors.update({
            p + "input_layernorm.weight": _array(block.pre_attention_norm.scale),
            p + "post_attention_layernorm.weight": _array(block.post_attention_norm.scale),
            p + "pre_feedforward_layernorm.weight": _array(block.pre_ffw_norm.scale),
            p + "post_feedforward_layernorm.weight": _array(block.post_ffw_norm.scale),
            p + "self_attn.q_proj.weight": _projection_in(attention.query_dense.kernel, True),
            p + "self_attn.k_proj.weight": _projection_in(attention.key_dense.kernel, True),
            p + "self_attn.v_proj.weight": _projection_in(attention.value_dense.kernel, True),
            p + "self_attn.o_proj.weight": _projection_out(attention.output_dense.kernel),
            p + "self_attn.q_norm.weight": _array(attention.query_norm.scale),
            p + "self_attn.k_norm.weight": _array(attention.key_norm.scale),
            p + "mlp.gate_proj.weight": _array(block.gating_ffw.kernel).T,
            p + "mlp.up_proj.weight": _array(block.gating_ffw_2.kernel).T,
            p + "mlp.down_proj.weight": _array(block.ffw_linear.kernel).T,
        })
    return config, {k: np.ascontiguousarray(v) for k, v in tensors.items()}


# keras-hub backbone class -> its writer (the inverse of keras-hub's converter for it).
WRITERS = {"Qwen3Backbone": qwen3_checkpoint, "Gemma3Backbone": gemma3_checkpoint}


def decoder_checkpoint(backbone, special_ids, max_seq_length=None):
    """(config.json dict, {Hugging Face name: float32 array}) of a backbone of a family
    keras-hub runs; ConfigError for a backbone class without a writer."""
    for cls in type(backbone).__mro__:
        if cls.__name__ in WRITERS:
            return WRITERS[cls.__name__](backbone, special_ids, max_seq_length)
    raise ConfigError(f"no Hugging Face writer for a {type(backbone).__name__} (tfsent "
                      f"writes {', '.join(WRITERS)})")
