"""Writes a cross-encoder (`tfsent.methods.CrossEncoder`) as a Hugging Face
sequence-classification folder: what `transformers.AutoModelForSequenceClassification` and
sentence-transformers' `CrossEncoder(DIR)` load, with the logits tfsent's `score` returns.

The folder is the huggingface format's (`huggingface.py`: config.json, model.safetensors
under Hugging Face's names through the same weight map, the family's tokenizer files with
its pair template) plus the head. A CrossEncoder's score head is the family's own
*ForSequenceClassification head (`families.CLASSIFICATION_HEADS`), so each maps exactly:

  bert ("pooler"): pooler Dense(H, tanh) on the first token -> Dense(1): `bert.pooler`
      (the backbone's) -> `classifier`.
  roberta, xlm-roberta ("dense_tanh"): Dense(H, tanh) -> Dense(1) on the first token:
      `classifier.dense` -> `classifier.out_proj`.
  distilbert ("pre_classifier"): Dense(H, ReLU) -> Dense(1) on the first token:
      `pre_classifier` -> `classifier`.
  qwen3, gemma3 ("score"): Dense(1) without bias on the last token that is not the pad
      token: `score` (Qwen3ForSequenceClassification, Gemma3TextForSequenceClassification;
      the backbone under `model.`, config.json's `pad_token_id` the tokenizer's pad token,
      which Hugging Face's head skips). The tokenizer files keep the pair template and
      drop any chat template, which sentence-transformers would render pairs with instead.

A head that is not the family's (a "linear" Dense(1) of a RoBERTa / XLM-R / DistilBERT /
Qwen3 / Gemma3 cross-encoder saved before the heads followed the family's), or one reading
another token than Hugging Face's, and a family without a mapping are refused: Hugging
Face's head would compute something else.

config.json: the family's *ForSequenceClassification architecture, one label (`num_labels`
1), and `sentence_transformers.activation_fn` = Identity: sentence-transformers (checked
with 6.2) applies Sigmoid to a one-label model's logits in `predict` unless the config names
another activation; Identity makes `CrossEncoder.predict` return tfsent's logits
(`predict(..., activation_fn=torch.nn.Sigmoid())` gives probabilities).

`onnx=True` also writes onnx/model.onnx (and onnx/model_qint8_avx512_vnni.onnx, int8
weights) for sentence-transformers' ONNX backend (`CrossEncoder(DIR, backend="onnx")`,
through optimum's ORTModelForSequenceClassification) and plain onnxruntime: the graph of
`tfsent.formats.onnx` over the same head (first token -> pooler where the family has one
-> the head's Dense layers; for qwen3 / gemma3, `onnx_decoders`' graph and `score` on the
last token that is not the pad token, found from `input_ids` as Hugging Face's head finds
it), inputs `input_ids`, `attention_mask` (and
`token_type_ids` for BERT) as the folder's tokenizer gives them for the pair, one output
`logits` (batch, 1).
"""

import os


import numpy as np

import tfsent.encoders.families as families
from tfsent.encoders import pair_prompts
from tfsent.encoders.huggingface.config import read_json
from tfsent.encoders.huggingface.tokenizer_files import without_template
from tfsent.encoders.huggingface.writing import write_json, write_transformer
from tfsent.encoders.pooling import LAST_NON_PAD
from tfsent.errors import ConfigError
from tfsent.formats import onnx as onnx_format
from tfsent.formats.heads import dense_stack
from tfsent.formats.huggingface import check_new_export, write_new_export
from tfsent.formats.sentence_transformers import ONNX_SUBDIR

FORMAT = "cross_encoder_hf"
ST_ACTIVATION = "torch.nn.modules.linear.Identity"


