"""Writes a cross-encoder (`tfsent.methods.CrossEncoder`) as a SavedModel for TF Serving.

Layout as `saved_model.py`'s (versions under the target, `assets.extra/` with the metadata
and warm-up requests, `batching_parameters.txt`). Signatures:

  score(queries: string[N], passages: string[N]) -> {score: float32[N]}  (also
      `serving_default`): the relevance logit of each (query, passage) pair: the pair
      tokenized in the graph in the family's template (`tokenize_pairs`, longest-first
      truncation to `max_seq_length`), the encoder's first-token representation (`cls`
      pooling; on a causal decoder the last token's, `last_token`; with the decoders'
      Hugging Face head, Qwen3's and Gemma3's, the last one that is not the pad token,
      `last_non_pad`), the score head;
  count_pair_tokens(queries, passages) -> {token_count: int32[N]}: each pair's tokens as
      `score` tokenizes it (template and truncation included), for clients that batch
      pairs by token count (`tfsent.serving.ServedCrossEncoder`).

Loading needs tensorflow and tensorflow_text only, like the encoder's SavedModel.
"""

import os

import numpy as np
import tensorflow as tf

from tfsent.encoders.pooling import LAST_NON_PAD, pair_state
from tfsent.errors import ConfigError, InputError
from tfsent.formats import tf_serving
from tfsent.formats.metadata import export_format, export_metadata, resolve_savedmodel_dir
from tfsent.formats.model_paths import check_cross_encoder
from tfsent.formats.saved_model import tf_variables, write_version
from tfsent.formats.staging import new_version_path

_PAIR = [tf.TensorSpec([None], tf.string, name="queries"),
         tf.TensorSpec([None], tf.string, name="passages")]


class ScoringModule(tf.Module):
    """The saved tf.Module: pair tokenizer + encoder forward + score head."""

    def __init__(self, encoder, head, max_seq_length=None, pooling="cls"):
        super().__init__()
        self.pooling = pooling
        # Kept out of the object graph (see saved_model.ServingModule): the functions read
        # `tf_variables`, which TF Serving's saver_def restore reaches.
        object.__setattr__(self, "encoder", encoder)
        object.__setattr__(self, "head", head)
        self.tokenizer = encoder.tokenizer.with_options(
            max_seq_length=encoder.clamp_length(max_seq_length), pad_to_max_length=False)
        self.tf_variables = tf_variables(encoder, head)

    @tf.function(input_signature=_PAIR)
    def score(self, queries, passages):
        """Signature `score`: (query, passage) strings -> relevance logits."""
        features = self.tokenizer.tokenize_pairs(queries, passages)
        pooled = pair_state(self.encoder, features, self.pooling)
        return {"score": tf.cast(self.head(pooled)[:, 0], tf.float32)}

    @tf.function(input_signature=_PAIR)
    def count_pair_tokens(self, queries, passages):
        """Signature `count_pair_tokens`: (query, passage) strings -> token_count (each
        pair's tokens as `score` tokenizes it, truncated)."""
        mask = self.tokenizer.tokenize_pairs(queries, passages)["padding_mask"]
        return {"token_count": tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)}


def export_cross_encoder(encoder, export_dir, head=None, version=None, metadata=None,
                         max_seq_length=None, pooling="cls"):
    """Writes the cross-encoder (`encoder` + the score `head`, a Dense(1) or the family's
    classification head, on the `pooling` token: `cls`, `last_token` for a causal decoder,
    `last_non_pad` for the decoders' Hugging Face head) as SavedModel version `version`
    (default: next) under `export_dir`; returns the version's path."""
    if pooling not in ("cls", "last_token", LAST_NON_PAD):
        raise ConfigError(f"format cross_encoder: pooling={pooling!r}; a cross-encoder "
                          "scores the first token (cls) or, on a causal decoder, the last "
                          f"(last_token; {LAST_NON_PAD}: the last that is not the pad token)")
    if head is None:
        raise ConfigError("format cross_encoder: needs the score head of a cross-encoder "
                          "(export a tfsent.methods.CrossEncoder: model.export(DIR, "
                          "format='cross_encoder'))")
    if encoder.tokenizer is None:
        raise ConfigError("cannot export an encoder without a tokenizer")
    final = new_version_path(export_dir, version)
    module = ScoringModule(encoder, head, max_seq_length, pooling)
    meta = export_metadata("cross_encoder", encoder, pooling, module.tokenizer.max_seq_length,
                           head, hidden_dim=encoder.hidden_dim, signature="score")
    prompt = getattr(encoder.tokenizer, "pair_prompt", None)
    if prompt is not None:  # a prompted reranker's (the graph builds it)
        meta.update(prompt=prompt["name"], instruction=prompt["instruction"])
    texts = np.array([s.encode("utf-8") for s in tf_serving.WARMUP_SENTENCES], dtype=object)
    warmup = [(signature, {"queries": texts[:n], "passages": texts[::-1][:n]})
              for signature, sizes in (("score", tf_serving.WARMUP_BATCH_SIZES),
                                       ("count_pair_tokens", tf_serving.WARMUP_BATCH_SIZES[-1:]))
              for n in sizes]
    write_version(final, module, {"serving_default": module.score, "score": module.score,
                                  "count_pair_tokens": module.count_pair_tokens},
                  {**meta, **(metadata or {})}, warmup=warmup)
    tf_serving.write_batching_parameters(export_dir)
    return final


def cross_encoder_export_path(path, option="reranker"):
    """The version directory of a `cross_encoder` export at `path` (a version directory,
    or the export directory: its newest version); an error naming `option` when there is
    no SavedModel or it is another kind of export (a bi-encoder's)."""
    kind = export_format(path)
    if kind is None:
        check_cross_encoder(path, option)  # a bi-encoder's folder or .keras file says so
        raise InputError(f"{option}: no SavedModel here (expected saved_model.pb or "
                         "integer version subdirectories)", path=os.fspath(path))
    if kind != "cross_encoder":
        raise ConfigError(f"{option}={path}: a {kind or 'non-tfsent'} export, not a "
                          "cross-encoder (export a tfsent.methods.CrossEncoder with "
                          "format='cross_encoder')")
    return resolve_savedmodel_dir(path)


def scoring_module(reranker, max_seq_length=None, option="reranker"):
    """A tf.Module whose `score(queries, passages)` returns {"score": logits}: built from a
    `tfsent.methods.CrossEncoder`, or loaded from the path of its `cross_encoder` export
    (`cross_encoder_export_path`). Anything else is a ConfigError naming `option`."""
    if isinstance(reranker, (str, os.PathLike)):
        return tf.saved_model.load(cross_encoder_export_path(reranker, option))
    if hasattr(reranker, "score_head") and hasattr(reranker, "encoder"):
        return ScoringModule(reranker.encoder, reranker.score_head, max_seq_length,
                             reranker.train_pooling)
    raise ConfigError(f"{option}: expected a tfsent.methods.CrossEncoder or the path of its "
                      f"cross_encoder export, got {type(reranker).__name__}")
