"""Exports a SentenceEncoder as a SavedModel that TF Serving loads.

Layout (TF Serving's): `EXPORT_DIR/<version>/saved_model.pb`, integer versions, each new
export takes the next version. A version is written under a hidden temporary name inside
EXPORT_DIR and renamed into place only when complete, so a server watching EXPORT_DIR never
sees a partial model; leftovers of an interrupted export are removed by the next export.

Signatures:
  serving_default(sentences: string[N]) -> {embedding: float32[N, H],
                                            embedding_normalized: float32[N, H]}
  encode_ids(token_ids: int32[N, L], padding_mask: int32[N, L]) -> same outputs, for
      pre-tokenized requests (core TF ops only in this signature; the SavedModel as a
      whole still holds the tokenizer's TF Text ops, which any loader must register).
With `truncate_dim=D` both embeddings keep their first D dimensions (a Matryoshka model;
truncation before normalisation) and H is D. With `quantize` both signatures also return
`embedding_int8` (int8[N, H], ranges calibrated on given sentences and stored in the
graph and the metadata) and/or `embedding_binary` (uint8[N, ceil(H / 8)], packed sign
bits): see `tfsent.quantize`.
Loading needs `tensorflow` and `tensorflow_text` (the tokenizer's ops) and nothing else,
through TF2's `tf.saved_model.load` or, as TF Serving does, a TF1 session restoring the
variables through the MetaGraph's saver_def (see `tf_variables`).

CLI: python -m tfsent.export --model=NAME_OR_DIR --pooling=mean --export_dir=DIR [--jit_compile]
         [--truncate_dim=D] [--quantize=int8,binary --calibration_file=SENTENCES.txt]
     python -m tfsent.export --model=... --format=sentence_transformers|huggingface|keras_hub
         --export_dir=NEW_DIR [--normalize]   (other ecosystems: see tfsent.publish)
"""

import json
import os
import re
import shutil

import tensorflow as tf

from tfsent import quantize
from tfsent.errors import ConfigError, InputError

METADATA_FILE = "tfsent_export.json"
_TMP_PREFIX = ".tmp-export-"


class _ServingModule(tf.Module):
    """The tf.Module that is saved: tokenizer + encoder forward + pooling."""

    def __init__(self, encoder, pooling, max_seq_length=None, head=None, jit_compile=False,
                 truncate_dim=None):
        super().__init__()
        # The encoder and head are kept out of the saved object graph (object.__setattr__
        # skips tf.Module's tracking): their Keras variables would be saved a second time
        # next to `tf_variables` below, which is what the functions use.
        object.__setattr__(self, "encoder", encoder)
        object.__setattr__(self, "head", head)
        # Per-batch padding at serving time: no wasted FLOPs on short sentences.
        self.tokenizer = encoder.tokenizer.with_options(
            max_seq_length=encoder.clamp_length(max_seq_length), pad_to_max_length=False)
        self.pooling = pooling
        self.truncate_dim = truncate_dim
        self.int8_ranges = None  # (lo, hi) once calibrated
        self.binary = False
        self.jit_compile = jit_compile
        if jit_compile:
            self._xla_embed = tf.function(self._embed, jit_compile=True)
        # TF Serving (and saved_model_cli, tf.compat.v1 loaders) restore variables through
        # the MetaGraph's saver_def, which only reaches tf.Variables tracked directly: a
        # Keras 3 variable wraps its tf.Variable and saves a copy the served graph does not
        # read ("Could not find variable ..." at the first request; keras-team/keras#20095).
        self.tf_variables = tf_variables(encoder, head)

    def _embed(self, token_ids, padding_mask):
        features = {"token_ids": token_ids, "padding_mask": padding_mask}
        emb = self.encoder(features, training=False, pooling=self.pooling)["embedding"]
        if self.head is not None:
            emb = self.head(emb)
        emb = tf.cast(emb, tf.float32)
        if self.truncate_dim is not None:
            emb = emb[:, :self.truncate_dim]
        normalized = tf.math.l2_normalize(emb, axis=-1)
        out = {"embedding": emb, "embedding_normalized": normalized}
        if self.int8_ranges is not None:
            out["embedding_int8"] = quantize.int8_codes_tf(normalized, *self.int8_ranges)
        if self.binary:
            out["embedding_binary"] = quantize.binary_codes_tf(normalized)
        return out

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
    def serve(self, sentences):
        """Signature `serving_default`: strings -> embedding, embedding_normalized."""
        features = self.tokenizer(sentences)
        if self.jit_compile:
            from tfsent.encoders import call_in_buckets

            return call_in_buckets(self._xla_embed, features, self.tokenizer.max_seq_length)
        return self._embed(features["token_ids"], features["padding_mask"])

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="token_ids"),
                                  tf.TensorSpec([None, None], tf.int32, name="padding_mask")])
    def encode_ids(self, token_ids, padding_mask):
        """Signature `encode_ids`: token ids + padding mask (plain TF ops only)."""
        return self._embed(token_ids, padding_mask)


