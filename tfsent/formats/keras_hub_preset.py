"""The keras-hub format: a preset that `keras_hub.models.Backbone.from_preset(DIR)` loads,
with the family's tokenizer and, where keras-hub has a `TextEmbedder` task for the family
that expresses the encoder, the task (`keras_hub.models.TextEmbedder.from_preset(DIR)`):

  BERT / XLM-R (BertTextEmbedder, ...)   pooling `mean` or `cls_before_pooler`
  qwen3 (Qwen3TextEmbedder)               pooling `last_token` or `mean`
  gemma3 (Gemma3TextEmbedder)             pooling `last_token` or `mean`; EmbeddingGemma's
                                          Dense head (two bias-free linear Dense layers
                                          after mean pooling) as keras-hub's embedding-model
                                          backbone (`is_embedding_model=True`, always
                                          L2-normalised)

Anything else (another pooling, another head) is written as the backbone and the
tokenizer, and tfsent_export.json says why there is no task. What keras-hub's own
preprocessors do differently from tfsent's tokenizers (Qwen3's end token): docs/families.md
("Publishing qwen3 and gemma3: LiteRT and keras-hub presets").
"""

import keras
from absl import logging

import tfsent.encoders.families as families
import tfsent.encoders.keras_hub_adapter as kh
from tfsent.encoders.huggingface import HF_ACTIVATIONS
from tfsent.encoders.huggingface.writing import tokenizer_kind
from tfsent.formats.huggingface import check_new_export, prompt_map, write_new_export
from tfsent.formats.metadata import encoder_prompts

# tfsent pooling -> the `pooling_mode` of each keras-hub TextEmbedder class.
_BERT_LIKE = {"mean": "mean", "cls_before_pooler": "cls"}
_DECODER = {"mean": "mean", "last_token": "last"}
EMBEDDER_POOLINGS = {"BertTextEmbedder": _BERT_LIKE, "XLMRobertaTextEmbedder": _BERT_LIKE,
                     "Qwen3TextEmbedder": _DECODER, "Gemma3TextEmbedder": _DECODER}


def _keras_hub_tokenizer(tokenizer, family):
    kind = tokenizer_kind(tokenizer)
    cls = kh.tokenizer_class(family)
    if kind == "wordpiece":
        return cls(vocabulary=list(tokenizer.vocabulary), lowercase=bool(tokenizer.lowercase),
                   strip_accents=bool(tokenizer.strip_accents))
    if kind in ("byte_bpe", "qwen_bpe"):
        return cls(vocabulary=dict(tokenizer.vocabulary), merges=list(tokenizer.merges))
    return kh.sentencepiece_tokenizer(family, bytes(tokenizer.model))


def export_keras_hub(encoder, directory, pooling=None, normalize=None, max_seq_length=None,
                     metadata=None, query_prompt=None, document_prompt=None):
    """Writes the keras_hub format to the new `directory`; returns it. `normalize` is the
    TextEmbedder's (None: the encoder's own). The prompts (None: the encoder's own) are
    recorded in tfsent_export.json (a preset has no place for them)."""
    directory, pooling, length = check_new_export(encoder, directory, pooling, max_seq_length)
    prompts = prompt_map(*encoder_prompts(encoder, query_prompt, document_prompt))
    normalize = encoder.normalize if normalize is None else bool(normalize)

    def write_files(folder):
        return {"normalize": normalize, "activation": encoder.activation,
                "prompts": prompts, **write(encoder, folder, pooling, normalize, length)}

    return write_new_export(directory, "keras_hub", encoder, pooling, length, None,
                            write_files, metadata)


def _head_kernels(head):
    """The kernels of a `DenseHead` that keras-hub's embedding model can hold (two Dense
    layers, no bias, no activation), else a sentence saying why not."""
    shape = [(m["units"], m["use_bias"], m["activation"]) for m in head.modules]
    if len(shape) != 2 or any(bias or activation for _, bias, activation in shape):
        return (f"keras-hub's embedding head is two Dense layers without bias or "
                f"activation; this encoder's Dense head is {shape} (units, bias, "
                "activation)")
    return [keras.ops.convert_to_numpy(layer.kernel) for layer in head.dense]


def _task_plan(encoder, pooling):
    """(the family's TextEmbedder name or None, the reason there is no TextEmbedder task or
    None, the embedding head's kernels or None)."""
    family = encoder.family
    embedder = families.TABLE[family].keras_hub_text_embedder
    if embedder is None:
        return None, f"keras-hub has no TextEmbedder for {family}", None
    modes = EMBEDDER_POOLINGS[embedder]
    if pooling not in modes:
        return embedder, (f"keras-hub's {embedder} cannot pool {pooling!r} (it expresses "
                          f"{', '.join(modes)})"), None
    head = encoder.dense_head
    if head is None:
        return embedder, None, None
    if not kh.builds_embedding_head(encoder.backbone):
        return embedder, (f"keras-hub's {embedder} has no place for a Dense head after "
                          "pooling"), None
    if pooling != "mean":
        return embedder, f"keras-hub's embedding head follows mean pooling, not {pooling!r}", None
    kernels_or_reason = _head_kernels(head)
    if isinstance(kernels_or_reason, str):
        return embedder, kernels_or_reason, None
    return embedder, None, kernels_or_reason


def write(encoder, directory, pooling, normalize, max_seq_length):
    """The keras_hub files into the existing `directory`; returns the details
    `tfsent_export.json` records."""
    backbone = encoder.backbone
    family = encoder.family
    native = families.TABLE[family].activation
    if encoder.activation != native and \
            HF_ACTIVATIONS.get(encoder.activation) != HF_ACTIVATIONS.get(native):
        logging.warning("keras-hub's %s runs %s in its feed-forward layers; this encoder was "
                        "trained with %s, so keras-hub's outputs differ slightly from tfsent's "
                        "(see the README's 'Export and serve' for the measured difference)",
                        type(backbone).__name__, native, encoder.activation)
    tokenizer = _keras_hub_tokenizer(encoder.tokenizer, family)
    embedder, reason, kernels = _task_plan(encoder, pooling)
    if reason is None:
        if kernels is not None:
            backbone = kh.embedding_model_backbone(backbone, kernels)
            if not normalize:
                logging.info("keras-hub's embedding model L2-normalises its output always: "
                             "the preset's embeddings are normalised (same directions)")
        cls = kh.text_embedder_class(family)
        preprocessor = cls.preprocessor_cls(tokenizer, sequence_length=int(max_seq_length))
        task = cls(backbone, preprocessor=preprocessor,
                   pooling_mode=EMBEDDER_POOLINGS[embedder][pooling], normalize=bool(normalize))
        task.save_to_preset(directory)
    else:
        logging.info("keras_hub export without a TextEmbedder task: %s (the backbone and the "
                     "tokenizer are written)", reason)
        backbone.save_to_preset(directory)
        tokenizer.save_to_preset(directory)
    return {"text_embedder": embedder if reason is None else None,
            "text_embedder_missing_because": reason,
            "embedding_head_in_backbone": kernels is not None,
            # keras-hub's embedding model normalises always
            "normalize": bool(normalize) or kernels is not None,
            "keras_hub_activation": native}
