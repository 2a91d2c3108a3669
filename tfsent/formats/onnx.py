"""ONNX export: the encoder's ids signature as an ONNX graph for ONNX Runtime (and
sentence-transformers' ONNX backend), fp32 and dynamically quantized int8.

    export_onnx(encoder, DIR, pooling=None, head=None, quantize=("int8",))
    python -m tfsent.export --format=onnx --export_dir=DIR [--quantize=int8]

DIR holds
  model.onnx                    fp32 (`ONNX_FILE`);
  model_qint8_avx512_vnni.onnx  with quantize int8 (`INT8_FILE`): onnxruntime's dynamic
                                quantization of the MatMul and Attention weights (int8 per
                                output channel, uint8 activations quantized per call, full
                                range), under the file name sentence-transformers gives its
                                avx512_vnni file (its setting is per tensor: per channel
                                keeps tfsent's cosine to fp32 >= 0.98 on this graph, per
                                tensor gave 0.94 on minilm-l6);
  the Hugging Face tokenizer files (`tfsent.encoders.huggingface.writing.write_tokenizer_files`):
  an ONNX Runtime user tokenizes with them (TF Text's ops do not convert to ONNX);
  tfsent_export.json.

The graph (`write_onnx_model`): inputs `input_ids`, `attention_mask` (int64, (batch,
sequence), both axes dynamic) and, for families with token types (BERT), `token_type_ids`:
the names and dtypes a Hugging Face tokenizer's `return_tensors="np"` gives, so
`session.run(None, dict(tokenizer(texts, ...)))` works. Outputs: `embedding` and
`embedding_normalized` (batch, dim), what the SavedModel's `encode_ids` signature returns
(pooling, head, float32), and `last_hidden_state` (batch, sequence, hidden), the
transformer's token states, which is what sentence-transformers' ONNX backend (through
optimum's ORTModelForFeatureExtraction) reads before its own Pooling / Dense / Normalize
modules.

Conversion: the graph is written directly with the `onnx` package's helper API from the
encoder's weights (`build_onnx_model`), in onnxruntime's fused CPU kernels (com.microsoft
Attention, SkipLayerNormalization, BiasGelu / FastGelu; the standard LayerNormalization of
opset 17), the graph onnxruntime's transformer optimizer aims for. tf2onnx 1.17 was tried
first and does convert the ids tf.function under TF 2.21 (with a handler for TF's Erfc,
which exact GELU lowers to), but it took ~110 s for minilm-l6 and its graph (LayerNorm as
GlobalAveragePool arithmetic, Keras' einsum projections as Reshape / Shape chains, no fused
attention) ran ~1.8x slower in onnxruntime than sentence-transformers' own export; `from_keras`
fails under Keras 3 (tf2onnx issue 2329). The encoder families (bert, roberta,
xlm-roberta, distilbert: post-LayerNorm blocks, positions from 0 in tfsent's tables) with
every pooling, and the decoder families (qwen3, gemma3: `onnx_decoders.py`) with the
poolings of the last layer's states convert; a head converts when sentence-transformers'
Dense could express it (`tfsent.formats.heads.dense_stack`).
"""

import os

import keras
import numpy as np

from tfsent.encoders import check_pooling, families
from tfsent.encoders import keras_hub_adapter as kh
from tfsent.encoders.pooling import LAST_NON_PAD
from tfsent.errors import ConfigError
from tfsent.formats.heads import dense_stack
from tfsent.encoders.huggingface.writing import write_tokenizer_files
from tfsent.formats.huggingface import check_new_export, write_new_export
from tfsent.formats.onnx_decoders import check_decoder, decoder_states, runs_decoder_graph