def tf_variables(*layers):
    """The tf.Variables behind the Keras variables of `layers` (None entries skipped)."""
    found = []
    for layer in layers:
        for variable in (layer.variables if layer is not None else ()):
            inner = getattr(variable, "_value", variable)  # keras.Variable -> tf.Variable
            if not isinstance(inner, tf.Variable):
                raise TypeError(f"variable {getattr(variable, 'path', variable)} of "
                                f"{type(layer).__name__} is not backed by a tf.Variable "
                                f"({type(inner).__name__}); cannot export it")
            found.append(inner)
    return found


def list_versions(export_dir):
    """Integer version subdirectories of `export_dir` that hold a complete SavedModel."""
    if not os.path.isdir(export_dir):
        return []
    versions = []
    for name in os.listdir(export_dir):
        if re.fullmatch(r"\d+", name) and os.path.exists(
                os.path.join(export_dir, name, "saved_model.pb")):
            versions.append(int(name))
    return sorted(versions)


def export_encoder(encoder, export_dir, pooling=None, version=None, metadata=None,
                   max_seq_length=None, head=None, jit_compile=False, truncate_dim=None,
                   quantize_outputs=(), calibration_sentences=None):
    """Writes `encoder` as SavedModel version `version` (default: next) under `export_dir`.

    `max_seq_length` is the serving truncation length (default: the encoder tokenizer's);
    `head` is an optional layer applied to the pooled embedding (CLSR's encoder e).
    `jit_compile=True` makes `serving_default` run the encoder under XLA on batches padded
    to bucketed shapes (`tfsent.encoders.WIDTH_BUCKETS`, rows to a power of two): faster
    once each shape is compiled; TF Serving on CPU then needs
    `--xla_cpu_compilation_enabled=true`. `encode_ids` stays plain TF.

    Returns the path of the new version directory. The write is atomic: a temporary
    hidden directory is renamed into place at the end.
    """
    pooling = pooling or encoder.pooling
    from tfsent.encoders import check_pooling

    check_pooling(pooling)
    if encoder.tokenizer is None:
        raise ConfigError("cannot export an encoder without a tokenizer")
    export_dir = os.fspath(export_dir)
    os.makedirs(export_dir, exist_ok=True)
    for name in os.listdir(export_dir):  # leftovers of an interrupted export
        if name.startswith(_TMP_PREFIX):
            shutil.rmtree(os.path.join(export_dir, name), ignore_errors=True)
    if version is None:
        existing = list_versions(export_dir)
        version = (existing[-1] + 1) if existing else 1
    final = os.path.join(export_dir, str(int(version)))
    if os.path.exists(final):
        raise ConfigError(f"export version {version} already exists at {final}")
    tmp = os.path.join(export_dir, f"{_TMP_PREFIX}{version}-{os.getpid()}")
    width = _embedding_width(encoder, head)
    if truncate_dim is not None:
        from tfsent.matryoshka import check_dims

        (truncate_dim,) = check_dims([truncate_dim], width, "truncate_dim")
    quantize_outputs = quantize.parse_quantize(quantize_outputs, "quantize_outputs")
    if "int8" in quantize_outputs and not calibration_sentences:
        raise ConfigError("int8 quantization needs calibration sentences (--calibration_file)")
    module = _ServingModule(encoder, pooling, max_seq_length, head, jit_compile,
                            truncate_dim)
    calibration = {}
    if "int8" in quantize_outputs:
        module.int8_ranges = _calibrate(module, calibration_sentences)
        calibration = {"int8_lo": module.int8_ranges[0].tolist(),
                       "int8_hi": module.int8_ranges[1].tolist(),
                       "int8_calibration_sentences": len(calibration_sentences)}
    module.binary = "binary" in quantize_outputs
    # The tf.functions themselves, not their concrete functions: `save` traces every
    # function again in its save context, so a concrete function traced here beforehand
    # would be a second (wasted) trace of the tokenizer and the encoder.
    signatures = {"serving_default": module.serve, "encode_ids": module.encode_ids}
    tf.saved_model.save(module, tmp, signatures=signatures)
    meta = {"pooling": pooling, "max_seq_length": module.tokenizer.max_seq_length,
            "hidden_dim": encoder.hidden_dim, "lowercase": encoder.tokenizer.lowercase,
            "strip_accents": encoder.tokenizer.strip_accents, "jit_compile": bool(jit_compile),
            "embedding_dim": truncate_dim or width, "truncate_dim": truncate_dim,
            "quantize": list(quantize_outputs), **calibration}
    meta.update(metadata or {})
    os.makedirs(os.path.join(tmp, "assets.extra"), exist_ok=True)
    with open(os.path.join(tmp, "assets.extra", METADATA_FILE), "w") as f:
        json.dump(meta, f, indent=2)
    os.rename(tmp, final)
    return final


