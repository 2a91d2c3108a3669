"""The keras-hub format: a preset that `keras_hub.models.Backbone.from_preset(DIR)` loads,
with the family's tokenizer and, where keras-hub has a `TextEmbedder` task for the family
and it expresses the pooling (BERT / XLM-R, `mean` or `cls_before_pooler`, no head), the
task (`keras_hub.models.TextEmbedder.from_preset(DIR)`)."""

from absl import logging

import tfsent.encoders.families as families
import tfsent.encoders.keras_hub_adapter as kh
from tfsent.encoders.huggingface import HF_ACTIVATIONS
from tfsent.encoders.huggingface.writing import tokenizer_kind
from tfsent.formats.huggingface import check_new_export, prompt_map, write_new_export

# tfsent pooling -> keras-hub TextEmbedder's pooling_mode.
KERAS_HUB_EMBEDDER_POOLINGS = {"mean": "mean", "cls_before_pooler": "cls"}


def _keras_hub_tokenizer(tokenizer, family):
    kind = tokenizer_kind(tokenizer)
    cls = kh.tokenizer_class(family)
    if kind == "wordpiece":
        return cls(vocabulary=list(tokenizer.vocabulary), lowercase=bool(tokenizer.lowercase),
                   strip_accents=bool(tokenizer.strip_accents))
    if kind == "byte_bpe":
        return cls(vocabulary=dict(tokenizer.vocabulary), merges=list(tokenizer.merges))
    return cls(proto=bytes(tokenizer.model))


def export_keras_hub(encoder, directory, pooling=None, normalize=False, max_seq_length=None,
                     metadata=None, query_prompt="", document_prompt=""):
    """Writes the keras_hub format to the new `directory`; returns it. The prompts are
    recorded in tfsent_export.json (a preset has no place for them)."""
    directory, pooling, length = check_new_export(encoder, directory, pooling, max_seq_length)
    prompts = prompt_map(query_prompt, document_prompt)

    def write_files(folder):
        return {"normalize": bool(normalize), "activation": encoder.activation,
                "prompts": prompts, **write(encoder, folder, pooling, normalize, length)}

    return write_new_export(directory, "keras_hub", encoder, pooling, length, None,
                            write_files, metadata)


def write(encoder, directory, pooling, normalize, max_seq_length):
    """The keras_hub files into the existing `directory`; returns the details
    `tfsent_export.json` records."""
    backbone = encoder.backbone
    family = encoder.family
    native = families.TABLE[family].activation
    if HF_ACTIVATIONS.get(encoder.activation) != HF_ACTIVATIONS[native]:
        logging.warning("keras-hub's %s runs %s in its feed-forward layers; this encoder was "
                        "trained with %s, so keras-hub's outputs differ slightly from tfsent's "
                        "(see the README's 'Export and serve' for the measured difference)",
                        type(backbone).__name__, native, encoder.activation)
    tokenizer = _keras_hub_tokenizer(encoder.tokenizer, family)
    embedder = families.TABLE[family].keras_hub_text_embedder
    reason = None
    if embedder is None:
        reason = f"keras-hub has no TextEmbedder for {family}"
    elif pooling not in KERAS_HUB_EMBEDDER_POOLINGS:
        reason = (f"keras-hub's TextEmbedder cannot pool {pooling!r} (it expresses "
                  f"{', '.join(KERAS_HUB_EMBEDDER_POOLINGS)})")
    if reason is None:
        cls = kh.text_embedder_class(family)
        preprocessor = cls.preprocessor_cls(tokenizer, sequence_length=int(max_seq_length))
        task = cls(backbone, preprocessor=preprocessor,
                   pooling_mode=KERAS_HUB_EMBEDDER_POOLINGS[pooling], normalize=bool(normalize))
        task.save_to_preset(directory)
    else:
        logging.info("keras_hub export without a TextEmbedder task: %s (the backbone and the "
                     "tokenizer are written)", reason)
        backbone.save_to_preset(directory)
        tokenizer.save_to_preset(directory)
    return {"text_embedder": embedder if reason is None else None,
            "text_embedder_missing_because": reason,
            "keras_hub_activation": native}
