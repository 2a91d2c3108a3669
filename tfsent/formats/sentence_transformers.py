"""The sentence-transformers format: `SentenceTransformer(DIR)` loads it offline. The
transformer in Hugging Face's layout at the top level (`tfsent.encoders.huggingface.writing.write_transformer`), then
modules.json's WeightedLayerPooling (layer-averaging poolings), Pooling, Dense (a `cls`
pooler, the encoder's own Dense head (EmbeddingGemma's), a method's export head) and
Normalize (`normalize`, by default the encoder's own) modules; with
`onnx=True` also the ONNX files of its ONNX backend (`tfsent.formats.onnx`). Written by
`export_sentence_transformers` (the registry's writer)."""

import os

import numpy as np

import tfsent.encoders.families as families
from tfsent.encoders.huggingface import SAFETENSORS_FILE, ST_CONFIG_FILE
from tfsent.encoders.huggingface.writing import write_json, write_safetensors, write_transformer
from tfsent.errors import ConfigError
from tfsent.formats import onnx as onnx_format
from tfsent.formats.heads import ST_ACTIVATIONS, dense_stack
from tfsent.formats.metadata import encoder_prompts, encoder_truncate_dim
from tfsent.formats.saved_model import embedding_width
from tfsent.formats.huggingface import (check_new_export, prompt_map,
                                        write_new_export)

ONNX_SUBDIR = "onnx"  # where sentence-transformers' ONNX backend looks
# Poolings whose modules need only the last hidden state (the others' WeightedLayerPooling
# needs every layer's, which sentence-transformers' ONNX backend does not return).
ONNX_POOLINGS = ("mean", "cls", "cls_before_pooler", "last_token")  # lasttoken: states + mask
# Poolings sentence-transformers expresses, and how: (Pooling mode, extra modules).
ST_POOLINGS = {
    "mean": "Pooling mean",
    "last_token": "Pooling lasttoken",
    "cls_before_pooler": "Pooling cls",
    "cls": "Pooling cls + Dense(H, H, Tanh) with the pooler's weights",
    "first_last_avg": "WeightedLayerPooling (layers 1 and L, weight 1; others 0) + Pooling mean",
    "emb_last_avg": "WeightedLayerPooling (embeddings and layer L) + Pooling mean",
    "last2_avg": "WeightedLayerPooling (layers L-1 and L) + Pooling mean",
}
def _layer_weights(pooling, num_layers):
    """(layer_start, weights) of sentence-transformers' WeightedLayerPooling that averages
    the same hidden states as tfsent's `pooling` (index 0 = the embedding output)."""
    n = num_layers
    if pooling == "last2_avg":
        return n - 1, [1.0, 1.0]
    if pooling == "first_last_avg":
        return (1, [1.0]) if n == 1 else (1, [1.0] + [0.0] * (n - 2) + [1.0])
    if pooling == "emb_last_avg":
        return 0, [1.0] + [0.0] * (n - 1) + [1.0]
    raise ValueError(pooling)


def check_sentence_transformers_pooling(pooling):
    """Raises ConfigError (listing what it can express) unless sentence-transformers can
    express tfsent's `pooling` faithfully."""
    if pooling not in ST_POOLINGS:
        lines = "\n".join(f"  {name}: {how}" for name, how in ST_POOLINGS.items())
        raise ConfigError(f"--pooling={pooling} cannot be expressed by sentence-transformers' "
                          f"modules; the format expresses these poolings:\n{lines}")


def _write_st_dense(directory, kernel, bias, activation):
    os.makedirs(directory)
    tensors = {"linear.weight": np.ascontiguousarray(kernel.T)}
    if bias is not None:
        tensors["linear.bias"] = np.ascontiguousarray(bias)
    write_safetensors(os.path.join(directory, SAFETENSORS_FILE), tensors)
    write_json(os.path.join(directory, "config.json"),
               {"in_features": int(kernel.shape[0]), "out_features": int(kernel.shape[1]),
                "bias": bias is not None, "activation_function": ST_ACTIVATIONS[activation]})