ONNX_FILE = "model.onnx"
INT8_FILE = "model_qint8_avx512_vnni.onnx"
QUANTIZE_MODES = ("int8",)
INT8_OPS = ("MatMul", "Attention")  # int8 kernels: DynamicQuantizeMatMul, QAttention
# Weights past this many bytes go to an external data file (protobuf's 2 GiB message limit).
EXTERNAL_DATA_BYTES = 1_800_000_000
EXTERNAL_DATA_SUFFIX = "_data"  # model.onnx -> model.onnx_data
OPSET = 17  # LayerNormalization is a standard op from 17
IR_VERSION = 8  # what opset 17 needs; older runtimes load it too
MS_DOMAIN = "com.microsoft"  # onnxruntime's contrib ops (fused CPU kernels)
_FLOAT, _INT32, _INT64, _BOOL = 1, 6, 7, 9  # onnx.TensorProto data types
# tfsent's feed-forward activation -> onnxruntime op with the bias folded in
_FFN_ACTIVATIONS = {"gelu": "BiasGelu", "gelu_new": "FastGelu", "gelu_approximate": "FastGelu",
                    "relu": "Relu"}
# sentence-transformers' Dense activations (the head) -> ONNX op (gelu: com.microsoft.Gelu)
_HEAD_ACTIVATIONS = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid"}
EXTRA = "tfsent[onnx]"


def check_quantize(quantize):
    """The quantize modes as a tuple; ConfigError naming --quantize for a mode ONNX export
    cannot do (before any work)."""
    if isinstance(quantize, str):
        quantize = [q.strip() for q in quantize.split(",") if q.strip()]
    modes = tuple(quantize or ())
    unknown = [q for q in modes if q not in QUANTIZE_MODES]
    if unknown:
        raise ConfigError(f"--quantize={','.join(modes)}: the onnx format can quantize "
                          f"{', '.join(QUANTIZE_MODES)} (weights, dynamic int8), not "
                          f"{', '.join(unknown)}")
    return modes


def require_onnx():
    """Imports the optional ONNX packages (onnx, onnxruntime); ConfigError naming
    the extra when one is missing."""
    try:
        # Optional dependencies of this format only (the `tfsent[onnx]` extra).
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as e:
        raise ConfigError(f"the onnx format needs the optional packages of {EXTRA} "
                          f"(pip install '{EXTRA}'): {e}") from e


def input_names(encoder):
    """The graph's inputs for `encoder`'s family (token_type_ids only with token types)."""
    names = ["input_ids", "attention_mask"]
    with_types = families.TABLE[encoder.family].has_segments
    return names + (["token_type_ids"] if with_types else [])


def check_exportable(encoder, pooling, head):
    """The encoder's own Dense head (a decoder family's folder modules, applied first) and
    the export head as one dense_stack list; ConfigError (before any work) for what the
    graph cannot express: an encoder family's feed-forward activation outside
    _FFN_ACTIVATIONS, a head that is not Dense layers with expressible activations.
    `pooling` LAST_NON_PAD: a decoder cross-encoder's token (`logits` graphs), read off the
    transformer's states as `pooling.pair_state` reads it, without the encoder's Dense
    head."""
    if pooling != LAST_NON_PAD:
        check_pooling(pooling)
    if runs_decoder_graph(encoder):
        check_decoder(encoder, pooling)
    elif encoder.activation not in _FFN_ACTIVATIONS:
        raise ConfigError(f"feed-forward activation {encoder.activation!r} has no ONNX "
                          f"form here; expressible: {', '.join(_FFN_ACTIVATIONS)}")
    own = None if pooling == LAST_NON_PAD else getattr(encoder, "dense_head", None)
    # ConfigError names a head layer it cannot express
    return dense_stack(own) + dense_stack(head)


class _GraphBuilder:
    """Accumulates ONNX nodes and initializers under unique names."""

    def __init__(self):
        from onnx import helper, numpy_helper  # optional dependency (tfsent[onnx])

        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes, self.initializers, self._count = [], [], 0

    def name(self, prefix):
        """`prefix` made unique."""
        self._count += 1
        return f"{prefix}_{self._count}"

    def const(self, prefix, value, dtype=np.float32):
        """An initializer holding `value`; returns its name."""
        name = self.name(prefix)
        # .copy(order="C"), not np.ascontiguousarray: that turns a scalar into shape (1,)
        self.initializers.append(self.numpy_helper.from_array(
            np.asarray(value, dtype).copy(order="C"), name))
        return name

    def op(self, op_type, inputs, outputs=None, domain=None, **attrs):
        """Adds one node; returns its (first) output's name."""
        outputs = outputs or [self.name(op_type)]
        self.nodes.append(self.helper.make_node(op_type, inputs, outputs,
                                                name=self.name(op_type), domain=domain,
                                                **attrs))
        return outputs[0]


