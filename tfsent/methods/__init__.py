"""Training objectives as Keras models, and the registry behind `--method`.

Each method module declares its `MethodSpec`(s) next to its class (`SPEC` or `SPECS`):
the class, its data kind, its config fields and the constructor arguments they feed, its
CPU-demo defaults and validation. This module only collects them.
"""

from tfsent.errors import ConfigError, did_you_mean
from tfsent.methods import (clsr, cmlm_cse, consert, cross_encoder, distill, scd,
                            scored_pairs, simcse, supcon)
from tfsent.methods.base import SentenceMethod
from tfsent.methods.clsr import CLSR
from tfsent.methods.cmlm_cse import CMLMCSE
from tfsent.methods.consert import ConSERT
from tfsent.methods.cross_encoder import CrossEncoder
from tfsent.methods.distill import Distill
from tfsent.methods.scd import SCD
from tfsent.methods.scored_pairs import ScoredPairs
from tfsent.methods.simcse import RetrievalSimCSE, SimCSE
from tfsent.methods.spec import MethodSpec, collect
from tfsent.methods.supcon import SupConSBERT

__all__ = ["SentenceMethod", "SimCSE", "RetrievalSimCSE", "CMLMCSE", "CLSR", "SupConSBERT",
           "SCD", "ConSERT", "Distill", "CrossEncoder", "ScoredPairs", "MethodSpec",
           "REGISTRY", "get_method", "help_text"]

REGISTRY = collect(simcse.SPECS, cmlm_cse.SPEC, supcon.SPEC, clsr.SPEC, scd.SPEC,
                   consert.SPECS, distill.SPEC, cross_encoder.SPEC, scored_pairs.SPEC)


def get_method(name):
    """The registry entry for `name`, or a ConfigError listing the valid names."""
    if name not in REGISTRY:
        raise ConfigError(f"unknown method {name!r}{did_you_mean(name, REGISTRY)}; choose one "
                          f"of {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def help_text():
    """Every method with its doc line and its own config fields (the `--method` flag's
    help; `tfsent.training.config.help_text` describes each field)."""
    lines = ["Objective, one of:"]
    for spec in REGISTRY.values():
        lines.append(f"  {spec.help_line()} [fields: "
                     f"{', '.join(f.name for f in spec.fields)}]")
    return "\n".join(lines)
