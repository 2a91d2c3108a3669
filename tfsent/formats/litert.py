"""LiteRT (TensorFlow Lite) export: the encoder as one `.tflite` file that takes token ids
and returns the pooled embedding, for `ai-edge-litert`'s Interpreter (phones, edge boxes,
CPU servers that want the lowest batch-1 latency).

    export_litert(encoder, DIR, pooling="mean", quantize="")       # fp32
    export_litert(encoder, DIR, pooling="mean", quantize="int8")   # dynamic-range int8
    python -m tfsent.export --model=... --format=litert --export_dir=DIR [--quantize=int8]

DIR (new, or an empty folder) gets:
  model.tflite        signature `serving_default`:
                        inputs  input_ids, attention_mask: int32[N, L] (any N, any L up to
                                the max length; the Interpreter resizes them per call)
                        outputs embedding: float32[N, H] (pooled, as `encode` without
                                normalisation), embedding_normalized: float32[N, H] (L2)
                      the same outputs as the SavedModel's `encode_ids` signature
                      (`tfsent.formats.saved_model.ServingModule`); padding is handled by the mask,
                      so a batch padded to its longest row embeds as each row alone.
  tokenizer files     Hugging Face's (tokenizer.json + vocab.txt for WordPiece, the family's
                      files otherwise; `tfsent.encoders.huggingface.writing.write_tokenizer_files`), so ids come
                      from `tokenizers` / `transformers` as for the published model. Their
                      `model_max_length` is the max length: truncate to it
                      (`truncation=True`).
  tfsent_export.json  inputs, outputs, max length, pooling, normalisation, precision, the
                      padding side of the tokenizer files (qwen3: left; with rotary
                      positions either side gives the same vectors), the query / document
                      prompts (the caller prepends them to the text).

How: a tf.function of the ids around the encoder's forward, frozen and converted by TF's
`tf.lite.TFLiteConverter.from_concrete_functions` with builtin ops only (no Flex / TF
Select ops, which `ai-edge-litert`'s wheel cannot run), batch and length left dynamic.
Keras 3's `model.export(format="litert")` converts a tfsent encoder too (tried, Keras
3.15), but not as a serving file should be: it converts `model.__call__`, so the inputs
are named `args_0` / `args_0_1`, the outputs are the (batch, length, H) sequence states
beside the pooled embedding and no normalised embedding; it goes through a temporary
SavedModel (5x slower to convert) and enables Flex ops, so an op without a builtin kernel
would fail only where the file is run. `quantize="int8"` is TF's dynamic-range
quantization (`optimizations=[Optimize.DEFAULT]`, no calibration data): int8 weights,
activations quantized per call by the kernels (XNNPACK's dynamically quantized fully
connected); the file is ~4x smaller.

Before anything is written, the converted model runs in `ai-edge-litert`'s Interpreter on
a few probe sentences and must match the encoder (cosine >= PROBE_MIN_COSINE for fp32,
INT8_PROBE_MIN_COSINE for int8), so a conversion that computes something else is refused.
The export (and running the file) needs the optional extra `tfsent[litert]`.
"""

import contextlib
import os
import threading

import numpy as np
import tensorflow as tf

import tfsent.encoders.families as families
from tfsent.encoders import check_pooling
from tfsent.errors import ConfigError, InputError
from tfsent.encoders.huggingface.writing import write_tokenizer_files
from tfsent.formats.huggingface import check_new_export, write_new_export
from tfsent.formats.metadata import encoder_prompts
from tfsent.formats.saved_model import ServingModule

MODEL_FILE = "model.tflite"
QUANTIZE_MODES = ("", "int8")
INPUTS = ("input_ids", "attention_mask")
OUTPUTS = ("embedding", "embedding_normalized")
INSTALL_LINE = 'pip install "tfsent[litert]"'
PROBE_MIN_COSINE = 0.9999
INT8_PROBE_MIN_COSINE = 0.98
_PROBE_SENTENCES = ("", "A man is playing a guitar.",
                    "Zwei Hunde spielen im Schnee, während die Sonne untergeht.")


def check_quantize(quantize):
    """The LiteRT quantize mode ("" = fp32, "int8" = dynamic-range int8; also as the
    registry's tuple, () or ("int8",)); ConfigError naming --quantize otherwise."""
    if isinstance(quantize, (tuple, list)):
        if len(quantize) > 1:
            raise ConfigError(f"--quantize={','.join(quantize)}: --format=litert writes one "
                              "precision (int8 or nothing)")
        quantize = quantize[0] if quantize else ""
    mode = str(quantize or "").strip()
    if mode not in QUANTIZE_MODES:
        raise ConfigError(f"--quantize={quantize!r} is not a LiteRT mode; --format=litert "
                          "takes --quantize=int8 (dynamic-range int8 weights) or nothing "
                          "(float32)")
    return mode


