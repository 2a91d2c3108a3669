"""Writes a SentenceEncoder as a SavedModel that TF Serving loads (the export stage).

Layout (TF Serving's): `EXPORT_DIR/<version>/saved_model.pb`, integer versions, each new
export takes the next version; each version's `assets.extra/` holds `tfsent_export.json`
(the metadata, `tfsent.formats.metadata`) and `tf_serving_warmup_requests`, and
`EXPORT_DIR/batching_parameters.txt` TF Serving's batching settings
(`tfsent.formats.tf_serving`). A version (the next: `tfsent.formats.staging.next_version`)
is built in a marked staging folder inside EXPORT_DIR (`tfsent.fsio.staged_dir`) and
renamed into place only when complete and
flushed to disk, so a server watching EXPORT_DIR never sees a partial model; a staging
folder of an export that was killed is removed by the next export (only its own, marked,
of a process that has ended: another process's export in progress is left alone).

Signatures:
  serving_default(sentences: string[N]) -> {embedding: float32[N, H],
                                            embedding_normalized: float32[N, H]}
  encode_query(sentences), encode_document(sentences) -> the same outputs, with the
      export's query / document prompt prepended to each string (retrieval models)
  encode_ids(token_ids: int32[N, L], padding_mask: int32[N, L]) -> same outputs, for
      pre-tokenized requests (core TF ops only in this signature; the SavedModel as a
      whole still holds the tokenizer's TF Text ops, which any loader must register).
  count_tokens(sentences) -> {token_count: int32[N]}: each string's tokens at the
      serving truncation length, special tokens included; a client that batches a
      corpus by it (most first) pads less than one batching by characters
      (`tfsent.serving.SavedModelEncoder` does; exports before 2026-11-28 lack it).
With `truncate_dim=D` both embeddings keep their first D dimensions (a Matryoshka model;
truncation before normalisation) and H is D. With `quantize` both signatures also return
`embedding_int8` (int8[N, H], ranges calibrated on given sentences and stored in the
graph and the metadata) and/or `embedding_binary` (uint8[N, ceil(H / 8)], packed sign
bits): see `tfsent.formats.quantize`.
Loading needs `tensorflow` and `tensorflow_text` (the tokenizer's ops) and nothing else,
through TF2's `tf.saved_model.load` or, as TF Serving does, a TF1 session restoring the
variables through the MetaGraph's saver_def (see `tf_variables`).

CLI: python -m tfsent.export --model=NAME_OR_DIR --pooling=mean --export_dir=DIR [--jit_compile]

Loading and running exports: `tfsent.serving`. The command line: `tfsent.export`.
"""

import numpy as np
import tensorflow as tf

from tfsent import fsio
from tfsent.encoders import call_in_buckets, check_pooling
from tfsent.encoders.lora import merge_lora
from tfsent.errors import ConfigError
from tfsent.formats import quantize, tf_serving
# METADATA_FILE and list_versions: also importable from here, as before the metadata module.
from tfsent.formats.metadata import METADATA_FILE, encoder_prompts, encoder_truncate_dim, \
    export_metadata, list_versions, write_metadata  # noqa: F401
from tfsent.formats.staging import new_version_path


class ServingModule(tf.Module):
    """The tf.Module that is saved: tokenizer + encoder forward + pooling."""

    def __init__(self, encoder, pooling, max_seq_length=None, head=None, jit_compile=False,
                 truncate_dim=None, query_prompt="", document_prompt=""):
        super().__init__()
        encoder = merge_lora(encoder)  # (a no-op when formats.export merged it already)
        self.query_prompt = str(query_prompt or "")
        self.document_prompt = str(document_prompt or "")
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

    def embed_ids(self, token_ids, padding_mask):
        """Token ids + padding mask -> the outputs of `encode_ids`, in the graph of the
        calling tf.function (the LiteRT export, `tfsent.formats.litert`, converts it)."""
        return self._embed(token_ids, padding_mask)

    def embed_sentences(self, sentences):
        """Strings -> the outputs of `serving_default` (tokenizer + forward), in the graph
        of the calling tf.function (the search export's `search` calls it too)."""
        features = self.tokenizer(sentences)
        if self.jit_compile:
            return call_in_buckets(self._xla_embed, features, self.tokenizer.max_seq_length)
        return self._embed(features["token_ids"], features["padding_mask"])

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
    def serve(self, sentences):
        """Signature `serving_default`: strings -> embedding, embedding_normalized."""
        return self.embed_sentences(sentences)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
    def encode_query(self, sentences):
        """Signature `encode_query`: the query prompt prepended, then `serving_default`."""
        return self.serve(tf.strings.join([self.query_prompt, sentences]))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
    def encode_document(self, sentences):
        """Signature `encode_document`: the document prompt prepended, then
        `serving_default`."""
        return self.serve(tf.strings.join([self.document_prompt, sentences]))

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="token_ids"),
                                  tf.TensorSpec([None, None], tf.int32, name="padding_mask")])
    def encode_ids(self, token_ids, padding_mask):
        """Signature `encode_ids`: token ids + padding mask (plain TF ops only)."""
        return self._embed(token_ids, padding_mask)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
    def count_tokens(self, sentences):
        """Signature `count_tokens`: strings -> token_count (tokens each, truncated)."""
        mask = self.tokenizer(sentences)["padding_mask"]
        return {"token_count": tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)}


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


