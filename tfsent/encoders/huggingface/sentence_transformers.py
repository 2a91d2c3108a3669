"""sentence-transformers model directories (modules.json): the Transformer module's
folder and the settings the other modules declare (Pooling, sentence_bert_config.json's
max_seq_length and do_lower_case, Normalize, a Dense that is the checkpoint's own pooler)."""

import os

import numpy as np
from safetensors.numpy import load_file

from tfsent.encoders.huggingface.config import read_json
from tfsent.errors import InputError

_ST_POOLING = {"pooling_mode_cls_token": "cls_before_pooler",
               "pooling_mode_mean_tokens": "mean", "pooling_mode_lasttoken": "last_token"}
_ST_OTHER_POOLING = ("pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                     "pooling_mode_weightedmean_tokens")
# config_sentence_transformers.json prompt names read as the query / document prompts.
_QUERY_PROMPTS = ("query",)
_DOCUMENT_PROMPTS = ("document", "passage", "corpus")


def read_sentence_transformers(directory):
    """Settings of a sentence-transformers model directory (modules.json):
    {"transformer_dir", "pooling" (a tfsent pooling, or None with "pooling_error"),
     "max_seq_length", "normalize", "do_lower_case", "dense_modules" (the folders of Dense
     modules after the Pooling one, in order)} (absent keys: not declared)."""
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
    return out


def read_prompts(directory):
    """{"query_prompt", "document_prompt"} from config_sentence_transformers.json's
    `prompts` (names `query`; `document`, `passage` or `corpus`), None when it names
    neither."""
    path = os.path.join(directory, "config_sentence_transformers.json")
    if not os.path.exists(path):
        return None
    prompts = read_json(path).get("prompts") or {}
    if not isinstance(prompts, dict):
        raise InputError("`prompts` is not an object of name -> text", path=path)

    def first(names):
        return next((str(prompts[n]) for n in names if prompts.get(n) is not None), "")

    found = {"query_prompt": first(_QUERY_PROMPTS), "document_prompt": first(_DOCUMENT_PROMPTS)}
    return found if any(found.values()) else None


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