def interpreter_class():
    """`ai_edge_litert.interpreter.Interpreter`; ConfigError naming the `litert` extra when
    the package is missing."""
    try:
        # Optional dependency (tfsent[litert]): only LiteRT exports and their users need it.
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as e:
        raise ConfigError(f"the LiteRT export runs the converted model in ai-edge-litert's "
                          f"Interpreter, which is not installed: {INSTALL_LINE}") from e
    return Interpreter


def convert(encoder, pooling=None, quantize="", head=None):
    """The `.tflite` bytes of `encoder` (+ `head` on the pooled embedding) with `pooling`:
    signature `serving_default(input_ids, attention_mask) -> embedding,
    embedding_normalized`, dynamic batch and length; `quantize="int8"`: dynamic-range
    int8 weights."""
    quantize = check_quantize(quantize)
    module = ServingModule(encoder, check_pooling(pooling or encoder.pooling), head=head)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name=INPUTS[0]),
                                  tf.TensorSpec([None, None], tf.int32, name=INPUTS[1])])
    def serve(input_ids, attention_mask):
        out = module.embed_ids(input_ids, attention_mask)
        return {name: out[name] for name in OUTPUTS}

    # The trackable the converter freezes the variables from: the tf.Variables alone (the
    # encoder's Keras variables do not reach tf.Module tracking, see ServingModule; the
    # module itself also tracks the tokenizer, whose lookup tables have no TFLite op).
    weights = tf.Module()
    weights.tf_variables = module.tf_variables
    with new_axes_as_expand_dims():  # keras-hub's decoder blocks index masks with None
        function = serve.get_concrete_function()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([function], weights)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantize == "int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    try:
        return converter.convert()
    except Exception as e:  # noqa: BLE001  (the converter raises its own ConverterError)
        lines = str(e).strip().splitlines() or [type(e).__name__]
        # The converter's summary names the ops without a builtin kernel ("TF Select ops:").
        named = [line for line in lines if "TF Select ops" in line] or lines[-1:]
        raise ConfigError(f"the {encoder.family} encoder does not convert to LiteRT "
                          f"builtin ops: {named[0].strip()[:500]}") from e


_GETITEM = tf.Tensor.__getitem__
_GETITEM_LOCK = threading.Lock()


@contextlib.contextmanager
def new_axes_as_expand_dims():
    """While the converted function is traced, indexing that only adds axes
    (`mask[:, None, :, :]`, `x[..., None]`: what keras-hub's Qwen3 and Gemma3 attention
    layers do to their masks) is traced as `tf.expand_dims`, the same numbers: TFLite has
    no builtin kernel for a strided slice that adds axes to a tensor of dynamic shape (the
    converter would need a Flex op). Any other indexing is TensorFlow's own. The switch is
    `tf.Tensor.__getitem__` itself, restored on exit; it applies only to the thread that
    entered the context (other threads index as TensorFlow does), and one thread at a time
    holds it (`_GETITEM_LOCK`)."""
    owner = threading.get_ident()

    def getitem(tensor, key):
        axes = _new_axes(key, tensor.shape.rank) if threading.get_ident() == owner else None
        if axes is None:
            return _GETITEM(tensor, key)
        for axis in axes:  # positions in the result, ascending
            tensor = tf.expand_dims(tensor, axis)
        return tensor

    with _GETITEM_LOCK:
        tf.Tensor.__getitem__ = getitem
        try:
            yield
        finally:
            tf.Tensor.__getitem__ = _GETITEM


def _new_axes(key, rank):
    """The result positions of the new axes of an index `key` made only of full slices
    (`:`), `None` and at most one `...` over a tensor of `rank`; None for any other key."""
    key = key if isinstance(key, tuple) else (key,)
    # By identity: a key may hold tensors or arrays, whose == is elementwise.
    kinds = ["new" if k is None else "rest" if k is Ellipsis else "full"
             if isinstance(k, slice) and all(v is None for v in (k.start, k.stop, k.step))
             else "other" for k in key]
    if "new" not in kinds or "other" in kinds or kinds.count("rest") > 1 \
            or ("rest" in kinds and rank is None):
        return None
    full = kinds.count("full")
    axes, position = [], 0
    for kind in kinds:
        if kind == "new":
            axes.append(position)
        position += rank - full if kind == "rest" else 1
    return axes


def run_litert(model, input_ids, attention_mask, num_threads=None):
    """Runs a LiteRT encoder (`model`: the file's path or bytes) on one batch of ids
    through `ai-edge-litert`'s Interpreter (XNNPACK, `num_threads` threads; None: the
    runtime's default); returns {embedding, embedding_normalized} as numpy arrays."""
    input_ids, attention_mask = check_ids(input_ids, attention_mask)
    interpreter_cls = interpreter_class()
    if isinstance(model, (bytes, bytearray)):
        interpreter = interpreter_cls(model_content=bytes(model), num_threads=num_threads)
    else:
        interpreter = interpreter_cls(model_path=os.fspath(model), num_threads=num_threads)
    runner = interpreter.get_signature_runner()
    return runner(input_ids=input_ids, attention_mask=attention_mask)


