"""The decoder families' transformer (qwen3: Qwen3Model, gemma3: Gemma3TextModel) as ONNX
nodes, for `tfsent.formats.onnx`: `input_ids` and `attention_mask` in, the final-normed token
states (batch, sequence, hidden) out.

    states = decoder_states(g, encoder)

The weights are read through the Hugging Face checkpoint tfsent publishes for the encoder
(`encoders.huggingface.decoders.decoder_checkpoint`: config.json's settings and the tensors
under Hugging Face's names), so the graph and the published folder cannot disagree. What
the graph computes is tfsent's forward (keras-hub's blocks, docs/families.md):
- token embeddings (gemma3: times sqrt(hidden)); positions 0..L-1 whatever the padding
  (rotary, keras-hub's rotate-half form, inverse frequencies base^(-2i/d) / factor);
- per block, pre-RMSNorm (qwen3: x * w, gemma3: x * (1 + w)), grouped-query attention with
  RMS-normed queries and keys, gemma3's post-attention / post-feed-forward norms, a gated
  feed-forward (qwen3: SiLU(gate) * up, gemma3: tanh-GELU(gate) * up, com.microsoft
  FastGelu);
- the attention mask: padding keys get -1e9 (a finite bias: a query whose keys are all
  padding, a padded position, gets a finite average where keras-hub gives zeros; no
  pooling reads those positions), plus qwen3's causal mask, gemma3's
  causal or bidirectional attention and sliding windows on its sliding layers (bidirectional:
  |i - j| <= w // 2 for Hugging Face's window w, keras-hub's 2 * (w // 2) + 1 wide band;
  causal: 0 <= i - j < w).
The RMSNorm epsilons are keras-hub's layers' own (which differ from config.json's where
keras-hub does not pass it on: Qwen3's query / key norms use 1e-5, Gemma3's block norms 1e-6),
so the graph gives tfsent's `encode`. Attention is written with standard ops (MatMul over
(batch, kv heads, group, L, L)); the RMSNorms as Pow / ReduceMean / Add / Sqrt / Div / Mul,
the pattern onnxruntime fuses into SimplifiedLayerNormalization (seen in its optimized
graph, 2026-12-01).
"""

import numpy as np

from tfsent.encoders import families
from tfsent.encoders.huggingface.decoders import decoder_checkpoint, special_ids
from tfsent.encoders.pooling import LAYERWISE_POOLINGS
from tfsent.errors import ConfigError

_MASKED = -1e9  # keras' masked-softmax bias for float32
# Poolings reading position 0, which a left-padded batch (Qwen's tokenizer files) fills with
# padding for every shorter row.
_FIRST_POSITION_POOLINGS = ("cls", "cls_before_pooler", "mean_no_cls")


def _is_gemma3(backbone):
    """True for a keras-hub Gemma3Backbone (its blocks: 1 + w norms, post-norms, tanh GELU,
    layer types); the other decoder graph is Qwen3's. By class, as `decoder_checkpoint`
    picks its writer."""
    return any(cls.__name__ == "Gemma3Backbone" for cls in type(backbone).__mro__)


def check_decoder(encoder, pooling):
    """ConfigError (before any work) for what the decoder graph cannot express: a pooling
    over inner layers (keras-hub keeps the last layer's states only), a pooling reading
    position 0 of a left-padded family, Gemma3 soft-capping, a Qwen3 sliding window or
    rope scaling."""
    family, backbone = encoder.family, encoder.backbone
    if pooling in LAYERWISE_POOLINGS:
        raise ConfigError(f"pooling {pooling!r} averages inner layers' states, which the "
                          f"{family} graph does not keep (keras-hub's blocks)")
    if pooling in _FIRST_POSITION_POOLINGS and families.TABLE[family].hf_padding_side == "left":
        raise ConfigError(f"pooling {pooling!r} reads the first position, which the {family} "
                          "tokenizer's left padding fills with padding; use last_token or mean")
    if _is_gemma3(backbone):
        if backbone.attention_logit_soft_cap is not None:
            raise ConfigError("a Gemma3 backbone with attention logit soft-capping has no "
                              "ONNX form here (Gemma 3 has none)")
    elif backbone.sliding_window_size is not None or float(backbone.rope_scaling_factor) != 1.0:
        raise ConfigError("a Qwen3 backbone with a sliding window or rope scaling has no ONNX "
                          "form here (Qwen3-Embedding has neither)")


