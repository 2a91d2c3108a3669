"""Tiny random checkpoints in Hugging Face's own layout, one per encoder family (test helper).

    make_tiny_checkpoint(family, directory, seed=0) -> directory
    make_sentence_transformers_dir(family, directory, ...) -> directory
    hf_tokenizer(directory) -> the `transformers` tokenizer of a checkpoint directory

A checkpoint directory holds what a Hugging Face hub checkpoint of the family's *ForMaskedLM
model holds (the layout most checkpoints users download have, written by transformers 4.x):
  config.json               `transformers`' own config class, saved by `save_pretrained`
  model.safetensors         random weights under Hugging Face's names, with the base-model
                            prefix (`bert.`, `roberta.`, `distilbert.`) and the MLM head
                            (tied decoder weights left out, as `save_pretrained` does)
  tokenizer files           vocab.txt (bert, distilbert) | vocab.json + merges.txt (roberta,
                            byte-level BPE trained with `tokenizers`) | sentencepiece.bpe.model
                            (xlm-roberta, a unigram model trained with `sentencepiece`)
  tokenizer_config.json, special_tokens_map.json
Vocabularies are trained on tfsent/data/demo/sentences.txt plus a few lines with accents,
CJK and emoji (`EXTRA_LINES`), once per process. Everything is deterministic for a seed.
Needs the `[test]` extra (tokenizers, sentencepiece, transformers without torch).
"""

import json
import os
import shutil
import tempfile

import numpy as np

FAMILIES = ("bert", "roberta", "xlm-roberta", "distilbert")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_SENTENCES = os.path.join(REPO, "tfsent", "data", "demo", "sentences.txt")
VOCAB_SIZE = 1000

# Added to the training corpus so that accented letters, CJK and emoji have pieces of their
# own (the demo corpus is plain English).
EXTRA_LINES = [
    "Café crème à la française, naïve résumé, São Paulo, Zürich, Ångström.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein.",
    "東京は日本の首都です。北京是中国的首都。",
    "서울은 한국의 수도입니다.",
    "The party was great 🎉 and everyone smiled 😀 👍.",
    "Ελληνικά και русский язык.",
]

_SIZES = {"hidden_size": 32, "num_layers": 4, "num_heads": 2, "intermediate_size": 64,
          "max_positions": 64}
_TRAINED = {}  # (kind) -> directory of trained tokenizer files (once per process)


