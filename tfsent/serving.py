"""Loading and running tfsent's exports and encoders for inference (the serving stage).

`load_any` opens whatever the commands accept as a model: an exported SavedModel (a
version directory, or an export directory whose newest version is used) or anything
`tfsent.encoders.load_encoder` takes. `SavedModelEncoder` runs an export in this process
with the `encode(sentences)` interface of a SentenceEncoder; `ServedQuantizedEncoder`
exposes an export's own int8 / binary codes; `ServedCrossEncoder` runs a cross-encoder
export's `score(queries, passages)`. Writing exports: `tfsent.formats.saved_model`.
"""

import os

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops of an export's tokenizer)

from tfsent.formats import quantize
from tfsent.encoders import load_encoder
from tfsent.encoders.token_batches import longest_first_batches, string_chunks, utf8_bytes
from tfsent.errors import ConfigError, InputError
from tfsent.matryoshka import resolve_truncate_dim
from tfsent.formats.metadata import metadata_path, read_metadata, resolve_savedmodel_dir


def load_any(model, pooling="mean", max_seq_length=512):
    """An object with `.encode(sentences, batch_size, normalize)`: a SavedModelEncoder for
    an exported SavedModel, else the SentenceEncoder `load_encoder` makes of `model`."""
    if os.path.isdir(model) and resolve_savedmodel_dir(model) is not None:
        return SavedModelEncoder(model)
    return load_encoder(model, pooling=pooling, max_seq_length=max_seq_length,
                        pad_to_max_length=False)


def load_savedmodel(path):
    """(version directory, `tf.saved_model.load` of it) for a version or export directory
    (`resolve_savedmodel_dir`); InputError naming `path` when there is no SavedModel."""
    resolved = resolve_savedmodel_dir(path)
    if resolved is None:
        raise InputError("no SavedModel here (expected saved_model.pb or integer "
                         "version subdirectories)", path=path)
    return resolved, tf.saved_model.load(resolved)


class SavedModelEncoder:
    """Wraps an exported SavedModel with the `encode(sentences)` interface of SentenceEncoder."""

    def __init__(self, path):
        self.path, self._loaded = load_savedmodel(path)
        self._serve = self._loaded.signatures["serving_default"]
        outputs = sorted(self._serve.structured_outputs)
        if "embedding" not in outputs:
            what = (" (a cross-encoder's score(queries, passages): rerank with it, e.g. "
                    "python -m tfsent.evaluate --rerank)"
                    if "score" in self._loaded.signatures else "")
            raise InputError(f"not a sentence-embedding export: its serving_default "
                             f"returns {', '.join(outputs)}{what}", path=self.path)
        self.embedding_dim = self._read_embedding_dim()

    def _read_embedding_dim(self):
        """The width of `embedding`: the signature's static output shape (what the graph
        computes, a head included), else the export metadata's `hidden_dim`."""
        dim = self._serve.structured_outputs["embedding"].shape[-1]
        if dim is not None:
            return int(dim)
        try:
            return int(self._metadata()["hidden_dim"])
        except (KeyError, TypeError, ValueError):
            raise InputError("the SavedModel's embedding width is unknown (no static output "
                             "shape and no hidden_dim in its metadata)",
                             path=self._metadata_path) from None

    @property
    def _metadata_path(self):
        return metadata_path(self.path)

    def _metadata(self):
        """The export's tfsent metadata ({} when it has none or it does not parse)."""
        return read_metadata(self.path, required=False)

    @property
    def prompts(self):
        """{"query_prompt", "document_prompt"} the export was written with (its metadata;
        "" for each when absent, as in exports older than the prompts)."""
        meta = self._metadata()
        return {key: str(meta.get(key) or "") for key in ("query_prompt", "document_prompt")}

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
        dimensions (before `normalize`; None or 0: all D, the export's own size: an export
        made with a truncate_dim serves only those)."""
        out = self._run(sentences, "embedding", batch_size, np.float32)
        truncate_dim = resolve_truncate_dim(truncate_dim, None, out.shape[1])
        if truncate_dim is not None:
            out = out[:, :truncate_dim]
        if normalize:
            out = quantize.l2_normalize(out)
        return out

    def encode_query(self, sentences, batch_size=64, normalize=False):
        """`encode` through the `encode_query` signature (the export's query prompt
        prepended); exports without it (older tfsent) use `serving_default`."""
        return self._run(sentences, "embedding", batch_size, np.float32, "encode_query",
                         normalize)

    def encode_document(self, sentences, batch_size=64, normalize=False):
        """`encode` through the `encode_document` signature (the document prompt)."""
        return self._run(sentences, "embedding", batch_size, np.float32, "encode_document",
                         normalize)

    def encode_quantized(self, sentences, quantization, batch_size=64):
        """The export's own quantized codes of `sentences`: int8 (N, D) or packed uint8
        (N, ceil(D / 8)); ConfigError when the export has no such output."""
        if quantization not in self.quantized_outputs:
            raise ConfigError(f"the SavedModel at {self.path} has no {quantization} output "
                              f"(it serves: {', '.join(self.quantized_outputs) or 'none'})")
        return self._run(sentences, f"embedding_{quantization}", batch_size,
                         np.int8 if quantization == "int8" else np.uint8)

    def _run(self, sentences, key, batch_size, dtype, signature="serving_default",
             normalize=False):
        """`signature[key]` of `sentences` in input order, in batches formed longest
        first: by token count through the export's `count_tokens` signature (without the
        prompt: it adds the same tokens to every string), by characters for exports
        without it."""
        serve = self._loaded.signatures.get(signature, self._serve)
        sentences = list(sentences)
        batches = longest_first_batches(len(sentences), batch_size,
                                        lambda: self._lengths(sentences))
        width = self._serve.structured_outputs[key].shape[-1]
        if key == "embedding" and width is None:
            width = self.embedding_dim
        if not sentences:
            return np.zeros((0, width), dtype)
        out = None
        for idx in batches:
            batch = tf.constant([utf8_bytes(sentences[i]) for i in idx])
            rows = serve(sentences=batch)[key].numpy()
            if out is None:
                out = np.zeros((len(sentences), rows.shape[1]), dtype)
            out[idx] = rows
        return quantize.l2_normalize(out) if normalize else out

    def _lengths(self, sentences):
        """Tokens per sentence (`count_tokens`), or characters for older exports."""
        count = self._loaded.signatures.get("count_tokens")
        if count is None:
            return np.array([len(s) for s in sentences])
        return np.concatenate([count(sentences=chunk)["token_count"].numpy()
                               for chunk in string_chunks(sentences)])


class ServedQuantizedEncoder:
    """`encode` returning an export's own quantized codes as float vectors whose cosine is
    the quantized similarity (int8 codes as numbers, binary bits as +-1)."""

    def __init__(self, saved_model_encoder, quantization):
        self.model = saved_model_encoder
        self.quantization = quantization

    def encode(self, sentences, batch_size=64, normalize=False, max_seq_length=None):
        """Float (N, D) vectors of the export's `embedding_<quantization>` codes."""
        del normalize, max_seq_length
        codes = self.model.encode_quantized(sentences, self.quantization, batch_size)
        if self.quantization == "binary":
            return quantize.binary_as_signs(codes, self.model.embedding_dim)
        return codes.astype(np.float32)


