"""sentence-transformers model directories (modules.json): the Transformer module's
folder and the settings the other modules declare (Pooling, sentence_bert_config.json's
max_seq_length and do_lower_case, Normalize, a Dense that is the checkpoint's own pooler) and
config_sentence_transformers.json's prompts and `truncate_dim`."""

import os

import numpy as np
from safetensors.numpy import load_file

from tfsent.encoders.huggingface.config import read_json
from tfsent.errors import InputError

_ST_POOLING = {"pooling_mode_cls_token": "cls_before_pooler",
               "pooling_mode_mean_tokens": "mean", "pooling_mode_lasttoken": "last_token"}
_ST_OTHER_POOLING = ("pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                     "pooling_mode_weightedmean_tokens")
# The model-level settings of a sentence-transformers folder (prompts, truncate_dim).
ST_CONFIG_FILE = "config_sentence_transformers.json"
# config_sentence_transformers.json prompt names read as the query / document prompts.
_QUERY_PROMPTS = ("query",)
_DOCUMENT_PROMPTS = ("document", "passage", "corpus")


def read_sentence_transformers(directory):
    """Settings of a sentence-transformers model directory (modules.json):
    {"transformer_dir", "pooling" (a tfsent pooling, or None with "pooling_error"),
     "max_seq_length", "normalize", "do_lower_case", "dense_modules" (the folders of Dense
     modules after the Pooling one, in order), "prompts" (`read_prompts`), "default_prompt"
     (`read_default_prompt`), "truncate_dim" (`read_truncate_dim`)} (absent keys: not declared)."""
    path = os.path.join(directory, "modules.json")
    modules = read_json(path)
    if not isinstance(modules, list) or not modules:
        raise InputError("expected a list of modules", path=path)
    out = {"normalize": False}
    for module in sorted(modules, key=lambda m: m.get("idx", 0)):
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        sub = os.path.join(directory, module.get("path", ""))
        if kind == "Transformer":
            out["transformer_dir"] = sub
            config = os.path.join(sub, "sentence_bert_config.json")
            if os.path.exists(config):
                st = read_json(config)
                if st.get("max_seq_length") is not None:
                    out["max_seq_length"] = int(st["max_seq_length"])
                out["do_lower_case"] = bool(st.get("do_lower_case", False))
        elif kind == "Pooling":
            config_path = os.path.join(sub, "config.json")
            config = read_json(config_path)
            modes = [k for k in (*_ST_POOLING, *_ST_OTHER_POOLING) if config.get(k)]
            if len(modes) == 1 and modes[0] in _ST_POOLING:
                out["pooling"] = _ST_POOLING[modes[0]]
            else:
                out["pooling"] = None
                out["pooling_error"] = InputError(
                    f"pooling {' + '.join(modes) or 'none'} is not supported (tfsent runs "
                    "CLS, mean or last-token pooling); pass pooling= to override it",
                    path=config_path)
        elif kind == "Normalize":
            out["normalize"] = True
        elif kind == "Dense" and _is_pooler_dense(sub, out):
            out["pooling"] = "cls"  # CLS token + the checkpoint's own pooler: tfsent's `cls`
        elif kind == "Dense" and "pooling" in out and not out["normalize"]:
            # A head after pooling (EmbeddingGemma's); the loader runs it for families that
            # have a `dense_head` (`encoders.dense_head`) and refuses it for the others.
            out.setdefault("dense_modules", []).append(sub)
        else:
            raise InputError(f"module {module.get('type')!r} is not supported (tfsent runs "
                             "Transformer, Pooling and Normalize modules, and a Dense module "
                             "that is the checkpoint's own BERT pooler after CLS pooling)",
                             path=path)
    if "transformer_dir" not in out:
        raise InputError("no sentence_transformers.models.Transformer module", path=path)
    out["prompts"] = read_prompts(directory)
    out["default_prompt"] = read_default_prompt(directory)
    out["truncate_dim"] = read_truncate_dim(directory)
    return out


def _model_config(directory):
    """(path, contents) of config_sentence_transformers.json; contents None when absent."""
    path = os.path.join(directory, ST_CONFIG_FILE)
    if not os.path.exists(path):
        return path, None
    config = read_json(path)
    if not isinstance(config, dict):
        raise InputError("expected a JSON object", path=path)
    return path, config


def read_truncate_dim(directory):
    """config_sentence_transformers.json's `truncate_dim` (what sentence-transformers'
    `encode` cuts its embeddings to by default), or None when absent or null. InputError
    naming the file unless it is a positive integer (its upper bound, the embedding size,
    is `check_truncate_dim`'s, once the encoder is built)."""
    path, config = _model_config(directory)
    value = (config or {}).get("truncate_dim")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"truncate_dim {value!r} is not a positive integer (the number of "
                         "leading embedding dimensions encode keeps)", path=path)
    return value


