"""The Hugging Face transformers format: a bare transformer that
`AutoModel.from_pretrained(DIR)` and `AutoTokenizer.from_pretrained(DIR)` load (config.json,
model.safetensors under Hugging Face's names, the family's tokenizer files). The
sentence-transformers format writes its Transformer module with the same functions, and
every new-directory format (onnx, litert, keras_hub too) ships the tokenizer files, so
their shared checks and staging live here too (`check_new_export`, `write_new_export`)."""

import os

from absl import logging

import tfsent.encoders.families as families
from tfsent.encoders import check_pooling
from tfsent.encoders.huggingface import SAFETENSORS_FILE, checked_family, hf_config, \
    hf_state_dict
from tfsent.errors import ConfigError
from tfsent.formats.metadata import export_metadata, write_metadata
from tfsent.formats.staging import check_new_target, staged_dir, write_json, \
    write_safetensors

_WORDPIECE_SPECIALS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                       "cls_token": "[CLS]", "mask_token": "[MASK]"}
# tfsent tokenizer class -> its kind (`families.Family.tokenizer_kind`), and how errors
# call that kind.
_TOKENIZER_KINDS = {"SentenceTokenizer": "wordpiece", "ByteBPETokenizer": "byte_bpe",
                    "SentencePieceTokenizer": "sentencepiece"}
_KIND_NAMES = {"wordpiece": "WordPiece", "byte_bpe": "byte-level BPE",
               "sentencepiece": "SentencePiece"}


def write_hf_model(backbone, directory, activation=None, pad_token_id=None, config_extra=None):
    """Writes config.json and model.safetensors (Hugging Face names) of a keras-hub backbone
    into the existing `directory`."""
    config = hf_config(backbone, activation, pad_token_id)
    config.update(config_extra or {})
    tensors = hf_state_dict(backbone, pad_token_id)
    write_safetensors(os.path.join(directory, SAFETENSORS_FILE), tensors)
    write_json(os.path.join(directory, "config.json"), config)


def tokenizer_kind(tokenizer):
    """The kind of a tfsent tokenizer (wordpiece | byte_bpe | sentencepiece); ConfigError
    for others."""
    name = type(tokenizer).__name__
    if name not in _TOKENIZER_KINDS:
        raise ConfigError(f"cannot write Hugging Face tokenizer files for a {name}; "
                          f"supported: {', '.join(_TOKENIZER_KINDS)}")
    return _TOKENIZER_KINDS[name]


def wordpiece_tokenizer_json(tokenizer):
    """tokenizer.json (the `tokenizers` library's format) of a tfsent WordPiece tokenizer:
    Hugging Face's BERT pipeline with the tokenizer's casing and accent settings."""
    vocab = {token: i for i, token in enumerate(tokenizer.vocabulary)}
    specials = sorted(vocab[t] for t in _WORDPIECE_SPECIALS.values())
    cls_id, sep_id = tokenizer.cls_id, tokenizer.sep_id
    cls, sep = tokenizer.vocabulary[cls_id], tokenizer.vocabulary[sep_id]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, "content": tokenizer.vocabulary[i], "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False,
                          "special": True} for i in specials],
        "normalizer": {"type": "BertNormalizer", "clean_text": True,
                       "handle_chinese_chars": True,
                       "strip_accents": bool(tokenizer.strip_accents),
                       "lowercase": bool(tokenizer.lowercase)},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": cls, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": sep, "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": cls, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": sep, "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": sep, "type_id": 1}}],
            "special_tokens": {cls: {"id": cls, "ids": [cls_id], "tokens": [cls]},
                               sep: {"id": sep, "ids": [sep_id], "tokens": [sep]}}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab},
    }