class ServedCrossEncoder:
    """A cross-encoder export (`tfsent.formats.cross_encoder`: a SavedModel with a
    `score(queries, passages)` signature, and `count_pair_tokens` since tfsent batches
    pairs by token count) run in this process, with the `score` interface of
    `tfsent.methods.CrossEncoder`."""

    def __init__(self, path):
        self.path, self._loaded = load_savedmodel(path)
        if "score" not in self._loaded.signatures:
            raise InputError(f"not a cross-encoder export: it has no score signature "
                             f"(signatures: {', '.join(sorted(self._loaded.signatures))}; "
                             f"CrossEncoder.export writes one)", path=self.path)
        self._score = self._loaded.signatures["score"]

    def score(self, queries, passages, batch_size=64, max_seq_length=None):
        """Relevance logits (float32 (N,)) of (query, passage) pairs (str or bytes), in
        input order, scored in batches formed longest first: by token count through the
        export's `count_pair_tokens` signature, by characters for exports without it
        (older tfsent). The export's own truncation length applies; `max_seq_length` is
        accepted and ignored."""
        del max_seq_length
        queries, passages = list(queries), list(passages)
        if len(queries) != len(passages):
            raise ConfigError(f"score: {len(queries)} queries but {len(passages)} passages")
        out = np.zeros(len(queries), np.float32)
        for idx in longest_first_batches(len(queries), batch_size,
                                         lambda: self._lengths(queries, passages)):
            batch = [tf.constant([utf8_bytes(texts[i]) for i in idx])
                     for texts in (queries, passages)]
            out[idx] = self._score(queries=batch[0], passages=batch[1])["score"].numpy()
        return out

    def _lengths(self, queries, passages):
        """Tokens per pair (`count_pair_tokens`), or characters for older exports."""
        count = self._loaded.signatures.get("count_pair_tokens")
        if count is None:
            return np.array([len(q) + len(p) for q, p in zip(queries, passages)])
        return np.concatenate([
            count(queries=q, passages=p)["token_count"].numpy()
            for q, p in zip(string_chunks(queries), string_chunks(passages))])
