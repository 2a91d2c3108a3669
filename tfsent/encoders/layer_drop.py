"""Smaller students cut from an encoder: keep some of its transformer layers.

    keep_layers(encoder, (0, 2, 4)) -> a SentenceEncoder whose backbone is a real keras-hub
                                       backbone of the same family with 3 layers
    parse_layers("0,2,4", num_layers) -> (0, 2, 4), or a ConfigError
    describe_encoder(name) -> {"family", "num_layers", "hidden_dim"} read from the model's
                              files without building it (None when only loading can tell)

The student's embeddings (token, position, segment, their LayerNorm), BERT's pooler and each
kept layer are copies of the encoder's; the tokenizer is the encoder's. Being an ordinary
backbone, the student saves, exports, publishes and serves like any encoder
(DistilBERT's students were initialised this way: every other layer of the teacher).
"""

import json
import os

import tfsent.encoders.families as families
import tfsent.encoders.huggingface as huggingface
import tfsent.encoders.keras_hub_adapter as kh
from tfsent.encoders.encoder_dir import ENCODER_CONFIG_FILE, backbone_config
from tfsent.encoders.loading import SHORT_NAMES, resolve_short_name
from tfsent.encoders.model import SentenceEncoder
from tfsent.errors import ConfigError


def parse_layers(value, num_layers=None, field="student_layers"):
    """The kept layer indices of "0,2,4" (or a list of ints): strictly increasing, each in
    [0, num_layers) when `num_layers` is known. ConfigError naming `field` otherwise."""
    if isinstance(value, str):
        items = [p.strip() for p in value.split(",")]
        try:
            layers = [int(p) for p in items]
        except ValueError:
            raise ConfigError(f"{field}={value!r}: expected comma-separated layer indices "
                              "such as 0,2,4") from None
    else:
        layers = [int(v) for v in value]
    if not layers:
        raise ConfigError(f"{field}: no layers given")
    repeated = sorted({i for i in layers if layers.count(i) > 1})
    if repeated:
        raise ConfigError(f"{field}={value!r}: layer {repeated[0]} is given twice; each "
                          "layer is kept at most once")
    if layers != sorted(layers):
        raise ConfigError(f"{field}={value!r}: layers must be in increasing order (the "
                          f"student runs them in the teacher's order), e.g. "
                          f"{','.join(map(str, sorted(layers)))}")
    if layers[0] < 0 or (num_layers is not None and layers[-1] >= num_layers):
        bad = layers[0] if layers[0] < 0 else layers[-1]
        known = f" of 0..{num_layers - 1} (the model has {num_layers})" \
            if num_layers is not None else " >= 0"
        raise ConfigError(f"{field}={value!r}: layer {bad} is out of range; indices are "
                          f"layers{known}; an empty {field} keeps every layer")
    return tuple(layers)


def keep_layers(encoder, layers):
    """A new SentenceEncoder: `encoder` with only its transformer `layers` (indices, in
    order), weights copied (not shared), same tokenizer, pooling, activation,
    normalisation and `truncate_dim`; the MLM head is left out (it was trained on the last
    layer)."""
    encoder.require_own_forward("a student cut from some of the layers")
    layers = parse_layers(layers, encoder.num_layers)
    source = encoder.backbone
    config = dict(backbone_config(source), num_layers=len(layers))
    student = kh.make_backbone(encoder.family, config, source.dtype_policy.name)
    kept_source = [source.transformer_layers[i] for i in layers]
    for target, origin in zip(student.transformer_layers, kept_source):
        target.set_weights(origin.get_weights())
    # Everything outside the transformer stack (embeddings, their LayerNorm, the pooler)
    # comes in the same order in both backbones.
    in_blocks = {id(v) for layer in source.transformer_layers for v in layer.weights}
    in_student_blocks = {id(v) for layer in student.transformer_layers for v in layer.weights}
    rest_source = [v for v in source.weights if id(v) not in in_blocks]
    rest_student = [v for v in student.weights if id(v) not in in_student_blocks]
    if [tuple(v.shape) for v in rest_source] != [tuple(v.shape) for v in rest_student]:
        raise ConfigError(f"cannot cut layers from this {encoder.family} backbone: its "
                          "non-transformer weights do not line up with a fresh backbone's")
    for target, origin in zip(rest_student, rest_source):
        target.assign(origin)
    return SentenceEncoder(student, encoder.tokenizer, encoder.pooling, encoder.activation,
                           encoder.seed, normalize=encoder.normalize,
                           truncate_dim=getattr(encoder, "truncate_dim", None))


def _read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def describe_encoder(name):
    """{"family", "num_layers", "hidden_dim"} of an encoder from its files alone (a tfsent
    encoder directory, a Hugging Face or sentence-transformers directory, `minilm-l6`), or
    None when only loading can tell (a keras-hub preset name, an unknown layout). Used to
    refuse bad settings before any model is loaded; `load_encoder` checks everything
    else."""
    try:
        path = resolve_short_name(name) if name in SHORT_NAMES else name
    except ConfigError:  # the package is missing: loading says how to install it
        return None
    if not os.path.isdir(path):
        return None
    meta_path = os.path.join(path, ENCODER_CONFIG_FILE)
    if os.path.exists(meta_path):
        meta = _read_json(meta_path)
        bb = meta.get("backbone_config", {})
        if "num_layers" in bb and "hidden_dim" in bb:
            return {"family": meta.get("family", families.UNRECORDED_FAMILY),
                    "num_layers": bb["num_layers"], "hidden_dim": bb["hidden_dim"]}
        return None
    if os.path.exists(os.path.join(path, "modules.json")):
        path = huggingface.read_sentence_transformers(path)["transformer_dir"]
    config_path = os.path.join(path, "config.json")
    if not os.path.exists(config_path):
        return None
    config = _read_json(config_path)
    if not isinstance(config, dict) or "model_type" not in config:
        return None  # a keras-hub preset directory: loading reads it
    family, config = huggingface.read_hf_config(path)
    if not families.TABLE[family].runs_own_forward:
        # keras-hub's converter reads these folders (qwen3, gemma3): decoder config.json
        # names, no tfsent weight map
        if "num_hidden_layers" not in config or "hidden_size" not in config:
            return None  # loading reports what is missing
        return {"family": family, "num_layers": int(config["num_hidden_layers"]),
                "hidden_dim": int(config["hidden_size"])}
    bb, _ = huggingface.backbone_config(family, config, config_path)
    return {"family": family, "num_layers": bb["num_layers"], "hidden_dim": bb["hidden_dim"]}