def check_head(encoder, head):
    """(architecture, head kind) of the encoder's family; ConfigError for a missing head,
    a family without a head mapping, and a head whose Dense layers are not the family's
    (`families.CLASSIFICATION_HEADS`)."""
    if head is None:
        raise ConfigError(f"format {FORMAT}: needs the score head of a cross-encoder (export "
                          f"a tfsent.methods.CrossEncoder: model.export(DIR, format='{FORMAT}'))")
    record = families.TABLE[encoder.family].hf_sequence_classification
    if record is None:
        can = [f for f, r in families.TABLE.items() if r.hf_sequence_classification]
        raise ConfigError(f"format {FORMAT}: the {encoder.family} family's "
                          "*ForSequenceClassification head is not mapped (families "
                          f"that publish: {', '.join(can)})")
    kind = families.CLASSIFICATION_HEADS[record[1]]
    h = encoder.hidden_dim
    want = ([((h, h), kind.inner_activation, True)] if kind.inner else []) + [
        ((h, 1), "linear", kind.bias)]
    got = [(tuple(kernel.shape), act, bias is not None and (kind.bias or bool(np.any(bias))))
           for kernel, bias, act in dense_stack(head)]
    if got != want:
        def show(layers):
            return " -> ".join(f"Dense({shape[1]}, {act}{'' if biased else ', no bias'})"
                               for shape, act, biased in layers)
        token = "first token" if kind.token == "first" else "last token that is not padding"
        raise ConfigError(
            f"format {FORMAT}: the score head is {show(got)}, {record[0]} computes "
            f"{show(want)} on the {token} (a {encoder.family} cross-encoder saved with "
            "the 'linear' head cannot be published exactly: train one with the family's "
            "head, or serve it as format cross_encoder)")
    return record


def head_tensors(encoder, head, kind):
    """{Hugging Face name: float32 array} of the classification head of `kind` (a key of
    families.CLASSIFICATION_HEADS): the score head's Dense layers under the head's module
    names, kernels transposed to PyTorch's (out, in)."""
    record = families.CLASSIFICATION_HEADS[kind]
    modules = ([record.inner] if record.inner else []) + [record.classifier]
    out = {}
    for module, (kernel, bias, _) in zip(modules, dense_stack(head)):
        out[f"{module}.weight"] = np.ascontiguousarray(kernel.T, np.float32)
        if module != record.classifier or record.bias:
            out[f"{module}.bias"] = np.asarray(bias, np.float32)
    return out


def export_cross_encoder_hf(encoder, directory, head=None, max_seq_length=None,
                            metadata=None, onnx=False, pooling=None):
    """Writes the cross-encoder (`encoder` + its score `head`, a Dense(1)) as a Hugging Face
    sequence-classification folder at the new `directory` (`onnx`: with the ONNX files of
    the module docstring), or, for a prompted reranker (its tokenizer has a `pair_prompt`),
    as the causal LM it came from (`export_prompted_reranker`); returns it. `pooling`: the
    token the head reads (a CrossEncoder's `train_pooling`; None: the family head's),
    refused unless it is the one Hugging Face's head reads."""
    if getattr(encoder.tokenizer, "pair_prompt", None) is not None:
        if onnx:
            raise ConfigError(f"format {FORMAT}: a prompted reranker is published as a "
                              "causal LM, without ONNX files")
        _check_token(pooling, "last_token", "the last token", "the causal LM's answer")
        return export_prompted_reranker(encoder, directory, head, max_seq_length, metadata)
    architecture, kind = check_head(encoder, head)
    first = families.CLASSIFICATION_HEADS[kind].token == "first"
    if first:
        _check_token(pooling, "cls", "the first token", architecture)
    else:
        _check_token(pooling, LAST_NON_PAD, "the last token that is not the pad token",
                     architecture)
    pooling = "cls" if first else "last_token"
    directory, _, length = check_new_export(encoder, directory, pooling, max_seq_length)
    # the token the ONNX graph's head reads: the first, or Hugging Face's last non-pad one
    onnx_token = "cls" if first else LAST_NON_PAD
    if onnx:
        onnx_format.require_onnx()
        onnx_format.check_exportable(encoder, onnx_token, head)
    config = {"architectures": [architecture], "id2label": {"0": "LABEL_0"},
              "label2id": {"LABEL_0": 0},
              "sentence_transformers": {"activation_fn": ST_ACTIVATION}}

    def write_files(folder):
        # `prefixed`: a decoder's backbone under its base prefix beside `score` (the
        # families tfsent runs itself always write theirs so)
        write_transformer(encoder, folder, length, config, head_tensors(encoder, head, kind),
                          prefixed=True)
        details = {"architecture": architecture, "num_labels": 1, "head_kind": kind,
                   "activation_fn": ST_ACTIVATION}
        if not first:
            _drop_chat_template(folder)
            details["score_token"] = LAST_NON_PAD  # `pooling` is the encoder's own
        if onnx:
            subdir = os.path.join(folder, ONNX_SUBDIR)
            os.makedirs(subdir)
            files = onnx_format.write_onnx_files(encoder, subdir, onnx_token, head,
                                                 quantize=("int8",), logits=True)
            details["onnx_files"] = [f"{ONNX_SUBDIR}/{name}" for name in files]
        return details

    return write_new_export(directory, FORMAT, encoder, pooling, length, head, write_files,
                            metadata)