def _numpy(variable):
    return np.asarray(keras.ops.convert_to_numpy(variable), np.float32)


def _dense(g, x, kernel, bias, prefix):
    y = g.op("MatMul", [x, g.const(f"{prefix}_kernel", kernel)])
    return y if bias is None else g.op("Add", [y, g.const(f"{prefix}_bias", bias)])


def _skip_layer_norm(g, x, residual, bias, norm, prefix):
    """LayerNorm(x + residual + bias): onnxruntime's fused SkipLayerNormalization."""
    return g.op("SkipLayerNormalization",
                [x, residual, g.const(f"{prefix}_gamma", _numpy(norm.gamma)),
                 g.const(f"{prefix}_beta", _numpy(norm.beta)), g.const(f"{prefix}_bias", bias)],
                domain=MS_DOMAIN, epsilon=float(norm.epsilon))


def _transformer_block(g, index, x, mask_int32, encoder):
    """One post-LayerNorm block in onnxruntime's fused CPU kernels: Attention (Q, K, V in
    one matmul, scaled softmax over the unmasked keys), SkipLayerNormalization, BiasGelu /
    FastGelu."""
    parts = kh.transformer_block_parts(encoder.backbone.transformer_layers[index])
    hidden = int(encoder.hidden_dim)
    qkv = (parts.query, parts.key, parts.value)
    p = f"layer{index}"
    context = g.op("Attention", [
        x, g.const(f"{p}_qkv_kernel", np.concatenate(
            [_numpy(d.kernel).reshape(hidden, hidden) for d in qkv], axis=1)),
        g.const(f"{p}_qkv_bias", np.concatenate([_numpy(d.bias).reshape(hidden)
                                                 for d in qkv])),
        mask_int32], domain=MS_DOMAIN, num_heads=int(encoder.num_heads))
    out = parts.attention_output
    projected = g.op("MatMul", [context, g.const(
        f"{p}_attention_output_kernel", _numpy(out.kernel).reshape(hidden, hidden))])
    x = _skip_layer_norm(g, projected, x, _numpy(out.bias), parts.attention_norm,
                         f"{p}_attention_norm")
    inner = parts.ffn_inner
    h = g.op("MatMul", [x, g.const(f"{p}_ffn_inner_kernel", _numpy(inner.kernel))])
    bias = g.const(f"{p}_ffn_inner_bias", _numpy(inner.bias))
    activation = _FFN_ACTIVATIONS[encoder.activation]
    if activation == "Relu":
        h = g.op("Relu", [g.op("Add", [h, bias])])
    else:
        h = g.op(activation, [h, bias], domain=MS_DOMAIN)
    outer = parts.ffn_output
    h = g.op("MatMul", [h, g.const(f"{p}_ffn_output_kernel", _numpy(outer.kernel))])
    return _skip_layer_norm(g, h, x, _numpy(outer.bias), parts.ffn_norm, f"{p}_ffn_norm")


def _masked_mean(g, x, mask_3d):
    """tfsent.encoders.pooling.masked_mean: (B, L, H), (B, L, 1) -> (B, H)."""
    axis = g.const("axis", [1], np.int64)
    total = g.op("ReduceSum", [g.op("Mul", [x, mask_3d]), axis], keepdims=0)
    count = g.op("Max", [g.op("ReduceSum", [mask_3d, axis], keepdims=0), g.const("one", 1.0)])
    return g.op("Div", [total, count])