def _embedding_width(encoder, head):
    """Width of the exported embedding: the head's output units, else the encoder's."""
    if head is None:
        return encoder.hidden_dim
    probe = head(tf.zeros([1, encoder.hidden_dim]))
    return int(probe.shape[-1])


def _calibrate(module, sentences, batch_size=64):
    """int8 ranges from the module's own normalised embeddings of `sentences`."""
    import numpy as np

    # A tf.function of its own: tracing `module.serve` here would cache a trace without
    # the int8 output that the saved signature must have.
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def normalized(strings):
        features = module.tokenizer(strings)
        return module._embed(features["token_ids"],  # noqa: SLF001
                             features["padding_mask"])["embedding_normalized"]

    parts = [normalized(tf.constant(sentences[i:i + batch_size])).numpy()
             for i in range(0, len(sentences), batch_size)]
    return tuple(np.asarray(r, np.float32) for r in quantize.calibrate_int8(
        np.concatenate(parts)))


def resolve_savedmodel_dir(path):
    """A SavedModel version dir, or an export dir (its newest version), or None."""
    path = os.fspath(path)
    if os.path.exists(os.path.join(path, "saved_model.pb")):
        return path
    versions = list_versions(path)
    if versions:
        return os.path.join(path, str(versions[-1]))
    return None


