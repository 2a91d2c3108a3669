"""Tiny random checkpoints of the decoder-based embedder families in Hugging Face's own
layout (test helper), shaped like the real releases:

    make_qwen3_embedding_dir(directory, seed=0) -> directory

A Qwen3-Embedding-shaped sentence-transformers folder: config.json (model_type qwen3,
Qwen3Model), model.safetensors (random weights under Hugging Face's base-model names, written
with numpy), tokenizer.json (byte-level BPE trained with `tokenizers` on the demo corpus,
Qwen2's split pattern, NFC, `<|endoftext|>` appended by the post-processor),
tokenizer_config.json (left padding), modules.json (Transformer, Pooling lasttoken,
Normalize), 1_Pooling/config.json, config_sentence_transformers.json (prompts).

    make_qwen3_seq_cls_dir(directory, seed=0, reranker=True) -> directory

A Qwen3ForSequenceClassification folder (a one-label `score` head): a Qwen3-Reranker
converted to sequence classification, or one fine-tuned from Qwen3-Embedding.

    make_embeddinggemma_dir(directory, seed=0) -> directory

An EmbeddingGemma-shaped sentence-transformers folder: config.json (model_type gemma3_text,
Gemma3TextModel, bidirectional attention, sliding / full layer_types, rope_parameters),
model.safetensors (random weights under Hugging Face's names), tokenizer.model (a BPE
SentencePiece model trained with `sentencepiece` on the demo corpus, Gemma's settings and
ids <pad>=0 <eos>=1 <bos>=2 <unk>=3), tokenizer.json + tokenizer_config.json written by
transformers' own GemmaTokenizer conversion (`<bos>` prepended, `<eos>` appended),
modules.json (Transformer, Pooling mean, Dense H->2H, Dense 2H->H, Normalize: the Dense
modules in sentence-transformers' own layout, config.json + model.safetensors
`linear.weight`), config_sentence_transformers.json (EmbeddingGemma's prompts).
"""

import json
import os

import numpy as np

from hf_checkpoints import demo_corpus

# Qwen2 / Qwen3's pre-tokenization pattern (tokenizer.json's Split pre-tokenizer).
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_PROMPTS = {"query": "Instruct: Given a web search query, retrieve relevant passages "
                         "that answer the query\nQuery:", "document": ""}
QWEN_SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 64}


def _write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)


def _write_qwen_tokenizer_config(directory, model_max_length):
    """tokenizer_config.json as Qwen3's releases have it (left padding, pad <|endoftext|>)."""
    _write_json(os.path.join(directory, "tokenizer_config.json"), {
        "tokenizer_class": "Qwen2Tokenizer", "padding_side": "left",
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "bos_token": None, "model_max_length": model_max_length,
        "clean_up_tokenization_spaces": False, "add_prefix_space": False})