def _pool(g, pooling, states, mask_3d, encoder):
    """tfsent.encoders.pooling.pool as ONNX nodes (`states[0]`: the embedding output;
    `mask_3d`: (B, L, 1) float, without the first position for mean_no_cls)."""
    last = states[-1]
    if pooling in ("cls", "cls_before_pooler"):
        # The first position as a sum over positions [0, 1): Gather of index 0 fails on a
        # (0, 0) batch, whose padded width is 0 (this gives (0, H), as the SavedModel).
        first = g.op("ReduceSum", [g.op("Slice", [
            last, g.const("zero_i", [0], np.int64), g.const("one_i", [1], np.int64),
            g.const("axis", [1], np.int64)]), g.const("axis", [1], np.int64)], keepdims=0)
        pooler = encoder.pooler_dense
        if pooling == "cls_before_pooler" or pooler is None:
            return first
        return g.op("Tanh", [_dense(g, first, _numpy(pooler.kernel), _numpy(pooler.bias),
                                    "pooler")])
    if pooling == LAST_NON_PAD:
        return _last_non_pad(g, last, encoder.tokenizer.pad_id)
    if pooling == "last_token":  # the mask's last 1 of each row (either padding side)
        axis = g.const("axis", [1], np.int64)
        after = g.op("Concat", [
            g.op("Slice", [mask_3d, g.const("one_i", [1], np.int64),
                           g.const("end_i", [np.iinfo(np.int64).max], np.int64), axis]),
            g.op("Mul", [g.op("Slice", [mask_3d, g.const("zero_i", [0], np.int64),
                                        g.const("one_i", [1], np.int64), axis]),
                         g.const("zero_f", 0.0)])], axis=1)
        weight = g.op("Mul", [mask_3d, g.op("Sub", [g.const("one", 1.0), after])])
        return g.op("ReduceSum", [g.op("Mul", [last, weight]), axis], keepdims=0)
    if pooling not in ("mean", "mean_no_cls"):  # averages of two hidden states
        other = states[{"first_last_avg": 1, "emb_last_avg": 0, "last2_avg": -2}[pooling]]
        last = g.op("Div", [g.op("Add", [other, last]), g.const("two", 2.0)])
    return _masked_mean(g, last, mask_3d)


def _positions(g):
    """0 .. L - 1 (int64, (L,)) for the graph's `input_ids` of width L."""
    length = g.op("Gather", [g.op("Shape", ["input_ids"]), g.const("one_s", 1, np.int64)],
                  axis=0)
    return g.op("Range", [g.const("zero_s", 0, np.int64), length,
                          g.const("one_s", 1, np.int64)])


def _last_non_pad(g, last, pad_id):
    """tfsent.encoders.pooling.last_non_pad as ONNX nodes: each row's state at the
    rightmost position that is unmasked and whose id is not `pad_id` (position 0 when
    none is): the token Hugging Face's decoder sequence classifiers score."""
    keep = g.op("And", [g.op("Cast", ["attention_mask"], to=_BOOL), g.op("Not", [
        g.op("Equal", ["input_ids", g.const("pad_id", pad_id, np.int64)])])])
    positions = g.op("Unsqueeze", [_positions(g), g.const("axes", [0], np.int64)])  # (1, L)
    rightmost = g.op("ReduceMax", [g.op("Where", [keep, positions, g.const(
        "zero_s", 0, np.int64)])], axes=[1], keepdims=1)  # (B, 1)
    select = g.op("Cast", [g.op("Equal", [positions, rightmost])], to=_FLOAT)
    return g.op("ReduceSum", [g.op("Mul", [last, g.op("Unsqueeze", [
        select, g.const("axes", [2], np.int64)])]), g.const("axis", [1], np.int64)],
        keepdims=0)


