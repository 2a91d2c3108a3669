"""Writes a cross-encoder (`tfsent.methods.CrossEncoder`) as a Hugging Face
sequence-classification folder: what `transformers.AutoModelForSequenceClassification` and
sentence-transformers' `CrossEncoder(DIR)` load, with the logits tfsent's `score` returns.

The folder is the huggingface format's (`huggingface.py`: config.json, model.safetensors
under Hugging Face's names through the same weight map, the family's tokenizer files with
its pair template) plus the head, per the family's `hf_sequence_classification` record:

  bert ("pooler"): tfsent's score is pooler Dense(H, tanh) on the first token -> Dense(1),
      which is BertForSequenceClassification's `bert.pooler` -> `classifier`: exact.
  roberta, xlm-roberta ("dense_tanh"): tfsent's score is Dense(1) on the first token's
      state; *RobertaForSequenceClassification always puts `classifier.dense` + tanh before
      `classifier.out_proj`. That Dense is written as the diagonal eps_i (bias 0) and
      out_proj's weights divided by eps_i, so the head computes
      sum_i w_i tanh(eps_i x_i) / eps_i. With eps_i = c / (|gamma_i| sqrt(H - 1) + |beta_i|)
      (gamma, beta: the last block's output LayerNorm, which bounds |x_i| by that sum) and
      c = LINEAR_TANH_RANGE, |eps_i x_i| <= c, so each term is off by at most c^2 / 3
      relative (1 - tanh(u) / u <= u^2 / 3): 3e-5 at worst, below float32 rounding for
      typical states (|x_i| far below the bound).
  distilbert (a ReLU pre-classifier), qwen3: refused (no head mapping yet).

config.json: the family's *ForSequenceClassification architecture, one label (`num_labels`
1), and `sentence_transformers.activation_fn` = Identity: sentence-transformers (checked
with 6.2) applies Sigmoid to a one-label model's logits in `predict` unless the config names
another activation; Identity makes `CrossEncoder.predict` return tfsent's logits
(`predict(..., activation_fn=torch.nn.Sigmoid())` gives probabilities).

`onnx=True` also writes onnx/model.onnx (and onnx/model_qint8_avx512_vnni.onnx, int8
weights) for sentence-transformers' ONNX backend (`CrossEncoder(DIR, backend="onnx")`,
through optimum's ORTModelForSequenceClassification) and plain onnxruntime: the graph of
`tfsent.formats.onnx` over tfsent's own head (first token -> pooler where the family has
one -> Dense(1), no tanh approximation), inputs `input_ids`, `attention_mask` (and
`token_type_ids` for BERT) as the folder's tokenizer gives them for the pair, one output
`logits` (batch, 1).
"""

import os


import numpy as np

import tfsent.encoders.families as families
from tfsent.encoders import keras_hub_adapter as kh
from tfsent.encoders.huggingface.writing import write_transformer
from tfsent.errors import ConfigError
from tfsent.formats import onnx as onnx_format
from tfsent.formats.huggingface import check_new_export, write_new_export
from tfsent.formats.sentence_transformers import ONNX_SUBDIR

FORMAT = "cross_encoder_hf"
# |eps_i x_i| <= this in the "dense_tanh" head (see the module docstring).
LINEAR_TANH_RANGE = 1e-2
ST_ACTIVATION = "torch.nn.modules.linear.Identity"


def check_head(encoder, head):
    """(architecture, head kind) of the encoder's family; ConfigError for a missing or
    non-Dense(1) head and for a family without a head mapping."""
    if head is None:
        raise ConfigError(f"format {FORMAT}: needs the score head of a cross-encoder (export "
                          f"a tfsent.methods.CrossEncoder: model.export(DIR, format='{FORMAT}'))")
    if tuple(head.kernel.shape) != (encoder.hidden_dim, 1):
        raise ConfigError(f"format {FORMAT}: the score head must be Dense(1) on the "
                          f"{encoder.hidden_dim}-d first-token state, got kernel "
                          f"{tuple(head.kernel.shape)}")
    record = families.TABLE[encoder.family].hf_sequence_classification
    if record is None:
        can = [f for f, r in families.TABLE.items() if r.hf_sequence_classification]
        raise ConfigError(f"format {FORMAT}: the {encoder.family} family's "
                          "*ForSequenceClassification head is not mapped yet (families "
                          f"that publish: {', '.join(can)})")
    return record


def linear_tanh_scales(norm, hidden_dim, c=LINEAR_TANH_RANGE):
    """eps_i = c / (|gamma_i| sqrt(H - 1) + |beta_i|) (at most 1) of the LayerNorm `norm`
    whose output the head reads: |eps_i x_i| <= c for every output x of that LayerNorm."""
    gamma = np.abs(np.asarray(norm.gamma.numpy(), np.float64))
    beta = np.abs(np.asarray(norm.beta.numpy(), np.float64))
    bound = gamma * np.sqrt(hidden_dim - 1) + beta
    return c / np.maximum(bound, c)


def head_tensors(encoder, head, kind):
    """{Hugging Face name: float32 array} of the classification head (see the module
    docstring for each kind)."""
    kernel = np.asarray(head.kernel.numpy(), np.float64)[:, 0]
    bias = np.asarray(head.bias.numpy(), np.float32).reshape(1)
    if kind == "pooler":
        return {"classifier.weight": kernel[None, :].astype(np.float32),
                "classifier.bias": bias}
    norm = kh.transformer_block_parts(encoder.backbone.transformer_layers[-1]).ffn_norm
    eps = linear_tanh_scales(norm, encoder.hidden_dim)
    return {"classifier.dense.weight": np.diag(eps).astype(np.float32),
            "classifier.dense.bias": np.zeros([encoder.hidden_dim], np.float32),
            "classifier.out_proj.weight": (kernel / eps)[None, :].astype(np.float32),
            "classifier.out_proj.bias": bias}


def export_cross_encoder_hf(encoder, directory, head=None, max_seq_length=None,
                            metadata=None, onnx=False):
    """Writes the cross-encoder (`encoder` + its score `head`, a Dense(1)) as a Hugging Face
    sequence-classification folder at the new `directory` (`onnx`: with the ONNX files of
    the module docstring); returns it."""
    directory, _, length = check_new_export(encoder, directory, "cls", max_seq_length)
    architecture, kind = check_head(encoder, head)
    if onnx:
        onnx_format.require_onnx()
        onnx_format.check_exportable(encoder, "cls", head)
    config = {"architectures": [architecture], "id2label": {"0": "LABEL_0"},
              "label2id": {"LABEL_0": 0},
              "sentence_transformers": {"activation_fn": ST_ACTIVATION}}

    def write_files(folder):
        write_transformer(encoder, folder, length, config, head_tensors(encoder, head, kind))
        details = {"architecture": architecture, "num_labels": 1, "head_kind": kind,
                   "activation_fn": ST_ACTIVATION}
        if kind == "dense_tanh":
            details["linear_tanh_range"] = LINEAR_TANH_RANGE
        if onnx:
            subdir = os.path.join(folder, ONNX_SUBDIR)
            os.makedirs(subdir)
            files = onnx_format.write_onnx_files(encoder, subdir, "cls", head,
                                                 quantize=("int8",), logits=True)
            details["onnx_files"] = [f"{ONNX_SUBDIR}/{name}" for name in files]
        return details

    return write_new_export(directory, FORMAT, encoder, "cls", length, head, write_files,
                            metadata)