def _check_token(pooling, expected, what, reader):
    """ConfigError when a cross-encoder's head reads another token (`pooling`) than the
    published head does (`expected`, described as `what`)."""
    if pooling not in (None, expected):
        raise ConfigError(f"format {FORMAT}: this cross-encoder's head reads the {pooling} "
                          f"token; {reader} reads {what} ({expected}), so the published "
                          "model would score something else (serve it as format "
                          "cross_encoder)")


def _drop_chat_template(folder):
    """Removes the chat template of the written tokenizer_config.json (a decoder's files
    carry one; chat_template.jinja is not among the files tfsent keeps):
    sentence-transformers' CrossEncoder renders a pair through a tokenizer's chat template
    when it has one, where tfsent's head was trained on the pair template."""
    path = os.path.join(folder, "tokenizer_config.json")
    settings = read_json(path)
    if isinstance(settings, dict) and "chat_template" in settings:
        settings.pop("chat_template")
        write_json(path, settings)


def prompted_lm_head(encoder, head):
    """(V, H) float32: the LM head of a prompted reranker's backbone with the positive
    answer's row set to the negative one's plus the score head's kernel, so that
    logit(yes) - logit(no) is the cross-encoder's score (the other rows, the LM's, kept).
    ConfigError for a head that is not one Dense(1) without bias (or with a zero bias)."""
    layers = dense_stack(head)
    if len(layers) != 1 or layers[0][0].shape != (encoder.hidden_dim, 1) or layers[0][2] \
            != "linear" or (layers[0][1] is not None and np.any(layers[0][1])):
        raise ConfigError(f"format {FORMAT}: a prompted reranker's head must be one Dense(1) "
                          "without bias (an LM head's answer rows have none)")
    yes, no = pair_prompts.answer_ids(encoder.tokenizer, encoder.tokenizer.pair_prompt["name"])
    table = pair_prompts.lm_head_table(encoder, f"format {FORMAT}").copy()
    table[yes] = table[no] + layers[0][0][:, 0]
    return table


def export_prompted_reranker(encoder, directory, head, max_seq_length=None, metadata=None):
    """A prompted reranker (Qwen3-Reranker, `tfsent.encoders.pair_prompts`) as the folder of
    its family's causal LM (`Family.hf_causal_lm`): the backbone under the base-model
    prefix, `lm_head.weight` from `prompted_lm_head`, chat_template.jinja rendering the
    prompt (with its instruction) for a (query, document) pair, tokenizer_config.json with
    `split_special_tokens` false (the template's chat tokens are single ids) and config.json
    naming Identity as sentence-transformers' activation. sentence-transformers'
    `CrossEncoder(DIR)` scores such a folder with logit(yes) - logit(no) at the last
    token: tfsent's score."""
    architecture = families.TABLE[encoder.family].hf_causal_lm
    if architecture is None:
        raise ConfigError(f"format {FORMAT}: the {encoder.family} family has no causal-LM "
                          "architecture to publish a prompted reranker as")
    directory, _, length = check_new_export(encoder, directory, "last_token", max_seq_length)
    lm_head = prompted_lm_head(encoder, head)
    template = pair_prompts.chat_template(encoder.tokenizer.pair_prompt)
    config = {"architectures": [architecture], "tie_word_embeddings": False,
              "sentence_transformers": {"activation_fn": ST_ACTIVATION}}

    def write_files(folder):
        write_transformer(encoder, folder, length, config, {"lm_head.weight": lm_head},
                          prefixed=True)
        with open(os.path.join(folder, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(template)
        path = os.path.join(folder, "tokenizer.json")  # the prompt appends nothing
        write_json(path, without_template(read_json(path)))
        path = os.path.join(folder, "tokenizer_config.json")
        settings = read_json(path)
        settings.pop("chat_template", None)  # the file's is the reranker's
        settings["split_special_tokens"] = False
        write_json(path, settings)
        return {"architecture": architecture, "num_labels": 1,
                "prompt": encoder.tokenizer.pair_prompt["name"],
                "instruction": encoder.tokenizer.pair_prompt["instruction"],
                "activation_fn": ST_ACTIVATION}

    return write_new_export(directory, FORMAT, encoder, "last_token", length, head,
                            write_files, metadata)