def export_encoder(encoder, export_dir, pooling=None, version=None, metadata=None,
                   max_seq_length=None, head=None, jit_compile=False, truncate_dim=None,
                   quantize_outputs=(), calibration_sentences=None, query_prompt=None,
                   document_prompt=None):
    """Writes `encoder` as SavedModel version `version` (default: next) under `export_dir`.

    Signatures: `serving_default` (strings), `encode_query` / `encode_document` (the
    same, with `query_prompt` / `document_prompt` prepended to each string before
    tokenizing, as E5 / BGE / sentence-transformers' `prompts` do; with empty prompts
    they equal `serving_default`), `encode_ids` (token ids), `count_tokens` (tokens per
    string, to batch by). Prompts left None are the
    encoder's own (`encoder.prompts`: a sentence-transformers folder's), else none.

    `max_seq_length` is the serving truncation length (default: the encoder tokenizer's);
    `head` is an optional layer applied to the pooled embedding (CLSR's encoder e).
    `truncate_dim` keeps the first D dimensions (None: the encoder's own `truncate_dim`
    when no `head` is given, else all; 0: all): `formats.metadata.encoder_truncate_dim`.
    `jit_compile=True` makes `serving_default` run the encoder under XLA on batches padded
    to bucketed shapes (`tfsent.encoders.WIDTH_BUCKETS`, rows to a power of two): faster
    once each shape is compiled; TF Serving on CPU then needs
    `--xla_cpu_compilation_enabled=true`. `encode_ids` stays plain TF.

    Returns the path of the new version directory. The write is atomic: the version is
    built in a marked staging folder (`tfsent.fsio.staged_dir`) and renamed into place.
    TF Serving's production files come with it (`tfsent.formats.tf_serving`): warm-up requests in
    the version's assets.extra, and `export_dir/batching_parameters.txt` unless present.
    """
    pooling = pooling or encoder.pooling
    check_pooling(pooling)
    if encoder.tokenizer is None:
        raise ConfigError("cannot export an encoder without a tokenizer")
    query_prompt, document_prompt = encoder_prompts(encoder, query_prompt, document_prompt)
    final = new_version_path(export_dir, version)
    width = embedding_width(encoder, head)
    truncate_dim = encoder_truncate_dim(encoder, truncate_dim, width, head)
    quantize_outputs = quantize.parse_quantize(quantize_outputs, "quantize_outputs")
    if "int8" in quantize_outputs and not calibration_sentences:
        raise ConfigError("int8 quantization needs calibration sentences (--calibration_file)")
    module = ServingModule(encoder, pooling, max_seq_length, head, jit_compile,
                           truncate_dim, query_prompt, document_prompt)
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
    signatures = {"serving_default": module.serve, "encode_query": module.encode_query,
                  "encode_document": module.encode_document, "encode_ids": module.encode_ids,
                  "count_tokens": module.count_tokens}
    meta = encoder_metadata("tf_saved_model", module, encoder, width,
                            quantize=list(quantize_outputs), query_prompt=module.query_prompt,
                            document_prompt=module.document_prompt, **calibration)
    # Warm-up: serving_default; the prompt signatures of a retrieval model (its clients'
    # signatures); count_tokens, which a client batching by token count calls first.
    warmup = tf_serving.warmup_requests()
    for signature, prompt in (("encode_query", module.query_prompt),
                              ("encode_document", module.document_prompt)):
        if prompt:
            warmup += tf_serving.warmup_requests(signature)
    warmup += tf_serving.warmup_requests(
        "count_tokens", batch_sizes=tf_serving.WARMUP_BATCH_SIZES[-1:])
    write_version(final, module, signatures, {**meta, **(metadata or {})}, warmup=warmup)
    tf_serving.write_batching_parameters(export_dir)
    return final


def encoder_metadata(format_name, module, encoder, width, **details):
    """The metadata of a SavedModel built on the ServingModule `module`:
    `export_metadata`'s entries, then the encoder path's (embedding width and truncation,
    tokenizer options), then `details`."""
    return export_metadata(
        format_name, encoder, module.pooling, module.tokenizer.max_seq_length, module.head,
        hidden_dim=encoder.hidden_dim, lowercase=encoder.tokenizer.lowercase,
        strip_accents=encoder.tokenizer.strip_accents, jit_compile=bool(module.jit_compile),
        embedding_dim=module.truncate_dim or width, truncate_dim=module.truncate_dim,
        **details)


def write_version(final, module, signatures, metadata, warmup=None):
    """Saves `module` with `signatures` and `metadata` (`tfsent.formats.metadata`) as the
    version folder `final`, built in a marked staging folder and renamed into place, with
    TF Serving's warm-up requests (assets.extra/tf_serving_warmup_requests): `warmup`
    ([(signature, inputs)], see `tfsent.formats.tf_serving.warmup_requests`), by default
    `serving_default` at batch 1 and 8."""
    if warmup is None:
        warmup = tf_serving.warmup_requests()
    with fsio.staged_dir(final, "SavedModel version") as tmp:
        tf.saved_model.save(module, tmp, signatures=signatures)
        write_metadata(tmp, metadata)
        tf_serving.write_warmup_requests(tmp, warmup)


def embedding_width(encoder, head=None):
    """Width of the exported embedding: the head's output units, else the encoder's."""
    if head is None:
        return encoder.hidden_dim
    probe = head(tf.zeros([1, encoder.hidden_dim]))
    return int(probe.shape[-1])


def _calibrate(module, sentences, batch_size=64):
    """int8 ranges from the module's own normalised embeddings of `sentences`."""
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
