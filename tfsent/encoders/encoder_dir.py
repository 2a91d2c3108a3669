"""tfsent encoder directories (format (c) of `loading.load_encoder`): the files
(`ENCODER_CONFIG_FILE`, backbone weights, the family's tokenizer files, `MLM_HEAD_FILE`),
their crash-safe writing (`save_encoder_dir`) and the recovery of a write a crash
interrupted (`recover_replaced_dir`, run by every load and save). Reading them is
`loading`'s; this module needs no `SentenceEncoder` class, so `model` can save through it.
"""

import json
import os
import shutil

import numpy as np

from tfsent.encoders.tokenizers import (ByteBPETokenizer, SentencePieceTokenizer,
                                        SentenceTokenizer)
from tfsent.errors import ConfigError

ENCODER_CONFIG_FILE = "tfsent_encoder.json"
MLM_HEAD_FILE = "mlm_head.npz"


def _backbone_config(backbone):
    config = backbone.get_config()
    keep = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim",
            "dropout", "max_sequence_length", "num_segments")
    return {k: config[k] for k in keep if k in config}


def _tokenizer_meta(tokenizer):
    if isinstance(tokenizer, SentenceTokenizer):
        return {"kind": "wordpiece", "lowercase": tokenizer.lowercase,
                "strip_accents": tokenizer.strip_accents,
                "segment_ids": tokenizer.emits_segment_ids}
    if isinstance(tokenizer, ByteBPETokenizer):
        return {"kind": "byte_bpe", "add_prefix_space": tokenizer.add_prefix_space,
                "special_tokens": tokenizer.special_tokens}
    if isinstance(tokenizer, SentencePieceTokenizer):
        return {"kind": "sentencepiece"}
    raise ConfigError(f"cannot save tokenizer {type(tokenizer).__name__}")


def save_encoder_dir(encoder, directory):
    """Writes `encoder` as a tfsent encoder directory: backbone weights, the family's
    tokenizer files (vocab.txt | vocab.json + merges.txt | sentencepiece.bpe.model), the
    MLM head when the encoder has one, and `tfsent_encoder.json` (family, sizes, pooling,
    tokenizer options). Crash-safe: written to a temporary sibling, then swapped in by
    `_atomic_replace_dir`."""
    directory = os.fspath(directory).rstrip("/")
    tmp, _ = _staging_paths(directory)
    recover_replaced_dir(directory)
    if os.path.exists(tmp):  # a write interrupted before the swap began
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    encoder.backbone.save_weights(os.path.join(tmp, "backbone.weights.h5"))
    encoder.tokenizer.save_files(tmp)
    if encoder.mlm_head is not None:
        np.savez(os.path.join(tmp, MLM_HEAD_FILE), **encoder.mlm_head)
    meta = {
        "format": "tfsent-encoder-2",
        "family": encoder.family,
        "backbone_class": type(encoder.backbone).__name__,
        "backbone_config": _backbone_config(encoder.backbone),
        "pooling": encoder.pooling,
        "activation": encoder.activation,
        "normalize": encoder.normalize,
        "max_seq_length": encoder.tokenizer.max_seq_length,
        "tokenizer": _tokenizer_meta(encoder.tokenizer),
        # Read by tfsent before format 2 (BERT only), kept for older readers.
        "lowercase": encoder.tokenizer.lowercase,
        "strip_accents": encoder.tokenizer.strip_accents,
    }
    with open(os.path.join(tmp, ENCODER_CONFIG_FILE), "w") as f:
        json.dump(meta, f, indent=2)
    _atomic_replace_dir(tmp, directory)


def _staging_paths(directory):
    """(new version being written, old version being replaced) beside `directory`."""
    return directory + ".tmp-save", directory + ".old"


def _atomic_replace_dir(tmp, directory):
    """Replaces `directory` by the complete directory `tmp` (its staging path).

    A directory cannot be renamed over a non-empty one, so this takes two renames
    (directory -> .old, tmp -> directory) and a removal. Whatever step a crash interrupts,
    `recover_replaced_dir` (run by the next load or save) finishes the swap: after the
    first rename the complete new version is in `tmp`, and it is moved into place; .old
    is removed once `directory` holds a complete version.
    """
    directory = directory.rstrip("/")
    _, old = _staging_paths(directory)
    recover_replaced_dir(directory)
    if os.path.exists(old):
        shutil.rmtree(old)
    if os.path.exists(directory):
        os.rename(directory, old)
    os.rename(tmp, directory)
    if os.path.exists(old):
        shutil.rmtree(old)


def recover_replaced_dir(directory):
    """Finishes a `_atomic_replace_dir` that a crash interrupted. Directory missing and
    .old present: the crash came between the two renames, so the new version in the
    staging path is complete and is moved into place (or, without one, .old is moved
    back). Then a leftover .old is removed. Returns True if anything was done."""
    directory = os.fspath(directory).rstrip("/")
    tmp, old = _staging_paths(directory)
    if not os.path.exists(old):
        return False
    if not os.path.exists(directory):
        os.rename(tmp if os.path.isdir(tmp) else old, directory)
    if os.path.exists(old):
        shutil.rmtree(old)
    return True