def check_onnx_files(pooling, family=None):
    """ConfigError (before any work) unless the ONNX files can go with this export: a
    family the ONNX writer builds, a pooling that needs only the last hidden state, and
    the tfsent[onnx] extra."""
    formats_of_family = families.TABLE[family].export_formats if family else None
    if formats_of_family is not None and "onnx" not in formats_of_family:
        raise ConfigError(f"--with_onnx: the {family} family cannot be exported as onnx yet "
                          f"(it exports as {', '.join(formats_of_family)}; docs/families.md)")
    if pooling not in ONNX_POOLINGS:
        raise ConfigError(f"--pooling={pooling}: sentence-transformers' ONNX backend gives its "
                          "modules the last hidden state only; the ONNX files go with "
                          f"{', '.join(ONNX_POOLINGS)}")
    onnx_format.require_onnx()


def export_sentence_transformers(encoder, directory, pooling=None, head=None,
                                 normalize=None, max_seq_length=None, metadata=None,
                                 query_prompt=None, document_prompt=None, onnx=False,
                                 truncate_dim=None):
    """Writes the sentence_transformers format to the new `directory`; returns it.

    Args:
        pooling: the embedding's pooling (default: the encoder's); one of ST_POOLINGS.
        head: a layer on the pooled embedding (Dense modules: `heads.dense_stack`), after
            the encoder's own Dense head when it has one.
        normalize: add a Normalize module (None: when the encoder normalises, as a
            sentence-transformers folder with a Normalize module loads, and no `head`
            is given).
        max_seq_length: truncation length, special tokens included (default: the
            tokenizer's, clamped to the position table).
        metadata: extra entries for tfsent_export.json (e.g. method, step).
        query_prompt, document_prompt: the `prompts` ("query", "document") that
            sentence-transformers' `encode_query` / `encode_document` apply (None: the
            encoder's own, `encoder.prompts`; "": none).
        onnx: also write onnx/model.onnx and onnx/model_qint8_avx512_vnni.onnx
            (`tfsent.formats.onnx`, the tfsent[onnx] extra), where `SentenceTransformer(DIR,
            backend="onnx", model_kwargs={"file_name": ...})` finds them (~2x the
            checkpoint's size on disk).
        truncate_dim: config_sentence_transformers.json's `truncate_dim`, the size
            sentence-transformers' `encode` cuts to (None: the encoder's own, without a
            `head`; 0: none).
    Everything the format cannot express is refused before anything is written.
    """
    directory, pooling, length = check_new_export(encoder, directory, pooling, max_seq_length)
    check_sentence_transformers_pooling(pooling)
    dense_stack(head)
    if onnx:
        check_onnx_files(pooling, encoder.family)
        onnx_format.check_exportable(encoder, pooling, head)  # the graph's own refusals
    prompts = prompt_map(*encoder_prompts(encoder, query_prompt, document_prompt))
    truncate_dim = encoder_truncate_dim(encoder, truncate_dim,
                                        embedding_width(encoder, head), head)
    if normalize is None:  # the encoder's own, for its own embedding (not a method's head)
        normalize = bool(encoder.normalize) and head is None

    def write_files(folder):
        details = write(encoder, folder, pooling, head, normalize, length, prompts,
                        truncate_dim)
        if onnx:
            os.makedirs(os.path.join(folder, ONNX_SUBDIR))
            files = onnx_format.write_onnx_files(encoder, os.path.join(folder, ONNX_SUBDIR),
                                                 pooling, head, quantize=("int8",))
            details["onnx_files"] = [f"{ONNX_SUBDIR}/{name}" for name in files]
        return {"normalize": bool(normalize), "activation": encoder.activation,
                "prompts": prompts, **details}

    return write_new_export(directory, "sentence_transformers", encoder, pooling, length,
                            head, write_files, metadata)