def check_truncate_dim(truncate_dim, embedding_dim, path):
    """InputError naming `path` when a folder's `truncate_dim` is not 1..embedding_dim."""
    if truncate_dim is None:
        return None
    if isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int) \
            or not 1 <= truncate_dim <= embedding_dim:
        raise InputError(f"truncate_dim {truncate_dim!r} is not a size of this model's "
                         f"{embedding_dim}-dimensional embedding (1..{embedding_dim})",
                         path=path)
    return truncate_dim


def read_prompts(directory):
    """{"query_prompt", "document_prompt"} from config_sentence_transformers.json's
    `prompts` (names `query`; `document`, `passage` or `corpus`), None when it names
    neither."""
    path, config = _model_config(directory)
    if config is None:
        return None
    prompts = config.get("prompts") or {}
    if not isinstance(prompts, dict):
        raise InputError("`prompts` is not an object of name -> text", path=path)

    def first(names):
        return next((str(prompts[n]) for n in names if prompts.get(n) is not None), "")

    found = {"query_prompt": first(_QUERY_PROMPTS), "document_prompt": first(_DOCUMENT_PROMPTS)}
    return found if any(found.values()) else None


def read_default_prompt(directory):
    """(name, text) of config_sentence_transformers.json's `default_prompt_name` (the prompt
    sentence-transformers' `encode` prepends when given none), or None when unset.
    InputError naming the file when it names no entry of `prompts`."""
    path, config = _model_config(directory)
    name = (config or {}).get("default_prompt_name")
    if name is None:
        return None
    prompts = config.get("prompts") or {}
    if not isinstance(prompts, dict) or name not in prompts:
        raise InputError(f"default_prompt_name {name!r} is not one of its prompts "
                         f"({', '.join(map(repr, prompts)) or 'none'})", path=path)
    return str(name), str(prompts[name])


def _is_pooler_dense(module_dir, settings):
    """True when a sentence-transformers Dense module (after CLS-token pooling) is exactly
    the transformer's pooler: tanh, square, and the same weights as `pooler.dense.*` of the
    checkpoint (what tfsent's own export writes for `cls` pooling). Anything else is a head
    tfsent's encoder does not run, so the caller refuses it."""
    if settings.get("pooling") != "cls_before_pooler" or "transformer_dir" not in settings:
        return False
    config = read_json(os.path.join(module_dir, "config.json"))
    if not str(config.get("activation_function", "")).endswith("Tanh"):
        return False
    dense_path = os.path.join(module_dir, "model.safetensors")
    model_path = os.path.join(settings["transformer_dir"], "model.safetensors")
    if not (os.path.exists(dense_path) and os.path.exists(model_path)):
        return False
    dense = load_file(dense_path)
    model = load_file(model_path)
    pooler = {name.rsplit("pooler.dense.", 1)[1]: value for name, value in model.items()
              if "pooler.dense." in name}
    return (set(pooler) == {"weight", "bias"} and "linear.weight" in dense
            and dense["linear.weight"].shape == pooler["weight"].shape
            and np.array_equal(dense["linear.weight"], pooler["weight"])
            and np.array_equal(dense.get("linear.bias"), pooler["bias"]))
