"""Writes a top-k search SavedModel: an encoder plus a corpus index (the export stage for
search; the command line is `tfsent.index`).

Layout and staging are the encoder export's (`tfsent.formats.saved_model`): `EXPORT_DIR/<version>`,
the next integer version, built in a marked staging folder and renamed into place when
complete, so TF Serving never sees half an index. Loading needs `tensorflow` and
`tensorflow_text` only, through `tf.saved_model.load` or a TF1 session restoring the
variables through the saver_def (TF Serving's way): the index is stored in plain
tf.Variables for that reason (see `tfsent.formats.saved_model.tf_variables`).

Signatures:
  search(queries: string[N], k: int32 scalar) ->
      {ids: string[N, k] (the corpus `_id`s, best first), scores: float32[N, k],
       embeddings: float32[N, D] (the normalised query embeddings)}
      (binary indexes add candidate_ids: string[N, C] and candidate_hamming: int32[N, C],
       the Hamming candidates before rescoring, nearest first)
  search_embeddings(query_embeddings: float32[N, D], k) -> the same outputs for query
      vectors computed elsewhere (normalised in the graph; no encoder run): what
      benchmarks/retrieval_scale.py times.
  serving_default, encode_ids: the encoder export's signatures, unchanged (no prompt).
  search_reranked(queries: string[N], k: int32, rerank_top: int32) -> {ids: string[N, k],
      scores: float32[N, k] (the reranker's), retriever_scores: float32[N, k],
      embeddings} (only with a reranker): the `search` of the top `rerank_top`, each
      (query, document text) pair scored by the cross-encoder stored in the same
      SavedModel, the k best by that score (ties: the retriever's order). The query
      prompt goes to the retriever only; the reranker reads the raw query and the
      document's text (title and text as indexed, without the document prompt). Needs
      1 <= k <= rerank_top <= corpus size.
`search` prepends the query prompt (given at export) to each query in the graph, then
embeds through the same tokenizer + forward as `serving_default` (one forward pass).
Each version carries TF Serving warm-up requests (`serving_default` at batch 1 and 8, one
`search` with k=1, and one `search_reranked` with a reranker; `tfsent.formats.tf_serving`);
no batching parameters: TF Serving's request batching needs a batch dimension on every
input, and `k` is a scalar.
`k` is chosen per request; k < 1 or k > corpus size fails the request with an
InvalidArgumentError reading "k=<k> is out of range: k must be between 1 and the corpus
size <M>".

Index kinds (D = the embedding width after `truncate_dim`; documents are embedded with
the document prompt prepended, truncated to D, L2-normalised):
- float32: the [M, D] matrix of normalised documents; score = cosine = dot product.
- int8: per-dimension min/max ranges over the corpus itself (asymmetric: `lo_d`, `hi_d`,
  255 steps; `tfsent.formats.quantize.int8_codes`, so nothing saturates); the query stays float
  and is scored against the dequantized codes, lo + step * (code + 128), computed as
  (q * step) . code + q . (lo + 128 step): the codes are cast to float32 one chunk at a
  time and multiplied, no float copy of the corpus is kept. Score = q . dequantized(doc)
  (about the cosine: the documents were unit vectors).
- binary: packed sign bits, uint8 [M, ceil(D / 8)] (`tfsent.formats.quantize.binary_codes`).
  Search: the query's sign bits against every document by Hamming distance (xor +
  popcount on 64/32/16/8-bit words), the `rescore_multiplier * k` nearest (at most M;
  ties: lower corpus index first) rescored with the float query against each candidate's
  +-1 sign vector (asymmetric, as sentence-transformers' `quantize_embeddings` rescoring):
  score = q . s / sqrt(D), the cosine between the query and the sign vector; the top k of
  the candidates by that score are returned.

Memory: the corpus is scanned in chunks of `chunk_rows` rows (default 16,384) keeping a
running top-k per query, so a request holds N x chunk_rows scores (2 MiB at batch 32),
plus one chunk of codes cast to float32 for int8 (24 MiB at D = 384) or N x chunk_rows
words of xor/popcount for binary, whatever the corpus size; at most two chunks are in
flight at a time.
"""

import math
import os

import keras
import numpy as np
import tensorflow as tf

from tfsent.data import beir
from tfsent.encoders import check_pooling
from tfsent.formats import quantize, tf_serving
from tfsent.formats.cross_encoder import scoring_module
from tfsent.errors import ConfigError, InputError
from tfsent.formats.metadata import encoder_truncate_dim
from tfsent.formats.saved_model import (ServingModule, embedding_width, encoder_metadata,
                                        write_version)
