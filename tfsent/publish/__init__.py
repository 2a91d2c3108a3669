"""Publishing an encoder to other ecosystems: sentence-transformers, Hugging Face
transformers and keras-hub directories, beside TF Serving's SavedModel (`tfsent.saved_model`).

    export_encoder_as(encoder, DIR, "sentence_transformers", head=None, pooling=None,
                      normalize=False)

Formats (`FORMATS`), one writer module each:
  saved_model            `tfsent.saved_model.export_encoder`: versioned SavedModels under DIR.
  sentence_transformers  `sentence_transformers.py`: `SentenceTransformer(DIR)` loads it
                         offline: the transformer in Hugging Face's layout at the top level,
                         then modules.json's Pooling, Dense (a `cls` pooler, a method's export
                         head) and Normalize (only with `normalize=True`) modules.
  huggingface            `huggingface.py`: the bare transformer (`AutoModel.from_pretrained(DIR)`
                         + its tokenizer), for users who pool themselves; `tfsent_export.json`
                         records the pooling and head it was trained with.
  keras_hub              `keras_hub_preset.py`: a keras-hub preset:
                         `keras_hub.models.Backbone.from_preset(DIR)`, the tokenizer, and a
                         `TextEmbedder` task where keras-hub has one for the family and it
                         expresses the pooling (BERT / XLM-R, `mean` or `cls_before_pooler`,
                         no head).

Every format but saved_model is written through `staging.staged_dir` (`tfsent.fsio`): into
a staging folder beside DIR, renamed into place when complete; an existing non-empty DIR is
refused before anything is written. A format that cannot express the embedding (a pooling, a head
layer, an activation) is refused with an error that says what it can express: nothing is
written that embeds differently.

Weight names are the inverse of keras-hub's Hugging Face converters
(keras_hub/src/utils/transformers/convert_{bert,roberta,xlm_roberta,distilbert}.py): the
weight maps are data in `tfsent.encoders.families.TABLE`, turned into tensors by
`tfsent.encoders.hf_format.hf_state_dict`. Names carry the base-model prefix (`bert.`,
`roberta.`, `distilbert.`), as hub checkpoints of *ForMaskedLM do: transformers strips it when
loading a base model, and keras-hub's RoBERTa / DistilBERT converters need it.
"""

import os

from absl import logging

from tfsent.encoders import check_pooling
from tfsent.encoders.families import FAMILIES
from tfsent.encoders.hf_format import checked_family, hf_config, hf_state_dict
from tfsent.errors import ConfigError
from tfsent.formats import onnx as onnx_format
from tfsent.saved_model import export_encoder
from tfsent.publish import huggingface, keras_hub_preset, sentence_transformers
from tfsent.publish.huggingface import (tokenizer_kind, wordpiece_tokenizer_json,
                                        write_hf_model, write_tokenizer_files)
from tfsent.publish.sentence_transformers import (ST_ACTIVATIONS, ST_POOLINGS,
                                                  check_sentence_transformers_pooling,
                                                  dense_stack)
from tfsent.publish.staging import check_export_target, staged_dir, write_json

FORMATS = ("saved_model", "sentence_transformers", "huggingface", "keras_hub")
ONNX_SUBDIR = "onnx"  # where sentence-transformers' ONNX backend looks
# Poolings whose sentence-transformers modules need only the last hidden state (the others'
# WeightedLayerPooling needs every layer's, which the ONNX backend does not return).
ONNX_ST_POOLINGS = ("mean", "cls", "cls_before_pooler")
EXPORT_INFO_FILE = "tfsent_export.json"

__all__ = ["FORMATS", "EXPORT_INFO_FILE", "FAMILIES", "export_encoder_as", "export_formats",
           "check_onnx_files", "ONNX_SUBDIR", "ONNX_ST_POOLINGS",
           "export_run_formats", "check_export_target", "check_sentence_transformers_pooling",
           "dense_stack", "ST_POOLINGS", "ST_ACTIVATIONS", "write_hf_model",
           "write_tokenizer_files", "wordpiece_tokenizer_json", "hf_state_dict", "hf_config"]