def _encoder_states(g, encoder, names):
    """An encoder family's (post-LayerNorm blocks) embedding output and every block's
    states, as ONNX nodes over the graph's inputs `names`."""
    emb = kh.embedding_parts(encoder.backbone)
    # The first `sequence` rows of a table: Slice with ends = Shape(input_ids)[1:2].
    seq_end = g.op("Slice", [g.op("Shape", ["input_ids"]), g.const("one", [1], np.int64),
                             g.const("two", [2], np.int64)])
    x = g.op("Gather", [g.const("token_embeddings", _numpy(emb.token.embeddings)),
                        "input_ids"])
    x = g.op("Add", [x, g.op("Slice", [
        g.const("position_embeddings", _numpy(emb.position.position_embeddings)),
        g.const("zero", [0], np.int64), seq_end, g.const("axis", [0], np.int64)])])
    if "token_type_ids" in names:
        x = g.op("Add", [x, g.op("Gather", [g.const(
            "token_type_embeddings", _numpy(emb.segment.embeddings)), "token_type_ids"])])
    x = g.op("LayerNormalization", [x, g.const("embeddings_gamma", _numpy(emb.norm.gamma)),
                                    g.const("embeddings_beta", _numpy(emb.norm.beta))],
             axis=-1, epsilon=float(emb.norm.epsilon))
    mask_int32 = g.op("Cast", ["attention_mask"], to=_INT32)
    states = [x]
    for i in range(encoder.num_layers):
        states.append(_transformer_block(g, i, states[-1], mask_int32, encoder))
    return states


def build_onnx_model(encoder, pooling=None, head=None, logits=False):
    """The encoder's ids forward (see the module docstring) as an onnx.ModelProto.
    `logits`: a cross-encoder's graph instead, whose one output `logits` (batch, 1) is the
    head on the pooled state (what Hugging Face's *ForSequenceClassification returns and
    sentence-transformers' CrossEncoder ONNX backend reads)."""
    require_onnx()
    from onnx import helper  # optional dependency (tfsent[onnx]), checked above

    pooling = pooling or encoder.pooling
    dense_layers = check_exportable(encoder, pooling, head)
    names = input_names(encoder)
    g = _GraphBuilder()
    if runs_decoder_graph(encoder):  # qwen3, gemma3: their own blocks (onnx_decoders)
        states = [decoder_states(g, encoder)]
    else:
        states = _encoder_states(g, encoder, names)
    if not logits:
        g.op("Identity", [states[-1]], outputs=["last_hidden_state"])
    mask_3d = g.op("Unsqueeze", [g.op("Cast", ["attention_mask"], to=_FLOAT),
                                 g.const("axes", [2], np.int64)])
    if pooling == "mean_no_cls":  # positions 1.. only
        not_first = g.op("Cast", [g.op("Greater", [_positions(g),
                                                   g.const("zero_s", 0, np.int64)])],
                         to=_FLOAT)
        mask_3d = g.op("Mul", [mask_3d, g.op("Unsqueeze", [
            not_first, g.const("axes", [0, 2], np.int64)])])
    pooled = _pool(g, pooling, states, mask_3d, encoder)
    for i, (kernel, bias, activation) in enumerate(dense_layers):
        pooled = _dense(g, pooled, kernel, bias, f"head{i}")
        if activation == "gelu":
            pooled = g.op("Gelu", [pooled], domain=MS_DOMAIN)
        elif activation != "linear":
            pooled = g.op(_HEAD_ACTIVATIONS[activation], [pooled])
    dim = int(dense_layers[-1][0].shape[1]) if dense_layers else int(encoder.hidden_dim)
    if logits:
        g.op("Identity", [pooled], outputs=["logits"])
        outputs = [helper.make_tensor_value_info("logits", _FLOAT, ["batch", dim])]
    else:
        g.op("Identity", [pooled], outputs=["embedding"])
        # tf.math.l2_normalize: x / sqrt(max(sum(x^2), 1e-12))
        norm = g.op("Sqrt", [g.op("Max", [g.op("ReduceSumSquare", [pooled], axes=[-1],
                                               keepdims=1), g.const("eps", 1e-12)])])
        g.op("Div", [pooled, norm], outputs=["embedding_normalized"])
        outputs = [helper.make_tensor_value_info(name, _FLOAT, ["batch", dim])
                   for name in ("embedding", "embedding_normalized")]
        outputs.append(helper.make_tensor_value_info(
            "last_hidden_state", _FLOAT, ["batch", "sequence", int(encoder.hidden_dim)]))
    graph = helper.make_graph(
        g.nodes, "tfsent_encoder",
        [helper.make_tensor_value_info(n, _INT64, ["batch", "sequence"]) for n in names],
        outputs, g.initializers)
    model = helper.make_model(graph, producer_name="tfsent", opset_imports=[
        helper.make_opsetid("", OPSET), helper.make_opsetid(MS_DOMAIN, 1)])
    model.ir_version = IR_VERSION
    return model