class SavedModelEncoder:
    """Wraps an exported SavedModel with the `encode(sentences)` interface of SentenceEncoder."""

    def __init__(self, path):
        import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

        resolved = resolve_savedmodel_dir(path)
        if resolved is None:
            raise InputError("no SavedModel here (expected saved_model.pb or integer "
                             "version subdirectories)", path=path)
        self.path = resolved
        self._loaded = tf.saved_model.load(resolved)
        self._serve = self._loaded.signatures["serving_default"]
        self.embedding_dim = self._read_embedding_dim()

    def _read_embedding_dim(self):
        """The width of `embedding`: the signature's static output shape (what the graph
        computes, a head included), else the export metadata's `hidden_dim`."""
        dim = self._serve.structured_outputs["embedding"].shape[-1]
        if dim is not None:
            return int(dim)
        path = os.path.join(self.path, "assets.extra", METADATA_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                return int(json.load(f)["hidden_dim"])
        except (OSError, ValueError, KeyError, TypeError):
            raise InputError("the SavedModel's embedding width is unknown (no static output "
                             "shape and no hidden_dim in its metadata)", path=path) from None

    @property
    def quantized_outputs(self):
        """The quantizations this export serves ("int8", "binary")."""
        outputs = self._serve.structured_outputs
        return tuple(q for q in quantize.QUANTIZATIONS if f"embedding_{q}" in outputs)

    def encode(self, sentences, batch_size=64, normalize=False, verbose=0, max_seq_length=None,
               truncate_dim=None):
        """Embeds a list of strings through the `serving_default` signature (the export's
        own truncation length applies; `max_seq_length` is accepted and ignored). Returns
        float32 (N, D); (0, D) for no sentences. `truncate_dim` keeps the first
        dimensions (before `normalize`)."""
        import numpy as np

        out = self._run(sentences, "embedding", batch_size, np.float32)
        if truncate_dim is not None:
            from tfsent.matryoshka import check_dims

            (truncate_dim,) = check_dims([truncate_dim], out.shape[1], "truncate_dim")
            out = out[:, :truncate_dim]
        if normalize:
            out = quantize.l2_normalize(out)
        return out

    def encode_quantized(self, sentences, quantization, batch_size=64):
        """The export's own quantized codes of `sentences`: int8 (N, D) or packed uint8
        (N, ceil(D / 8)); ConfigError when the export has no such output."""
        import numpy as np

        if quantization not in self.quantized_outputs:
            raise ConfigError(f"the SavedModel at {self.path} has no {quantization} output "
                              f"(it serves: {', '.join(self.quantized_outputs) or 'none'})")
        return self._run(sentences, f"embedding_{quantization}", batch_size,
                         np.int8 if quantization == "int8" else np.uint8)

    def _run(self, sentences, key, batch_size, dtype):
        """`serving_default[key]` of `sentences` in input order, longest first in batches."""
        import numpy as np

        sentences = list(sentences)
        width = self._serve.structured_outputs[key].shape[-1]
        if key == "embedding" and width is None:
            width = self.embedding_dim
        if not sentences:
            return np.zeros((0, width), dtype)
        order = np.argsort([len(s) for s in sentences], kind="stable")[::-1]
        out = None
        for start in range(0, len(sentences), batch_size):
            idx = order[start:start + batch_size]
            batch = tf.constant([sentences[i].encode("utf-8", "replace") for i in idx])
            rows = self._serve(sentences=batch)[key].numpy()
            if out is None:
                out = np.zeros((len(sentences), rows.shape[1]), dtype)
            out[idx] = rows
        return out


def main(argv):
    """CLI entry point: load an encoder and export it in --format (a bad flag or input:
    `error: ...` on stderr, exit status 2)."""
    import sys

    from absl import app

    from tfsent.errors import TfsentError

    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
        print(_export_from_flags())
    except TfsentError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def _export_from_flags():
    from absl import flags, logging

    from tfsent.encoders import load_encoder

    FLAGS = flags.FLAGS
    # Refuse what can be refused before loading the model.
    if FLAGS.format == "saved_model" and FLAGS.normalize:
        raise ConfigError("--normalize applies to the other formats: a SavedModel serves "
                          "both `embedding` and `embedding_normalized`")
    quantize_outputs = quantize.parse_quantize(FLAGS.quantize)
    calibration = None
    if FLAGS.calibration_file and "int8" not in quantize_outputs:
        raise ConfigError("--calibration_file sets the int8 ranges: use it with "
                          "--quantize=int8")
    if "int8" in quantize_outputs:
        if not FLAGS.calibration_file:
            raise ConfigError("--quantize=int8 needs --calibration_file (sentences, one per "
                              "line, like the ones the model will serve)")
        calibration = quantize.read_calibration_sentences(FLAGS.calibration_file)
    if FLAGS.truncate_dim is not None and FLAGS.truncate_dim < 1:
        raise ConfigError(f"--truncate_dim must be >= 1, got {FLAGS.truncate_dim}")
    if FLAGS.format != "saved_model":
        from tfsent import publish

        for flag in ("jit_compile", "truncate_dim", "quantize"):
            if getattr(FLAGS, flag):
                raise ConfigError(f"--{flag} applies to --format=saved_model only")
        publish.check_export_target(FLAGS.export_dir)
        if FLAGS.format == "sentence_transformers":
            publish.check_sentence_transformers_pooling(FLAGS.pooling)
    encoder = load_encoder(FLAGS.model, pooling=FLAGS.pooling,
                           max_seq_length=FLAGS.max_seq_length)
    if FLAGS.format == "saved_model":
        metadata = {"model": FLAGS.model}
        if calibration is not None:
            metadata["int8_calibration_file"] = os.path.abspath(FLAGS.calibration_file)
        if FLAGS.truncate_dim is not None:
            from tfsent.matryoshka import check_dims

            check_dims([FLAGS.truncate_dim], encoder.hidden_dim, "--truncate_dim")
        path = export_encoder(encoder, FLAGS.export_dir, pooling=FLAGS.pooling,
                              metadata=metadata, jit_compile=FLAGS.jit_compile,
                              truncate_dim=FLAGS.truncate_dim,
                              quantize_outputs=quantize_outputs,
                              calibration_sentences=calibration)
    else:
        from tfsent.publish import export_encoder_as

        path = export_encoder_as(encoder, FLAGS.export_dir, FLAGS.format,
                                 pooling=FLAGS.pooling, normalize=FLAGS.normalize,
                                 metadata={"model": FLAGS.model})
    logging.info("exported %s (pooling %s) as %s to %s", FLAGS.model, FLAGS.pooling,
                 FLAGS.format, path)
    return path


def _define_flags():
    from absl import flags

    from tfsent.publish import FORMATS

    flags.DEFINE_string("model", "minilm-l6", "Encoder: preset name, checkpoint dir or minilm-l6.")
    flags.DEFINE_string("pooling", "mean", "Pooling carried by the export.")
    flags.DEFINE_integer("max_seq_length", 256, "Tokenizer truncation length.")
    flags.DEFINE_enum("format", "saved_model", FORMATS,
                      "saved_model: versioned SavedModels for TF Serving under --export_dir; "
                      "sentence_transformers / huggingface / keras_hub: a new directory "
                      "--export_dir (see tfsent.publish).")
    flags.DEFINE_string("export_dir", None, "Directory of versioned SavedModels, or the new "
                        "directory of the other formats.")
    flags.DEFINE_bool("normalize", False, "L2-normalise the embedding (sentence_transformers: "
                      "a Normalize module; keras_hub: the TextEmbedder's normalize).")
    flags.DEFINE_bool("jit_compile", False, "Serve under XLA on bucketed batch shapes (TF "
                      "Serving on CPU then needs --xla_cpu_compilation_enabled=true).")
    flags.DEFINE_integer("truncate_dim", None, "Serve only the first D dimensions of the "
                         "embedding (a Matryoshka-trained model), truncated before "
                         "normalisation.")
    flags.DEFINE_string("quantize", "", "Also serve quantized embeddings: int8, binary or "
                        "int8,binary (outputs embedding_int8 / embedding_binary).")
    flags.DEFINE_string("calibration_file", None, "Sentences (one per line) whose embeddings "
                        "set the int8 ranges; required with --quantize=int8.")
    flags.mark_flag_as_required("export_dir")


if __name__ == "__main__":
    from absl import app

    _define_flags()
    app.run(main)
