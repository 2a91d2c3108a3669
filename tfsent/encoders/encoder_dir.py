"""tfsent encoder directories (format (c) of `loading.load_encoder`): the files
(`ENCODER_CONFIG_FILE`, backbone weights, the family's tokenizer files, `MLM_HEAD_FILE`) and
their crash- and owner-safe writing (`save_encoder_dir`, on `tfsent.fsio`). Reading them is
`loading`'s; this module needs no `SentenceEncoder` class, so `model` saves through it.
"""

import json
import os

import numpy as np

from tfsent import fsio
import tfsent.encoders.families as families
from tfsent.encoders.lora import merge_lora
from tfsent.encoders.tokenizers import (ByteBPETokenizer, GemmaSentencePieceTokenizer,
                                        QwenBPETokenizer, SentencePieceTokenizer,
                                        SentenceTokenizer)
from tfsent.errors import ConfigError

ENCODER_CONFIG_FILE = "tfsent_encoder.json"
MLM_HEAD_FILE = "mlm_head.npz"
DENSE_HEAD_FILE = "dense_head.npz"  # a sentence-transformers folder's Dense modules


def backbone_config(backbone):
    """The size fields of a keras-hub backbone's config (what `save_encoder_dir` records
    and `keras_hub_adapter.make_backbone` takes)."""
    config = backbone.get_config()
    family = families.family_of(backbone)
    if family is not None and not families.TABLE[family].runs_own_forward:
        # keras-hub's own layers: every constructor setting of the backbone
        return {k: v for k, v in config.items() if k not in ("name", "trainable", "dtype")}
    keep = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim",
            "dropout", "max_sequence_length", "num_segments")
    return {k: config[k] for k in keep if k in config}


def _tokenizer_meta(tokenizer):
    if isinstance(tokenizer, SentenceTokenizer):
        return {"kind": "wordpiece", "lowercase": tokenizer.lowercase,
                "strip_accents": tokenizer.strip_accents,
                "segment_ids": tokenizer.emits_segment_ids}
    if isinstance(tokenizer, QwenBPETokenizer):
        return {"kind": "qwen_bpe", "special_tokens": tokenizer.special_tokens}
    if isinstance(tokenizer, ByteBPETokenizer):
        return {"kind": "byte_bpe", "add_prefix_space": tokenizer.add_prefix_space,
                "special_tokens": tokenizer.special_tokens}
    if isinstance(tokenizer, SentencePieceTokenizer):
        return {"kind": "sentencepiece"}
    if isinstance(tokenizer, GemmaSentencePieceTokenizer):
        return {"kind": "gemma_sentencepiece"}
    raise ConfigError(f"cannot save tokenizer {type(tokenizer).__name__}")


def save_encoder_dir(encoder, directory):
    """Writes `encoder` as a tfsent encoder directory: backbone weights, the family's
    tokenizer files (vocab.txt | vocab.json + merges.txt | sentencepiece.bpe.model), the
    MLM head when the encoder has one, and `tfsent_encoder.json` (family, sizes, pooling,
    tokenizer options).

    Crash-safe and owner-safe (`tfsent.fsio.staged_dir`): written into a marked staging
    folder beside `directory`, flushed, then renamed into place. An existing `directory`
    is replaced only if it is a tfsent encoder directory (holds `tfsent_encoder.json`);
    any other non-empty folder is refused with a ConfigError. A symlinked `directory` is
    written through (the folder it points to is replaced, the link kept)."""
    encoder = merge_lora(encoder)  # LoRA adapters merged into plain kernels
    with fsio.staged_dir(directory, "tfsent encoder directory",
                         replace=_check_encoder_dir) as tmp:
        encoder.backbone.save_weights(os.path.join(tmp, "backbone.weights.h5"))
        encoder.tokenizer.save_files(tmp)
        if encoder.mlm_head is not None:
            np.savez(os.path.join(tmp, MLM_HEAD_FILE), **encoder.mlm_head)
        head = getattr(encoder, "dense_head", None)
        if head is not None:
            np.savez(os.path.join(tmp, DENSE_HEAD_FILE),
                     *[np.asarray(w) for w in head.get_weights()])
        meta = {
            "format": "tfsent-encoder-2",
            "family": encoder.family,
            "backbone_class": type(encoder.backbone).__name__,
            "backbone_config": backbone_config(encoder.backbone),
            "pooling": encoder.pooling,
            "activation": encoder.activation,
            "normalize": encoder.normalize,
            "max_seq_length": encoder.tokenizer.max_seq_length,
            "tokenizer": _tokenizer_meta(encoder.tokenizer),
            "prompts": getattr(encoder, "prompts", None),
            "truncate_dim": getattr(encoder, "truncate_dim", None),  # encode's default size
            "dense_head": None if head is None else head.get_config()["modules"],  # a folder's query / document
            # Read by tfsent before format 2 (BERT only), kept for older readers.
            "lowercase": encoder.tokenizer.lowercase,
            "strip_accents": encoder.tokenizer.strip_accents,
        }
        with open(os.path.join(tmp, ENCODER_CONFIG_FILE), "w") as f:
            json.dump(meta, f, indent=2)


def _check_encoder_dir(directory):
    """Refuses to replace a folder that is not a tfsent encoder directory."""
    if not os.path.exists(os.path.join(directory, ENCODER_CONFIG_FILE)):
        raise ConfigError(f"{directory} is not empty and is not a tfsent encoder directory "
                          f"(no {ENCODER_CONFIG_FILE}); an encoder is saved to a new or "
                          f"empty folder, or over an earlier tfsent encoder directory")


_backbone_config = backbone_config  # the earlier private name (tests/test_keras_native.py)