def write_onnx_model(encoder, path, pooling=None, head=None, logits=False):
    """Writes the encoder's ids forward (`build_onnx_model`) as an fp32 ONNX file at
    `path`; returns `path`. Weights past EXTERNAL_DATA_BYTES (protobuf cannot hold 2 GiB in
    one message: Qwen3-Embedding-0.6B is 2.4 GB in fp32) go to `path` + "_data" beside it,
    which onnxruntime reads from the file's folder."""
    import onnx  # optional dependency (tfsent[onnx]); build_onnx_model checks it

    model = build_onnx_model(encoder, pooling, head, logits)
    if sum(len(t.raw_data) for t in model.graph.initializer) > EXTERNAL_DATA_BYTES:
        onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                  location=os.path.basename(path) + EXTERNAL_DATA_SUFFIX, size_threshold=1024)
    else:
        onnx.save(model, path)
    return path


def quantize_int8(source, target):
    """onnxruntime's dynamic int8 quantization of the ONNX file `source` into `target`:
    MatMul weights int8 per tensor, activations uint8 quantized per call, full range
    (sentence-transformers' avx512_vnni settings). A `source` with external data gives a
    `target` with its own (the quantizer's `.data` file beside it)."""
    require_onnx()
    from onnxruntime.quantization import QuantType, quantize_dynamic  # optional (tfsent[onnx])

    external = os.path.exists(source + EXTERNAL_DATA_SUFFIX)
    quantize_dynamic(source, target, weight_type=QuantType.QInt8, per_channel=True,
                     use_external_data_format=external,
                     reduce_range=False, op_types_to_quantize=list(INT8_OPS),
                     # the contrib ops' outputs have no inferred type: they are float32
                     extra_options={"DefaultTensorType": _FLOAT})
    return target


def write_onnx_files(encoder, directory, pooling=None, head=None, quantize=(), logits=False):
    """model.onnx (and INT8_FILE with quantize int8) into the existing `directory`
    (`logits`: a cross-encoder's graph, `build_onnx_model`); returns their file names."""
    before = set(os.listdir(directory))
    fp32 = write_onnx_model(encoder, os.path.join(directory, ONNX_FILE), pooling, head,
                            logits)
    files = [ONNX_FILE]
    if "int8" in quantize:
        quantize_int8(fp32, os.path.join(directory, INT8_FILE))
        files.append(INT8_FILE)
    # external data files (large models), after the models they belong to
    return files + sorted(set(os.listdir(directory)) - before - set(files))


def export_onnx(encoder, directory, pooling=None, head=None, quantize=(), max_seq_length=None,
                metadata=None):
    """Writes the onnx format (see the module docstring) to the new `directory`; returns
    it. Everything refusable (an unknown quantize mode, an existing non-empty directory, a
    missing extra, an encoder without tokenizer) is refused before any work. Prompts and
    normalisation belong to the caller: the model takes token ids and serves both
    `embedding` and `embedding_normalized`."""
    quantize = check_quantize(quantize)
    directory, pooling, length = check_new_export(encoder, directory, pooling, max_seq_length)
    require_onnx()

    def write_files(folder):
        files = write_onnx_files(encoder, folder, pooling, head, quantize)
        write_tokenizer_files(encoder.tokenizer, folder, encoder.family, length)
        return {"files": files, "opset": OPSET, "inputs": input_names(encoder),
                "outputs": ["embedding", "embedding_normalized", "last_hidden_state"]}

    return write_new_export(directory, "onnx", encoder, pooling, length, head, write_files,
                            metadata)
