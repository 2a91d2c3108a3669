"""Tiny random checkpoints of the decoder-based embedder families in Hugging Face's own
layout (test helper), shaped like the real releases:

    make_qwen3_embedding_dir(directory, seed=0) -> directory

A Qwen3-Embedding-shaped sentence-transformers folder: config.json (model_type qwen3,
Qwen3Model), model.safetensors (random weights under Hugging Face's base-model names, written
with numpy), tokenizer.json (byte-level BPE trained with `tokenizers` on the demo corpus,
Qwen2's split pattern, NFC, `<|endoftext|>` appended by the post-processor),
tokenizer_config.json (left padding), modules.json (Transformer, Pooling lasttoken,
Normalize), 1_Pooling/config.json, config_sentence_transformers.json (prompts).
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


def qwen_tokenizer_json(vocab_size=600):
    """tokenizer.json text of a Qwen-style byte-level BPE trained on the demo corpus."""
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
    tok.train_from_iterator(demo_corpus(), trainer)
    tok.add_special_tokens(QWEN_SPECIALS)
    eos = tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(
        single="$A:0 <|endoftext|>:0", pair="$A:0 <|endoftext|>:0 $B:1 <|endoftext|>:1",
        special_tokens=[("<|endoftext|>", eos)])
    return tok


def _qwen3_weights(config, rng):
    h, i_dim, hd = config["hidden_size"], config["intermediate_size"], config["head_dim"]
    nq, nkv = config["num_attention_heads"], config["num_key_value_heads"]

    def normal(*shape, scale=0.2):
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


def make_qwen3_embedding_dir(directory, seed=0, max_seq_length=64):
    """Writes a tiny Qwen3-Embedding-shaped sentence-transformers folder; returns it."""
    from safetensors.numpy import save_file
    os.makedirs(os.path.join(directory, "1_Pooling"), exist_ok=True)
    tok = qwen_tokenizer_json()
    tok.save(os.path.join(directory, "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    config = {"architectures": ["Qwen3Model"], "model_type": "qwen3",
              "vocab_size": tok.get_vocab_size(), **QWEN_SIZES,
              "hidden_act": "silu", "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
              "rope_theta": 1000000.0, "rope_scaling": None, "attention_bias": False,
              "attention_dropout": 0.0, "tie_word_embeddings": True,
              "use_sliding_window": False, "sliding_window": None, "max_window_layers": 2,
              "bos_token_id": eos, "eos_token_id": eos, "torch_dtype": "float32",
              "initializer_range": 0.02, "use_cache": True}
    _write_json(os.path.join(directory, "config.json"), config)
    save_file(_qwen3_weights(config, np.random.default_rng(seed)),
              os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    _write_json(os.path.join(directory, "tokenizer_config.json"), {
        "tokenizer_class": "Qwen2Tokenizer", "padding_side": "left",
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "bos_token": None, "model_max_length": 32768, "clean_up_tokenization_spaces": False,
        "add_prefix_space": False})
    _write_json(os.path.join(directory, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"}])
    _write_json(os.path.join(directory, "sentence_bert_config.json"),
                {"max_seq_length": max_seq_length, "do_lower_case": False})
    _write_json(os.path.join(directory, "1_Pooling", "config.json"), {
        "word_embedding_dimension": QWEN_SIZES["hidden_size"],
        "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": True,
        "include_prompt": True})
    _write_json(os.path.join(directory, "config_sentence_transformers.json"), {
        "prompts": QWEN_PROMPTS, "default_prompt_name": None, "similarity_fn_name": "cosine"})
    return directory
