"""The Hugging Face transformers format: a bare transformer that
`AutoModel.from_pretrained(DIR)` and `AutoTokenizer.from_pretrained(DIR)` load (config.json,
model.safetensors under Hugging Face's names, the family's tokenizer files: what is in those
files is `tfsent.encoders.huggingface.writing`'s). The sentence-transformers format writes
its Transformer module the same way, and
every new-directory format (onnx, litert, keras_hub too) ships the tokenizer files, so
their shared checks and staging live here too (`check_new_export`, `write_new_export`)."""

from absl import logging

from tfsent.encoders import check_pooling
from tfsent.encoders.huggingface import checked_family
from tfsent.errors import ConfigError
from tfsent.formats.metadata import (encoder_prompts, export_metadata, uncut_truncate_dim,
                                     write_metadata)
from tfsent.encoders.huggingface.writing import tokenizer_kind, write_transformer
from tfsent.formats.staging import check_new_target, staged_dir


def prompt_map(query_prompt="", document_prompt=""):
    """{"query": ..., "document": ...} of the prompts given (sentence-transformers'
    `prompts`; what tfsent_export.json records)."""
    return {name: text for name, text in (("query", query_prompt),
                                          ("document", document_prompt)) if text}


def check_new_export(encoder, directory, pooling=None, max_seq_length=None):
    """What every new-directory format (they all ship Hugging Face tokenizer files) refuses
    before any work: an encoder without a tokenizer, an unknown pooling, a backbone outside
    the family table, a tokenizer without Hugging Face files, a target that is not new.
    Returns (absolute directory, pooling, max_seq_length clamped to the position table)."""
    if encoder.tokenizer is None:
        raise ConfigError("cannot export an encoder without a tokenizer")
    pooling = check_pooling(pooling or encoder.pooling)
    checked_family(encoder.backbone)
    tokenizer_kind(encoder.tokenizer)
    directory = check_new_target(directory)
    return directory, pooling, encoder.clamp_length(max_seq_length)


def write_new_export(directory, format_name, encoder, pooling, max_seq_length, head,
                     write_files, metadata=None):
    """Builds a new-directory export: `write_files(folder)` writes the format's files into
    a staging folder and returns its metadata details, recorded with `export_metadata`'s
    entries and the caller's `metadata` (`write_metadata`); the folder is then renamed to
    `directory` (`staging.staged_dir`). Returns `directory`. A format whose details name no
    `truncate_dim` (its files give the whole embedding) records the encoder's own for the
    caller (`uncut_truncate_dim`)."""
    with staged_dir(directory, f"{format_name} export") as folder:
        details = write_files(folder)
        if "truncate_dim" not in details:
            details.update(uncut_truncate_dim(encoder, head))
        write_metadata(folder, export_metadata(format_name, encoder, pooling, max_seq_length,
                                               head, **details), metadata)
    logging.info("exported a %s encoder as %s to %s", encoder.family, format_name, directory)
    return directory


def export_huggingface(encoder, directory, pooling=None, normalize=None,
                       max_seq_length=None, metadata=None, query_prompt=None,
                       document_prompt=None):
    """Writes the huggingface format (the bare transformer and its tokenizer) to the new
    `directory`; returns it. The pooling, `normalize`, the prompts (None: the
    encoder's own) and the encoder's own `truncate_dim` are not part of a bare transformer,
    nor is an encoder's Dense head (EmbeddingGemma's): tfsent_export.json records them for
    users who pool themselves (sentence-transformers reads no model settings from a folder
    without modules.json); the sentence_transformers format carries them all."""
    directory, pooling, length = check_new_export(encoder, directory, pooling, max_seq_length)
    prompts = prompt_map(*encoder_prompts(encoder, query_prompt, document_prompt))
    normalize = encoder.normalize if normalize is None else bool(normalize)

    def write_files(folder):
        write_transformer(encoder, folder, length)
        return {"normalize": bool(normalize), "activation": encoder.activation,
                "prompts": prompts, "embedding_dim": int(encoder.backbone.hidden_dim)}

    return write_new_export(directory, "huggingface", encoder, pooling, length, None,
                            write_files, metadata)
