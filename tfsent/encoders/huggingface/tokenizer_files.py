"""The tokenizer files of a Hugging Face checkpoint (vocab.txt | vocab.json + merges.txt |
sentencepiece.bpe.model, or tokenizer.json; tokenizer_config.json and
special_tokens_map.json) read into the family's tfsent tokenizer, checked against the
model's vocabulary size."""

import json
import os

from absl import logging

import tfsent.encoders.families as families
from tfsent.encoders.huggingface.config import read_json
from tfsent.encoders.tokenizers import (HF_TOKENIZER_FILES, ByteBPETokenizer,
                                        GemmaSentencePieceTokenizer, QwenBPETokenizer,
                                        SentencePieceTokenizer, SentenceTokenizer)
from tfsent.errors import InputError


def _special_token(value):
    return value.get("content") if isinstance(value, dict) else value


def tokenizer_settings(directory):
    """tokenizer_config.json merged over special_tokens_map.json ({} when absent)."""
    settings = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            data = read_json(path)
            if isinstance(data, dict):
                settings.update(data)
    return settings


def read_hf_tokenizer_files(directory):
    """{file name: text} of the Hugging Face tokenizer files (`HF_TOKENIZER_FILES`) in
    `directory` that a decoder family's tokenizer keeps for its exports."""
    out = {}
    for name in HF_TOKENIZER_FILES:
        path = os.path.join(directory, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                out[name] = f.read()
    return out


def _tokenizer_json(directory):
    path = os.path.join(directory, "tokenizer.json")
    return (path, read_json(path)) if os.path.exists(path) else (path, None)


def make_tokenizer(family, directory, max_seq_length, pad_to_max_length, vocab_size):
    """The tfsent tokenizer of a Hugging Face checkpoint directory (its classic tokenizer
    files, or tokenizer.json for WordPiece / BPE); checks that every id it can produce
    indexes the model's embedding table (vocab_size)."""
    settings = tokenizer_settings(directory)
    kind = families.TABLE[family].tokenizer_kind
    if kind == "wordpiece":
        path = os.path.join(directory, "vocab.txt")
        if os.path.exists(path):
            vocabulary = path
        else:
            path, data = _tokenizer_json(directory)
            vocabulary = _tokenizer_json_vocab(path, data, "WordPiece", directory, "vocab.txt")
        lowercase = bool(settings.get("do_lower_case", True))
        strip = settings.get("strip_accents")
        tokenizer = SentenceTokenizer(vocabulary, lowercase, lowercase if strip is None
                                      else bool(strip), max_seq_length, pad_to_max_length,
                                      segment_ids=families.TABLE[family].has_segments)
    elif kind == "byte_bpe":
        specials = {role: _special_token(settings[key]) for role, key in
                    (("cls", "cls_token"), ("sep", "sep_token"), ("pad", "pad_token"),
                     ("mask", "mask_token"), ("unk", "unk_token")) if key in settings}
        path = os.path.join(directory, "vocab.json")
        merges = os.path.join(directory, "merges.txt")
        if os.path.exists(path) and os.path.exists(merges):
            vocabulary = path
        else:
            path, data = _tokenizer_json(directory)
            vocabulary = _tokenizer_json_vocab(path, data, "BPE", directory,
                                               "vocab.json and merges.txt")
            merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
        tokenizer = ByteBPETokenizer(vocabulary, merges, bool(settings.get("add_prefix_space",
                                                                           False)),
                                     specials, max_seq_length, pad_to_max_length)
    elif kind == "qwen_bpe":
        path, data = _tokenizer_json(directory)
        vocabulary = dict(_tokenizer_json_vocab(path, data, "BPE", directory,
                                                "tokenizer.json"))
        for added in data.get("added_tokens") or []:
            vocabulary[added["content"]] = int(added["id"])
        merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
        appended = _appended_token(path, data)
        hf_files = read_hf_tokenizer_files(directory)
        if appended is None:
            # A base model's or Qwen3-Reranker's tokenizer.json: no template. Sentence
            # embeddings read the appended token (Qwen3-Embedding's), so the kept
            # tokenizer.json gets that template (the exports' clients then append it too);
            # a prompted reranker's pairs append nothing (`pair_prompts`).
            appended = families.TABLE[family].appended_token
            hf_files["tokenizer.json"] = json.dumps(
                with_appended_template(data, appended, vocabulary[appended]),
                ensure_ascii=False)
            logging.warning("%s appends no token to a text; tfsent's %s tokenizer appends %s "
                            "as Qwen3-Embedding's does (last-token embeddings read it), and "
                            "so do the tokenizer.json files of its exports", path, family,
                            appended)
        elif appended != families.TABLE[family].appended_token:
            raise InputError(f"tokenizer.json's post-processor appends {appended!r}; tfsent "
                             f"runs {family} tokenizers that append "
                             f"{families.TABLE[family].appended_token!r}", path=path)
        pad = _special_token(settings.get("pad_token")) or appended
        tokenizer = QwenBPETokenizer(vocabulary, merges, {"sep": appended, "pad": pad},
                                     max_seq_length, pad_to_max_length, hf_files=hf_files)
    elif kind == "gemma_sentencepiece":
        tokenizer = _gemma_tokenizer(family, directory, settings, max_seq_length,
                                     pad_to_max_length)
        path = os.path.join(directory, "tokenizer.model")
    else:
        path = os.path.join(directory, "sentencepiece.bpe.model")
        if not os.path.exists(path):
            raise InputError("no sentencepiece.bpe.model (an XLM-R checkpoint's tokenizer "
                             "model; tokenizer.json alone is not enough for tfsent)",
                             path=directory)
        tokenizer = SentencePieceTokenizer(path, max_seq_length, pad_to_max_length)
    top_id = tokenizer.vocabulary_size - 1
    if top_id >= vocab_size:
        raise InputError(f"the tokenizer has {tokenizer.vocabulary_size} ids but config.json's "
                         f"vocab_size is {vocab_size}: the files do not belong together",
                         path=path)
    return tokenizer


def _gemma_tokenizer(family, directory, settings, max_seq_length, pad_to_max_length):
    """Gemma's tokenizer.model, checked against tokenizer.json's template (when there is
    one) and tokenizer_config.json: tfsent runs `<bos> $A <eos>` (EmbeddingGemma's)."""
    path = os.path.join(directory, "tokenizer.model")
    if not os.path.exists(path):
        raise InputError("no tokenizer.model (Gemma's SentencePiece model; tfsent does not "
                         "run a Gemma tokenizer from tokenizer.json alone)", path=directory)
    json_path, data = _tokenizer_json(directory)
    if data is not None:
        post = data.get("post_processor") or {}
        single = [next(iter(item.values())).get("id") for item in post.get("single") or []]
        if single != ["<bos>", "A", families.TABLE[family].appended_token]:
            raise InputError(f"tokenizer.json's template {single or 'none'} is not "
                             "`<bos> $A <eos>` (EmbeddingGemma's, which tfsent runs)",
                             path=json_path)
    elif not (settings.get("add_bos_token", True) and settings.get("add_eos_token")):
        raise InputError("tokenizer_config.json does not set add_bos_token and "
                         "add_eos_token (EmbeddingGemma's `<bos> text <eos>`, which tfsent "
                         "runs)", path=os.path.join(directory, "tokenizer_config.json"))
    return GemmaSentencePieceTokenizer(path, max_seq_length, pad_to_max_length,
                                       hf_files=read_hf_tokenizer_files(directory))


_TEMPLATE = "TemplateProcessing"


def with_appended_template(data, token, token_id):
    """tokenizer.json's data with a post-processor appending `token` to a text (`$A token`;
    a pair `$A token $B:1 token:1`), kept after the one it had (a Sequence)."""
    template = {"type": _TEMPLATE,
                "single": [{"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": token, "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": token, "type_id": 0}},
                         {"Sequence": {"id": "B", "type_id": 1}},
                         {"SpecialToken": {"id": token, "type_id": 1}}],
                "special_tokens": {token: {"id": token, "ids": [int(token_id)],
                                           "tokens": [token]}}}
    post = data.get("post_processor")
    data = dict(data)
    data["post_processor"] = template if not post else {
        "type": "Sequence", "processors": [post, template]}
    return data


