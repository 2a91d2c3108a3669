"""Quantized sentence embeddings: int8 with calibrated per-dimension ranges, and packed
binary (one bit per dimension).

Both quantize the L2-normalised embedding (after any truncation, see `truncate_dim`):
- int8: dimension d has a range [lo_d, hi_d] (its minimum and maximum over the
  embeddings of a calibration set of sentences); a value x becomes
  `clip(round((x - lo_d) / step_d) - 128, -128, 127)` with `step_d = (hi_d - lo_d) / 255`
  (a dimension constant over the calibration set gets step 1). Values outside the
  calibrated range saturate. Compare codes with cosine (or dot product) on the int8
  values, as a vector store does.
- binary: bit d is 1 when x_d > 0; the bits are packed 8 per uint8, the first dimension
  in the most significant bit (numpy.packbits' order), the last byte zero-padded, so a
  D-dimensional embedding takes ceil(D / 8) bytes. Compare with the Hamming distance;
  `binary_as_signs` turns codes into +-1 vectors whose cosine is 1 - 2 * hamming / D.

The same arithmetic exists in NumPy (`int8_codes`, `binary_codes`: evaluation) and in
the TF graph (`int8_codes_tf`, `binary_codes_tf`: the SavedModel's extra outputs), tested
equal.
"""

import numpy as np
import tensorflow as tf

from tfsent.data.textio import read_lines
from tfsent.errors import ConfigError, InputError

QUANTIZATIONS = ("int8", "binary")


def parse_quantize(spec, option="--quantize"):
    """`"int8"`, `"binary"`, `"int8,binary"` (or a sequence) -> tuple of names, in
    QUANTIZATIONS order; "" or None -> (). ConfigError naming `option` otherwise."""
    if not spec:
        return ()
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names = [str(i).strip() for i in items if str(i).strip()]
    unknown = [n for n in names if n not in QUANTIZATIONS]
    if unknown:
        raise ConfigError(f"{option}: unknown quantization {unknown[0]!r}; valid: "
                          f"{', '.join(QUANTIZATIONS)} (comma-separated for several)")
    return tuple(q for q in QUANTIZATIONS if q in names)


def read_calibration_sentences(path):
    """The sentences of a calibration file (one per line, blank lines skipped).
    InputError naming the file when it is missing or has no sentence."""
    sentences = [" ".join(line.split()) for line in read_lines(path)]
    sentences = [s for s in sentences if s]
    if not sentences:
        raise InputError("calibration file has no sentences (it is empty or blank)",
                         path=path)
    return sentences


def l2_normalize(embeddings, dtype=np.float32):
    """Row-wise L2 normalisation in NumPy (a zero row stays zero)."""
    emb = np.asarray(embeddings, dtype)
    return emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)


def calibrate_int8(embeddings):
    """Per-dimension ranges `(lo, hi)` (float64 (D,)) of the normalised `embeddings`
    (N, D), N >= 1: what `int8_codes` needs."""
    emb = l2_normalize(embeddings, np.float64)
    if emb.ndim != 2 or emb.shape[0] == 0:
        raise InputError(f"int8 calibration needs at least one embedding, got shape "
                         f"{emb.shape}")
    return emb.min(axis=0), emb.max(axis=0)


def _steps(lo, hi):
    width = np.asarray(hi, np.float64) - np.asarray(lo, np.float64)
    return np.where(width > 0, width / 255.0, 1.0)


def int8_codes(embeddings, lo, hi):
    """int8 (N, D) codes of the normalised `embeddings` for calibrated ranges lo, hi
    (computed in float64; the graph's float32 version may differ by one step)."""
    emb = l2_normalize(embeddings, np.float64)
    scaled = np.round((emb - lo) / _steps(lo, hi)) - 128.0
    return np.clip(scaled, -128, 127).astype(np.int8)


def binary_codes(embeddings):
    """uint8 (N, ceil(D / 8)) packed sign bits (1 where the value is > 0)."""
    return np.packbits(np.asarray(embeddings) > 0, axis=1)


def binary_as_signs(codes, dim):
    """Packed binary codes -> float32 (N, dim) of +-1 (bit 1 -> +1)."""
    bits = np.unpackbits(np.asarray(codes, np.uint8), axis=1)[:, :dim]
    return bits.astype(np.float32) * 2.0 - 1.0


def quantized_for_similarity(embeddings, quantize, ranges=None):
    """float32 vectors whose cosine is the quantized similarity: the int8 codes as
    numbers (needs `ranges` from `calibrate_int8`), or +-1 signs for binary."""
    if quantize == "int8":
        if ranges is None:
            raise ConfigError("int8 quantization needs calibrated ranges")
        return int8_codes(embeddings, *ranges).astype(np.float32)
    if quantize == "binary":
        dim = np.asarray(embeddings).shape[1]
        return binary_as_signs(binary_codes(embeddings), dim)
    raise ConfigError(f"unknown quantization {quantize!r}; valid: {', '.join(QUANTIZATIONS)}")


def int8_codes_tf(normalized, lo, hi):
    """`int8_codes` in the TF graph; `normalized` is already L2-normalised (float32)."""
    steps = tf.constant(_steps(lo, hi), tf.float32)
    scaled = tf.round((normalized - tf.constant(np.asarray(lo, np.float32))) / steps) - 128.0
    return tf.cast(tf.clip_by_value(scaled, -128.0, 127.0), tf.int8)


def binary_codes_tf(embeddings):
    """`binary_codes` in the TF graph: (N, D) float -> uint8 (N, ceil(D / 8))."""
    dim = embeddings.shape[-1]
    padded = -dim % 8
    bits = tf.cast(embeddings > 0, tf.int32)
    if padded:
        bits = tf.pad(bits, [[0, 0], [0, padded]])
    bits = tf.reshape(bits, [-1, (dim + padded) // 8, 8])
    weights = tf.constant([128, 64, 32, 16, 8, 4, 2, 1], tf.int32)
    return tf.cast(tf.reduce_sum(bits * weights, axis=-1), tf.uint8)