def demo_corpus():
    """The sentences the vocabularies are trained on."""
    with open(DEMO_SENTENCES, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    return lines + EXTRA_LINES


def _corpus_file(directory):
    path = os.path.join(directory, "corpus.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(demo_corpus()) + "\n")
    return path


def _trained_files(kind):
    """Trains (once) and returns the directory holding the tokenizer files of `kind`."""
    if kind in _TRAINED:
        return _TRAINED[kind]
    directory = tempfile.mkdtemp(prefix=f"tfsent-vocab-{kind}-")
    corpus = _corpus_file(directory)
    if kind == "wordpiece":
        from tokenizers import BertWordPieceTokenizer

        tok = BertWordPieceTokenizer(lowercase=True)
        tok.train([corpus], vocab_size=VOCAB_SIZE, show_progress=False,
                  special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
        tok.save_model(directory)
    elif kind == "bpe":
        from tokenizers import ByteLevelBPETokenizer

        tok = ByteLevelBPETokenizer()
        # RoBERTa's layout: <s> <pad> </s> <unk> first, <mask> last.
        tok.train([corpus], vocab_size=VOCAB_SIZE - 1, min_frequency=2, show_progress=False,
                  special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
        tok.save_model(directory)
        path = os.path.join(directory, "vocab.json")
        with open(path, encoding="utf-8") as f:
            vocab = json.load(f)
        vocab["<mask>"] = len(vocab)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(vocab, f, ensure_ascii=False)
    elif kind == "sentencepiece":
        import sentencepiece as spm

        # XLM-R's model: unigram, <unk> <s> </s> as pieces 0-2, no <pad> piece.
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=os.path.join(directory, "sentencepiece.bpe"),
            vocab_size=VOCAB_SIZE - 2, model_type="unigram", character_coverage=1.0,
            unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1, minloglevel=2)
        os.remove(os.path.join(directory, "sentencepiece.bpe.vocab"))
    else:
        raise ValueError(kind)
    os.remove(corpus)
    _TRAINED[kind] = directory
    return directory


def _tokenizer_kind(family):
    return {"bert": "wordpiece", "distilbert": "wordpiece", "roberta": "bpe",
            "xlm-roberta": "sentencepiece"}[family]


def _write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def _write_tokenizer_files(family, directory, max_positions):
    kind = _tokenizer_kind(family)
    source = _trained_files(kind)
    for name in os.listdir(source):
        shutil.copy(os.path.join(source, name), os.path.join(directory, name))
    if kind == "wordpiece":
        specials = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                    "cls_token": "[CLS]", "mask_token": "[MASK]"}
        tokenizer_class = "BertTokenizer" if family == "bert" else "DistilBertTokenizer"
        config = {"do_lower_case": True, "strip_accents": None, "tokenize_chinese_chars": True,
                  **specials, "model_max_length": max_positions,
                  "tokenizer_class": tokenizer_class}
        with open(os.path.join(directory, "vocab.txt"), encoding="utf-8") as f:
            size = sum(1 for _ in f)
    else:
        specials = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                    "sep_token": "</s>", "pad_token": "<pad>", "cls_token": "<s>",
                    "mask_token": {"content": "<mask>", "single_word": False, "lstrip": True,
                                   "rstrip": False, "normalized": False}}
        config = {**specials, "model_max_length": max_positions}
        if kind == "bpe":
            config.update({"add_prefix_space": False, "errors": "replace",
                           "trim_offsets": True, "tokenizer_class": "RobertaTokenizer"})
            with open(os.path.join(directory, "vocab.json"), encoding="utf-8") as f:
                size = len(json.load(f))
        else:
            config["tokenizer_class"] = "XLMRobertaTokenizer"
            import sentencepiece as spm

            sp = spm.SentencePieceProcessor(
                model_file=os.path.join(directory, "sentencepiece.bpe.model"))
            size = sp.get_piece_size() + 2  # fairseq offset 1, <mask> appended
    _write_json(os.path.join(directory, "tokenizer_config.json"), config)
    _write_json(os.path.join(directory, "special_tokens_map.json"), specials)
    return size


def _hf_config(family, vocab_size, sizes, dropout):
    """The `transformers` config object of `family` with tiny sizes."""
    import transformers

    h, n, heads, inter, pos = (sizes["hidden_size"], sizes["num_layers"], sizes["num_heads"],
                               sizes["intermediate_size"], sizes["max_positions"])
    if family == "distilbert":
        config = transformers.DistilBertConfig(
            vocab_size=vocab_size, dim=h, n_layers=n, n_heads=heads, hidden_dim=inter,
            max_position_embeddings=pos, dropout=dropout, attention_dropout=dropout,
            activation="gelu", pad_token_id=0)
        config.architectures = ["DistilBertForMaskedLM"]
        return config
    common = dict(vocab_size=vocab_size, hidden_size=h, num_hidden_layers=n,
                  num_attention_heads=heads, intermediate_size=inter, hidden_act="gelu",
                  hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    if family == "bert":
        config = transformers.BertConfig(max_position_embeddings=pos, type_vocab_size=2,
                                         layer_norm_eps=1e-12, pad_token_id=0, **common)
        config.architectures = ["BertForMaskedLM"]
        return config
    cls = (transformers.RobertaConfig if family == "roberta"
           else transformers.XLMRobertaConfig)
    # padding_idx = 1: positions start at 2, so the table has 2 extra rows.
    config = cls(max_position_embeddings=pos + 2, type_vocab_size=1, layer_norm_eps=1e-5,
                 pad_token_id=1, bos_token_id=0, eos_token_id=2, **common)
    config.architectures = ["RobertaForMaskedLM" if family == "roberta"
                            else "XLMRobertaForMaskedLM"]
    return config


def hf_weight_shapes(family, vocab_size, sizes=None, pooler=True, mlm_head=True):
    """{Hugging Face weight name: shape} of a *ForMaskedLM checkpoint of `family` (as the
    hub's files name them, base-model prefix included)."""
    s = dict(_SIZES, **(sizes or {}))
    h, n, inter, pos = (s["hidden_size"], s["num_layers"], s["intermediate_size"],
                        s["max_positions"])
    v = vocab_size
    shapes = {}
    if family == "distilbert":
        p = "distilbert."
        shapes.update({f"{p}embeddings.word_embeddings.weight": (v, h),
                       f"{p}embeddings.position_embeddings.weight": (pos, h),
                       f"{p}embeddings.LayerNorm.weight": (h,),
                       f"{p}embeddings.LayerNorm.bias": (h,)})
        for i in range(n):
            q = f"{p}transformer.layer.{i}."
            for name in ("q_lin", "k_lin", "v_lin", "out_lin"):
                shapes[f"{q}attention.{name}.weight"] = (h, h)
                shapes[f"{q}attention.{name}.bias"] = (h,)
            for name in ("sa_layer_norm", "output_layer_norm"):
                shapes[f"{q}{name}.weight"] = (h,)
                shapes[f"{q}{name}.bias"] = (h,)
            shapes.update({f"{q}ffn.lin1.weight": (inter, h), f"{q}ffn.lin1.bias": (inter,),
                           f"{q}ffn.lin2.weight": (h, inter), f"{q}ffn.lin2.bias": (h,)})
        if mlm_head:
            shapes.update({"vocab_transform.weight": (h, h), "vocab_transform.bias": (h,),
                           "vocab_layer_norm.weight": (h,), "vocab_layer_norm.bias": (h,),
                           "vocab_projector.bias": (v,)})
        return shapes
    p = "bert." if family == "bert" else "roberta."
    positions = pos if family == "bert" else pos + 2
    types = 2 if family == "bert" else 1
    shapes.update({f"{p}embeddings.word_embeddings.weight": (v, h),
                   f"{p}embeddings.position_embeddings.weight": (positions, h),
                   f"{p}embeddings.token_type_embeddings.weight": (types, h),
                   f"{p}embeddings.LayerNorm.weight": (h,),
                   f"{p}embeddings.LayerNorm.bias": (h,)})
    for i in range(n):
        q = f"{p}encoder.layer.{i}."
        for name in ("query", "key", "value"):
            shapes[f"{q}attention.self.{name}.weight"] = (h, h)
            shapes[f"{q}attention.self.{name}.bias"] = (h,)
        shapes.update({f"{q}attention.output.dense.weight": (h, h),
                       f"{q}attention.output.dense.bias": (h,),
                       f"{q}attention.output.LayerNorm.weight": (h,),
                       f"{q}attention.output.LayerNorm.bias": (h,),
                       f"{q}intermediate.dense.weight": (inter, h),
                       f"{q}intermediate.dense.bias": (inter,),
                       f"{q}output.dense.weight": (h, inter), f"{q}output.dense.bias": (h,),
                       f"{q}output.LayerNorm.weight": (h,), f"{q}output.LayerNorm.bias": (h,)})
    if family == "bert" and pooler:
        shapes.update({f"{p}pooler.dense.weight": (h, h), f"{p}pooler.dense.bias": (h,)})
    if mlm_head:
        m = "cls.predictions." if family == "bert" else "lm_head."
        norm = "transform.LayerNorm" if family == "bert" else "layer_norm"
        dense = "transform.dense" if family == "bert" else "dense"
        shapes.update({f"{m}{dense}.weight": (h, h), f"{m}{dense}.bias": (h,),
                       f"{m}{norm}.weight": (h,), f"{m}{norm}.bias": (h,), f"{m}bias": (v,)})
    return shapes


def random_weights(shapes, seed=0):
    """Random float32 weights: N(0, 0.02) matrices, LayerNorm weights near 1, small random
    biases (non-zero, so that a mis-mapped bias shows). RoBERTa's token-type row is zero, as
    in every converted fairseq checkpoint."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if "token_type_embeddings" in name and shape[0] == 1:
            value = np.zeros(shape)
        elif "LayerNorm.weight" in name or "layer_norm.weight" in name:
            value = 1.0 + 0.1 * rng.standard_normal(shape)
        elif len(shape) == 1:
            value = 0.02 * rng.standard_normal(shape)
        else:
            value = 0.02 * rng.standard_normal(shape)
            if "embeddings" in name:
                value *= 10  # embeddings large enough that positions and tokens matter
        out[name] = value.astype(np.float32)
    return out


def make_tiny_checkpoint(family, directory, seed=0, mlm_head=True, pooler=True, dropout=0.1,
                         **sizes):
    """Writes a tiny random `family` checkpoint in Hugging Face's layout into `directory`
    (created; must not exist or be empty) and returns `directory`.

    sizes: hidden_size, num_layers, num_heads, intermediate_size, max_positions (usable
    positions; RoBERTa-style families get 2 more rows). `mlm_head=False` writes a base model
    (no MLM head), `pooler=False` a BERT without pooler.
    """
    from safetensors.numpy import save_file

    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; one of {FAMILIES}")
    s = dict(_SIZES, **sizes)
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    vocab_size = _write_tokenizer_files(family, directory, s["max_positions"])
    _hf_config(family, vocab_size, s, dropout).save_pretrained(directory)
    weights = random_weights(hf_weight_shapes(family, vocab_size, s, pooler, mlm_head), seed)
    save_file(weights, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    return directory


_ST_POOLING_KEYS = ("pooling_mode_cls_token", "pooling_mode_mean_tokens",
                    "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")


def make_sentence_transformers_dir(family, directory, pooling="mean", max_seq_length=24,
                                   normalize=True, seed=0, **kwargs):
    """A sentence-transformers model directory around a tiny checkpoint: modules.json,
    1_Pooling/config.json (`pooling` "mean" | "cls" | "max"), sentence_bert_config.json,
    and a Normalize module when `normalize`. Returns `directory`."""
    make_tiny_checkpoint(family, directory, seed=seed, mlm_head=False, **kwargs)
    modules = [{"idx": 0, "name": "0", "path": "",
                "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling",
                "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    _write_json(os.path.join(directory, "modules.json"), modules)
    with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    dim = config.get("hidden_size", config.get("dim"))
    flags = {key: False for key in _ST_POOLING_KEYS}
    flags[{"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens",
           "max": "pooling_mode_max_tokens"}[pooling]] = True
    os.makedirs(os.path.join(directory, "1_Pooling"), exist_ok=True)
    _write_json(os.path.join(directory, "1_Pooling", "config.json"),
                {"word_embedding_dimension": dim, **flags})
    _write_json(os.path.join(directory, "sentence_bert_config.json"),
                {"max_seq_length": max_seq_length, "do_lower_case": False})
    return directory


def hf_tokenizer(directory):
    """The `transformers` tokenizer of a checkpoint directory (the parity reference)."""
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(directory)