def write_tokenizer_files(tokenizer, directory, family, max_seq_length):
    """Hugging Face tokenizer files of a tfsent tokenizer: the vocabulary files,
    tokenizer_config.json (casing / accents as the tfsent tokenizer applies them) and
    special_tokens_map.json; tokenizer.json for WordPiece."""
    kind = tokenizer_kind(tokenizer)
    if kind != families.TABLE[family].tokenizer_kind:
        raise ConfigError(f"a {_KIND_NAMES[kind]} tokenizer does not belong to a {family} "
                          "model")
    tokenizer_class = families.TABLE[family].hf_tokenizer_class
    if kind == "wordpiece":
        with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("".join(token + "\n" for token in tokenizer.vocabulary))
        write_json(os.path.join(directory, "tokenizer.json"),
                   wordpiece_tokenizer_json(tokenizer))
        specials = dict(_WORDPIECE_SPECIALS)
        config = {"tokenizer_class": tokenizer_class,
                  "do_lower_case": bool(tokenizer.lowercase),
                  "strip_accents": bool(tokenizer.strip_accents),
                  "tokenize_chinese_chars": True, "do_basic_tokenize": True,
                  "clean_up_tokenization_spaces": True, **specials}
    elif kind == "byte_bpe":
        tokenizer.save_files(directory)
        specials = {f"{role}_token": tok for role, tok in tokenizer.special_tokens.items()
                    if role in ("bos", "eos", "unk", "sep", "pad", "cls", "mask")}
        config = {"tokenizer_class": tokenizer_class,
                  "add_prefix_space": bool(tokenizer.add_prefix_space),
                  "trim_offsets": True, "errors": "replace", **specials}
    else:
        tokenizer.save_files(directory)
        logging.warning("XLM-R export: sentencepiece.bpe.model without a tokenizer.json; "
                        "transformers builds the tokenizer from it, which needs the "
                        "`sentencepiece` and `protobuf` packages where the model is loaded")
        specials = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>",
                    "cls_token": "<s>", "unk_token": "<unk>", "pad_token": "<pad>",
                    "mask_token": "<mask>"}
        config = {"tokenizer_class": tokenizer_class, **specials}
    config["model_max_length"] = int(max_seq_length)
    write_json(os.path.join(directory, "tokenizer_config.json"), config)
    write_json(os.path.join(directory, "special_tokens_map.json"), specials)


def write_transformer(encoder, directory, max_seq_length, config_extra=None):
    """The encoder's transformer and tokenizer in Hugging Face's layout, into the existing
    `directory`."""
    tokenizer = encoder.tokenizer
    pad = getattr(tokenizer, "pad_id", None)
    write_hf_model(encoder.backbone, directory, encoder.activation, pad, config_extra)
    write_tokenizer_files(tokenizer, directory, encoder.family, max_seq_length)


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
    `directory` (`staging.staged_dir`). Returns `directory`."""
    with staged_dir(directory, f"{format_name} export") as folder:
        details = write_files(folder)
        write_metadata(folder, export_metadata(format_name, encoder, pooling, max_seq_length,
                                               head, **details), metadata)
    logging.info("exported a %s encoder as %s to %s", encoder.family, format_name, directory)
    return directory


def export_huggingface(encoder, directory, pooling=None, normalize=False,
                       max_seq_length=None, metadata=None, query_prompt="",
                       document_prompt=""):
    """Writes the huggingface format (the bare transformer and its tokenizer) to the new
    `directory`; returns it. The pooling, `normalize` and the prompts are not part of a
    bare transformer: tfsent_export.json records them for users who pool themselves."""
    directory, pooling, length = check_new_export(encoder, directory, pooling, max_seq_length)
    prompts = prompt_map(query_prompt, document_prompt)

    def write_files(folder):
        write_transformer(encoder, folder, length)
        return {"normalize": bool(normalize), "activation": encoder.activation,
                "prompts": prompts, "embedding_dim": int(encoder.backbone.hidden_dim)}

    return write_new_export(directory, "huggingface", encoder, pooling, length, None,
                            write_files, metadata)