def export_encoder_as(encoder, directory, format="sentence_transformers", head=None,
                      pooling=None, normalize=False, max_seq_length=None, metadata=None,
                      query_prompt="", document_prompt="", onnx=False):
    """Writes `encoder` (+ `head`, a layer on the pooled embedding, e.g. a method's
    `export_head`) in `format` (one of FORMATS) to `directory`; returns the path written.

    Args:
        encoder: a `tfsent.encoders.SentenceEncoder`.
        directory: target directory; must not exist or be empty (saved_model: the
            directory of versioned SavedModels, as `tfsent.saved_model.export_encoder`).
        format: saved_model | sentence_transformers | huggingface | keras_hub.
        head: layer applied to the pooled embedding (sentence_transformers: Dense modules).
        pooling: the embedding's pooling (default: the encoder's).
        normalize: L2-normalise the embedding (a Normalize module; keras-hub's TextEmbedder
            `normalize`; recorded for the others).
        max_seq_length: truncation length, special tokens included (default: the
            tokenizer's, clamped to the position table).
        metadata: extra entries for tfsent_export.json (e.g. method, step).
        query_prompt, document_prompt: text put before queries / documents (retrieval):
            the SavedModel's `encode_query` / `encode_document` signatures, the
            sentence-transformers `prompts` ("query", "document") that its
            `encode_query` / `encode_document` apply; recorded in tfsent_export.json.
        onnx: sentence_transformers only: also write onnx/model.onnx and
            onnx/model_qint8_avx512_vnni.onnx (`tfsent.formats.onnx`, the tfsent[onnx]
            extra), where `SentenceTransformer(DIR, backend="onnx", model_kwargs={"file_name":
            ...})` finds them (~2x the checkpoint's size on disk; off by default).
    """
    prompts = {name: text for name, text in (("query", query_prompt),
                                             ("document", document_prompt)) if text}
    if format not in FORMATS:
        raise ConfigError(f"--format={format!r} is not a format; choose one of "
                          f"{', '.join(FORMATS)}")
    pooling = check_pooling(pooling or encoder.pooling)
    if format == "saved_model":
        meta = dict(metadata or {}, normalize=bool(normalize))
        return export_encoder(encoder, directory, pooling=pooling, metadata=meta,
                              max_seq_length=max_seq_length, head=head,
                              query_prompt=query_prompt, document_prompt=document_prompt)
    if encoder.tokenizer is None:
        raise ConfigError("cannot export an encoder without a tokenizer")
    family = checked_family(encoder.backbone)  # refuses unknown backbones before writing
    tokenizer_kind(encoder.tokenizer)
    directory = check_export_target(directory)
    length = encoder.clamp_length(max_seq_length)
    if head is not None and format in ("huggingface", "keras_hub"):
        raise ConfigError(f"format {format} cannot carry the export head (a layer on the "
                          "pooled embedding, e.g. CLSR's MLP); use --format="
                          "sentence_transformers (Dense modules) or saved_model")
    if format == "sentence_transformers":  # fail fast, before the temporary directory
        sentence_transformers.check(pooling, head)
    if onnx:
        check_onnx_files(format, pooling)
    with staged_dir(directory, f"{format} export") as tmp:
        if format == "sentence_transformers":
            details = sentence_transformers.write(encoder, tmp, pooling, head, normalize,
                                                  length, prompts)
            if onnx:
                os.makedirs(os.path.join(tmp, ONNX_SUBDIR))
                details["onnx_files"] = [f"{ONNX_SUBDIR}/{name}" for name in
                                         onnx_format.write_onnx_files(
                                             encoder, os.path.join(tmp, ONNX_SUBDIR), pooling,
                                             head, quantize=("int8",))]
        elif format == "huggingface":
            details = huggingface.write(encoder, tmp, length)
        else:
            details = keras_hub_preset.write(encoder, tmp, pooling, normalize, length)
        info = {"format": format, "family": family, "pooling": pooling,
                "normalize": bool(normalize), "max_seq_length": int(length),
                "activation": encoder.activation,
                "head": None if head is None else type(head).__name__, "prompts": prompts,
                **details}
        info.update(metadata or {})
        write_json(os.path.join(tmp, EXPORT_INFO_FILE), info)
    logging.info("exported a %s encoder as %s to %s", family, format, directory)
    return directory


def check_onnx_files(format, pooling):
    """ConfigError (before any work) unless the ONNX files can go with this export."""
    if format != "sentence_transformers":
        raise ConfigError(f"the ONNX files go into a sentence_transformers export, not "
                          f"{format} (for ONNX Runtime alone use --format=onnx)")
    if pooling not in ONNX_ST_POOLINGS:
        raise ConfigError(f"--pooling={pooling}: sentence-transformers' ONNX backend gives its "
                          "modules the last hidden state only; the ONNX files go with "
                          f"{', '.join(ONNX_ST_POOLINGS)}")
    onnx_format.require_onnx()


def export_formats(spec):
    """Parses a comma-separated format list (`--config.export_formats`); ConfigError names
    an unknown format."""
    names = [s.strip() for s in str(spec).split(",") if s.strip()]
    for name in names:
        if name not in FORMATS:
            raise ConfigError(f"export_formats: {name!r} is not a format; choose from "
                              f"{', '.join(FORMATS)}")
    return names


def export_run_formats(encoder, output_dir, formats, pooling=None, head=None,
                       max_seq_length=None, metadata=None, query_prompt="",
                       document_prompt=""):
    """The training CLI's exports besides its SavedModel: every format named in `formats`
    (`--config.export_formats`) other than saved_model, each to
    OUTPUT_DIR/export_<format>/<version> (the next integer, as SavedModel versions), so a
    second run into the same directory adds a version. Returns {format: path}."""
    paths = {}
    for name in export_formats(formats):
        if name == "saved_model":
            continue
        parent = os.path.join(output_dir, f"export_{name}")
        versions = [int(v) for v in os.listdir(parent) if v.isdigit()] if os.path.isdir(
            parent) else []
        target = os.path.join(parent, str(max(versions, default=0) + 1))
        paths[name] = export_encoder_as(encoder, target, name, head=head, pooling=pooling,
                                        max_seq_length=max_seq_length, metadata=metadata,
                                        query_prompt=query_prompt,
                                        document_prompt=document_prompt)
    return paths