def _epsilons(encoder):
    """{"block", "query_key", "final"}: the RMSNorm epsilons keras-hub's layers use."""
    backbone = encoder.backbone
    if _is_gemma3(backbone):
        block = backbone.get_layer("decoder_block_0")
        return {"block": block.pre_attention_norm.epsilon,
                "query_key": block.attention.query_norm.epsilon,
                "final": backbone.get_layer("final_normalization").epsilon}
    layer = backbone.get_layer("transformer_layer_0")
    return {"block": layer._self_attention_layernorm.epsilon,
            "query_key": layer._self_attention_layer._query_dense_layer_norm.epsilon,
            "final": backbone.get_layer("sequence_output_layernorm").epsilon}


def _weight(tensors, name):
    """The (in, out) MatMul weight of a Hugging Face (out, in) projection."""
    return np.ascontiguousarray(tensors[name].T)


def _rms_norm(g, x, weight, epsilon, prefix):
    """x / sqrt(mean(x^2, last axis) + epsilon) * weight."""
    variance = g.op("ReduceMean", [g.op("Pow", [x, g.const("two", 2.0)])], axes=[-1],
                    keepdims=1)
    normed = g.op("Div", [x, g.op("Sqrt", [g.op("Add", [variance, g.const("eps", epsilon)])])])
    return g.op("Mul", [normed, g.const(f"{prefix}_weight", weight)])


class _Rotary:
    """cos / sin tables (1, L, 1, head_dim) of the sequence's positions, one pair per
    (base, factor), shared by the layers that use them."""

    def __init__(self, g, positions, head_dim):
        self.g, self.positions, self.head_dim = g, positions, head_dim
        self._tables = {}

    def tables(self, base, factor):
        key = (float(base), float(factor))
        if key not in self._tables:
            g, d = self.g, self.head_dim
            exponent = np.arange(0, d, 2, dtype=np.float32) / np.float32(d)
            inverse = np.power(np.float32(base), -exponent) / np.float32(factor)
            freq = g.op("Mul", [g.op("Unsqueeze", [self.positions, g.const("axes", [1], np.int64)]),
                                g.const("inv_freq", inverse)])
            angles = g.op("Concat", [freq, freq], axis=-1)  # (L, d)
            axes = g.const("axes", [0, 2], np.int64)
            self._tables[key] = (g.op("Unsqueeze", [g.op("Cos", [angles]), axes]),
                                 g.op("Unsqueeze", [g.op("Sin", [angles]), axes]))
        return self._tables[key]

    def apply(self, x, base, factor):
        """x (B, L, heads, d) rotated: x * cos + rotate_half(x) * sin."""
        g, half = self.g, self.head_dim // 2
        cos, sin = self.tables(base, factor)
        axis = g.const("axis", [-1], np.int64)
        first = g.op("Slice", [x, g.const("zero_i", [0], np.int64),
                               g.const("half", [half], np.int64), axis])
        second = g.op("Slice", [x, g.const("half", [half], np.int64),
                                g.const("end_i", [self.head_dim], np.int64), axis])
        rotated = g.op("Concat", [g.op("Neg", [second]), first], axis=-1)
        return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rotated, sin])])