def write(encoder, directory, pooling, head, normalize, max_seq_length, prompts=None,
          truncate_dim=None):
    """The sentence_transformers files into the existing `directory`; returns the details
    `tfsent_export.json` records. `prompts` ({"query": ..., "document": ...}) go into
    config_sentence_transformers.json, where `encode_query` / `encode_document` find them,
    and so does `truncate_dim` (a checked size, or None), `encode`'s default size."""
    check_sentence_transformers_pooling(pooling)
    # refuses inexpressible heads before anything is written
    dense_layers = dense_stack(getattr(encoder, "dense_head", None)) + dense_stack(head)
    backbone = encoder.backbone
    if pooling == "cls":
        pooler = encoder.pooler_dense if families.TABLE[encoder.family].has_pooler else None
        if pooler is None:
            raise ConfigError(f"--pooling=cls needs a pooler Dense, which this {encoder.family} "
                              "encoder has not; use cls_before_pooler")
        dense_layers = [(np.asarray(pooler.kernel.numpy(), np.float32),
                         np.asarray(pooler.bias.numpy(), np.float32), "tanh")] + dense_layers
    layered = pooling in ("first_last_avg", "emb_last_avg", "last2_avg")
    write_transformer(encoder, directory, max_seq_length,
                      config_extra={"output_hidden_states": True} if layered else None)
    write_json(os.path.join(directory, "sentence_bert_config.json"),
               {"max_seq_length": int(max_seq_length), "do_lower_case": False})
    modules = [{"idx": 0, "name": "0", "path": "",
                "type": "sentence_transformers.models.Transformer"}]

    def add(kind, folder):
        idx = len(modules)
        path = f"{idx}_{folder}"
        modules.append({"idx": idx, "name": str(idx), "path": path,
                        "type": f"sentence_transformers.models.{kind}"})
        return os.path.join(directory, path)

    hidden = int(backbone.hidden_dim)
    if layered:
        start, weights = _layer_weights(pooling, backbone.num_layers)
        path = add("WeightedLayerPooling", "WeightedLayerPooling")
        os.makedirs(path)
        write_json(os.path.join(path, "config.json"),
                   {"word_embedding_dimension": hidden, "layer_start": start,
                    "num_hidden_layers": int(backbone.num_layers)})
        write_safetensors(os.path.join(path, SAFETENSORS_FILE),
                          {"layer_weights": np.asarray(weights, np.float32)})
    path = add("Pooling", "Pooling")
    os.makedirs(path)
    mode = ("cls" if pooling in ("cls", "cls_before_pooler") else
            "lasttoken" if pooling == "last_token" else "mean")
    write_json(os.path.join(path, "config.json"),
               {"word_embedding_dimension": hidden,
                "pooling_mode_cls_token": mode == "cls",
                "pooling_mode_mean_tokens": mode == "mean",
                "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False,
                "pooling_mode_weightedmean_tokens": False,
                "pooling_mode_lasttoken": mode == "lasttoken",
                "include_prompt": True})
    for kernel, bias, activation in dense_layers:
        _write_st_dense(add("Dense", "Dense"), kernel, bias, activation)
    if normalize:
        os.makedirs(add("Normalize", "Normalize"))
    write_json(os.path.join(directory, "modules.json"), modules)
    model_config = {"prompts": dict(prompts or {}), "default_prompt_name": None,
                    "similarity_fn_name": "cosine"}
    if truncate_dim is not None:
        model_config["truncate_dim"] = int(truncate_dim)
    write_json(os.path.join(directory, ST_CONFIG_FILE), model_config)
    dim = dense_layers[-1][0].shape[1] if dense_layers else hidden
    return {"embedding_dim": int(truncate_dim or dim), "truncate_dim": truncate_dim,
            "modules": [m["type"].rsplit(".", 1)[1] for m in modules]}