def qwen_tokenizer_json(vocab_size=600, reranker=False):
    """tokenizer.json text of a Qwen-style byte-level BPE trained on the demo corpus;
    `reranker`: Qwen3-Reranker's (no template: nothing appended; the chat tokens
    `<think>` and `</think>` added; "yes" and "no" single tokens)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers import processors, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    corpus = demo_corpus()
    # Paragraph breaks too, so that "\n\n" is one token as in the real vocabulary ("ĊĊ").
    paragraphs = [corpus[i] + "\n\n" + corpus[i + 1] for i in range(0, 400, 2)]
    answers = ["yes", "no"] * 200 if reranker else []
    tok.train_from_iterator(corpus + paragraphs + answers, trainer)
    assert len(tok.encode("\n\n").ids) == 1
    if reranker:
        tok.add_special_tokens(QWEN_SPECIALS + ["<think>", "</think>"])
        assert tok.token_to_id("yes") is not None and tok.token_to_id("no") is not None
        return tok
    tok.add_special_tokens(QWEN_SPECIALS)
    eos = tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(
        single="$A:0 <|endoftext|>:0", pair="$A:0 <|endoftext|>:0 $B:1 <|endoftext|>:1",
        special_tokens=[("<|endoftext|>", eos)])
    return tok


def _qwen3_weights(config, rng):
    h, i_dim, hd = config["hidden_size"], config["intermediate_size"], config["head_dim"]
    nq, nkv = config["num_attention_heads"], config["num_key_value_heads"]
    # the tiny checkpoints' 0.2; 1 / sqrt(h) at real widths (a benchmark's folder), where
    # 0.2 would overflow the residual stream
    spread = 0.2 if h <= 64 else h ** -0.5

    def normal(*shape, scale=spread):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def norm(n):
        return (1.0 + rng.standard_normal(n) * 0.1).astype(np.float32)

    weights = {"embed_tokens.weight": normal(config["vocab_size"], h, scale=0.5),
               "norm.weight": norm(h)}
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}."
        weights.update({
            p + "input_layernorm.weight": norm(h),
            p + "post_attention_layernorm.weight": norm(h),
            p + "self_attn.q_proj.weight": normal(nq * hd, h),
            p + "self_attn.k_proj.weight": normal(nkv * hd, h),
            p + "self_attn.v_proj.weight": normal(nkv * hd, h),
            p + "self_attn.o_proj.weight": normal(h, nq * hd),
            p + "self_attn.q_norm.weight": norm(hd),
            p + "self_attn.k_norm.weight": norm(hd),
            p + "mlp.gate_proj.weight": normal(i_dim, h),
            p + "mlp.up_proj.weight": normal(i_dim, h),
            p + "mlp.down_proj.weight": normal(h, i_dim),
        })
    return weights


def _qwen3_config(tok, architecture, **overrides):
    """config.json of a tiny Qwen3 checkpoint with tokenizer `tok` (a Qwen3-Embedding's
    settings; `overrides` replace some)."""
    eos = tok.token_to_id("<|endoftext|>")
    config = {"architectures": [architecture], "model_type": "qwen3",
              "vocab_size": tok.get_vocab_size(), **QWEN_SIZES,
              "hidden_act": "silu", "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
              "rope_theta": 1000000.0, "rope_scaling": None, "attention_bias": False,
              "attention_dropout": 0.0, "tie_word_embeddings": True,
              "use_sliding_window": False, "sliding_window": None, "max_window_layers": 2,
              "bos_token_id": eos, "eos_token_id": eos, "torch_dtype": "float32",
              "initializer_range": 0.02, "use_cache": True}
    config.update(overrides)
    return config


def make_qwen3_reranker_dir(directory, seed=0, tied=False):
    """Writes a tiny Qwen3-Reranker-shaped folder (Qwen3ForCausalLM: `model.`-prefixed
    names, its own `lm_head.weight` unless `tied`; a tokenizer.json without template,
    left padding, as the release ships); returns it."""
    from safetensors.numpy import save_file
    os.makedirs(directory, exist_ok=True)
    tok = qwen_tokenizer_json(reranker=True)
    tok.save(os.path.join(directory, "tokenizer.json"))
    config = _qwen3_config(tok, "Qwen3ForCausalLM", tie_word_embeddings=tied,
                           eos_token_id=tok.token_to_id("<|im_end|>"))
    _write_json(os.path.join(directory, "config.json"), config)
    rng = np.random.default_rng(seed)
    weights = {"model." + k: v for k, v in _qwen3_weights(config, rng).items()}
    if not tied:
        weights["lm_head.weight"] = (rng.standard_normal(
            (config["vocab_size"], config["hidden_size"])) * 0.1).astype(np.float32)
    save_file(weights, os.path.join(directory, "model.safetensors"),
              metadata={"format": "pt"})
    _write_qwen_tokenizer_config(directory, 131072)
    return directory


def make_qwen3_seq_cls_dir(directory, seed=0, reranker=True):
    """Writes a tiny Qwen3ForSequenceClassification folder (`model.`-prefixed names, a
    one-label `score.weight` without bias, config.json's pad_token_id the tokenizer's
    `<|endoftext|>`): `reranker`, a Qwen3-Reranker converted to sequence classification
    (its tokenizer: no template, left padding); else one fine-tuned from Qwen3-Embedding
    (a tokenizer appending `<|endoftext|>`, also to each text of a pair); returns it."""
    from safetensors.numpy import save_file
    os.makedirs(directory, exist_ok=True)
    tok = qwen_tokenizer_json(reranker=reranker)
    tok.save(os.path.join(directory, "tokenizer.json"))
    pad = tok.token_to_id("<|endoftext|>")
    config = _qwen3_config(tok, "Qwen3ForSequenceClassification", pad_token_id=pad,
                           id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})
    _write_json(os.path.join(directory, "config.json"), config)
    rng = np.random.default_rng(seed)
    weights = {"model." + k: v for k, v in _qwen3_weights(config, rng).items()}
    weights["score.weight"] = (rng.standard_normal((1, config["hidden_size"])) * 0.5
                               ).astype(np.float32)
    save_file(weights, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    _write_qwen_tokenizer_config(directory, 32768)
    return directory


def make_qwen3_embedding_dir(directory, seed=0, max_seq_length=64, sizes=None,
                             vocab_size=600):
    """Writes a tiny Qwen3-Embedding-shaped sentence-transformers folder; returns it.
    `sizes` replaces QWEN_SIZES' entries (benchmarks/serve_latency.py's random folder of
    Qwen3-Embedding-0.6B's shape); `vocab_size`: its BPE's."""
    from safetensors.numpy import save_file
    os.makedirs(os.path.join(directory, "1_Pooling"), exist_ok=True)
    tok = qwen_tokenizer_json(vocab_size)
    tok.save(os.path.join(directory, "tokenizer.json"))
    config = _qwen3_config(tok, "Qwen3Model", **(sizes or {}))
    _write_json(os.path.join(directory, "config.json"), config)
    save_file(_qwen3_weights(config, np.random.default_rng(seed)),
              os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    _write_qwen_tokenizer_config(directory, 32768)
    _write_json(os.path.join(directory, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"}])
    _write_json(os.path.join(directory, "sentence_bert_config.json"),
                {"max_seq_length": max_seq_length, "do_lower_case": False})
    _write_json(os.path.join(directory, "1_Pooling", "config.json"), {
        "word_embedding_dimension": config["hidden_size"],
        "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": True,
        "include_prompt": True})
    _write_json(os.path.join(directory, "config_sentence_transformers.json"), {
        "prompts": QWEN_PROMPTS, "default_prompt_name": None, "similarity_fn_name": "cosine"})
    return directory


# EmbeddingGemma-300m's prompts (config_sentence_transformers.json), a few of them.
GEMMA_PROMPTS = {"query": "task: search result | query: ", "document": "title: none | text: ",
                 "BitextMining": "task: search result | query: ",
                 "Clustering": "task: clustering | query: ",
                 "STS": "task: sentence similarity | query: "}
# Six layers: keras-hub's and Hugging Face's pattern of five sliding layers, one full.
GEMMA_SIZES = {"hidden_size": 32, "num_hidden_layers": 6, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 64}
GEMMA_DENSE = 64  # 2_Dense's width (EmbeddingGemma-300m: 3072)
GEMMA_WINDOW = 8  # config.json's sliding_window (EmbeddingGemma-300m: 512)


def gemma_sentencepiece_model(vocab_size=700):
    """The serialized proto of a BPE SentencePiece model trained on the demo corpus with
    Gemma's settings (byte fallback, digits split, no dummy prefix, whitespace kept) and
    ids (<pad>=0, <eos>=1, <bos>=2, <unk>=3, <mask>=4)."""
    import io

    import sentencepiece as spm
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(demo_corpus()), model_writer=out, model_type="bpe",
        vocab_size=vocab_size, byte_fallback=True, split_digits=True,
        add_dummy_prefix=False, remove_extra_whitespaces=False,
        normalization_rule_name="identity", allow_whitespace_only_pieces=True,
        character_coverage=1.0, pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>",
        user_defined_symbols=["<mask>"], minloglevel=2)
    return out.getvalue()


def _write_gemma_tokenizer(directory):
    """tokenizer.model, then tokenizer.json + tokenizer_config.json from transformers'
    own conversion of it (GemmaTokenizer, add_eos_token as EmbeddingGemma ships)."""
    import transformers
    with open(os.path.join(directory, "tokenizer.model"), "wb") as f:
        f.write(gemma_sentencepiece_model())
    tok = transformers.GemmaTokenizer.from_pretrained(directory, add_bos_token=True,
                                                      add_eos_token=True)
    tok.model_max_length = 2048
    tok.padding_side = "right"
    tok.save_pretrained(directory)
    path = os.path.join(directory, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        settings = json.load(f)
    settings.pop("vocab_file", None)  # this machine's path
    settings.update(add_bos_token=True, add_eos_token=True, padding_side="right")
    _write_json(path, settings)
    return tok


def _gemma3_weights(config, rng):
    h, i_dim, hd = config["hidden_size"], config["intermediate_size"], config["head_dim"]
    nq, nkv = config["num_attention_heads"], config["num_key_value_heads"]

    def normal(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def norm(n):  # Gemma's RMSNorm scales by (1 + weight)
        return (rng.standard_normal(n) * 0.1).astype(np.float32)

    weights = {"embed_tokens.weight": normal(config["vocab_size"], h, scale=0.1),
               "norm.weight": norm(h)}
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}."
        weights.update({
            p + "input_layernorm.weight": norm(h),
            p + "post_attention_layernorm.weight": norm(h),
            p + "pre_feedforward_layernorm.weight": norm(h),
            p + "post_feedforward_layernorm.weight": norm(h),
            p + "self_attn.q_proj.weight": normal(nq * hd, h),
            p + "self_attn.k_proj.weight": normal(nkv * hd, h),
            p + "self_attn.v_proj.weight": normal(nkv * hd, h),
            p + "self_attn.o_proj.weight": normal(h, nq * hd),
            p + "self_attn.q_norm.weight": norm(hd),
            p + "self_attn.k_norm.weight": norm(hd),
            p + "mlp.gate_proj.weight": normal(i_dim, h),
            p + "mlp.up_proj.weight": normal(i_dim, h),
            p + "mlp.down_proj.weight": normal(h, i_dim),
        })
    return weights


def _write_dense_module(directory, weight):
    """A sentence-transformers Dense module folder (no bias, identity activation), as
    sentence-transformers saves one: config.json + model.safetensors `linear.weight`
    (out, in)."""
    from safetensors.numpy import save_file
    os.makedirs(directory, exist_ok=True)
    _write_json(os.path.join(directory, "config.json"), {
        "in_features": int(weight.shape[1]), "out_features": int(weight.shape[0]),
        "bias": False, "activation_function": "torch.nn.modules.linear.Identity"})
    save_file({"linear.weight": weight}, os.path.join(directory, "model.safetensors"),
              metadata={"format": "pt"})


def make_embeddinggemma_dir(directory, seed=0, max_seq_length=64):
    """Writes a tiny EmbeddingGemma-shaped sentence-transformers folder; returns it."""
    from safetensors.numpy import save_file
    os.makedirs(os.path.join(directory, "1_Pooling"), exist_ok=True)
    tok = _write_gemma_tokenizer(directory)
    n = GEMMA_SIZES["num_hidden_layers"]
    config = {"architectures": ["Gemma3TextModel"], "model_type": "gemma3_text",
              "vocab_size": len(tok), **GEMMA_SIZES,
              "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 2048,
              "rms_norm_eps": 1e-6, "query_pre_attn_scalar": GEMMA_SIZES["head_dim"],
              # EmbeddingGemma: 512; 8 here, shorter than the test texts, so that the
              # bidirectional window is tested.
              "sliding_window": GEMMA_WINDOW, "use_bidirectional_attention": True,
              "layer_types": ["sliding_attention" if (i + 1) % 6 else "full_attention"
                              for i in range(n)],
              "rope_parameters": {
                  "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                  "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
              "attention_bias": False, "attention_dropout": 0.0,
              "attn_logit_softcapping": None, "final_logit_softcapping": None,
              "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2,
              "tie_word_embeddings": True, "dtype": "float32",
              "initializer_range": 0.02, "use_cache": True}
    _write_json(os.path.join(directory, "config.json"), config)
    rng = np.random.default_rng(seed)
    save_file(_gemma3_weights(config, rng), os.path.join(directory, "model.safetensors"),
              metadata={"format": "pt"})
    h = GEMMA_SIZES["hidden_size"]
    _write_dense_module(os.path.join(directory, "2_Dense"),
                        (rng.standard_normal((GEMMA_DENSE, h)) * 0.2).astype(np.float32))
    _write_dense_module(os.path.join(directory, "3_Dense"),
                        (rng.standard_normal((h, GEMMA_DENSE)) * 0.2).astype(np.float32))
    _write_json(os.path.join(directory, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
        {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"},
        {"idx": 4, "name": "4", "path": "4_Normalize",
         "type": "sentence_transformers.models.Normalize"}])
    _write_json(os.path.join(directory, "sentence_bert_config.json"),
                {"max_seq_length": max_seq_length, "do_lower_case": False})
    _write_json(os.path.join(directory, "1_Pooling", "config.json"), {
        "word_embedding_dimension": h, "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": False,
        "include_prompt": True})
    _write_json(os.path.join(directory, "config_sentence_transformers.json"), {
        "prompts": GEMMA_PROMPTS, "default_prompt_name": None, "similarity_fn_name": "cosine"})
    return directory