def check_ids(input_ids, attention_mask):
    """The ids and mask as int32 arrays; InputError unless both are integer (batch,
    length) arrays of the same shape (the Interpreter's own errors do not say which
    input is wrong)."""
    arrays = []
    for name, value in (("input_ids", input_ids), ("attention_mask", attention_mask)):
        array = np.asarray(value)
        if array.ndim != 2 or not (np.issubdtype(array.dtype, np.integer)
                                   or np.issubdtype(array.dtype, np.bool_)):
            raise InputError(f"{name} must be an integer array of shape (batch, length), "
                             f"got {array.dtype} {array.shape}")
        arrays.append(array.astype(np.int32))
    if arrays[0].shape != arrays[1].shape:
        raise InputError(f"input_ids {arrays[0].shape} and attention_mask "
                         f"{arrays[1].shape} must have the same shape")
    return arrays


def export_litert(encoder, directory, pooling=None, quantize="", max_seq_length=None,
                  head=None, metadata=None, query_prompt=None, document_prompt=None):
    """Writes `encoder` as a LiteRT model with its tokenizer files to the new `directory`
    (absent or empty; written in a staging folder and renamed into place); returns its
    absolute path.

    Args:
        encoder: a `tfsent.encoders.SentenceEncoder` with a tokenizer.
        directory: the target folder.
        pooling: the embedding's pooling (default: the encoder's).
        quantize: "" (float32) or "int8" (dynamic-range int8 weights).
        max_seq_length: the tokenizer files' truncation length, special tokens included
            (default: the tokenizer's, clamped to the position table).
        head: a layer applied to the pooled embedding (a method's export head).
        metadata: extra entries for tfsent_export.json.
        query_prompt, document_prompt: recorded in tfsent_export.json (None: the
            encoder's own, `encoder.prompts`); the file takes token ids, so the caller
            prepends a prompt to the text before tokenizing.
    Normalisation belongs to the caller too: the file serves both `embedding` and
    `embedding_normalized`.
    """
    quantize = check_quantize(quantize)
    directory, pooling, length = check_new_export(encoder, directory, pooling, max_seq_length)
    query_prompt, document_prompt = encoder_prompts(encoder, query_prompt, document_prompt)
    interpreter_class()  # the extra, before any work
    model = convert(encoder, pooling, quantize, head)
    probe_cosine = _check_probe(encoder, model, pooling, head, length, quantize)
    width = int(probe_cosine["width"])
    padding_side = families.TABLE[encoder.family].hf_padding_side

    def write_files(folder):
        with open(os.path.join(folder, MODEL_FILE), "wb") as f:
            f.write(model)
        write_tokenizer_files(encoder.tokenizer, folder, encoder.family, length)
        return {"model_file": MODEL_FILE, "signature": "serving_default",
                "inputs": {name: "int32[batch, length]" for name in INPUTS},
                "outputs": {"embedding": f"float32[batch, {width}]",
                            "embedding_normalized": f"float32[batch, {width}] (L2)"},
                "dynamic_shapes": True, "normalization": "embedding_normalized is "
                "embedding divided by its L2 norm; embedding is not normalised",
                "padding": "attention_mask 0 marks padding (any padding id)",
                "padding_side": padding_side,
                "token_type_ids": "not an input (single sentences: all 0)",
                "query_prompt": query_prompt, "document_prompt": document_prompt,
                "quantize": quantize or "none", "embedding_dim": width,
                "probe_min_cosine": probe_cosine["min"]}

    return write_new_export(directory, "litert", encoder, pooling, length, head, write_files,
                            metadata)


def _check_probe(encoder, model, pooling, head, length, quantize):
    """Runs the converted `model` in ai-edge-litert on the probe sentences (one padded
    batch) against the encoder's own forward; ConfigError below the precision's bound.
    Returns {"min": lowest cosine, "width": embedding width}."""
    tokenizer = encoder.tokenizer.with_options(max_seq_length=length,
                                               pad_to_max_length=False)
    features = tokenizer(tf.constant(_PROBE_SENTENCES))
    ids = features["token_ids"].numpy()
    mask = features["padding_mask"].numpy()
    expected = encoder({"token_ids": features["token_ids"],
                        "padding_mask": features["padding_mask"]},
                       training=False, pooling=pooling)["embedding"]
    if head is not None:
        expected = head(expected)
    expected = tf.math.l2_normalize(tf.cast(expected, tf.float32), axis=-1).numpy()
    got = run_litert(model, ids, mask)["embedding_normalized"]
    cosine = float(np.min(np.sum(got * expected, axis=-1)))
    bound = INT8_PROBE_MIN_COSINE if quantize == "int8" else PROBE_MIN_COSINE
    if not cosine >= bound:
        raise ConfigError(f"the converted LiteRT model ({quantize or 'fp32'}) does not "
                          f"reproduce the {encoder.family} encoder: cosine {cosine:.6f} < "
                          f"{bound} on the probe sentences; nothing was written")
    return {"min": cosine, "width": got.shape[-1]}