def without_template(data):
    """tokenizer.json's data without a TemplateProcessing post-processor (alone or in a
    Sequence): a text gets no special token appended."""
    post = data.get("post_processor") or {}
    data = dict(data)
    if post.get("type") == _TEMPLATE:
        data["post_processor"] = None
    elif post.get("type") == "Sequence":
        kept = [p for p in post.get("processors", []) if p.get("type") != _TEMPLATE]
        data["post_processor"] = (None if not kept else kept[0] if len(kept) == 1
                                  else {"type": "Sequence", "processors": kept})
    return data


def appended_token(directory):
    """The special token a checkpoint folder's tokenizer.json appends to a single text
    (None: no tokenizer.json, or one without such a template: a base Qwen3 model's, a
    Qwen3-Reranker's)."""
    path, data = _tokenizer_json(directory)
    return None if data is None else _appended_token(path, data)


def _appended_token(path, data):
    """The one special token tokenizer.json's post-processor appends to a single text (a
    TemplateProcessing `$A <token>`), or None when it appends none."""
    post = data.get("post_processor") or {}
    if post.get("type") == "Sequence":
        post = next((p for p in post.get("processors", [])
                     if p.get("type") == "TemplateProcessing"), {})
    if post.get("type") != "TemplateProcessing":
        return None
    single = post.get("single") or []
    names = [next(iter(item.values())).get("id") for item in single]
    if len(names) == 2 and names[0] == "A" and "SpecialToken" in single[1]:
        return names[1]
    raise InputError(f"tokenizer.json's template {names} is not `$A <token>`", path=path)


def _tokenizer_json_vocab(path, data, model_type, directory, classic):
    if data is None:
        raise InputError(f"no tokenizer files: expected {classic} or tokenizer.json",
                         path=directory)
    model = data.get("model") or {}
    if model.get("type") != model_type or not isinstance(model.get("vocab"), dict):
        raise InputError(f"tokenizer.json holds no {model_type} vocabulary", path=path)
    vocab = model["vocab"]
    if model_type == "BPE":
        return vocab
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise InputError("vocabulary ids are not 0..N-1", path=path)
    return [tok for tok, _ in by_id]
