"""Writing a checkpoint in Hugging Face's file layout: config.json and model.safetensors
under Hugging Face's names (`write_hf_model`, from `config.hf_config` and
`weights.hf_state_dict`), the family's tokenizer files (`write_tokenizer_files`: vocab
files, tokenizer.json for WordPiece, tokenizer_config.json, special_tokens_map.json), and the
JSON / safetensors writers every export format uses. The export formats
(`tfsent.formats`) stage and place these files; what is in them is decided here, beside the
readers of the same files."""

import json
import os

import safetensors.numpy
from absl import logging

import tfsent.encoders.families as families
from tfsent.encoders.huggingface.config import hf_config
from tfsent.encoders.huggingface.decoders import decoder_checkpoint, special_ids
from tfsent.encoders.huggingface.weights import SAFETENSORS_FILE, hf_state_dict
from tfsent.errors import ConfigError


def write_json(path, data):
    """Writes `data` as indented UTF-8 JSON with a final newline (every JSON file the
    format writers produce)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_safetensors(path, tensors):
    """Writes {name: array} as a safetensors file marked for PyTorch (`format: pt`, what
    transformers and sentence-transformers expect)."""
    safetensors.numpy.save_file(tensors, path, metadata={"format": "pt"})


_WORDPIECE_SPECIALS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                       "cls_token": "[CLS]", "mask_token": "[MASK]"}
# tfsent tokenizer class -> its kind (`families.Family.tokenizer_kind`), and how errors
# call that kind.
_TOKENIZER_KINDS = {"SentenceTokenizer": "wordpiece", "ByteBPETokenizer": "byte_bpe",
                    "SentencePieceTokenizer": "sentencepiece",
                    "QwenBPETokenizer": "qwen_bpe",
                    "GemmaSentencePieceTokenizer": "gemma_sentencepiece"}
_KIND_NAMES = {"wordpiece": "WordPiece", "byte_bpe": "byte-level BPE",
               "sentencepiece": "SentencePiece", "qwen_bpe": "Qwen byte-level BPE",
               "gemma_sentencepiece": "Gemma SentencePiece"}
# Kinds whose files are the source folder's, kept by the tokenizer (`hf_files`).
_KEPT_FILE_KINDS = ("qwen_bpe", "gemma_sentencepiece")


def write_hf_model(backbone, directory, activation=None, pad_token_id=None, config_extra=None,
                   extra_tensors=None):
    """Writes config.json and model.safetensors (Hugging Face names) of a keras-hub backbone
    into the existing `directory`; `config_extra` and `extra_tensors` (a task head's
    {name: array}) are added to them."""
    config = hf_config(backbone, activation, pad_token_id)
    config.update(config_extra or {})
    tensors = {**hf_state_dict(backbone, pad_token_id), **(extra_tensors or {})}
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


# Every tokenizer_config.json tfsent writes sets `split_special_tokens`: a special token's
# string inside a text ("[SEP]", "<|endoftext|>") is tokenized as text, as tfsent's own
# tokenizers do in training and in the SavedModel; transformers (and sentence-transformers
# through it) maps such a string to the special id without it. (Hugging Face's fast XLM-R
# tokenizer ignores the setting: docs/families.md.)
SPLIT_SPECIAL_TOKENS = True


def write_tokenizer_files(tokenizer, directory, family, max_seq_length):
    """Hugging Face tokenizer files of a tfsent tokenizer: the vocabulary files,
    tokenizer_config.json (casing / accents as the tfsent tokenizer applies them) and
    special_tokens_map.json; tokenizer.json for WordPiece."""
    kind = tokenizer_kind(tokenizer)
    if kind != families.TABLE[family].tokenizer_kind:
        raise ConfigError(f"a {_KIND_NAMES[kind]} tokenizer does not belong to a {family} "
                          "model")
    if kind in _KEPT_FILE_KINDS:
        write_kept_tokenizer_files(tokenizer, directory, family, max_seq_length)
        return
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
    config["split_special_tokens"] = SPLIT_SPECIAL_TOKENS
    write_json(os.path.join(directory, "tokenizer_config.json"), config)
    write_json(os.path.join(directory, "special_tokens_map.json"), specials)


def write_kept_tokenizer_files(tokenizer, directory, family, max_seq_length):
    """A decoder family's tokenizer files as its source folder had them (the tokenizer's
    `hf_files`: tokenizer.json, tokenizer_config.json, special_tokens_map.json), with
    tokenizer_config.json's model_max_length set to the export's length; Gemma's
    tokenizer.model too. ConfigError when the tokenizer kept no tokenizer.json."""
    kept = dict(getattr(tokenizer, "hf_files", None) or {})
    if "tokenizer.json" not in kept:
        raise ConfigError(f"this {family} tokenizer keeps no tokenizer.json of the folder it "
                          "was loaded from (an encoder directory saved before tfsent kept "
                          "them); load the encoder from its Hugging Face / "
                          "sentence-transformers folder and export that")
    settings = json.loads(kept.pop("tokenizer_config.json", "{}"))
    settings["model_max_length"] = int(max_seq_length)
    settings["split_special_tokens"] = SPLIT_SPECIAL_TOKENS
    settings.setdefault("tokenizer_class", families.TABLE[family].hf_tokenizer_class)
    for name, text in kept.items():
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            f.write(text)
    write_json(os.path.join(directory, "tokenizer_config.json"), settings)
    if tokenizer_kind(tokenizer) == "gemma_sentencepiece":
        with open(os.path.join(directory, "tokenizer.model"), "wb") as f:
            f.write(tokenizer.model)


def write_transformer(encoder, directory, max_seq_length, config_extra=None,
                      extra_tensors=None, prefixed=False):
    """The encoder's transformer and tokenizer in Hugging Face's layout, into the existing
    `directory` (`write_hf_model`'s `config_extra` and `extra_tensors` added). A family
    keras-hub runs (qwen3, gemma3) is written by `decoders.decoder_checkpoint`, its names
    under the family's `base_prefix` when `prefixed` (a model with a head of its own: a
    causal LM's `model.` beside `lm_head`)."""
    tokenizer = encoder.tokenizer
    pad = getattr(tokenizer, "pad_id", None)
    if families.TABLE[encoder.family].runs_own_forward:
        write_hf_model(encoder.backbone, directory, encoder.activation, pad, config_extra,
                       extra_tensors)
    else:
        config, tensors = decoder_checkpoint(encoder.backbone, special_ids(tokenizer),
                                             max_seq_length)
        if prefixed:
            prefix = families.TABLE[encoder.family].base_prefix
            tensors = {prefix + name: value for name, value in tensors.items()}
        config.update(config_extra or {})
        write_safetensors(os.path.join(directory, SAFETENSORS_FILE),
                          {**tensors, **(extra_tensors or {})})
        write_json(os.path.join(directory, "config.json"), config)
    write_tokenizer_files(tokenizer, directory, encoder.family, max_seq_length)