from tfsent.formats.staging import new_version_path

INDEX_KINDS = ("float32", "int8", "binary")
DEFAULT_CHUNK_ROWS = 16384
DEFAULT_RESCORE_MULTIPLIER = 4


def check_index_kind(quantize_flag, option="--quantize"):
    """`""`/None/"float32" -> "float32"; "int8" / "binary" as given; ConfigError naming
    `option` otherwise."""
    if not quantize_flag:
        return "float32"
    if quantize_flag not in INDEX_KINDS:
        raise ConfigError(f"{option}: {quantize_flag!r} is not an index quantization; valid: "
                          f"int8, binary (or none for float32)")
    return quantize_flag


class SearchModule(ServingModule):
    """The saved tf.Module of a search export: the encoder signatures of ServingModule
    plus the corpus index (ids, vectors or codes) in tf.Variables and the search
    functions."""

    def __init__(self, encoder, pooling, ids, vectors, kind="float32", max_seq_length=None,
                 truncate_dim=None, query_prompt="", rescore_multiplier=4,
                 chunk_rows=DEFAULT_CHUNK_ROWS, reranker=None, texts=None):
        super().__init__(encoder, pooling, max_seq_length, truncate_dim=truncate_dim)
        if reranker is not None:  # tracked: its variables are saved with the index
            self.reranker = reranker
            self.index_texts = tf.Variable(tf.constant(list(texts), tf.string),
                                           trainable=False, name="index_texts")
            self.search_reranked = tf.function(self._search_reranked, input_signature=[
                tf.TensorSpec([None], tf.string, name="queries"),
                tf.TensorSpec([], tf.int32, name="k"),
                tf.TensorSpec([], tf.int32, name="rerank_top")])
        vectors = np.asarray(vectors, np.float32)
        self.kind = kind
        self.query_prompt = query_prompt
        self.rescore_multiplier = int(rescore_multiplier)
        self.chunk_rows = int(chunk_rows)
        self.num_documents, self.dim = vectors.shape
        self.index_ids = tf.Variable(tf.constant(list(ids), tf.string), trainable=False,
                                     name="index_ids")
        if kind == "float32":
            self.index_vectors = tf.Variable(vectors, trainable=False, name="index_float32")
        elif kind == "int8":
            # In blocks of rows: the float64 arithmetic of `quantize` on a whole 1M-row
            # corpus would take several GB at once.
            blocks = range(0, self.num_documents, 65536)
            ranges = [quantize.calibrate_int8(vectors[i:i + 65536]) for i in blocks]
            lo = np.min([r[0] for r in ranges], axis=0)
            hi = np.max([r[1] for r in ranges], axis=0)
            self.int8_lo, self.int8_hi = lo, hi
            steps = np.where(hi - lo > 0, (hi - lo) / 255.0, 1.0)
            self._int8_step = np.asarray(steps, np.float32)
            self._int8_offset = np.asarray(lo + 128.0 * steps, np.float32)
            codes = np.concatenate([quantize.int8_codes(vectors[i:i + 65536], lo, hi)
                                    for i in blocks])
            self.index_int8 = tf.Variable(codes, trainable=False, name="index_int8")
        elif kind == "binary":
            self.index_binary = tf.Variable(quantize.binary_codes(vectors), trainable=False,
                                            name="index_binary")
        else:
            raise ConfigError(f"unknown index kind {kind!r}; valid: {', '.join(INDEX_KINDS)}")

    # -- signatures ---------------------------------------------------------------------
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="queries"),
                                  tf.TensorSpec([], tf.int32, name="k")])
    def search(self, queries, k):
        """Signature `search`: query strings and k -> ids, scores, embeddings."""
        if self.query_prompt:
            queries = tf.strings.join([self.query_prompt, queries])
        normalized = self.embed_sentences(queries)["embedding_normalized"]
        return _public(self._search(normalized, k))

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32,
                                                name="query_embeddings"),
                                  tf.TensorSpec([], tf.int32, name="k")])
    def search_embeddings(self, query_embeddings, k):
        """Signature `search_embeddings`: query vectors (normalised here) and k -> ids,
        scores, embeddings."""
        query_embeddings = tf.ensure_shape(query_embeddings, [None, self.dim])
        return _public(self._search(tf.math.l2_normalize(query_embeddings, axis=-1), k))

    def _search_reranked(self, queries, k, rerank_top):
        """Signature `search_reranked` (made in __init__ only with a reranker: a saved
        module traces each of its functions): retrieve the top `rerank_top`, rerank them
        with the stored cross-encoder, return the k best."""
        message = tf.strings.format("k={} is out of range: k must be between 1 and "
                                    "rerank_top={}", [k, rerank_top])
        check = tf.debugging.Assert(tf.logical_and(k >= 1, k <= rerank_top), [message])
        with tf.control_dependencies([check]):
            k = tf.identity(k)
        prompted = tf.strings.join([self.query_prompt, queries]) if self.query_prompt \
            else queries
        normalized = self.embed_sentences(prompted)["embedding_normalized"]
        first = self._search(normalized, rerank_top)
        shape = tf.shape(first["positions"])
        passages = tf.reshape(tf.gather(self.index_texts, first["positions"]), [-1])
        pair_queries = tf.repeat(queries, shape[1])
        scores = tf.reshape(self.reranker.score(pair_queries, passages)["score"], shape)
        best = tf.math.top_k(scores, k)  # ties: lower position = the retriever's order
        return {"ids": tf.gather(first["ids"], best.indices, batch_dims=1),
                "scores": best.values,
                "retriever_scores": tf.gather(first["scores"], best.indices, batch_dims=1),
                "embeddings": normalized}

    # -- search -------------------------------------------------------------------------
    def _checked_k(self, k):
        message = tf.strings.format(
            "k={} is out of range: k must be between 1 and the corpus size "
            + str(self.num_documents), [k])
        check = tf.debugging.Assert(tf.logical_and(k >= 1, k <= self.num_documents),
                                    [message])
        with tf.control_dependencies([check]):
            return tf.identity(k)

    def _search(self, queries, k):
        k = self._checked_k(k)
        if self.kind == "binary":
            return self._search_binary(queries, k)
        if self.kind == "float32":
            matrix = self.index_vectors.read_value()

            def score(start, size):
                chunk = tf.slice(matrix, [start, 0], [size, -1])
                return tf.matmul(queries, chunk, transpose_b=True)
        else:
            codes = self.index_int8.read_value()
            scaled = queries * self._int8_step
            offset = tf.reduce_sum(queries * self._int8_offset, axis=1, keepdims=True)

            def score(start, size):
                chunk = tf.cast(tf.slice(codes, [start, 0], [size, -1]), tf.float32)
                return tf.matmul(scaled, chunk, transpose_b=True) + offset
        scores, positions = self._chunked_top_k(score, k, tf.shape(queries)[0],
                                                float("-inf"))
        return {"ids": tf.gather(self.index_ids, positions), "scores": scores,
                "embeddings": queries, "positions": positions}

    def _search_binary(self, queries, k):
        codes = self.index_binary.read_value()
        word = _word_dtype(codes.shape[1])
        query_words = _as_words(quantize.binary_codes_tf(queries), word)

        def negative_hamming(start, size):
            chunk = _as_words(tf.slice(codes, [start, 0], [size, -1]), word)
            bits = tf.raw_ops.PopulationCount(
                x=tf.bitwise.bitwise_xor(query_words[:, None, :], chunk[None, :, :]))
            return -tf.reduce_sum(tf.cast(bits, tf.int32), axis=-1)

        candidates = tf.minimum(k * self.rescore_multiplier, self.num_documents)
        negative, positions = self._chunked_top_k(negative_hamming, candidates,
                                                  tf.shape(queries)[0], -(2 ** 31))
        signs = _unpack_signs(tf.gather(codes, positions), self.dim)
        rescored = tf.einsum("nd,ncd->nc", queries, signs) / math.sqrt(self.dim)
        best = tf.math.top_k(rescored, k)
        final = tf.gather(positions, best.indices, batch_dims=1)
        return {"ids": tf.gather(self.index_ids, final), "positions": final,
                "scores": best.values, "embeddings": queries,
                "candidate_ids": tf.gather(self.index_ids, positions),
                "candidate_hamming": -negative}

    def _chunked_top_k(self, score, k, batch, floor):
        """The k best (highest) scores of each query over the whole corpus and their row
        positions, scanning `chunk_rows` rows at a time: `score(start, size)` gives the
        [N, size] scores of rows start .. start + size - 1. Ties: lower row first."""
        rows, chunk_rows = self.num_documents, self.chunk_rows

        def merge(i, best, best_positions):
            start = i * chunk_rows
            size = tf.minimum(chunk_rows, rows - start)
            top = tf.math.top_k(score(start, size), tf.minimum(k, size))
            values = tf.concat([best, top.values], axis=1)
            positions = tf.concat([best_positions, top.indices + start], axis=1)
            merged = tf.math.top_k(values, k)
            return i + 1, merged.values, tf.gather(positions, merged.indices, batch_dims=1)

        dtype = tf.float32 if isinstance(floor, float) else tf.int32
        start = (tf.constant(0), tf.fill([batch, k], tf.constant(floor, dtype)),
                 tf.fill([batch, k], -1))
        if rows <= chunk_rows:  # one chunk: no loop
            _, best, best_positions = merge(*start)
        else:
            _, best, best_positions = tf.while_loop(
                lambda i, *_: i < -(-rows // chunk_rows), merge, start,
                parallel_iterations=2)
        return best, best_positions


def _public(found):
    """A search's outputs without the corpus row positions (internal)."""
    return {name: value for name, value in found.items() if name != "positions"}


def _word_dtype(num_bytes):
    """The widest unsigned word (8, 4, 2 or 1 bytes) that divides a code of `num_bytes`."""
    for size, dtype in ((8, tf.uint64), (4, tf.uint32), (2, tf.uint16)):
        if num_bytes % size == 0:
            return dtype
    return tf.uint8


def _as_words(codes, word):
    """uint8 [R, B] codes viewed as [R, B / size] words (a bitcast, no copy; Hamming
    distances do not depend on the byte order)."""
    if word == tf.uint8:
        return codes
    size = word.size
    return tf.bitcast(tf.reshape(codes, [tf.shape(codes)[0], -1, size]), word)


def _unpack_signs(codes, dim):
    """uint8 [..., B] packed bits -> float32 [..., dim] of +-1 (first dimension in the most
    significant bit, as `quantize.binary_codes`)."""
    shifts = tf.constant([7, 6, 5, 4, 3, 2, 1, 0], tf.uint8)
    bits = tf.bitwise.bitwise_and(tf.bitwise.right_shift(codes[..., None], shifts), 1)
    bits = tf.reshape(bits, tf.concat([tf.shape(codes)[:-1], [-1]], axis=0))[..., :dim]
    return tf.cast(bits, tf.float32) * 2.0 - 1.0


def encode_documents(module, texts, dim, batch_size=64, verbose=1):
    """The normalised embeddings (float32 [M, dim]) of `texts` through `module`'s own
    tokenizer and forward (the graph that embeds queries at serving time), longest texts
    first, with a progress bar when `verbose`."""
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def normalized(strings):
        return module.embed_sentences(strings)["embedding_normalized"]

    order = np.argsort([len(t) for t in texts], kind="stable")[::-1]
    out = np.zeros((len(texts), dim), np.float32)
    bar = keras.utils.Progbar(len(texts), unit_name="document") if verbose else None
    for start in range(0, len(texts), batch_size):
        rows = order[start:start + batch_size]
        out[rows] = normalized(tf.constant([texts[i] for i in rows])).numpy()
        if bar is not None:
            bar.add(len(rows))
    return out


def export_search_index(encoder, corpus, export_dir, quantize_index=None, pooling=None,
                        truncate_dim=None, max_seq_length=None, query_prompt="",
                        document_prompt="", batch_size=64,
                        rescore_multiplier=DEFAULT_RESCORE_MULTIPLIER,
                        chunk_rows=DEFAULT_CHUNK_ROWS, version=None, metadata=None,
                        embeddings=None, reranker=None, verbose=1):
    """Embeds `corpus` (a `tfsent.data.beir.Corpus`) with `encoder` and writes the search
    SavedModel as version `version` (default: the next) under `export_dir`.

    Args:
        quantize_index: None/"" (float32), "int8" or "binary" (see the module docstring).
        truncate_dim: keep the first D dimensions of the embedding (before normalising);
            None: the encoder's own `truncate_dim` (else all), 0: all.
        query_prompt, document_prompt: strings prepended to each query (in the graph) and
            to each document (here) before tokenizing.
        rescore_multiplier: binary only: candidates rescored per result.
        chunk_rows: corpus rows scored at a time per request (memory bound).
        embeddings: precomputed [M, H] document embeddings from this encoder (skips the
            encoding; truncation and normalisation still apply), e.g. for benchmarks.
        reranker: a `tfsent.methods.CrossEncoder` or the path of its `cross_encoder`
            export: stored in the SavedModel with the corpus texts, for the
            `search_reranked` signature.
    Returns the path of the new version directory.
    """
    kind = check_index_kind(quantize_index, "quantize_index")
    pooling = pooling or encoder.pooling
    check_pooling(pooling)
    if encoder.tokenizer is None:
        raise ConfigError("cannot export an encoder without a tokenizer")
    if len(corpus) == 0:
        raise InputError("the corpus is empty")
    if len(set(corpus.ids)) != len(corpus.ids):
        raise InputError("the corpus has duplicate ids")
    for name, value in (("batch_size", batch_size), ("rescore_multiplier", rescore_multiplier),
                        ("chunk_rows", chunk_rows)):
        if int(value) < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")
    width = embedding_width(encoder)
    truncate_dim = encoder_truncate_dim(encoder, truncate_dim, width)
    if embeddings is not None:
        embeddings = np.asarray(embeddings, np.float32)
        if embeddings.shape != (len(corpus), width):
            raise InputError(f"embeddings have shape {embeddings.shape}, expected "
                             f"({len(corpus)}, {width}) (one row per document)")
    scorer = scoring_module(reranker) if reranker is not None else None
    final = new_version_path(export_dir, version)
    if embeddings is None:
        module = ServingModule(encoder, pooling, max_seq_length, truncate_dim=truncate_dim)
        vectors = encode_documents(module, [document_prompt + t for t in corpus.texts],
                                   truncate_dim or width, batch_size, verbose)
    else:
        vectors = quantize.l2_normalize(embeddings[:, :truncate_dim or width])
    search = SearchModule(encoder, pooling, corpus.ids, vectors, kind, max_seq_length,
                          truncate_dim, query_prompt, rescore_multiplier, chunk_rows,
                          reranker=scorer, texts=corpus.texts)
    del vectors
    index = {"kind": kind, "documents": len(corpus), "dim": search.dim,
             "query_prompt": query_prompt, "document_prompt": document_prompt,
             "chunk_rows": int(chunk_rows)}
    if kind == "int8":
        index.update(int8="min/max per dimension over the corpus, 255 steps",
                     int8_lo=search.int8_lo.tolist(), int8_hi=search.int8_hi.tolist())
    if kind == "binary":
        index["rescore_multiplier"] = int(rescore_multiplier)
    if scorer is not None:
        index["reranker"] = (os.fspath(reranker) if isinstance(reranker, (str, os.PathLike))
                             else type(reranker).__name__)
    meta = {**encoder_metadata("search_index", search, encoder, width, quantize=[],
                               search_index=index), **(metadata or {})}
    signatures = {"serving_default": search.serve, "encode_ids": search.encode_ids,
                  "search": search.search, "search_embeddings": search.search_embeddings}
    # Warm-up: the encoder's requests, one search (k=1) and, with a reranker, one
    # search_reranked. No batching_parameters.txt: TF Serving's batching needs a batch
    # dimension on every input, and `k` is a scalar.
    warmup = tf_serving.warmup_requests() + tf_serving.warmup_requests(
        "search", "queries", batch_sizes=(1,), extra_inputs={"k": np.int32(1)})
    if scorer is not None:
        signatures["search_reranked"] = search.search_reranked
        warmup += tf_serving.warmup_requests(
            "search_reranked", "queries", batch_sizes=(1,),
            extra_inputs={"k": np.int32(1), "rerank_top": np.int32(min(10, len(corpus)))})
    write_version(final, search, signatures, meta, warmup=warmup)
    return final


def write_search_index(encoder, export_dir, corpus, quantize=(), pooling=None,
                       truncate_dim=None, max_seq_length=None, query_prompt="",
                       document_prompt="", batch_size=64,
                       rescore_multiplier=DEFAULT_RESCORE_MULTIPLIER, metadata=None,
                       reranker=None, verbose=1):
    """The registry's writer of `search_index` (`tfsent.formats.export(encoder, DIR,
    format="search_index", corpus=..., quantize="binary")`): `export_search_index` with
    `corpus` a `tfsent.data.beir.Corpus` or the path of one (a BEIR folder or its
    corpus.jsonl), `quantize` () or a tuple of one index kind, and `reranker` a
    CrossEncoder or the path of its export (adds `search_reranked`)."""
    if len(quantize) > 1:
        raise ConfigError(f"quantize={','.join(quantize)}: a search index is of one kind "
                          "(int8 or binary; none for float32)")
    if isinstance(corpus, (str, os.PathLike)):
        corpus = beir.read_corpus(os.fspath(corpus))
    return export_search_index(
        encoder, corpus, export_dir, quantize_index=quantize[0] if quantize else None,
        pooling=pooling, truncate_dim=truncate_dim, max_seq_length=max_seq_length,
        query_prompt=query_prompt, document_prompt=document_prompt, batch_size=batch_size,
        rescore_multiplier=rescore_multiplier, metadata=metadata, reranker=reranker,
        verbose=verbose)


def saved_model_size(path):
    """Bytes of the files under a SavedModel version directory."""
    return sum(os.path.getsize(os.path.join(folder, name))
               for folder, _, files in os.walk(path) for name in files)