def _attention(g, x, tensors, p, config, rotary, rope, bias, norm_shift, eps):
    """Grouped-query self-attention of one block (q/k RMS-normed, rotated; `bias`:
    (B, 1, 1, L, L) additive)."""
    heads, kv_heads = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    head_dim = int(config["head_dim"])
    group = heads // kv_heads
    # Gemma's query_pre_attn_scalar is what keras-hub's blocks apply (gemma3_query_scalar).
    scale = float(config.get("query_pre_attn_scalar", head_dim)) ** -0.5

    def project(name, n):
        kernel = _weight(tensors, f"{p}self_attn.{name}.weight")
        y = g.op("MatMul", [x, g.const(f"{p}_{name}", kernel)])
        return g.op("Reshape", [y, g.const("shape", [0, 0, n, head_dim], np.int64)])

    def normed(y, name):
        return _rms_norm(g, y, tensors[f"{p}self_attn.{name}.weight"] + norm_shift, eps,
                         f"{p}_{name}")

    q = rotary.apply(normed(project("q_proj", heads), "q_norm"), *rope)
    k = rotary.apply(normed(project("k_proj", kv_heads), "k_norm"), *rope)
    v = project("v_proj", kv_heads)
    q = g.op("Mul", [q, g.const("scale", scale)])
    q = g.op("Transpose", [g.op("Reshape", [q, g.const(
        "shape", [0, 0, kv_heads, group, head_dim], np.int64)])], perm=[0, 2, 3, 1, 4])
    k = g.op("Unsqueeze", [g.op("Transpose", [k], perm=[0, 2, 3, 1]),
                           g.const("axes", [2], np.int64)])  # (B, kv, 1, d, L)
    v = g.op("Unsqueeze", [g.op("Transpose", [v], perm=[0, 2, 1, 3]),
                           g.const("axes", [2], np.int64)])  # (B, kv, 1, L, d)
    scores = g.op("Add", [g.op("MatMul", [q, k]), bias])  # (B, kv, group, L, L)
    context = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
    context = g.op("Reshape", [g.op("Transpose", [context], perm=[0, 3, 1, 2, 4]),
                               g.const("shape", [0, 0, heads * head_dim], np.int64)])
    return g.op("MatMul", [context, g.const(f"{p}_o_proj",
                                            _weight(tensors, f"{p}self_attn.o_proj.weight"))])


def _structure_bias(g, index, kind, window):
    """(L, L) additive bias of the allowed (query i, key j) pairs, or None when every pair
    is allowed. `kind`: causal / bidirectional; `window`: Hugging Face's sliding window or
    None."""
    if kind == "bidirectional" and window is None:
        return None
    distance = g.op("Sub", [g.op("Unsqueeze", [index, g.const("axes", [1], np.int64)]),
                            g.op("Unsqueeze", [index, g.const("axes", [0], np.int64)])])
    if kind == "causal":
        allowed = g.op("GreaterOrEqual", [distance, g.const("zero_l", 0, np.int64)])
        if window is not None:
            allowed = g.op("And", [allowed, g.op("Less", [
                distance, g.const("window", int(window), np.int64)])])
    else:
        reach = g.const("reach", int(window) // 2, np.int64)
        allowed = g.op("And", [g.op("LessOrEqual", [distance, reach]), g.op(
            "LessOrEqual", [g.op("Neg", [distance]), reach])])
    return g.op("Where", [allowed, g.const("zero_f", 0.0), g.const("masked", _MASKED)])


def _block_bias(g, key_bias, structure):
    """(B, 1, 1, L or 1, L): the padding keys' bias (B, 1, L) plus a structure's (None:
    none)."""
    total = key_bias if structure is None else g.op("Add", [key_bias, structure])
    return g.op("Unsqueeze", [total, g.const("axes", [1, 2], np.int64)])


def _gemma3_layers(config):
    """[(kind of attention, window or None, (rope base, factor))] per layer."""
    kind = "bidirectional" if config.get("use_bidirectional_attention") else "causal"
    out = []
    for layer_type in config["layer_types"]:
        rope = config["rope_parameters"][layer_type]
        window = config["sliding_window"] if layer_type == "sliding_attention" else None
        out.append((kind, window, (rope["rope_theta"], rope.get("factor", 1.0))))
    return out


def decoder_states(g, encoder):
    """Adds the encoder's transformer (a family keras-hub runs) to the graph builder `g`
    over its `input_ids` / `attention_mask` inputs; returns the name of the final-normed
    token states (B, L, H). ConfigError for a backbone this graph cannot express."""
    # decoder_checkpoint: ConfigError for a backbone class it has no writer for
    config, tensors = decoder_checkpoint(encoder.backbone, special_ids(encoder.tokenizer))
    gemma = _is_gemma3(encoder.backbone)
    shift = np.float32(1.0) if gemma else np.float32(0.0)  # Gemma's RMSNorm scales by 1 + w
    eps = {name: float(value) for name, value in _epsilons(encoder).items()}
    hidden = int(config["hidden_size"])
    length = g.op("Gather", [g.op("Shape", ["input_ids"]), g.const("one_s", 1, np.int64)], axis=0)
    index = g.op("Range", [g.const("zero_s", 0, np.int64), length, g.const("one_s", 1, np.int64)])
    rotary = _Rotary(g, g.op("Cast", [index], to=1), int(config["head_dim"]))
    mask = g.op("Cast", ["attention_mask"], to=1)
    key_bias = g.op("Mul", [g.op("Sub", [g.const("one", 1.0), mask]), g.const("masked", _MASKED)])
    key_bias = g.op("Unsqueeze", [key_bias, g.const("axes", [1], np.int64)])  # (B, 1, L)
    if gemma:
        layers = _gemma3_layers(config)
    else:
        layers = [("causal", None, (config["rope_theta"], 1.0))] * int(config["num_hidden_layers"])
    biases = {}
    x = g.op("Gather", [g.const("embed_tokens", tensors["embed_tokens.weight"]), "input_ids"],
             axis=0)
    if gemma:
        x = g.op("Mul", [x, g.const("embed_scale", np.sqrt(np.float32(hidden)))])
    for i, (kind, window, rope) in enumerate(layers):
        if (kind, window) not in biases:
            structure = _structure_bias(g, index, kind, window)
            biases[kind, window] = _block_bias(g, key_bias, structure)
        p = f"layers.{i}."

        def norm(y, name):
            return _rms_norm(g, y, tensors[p + name + ".weight"] + shift, eps["block"],
                             f"{p}{name}")

        attended = _attention(g, norm(x, "input_layernorm"), tensors, p, config, rotary, rope,
                              biases[kind, window], shift, eps["query_key"])
        if gemma:
            attended = norm(attended, "post_attention_layernorm")
        x = g.op("Add", [x, attended])
        h = norm(x, "pre_feedforward_layernorm" if gemma else "post_attention_layernorm")
        gate, up = (g.op("MatMul", [h, g.const(f"{p}{name}", _weight(
            tensors, f"{p}mlp.{name}_proj.weight"))]) for name in ("gate", "up"))
        if gemma:
            gate = g.op("FastGelu", [gate], domain="com.microsoft")
        else:
            gate = g.op("Mul", [gate, g.op("Sigmoid", [gate])])
        out = g.op("MatMul", [g.op("Mul", [gate, up]), g.const(
            f"{p}down", _weight(tensors, p + "mlp.down_proj.weight"))])
        if gemma:
            out = norm(out, "post_feedforward_layernorm")
        x = g.op("Add", [x, out])
    return _rms_norm(g, x, tensors["norm.weight"] + shift, eps["final"], "norm")


def runs_decoder_graph(encoder):
    """True when the encoder's ONNX graph is this module's (a family keras-hub runs)."""
    return not families.TABLE[encoder.family].runs_own_forward
