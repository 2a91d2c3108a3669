"""Module names that moved, and the import hook that keeps the old names working.

Issue 41 gave each stage a package (`tfsent.training`, `tfsent.formats`, `tfsent.search`,
...). Code written against an earlier tfsent (`import tfsent.callbacks`, `from
tfsent.saved_model import export_encoder`) still runs: the old name is an alias of the new
module (the same module object, so patches and `isinstance` agree) and the first import
under an old name logs one FutureWarning naming the new one. `MOVED` is the one table of
these names; `tests/test_architecture.py` reads it (an alias counts as an import of its
target) and checks that no code inside tfsent uses an old name.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# {old module name: new module name}. One section per stage; keep the sections apart.
MOVED = {
    # --- training (tfsent/training/) ---
    "tfsent.callbacks": "tfsent.training.callbacks",
    "tfsent.config": "tfsent.training.config",
    "tfsent.selection": "tfsent.training.selection",
    "tfsent.optimizers": "tfsent.training.optimizers",
    "tfsent.distribute": "tfsent.training.distribute",  # its gathers: tfsent.methods.replicas
    "tfsent.grad_cache": "tfsent.methods.grad_cache",

    # --- export formats (tfsent/formats/) ---
    "tfsent.saved_model": "tfsent.formats.saved_model",
    "tfsent.tf_serving": "tfsent.formats.tf_serving",
    "tfsent.quantize": "tfsent.formats.quantize",
    "tfsent.search_index": "tfsent.formats.search_index",
    "tfsent.publish": "tfsent.formats",
    "tfsent.publish.sentence_transformers": "tfsent.formats.sentence_transformers",
    "tfsent.publish.huggingface": "tfsent.formats.huggingface",
    "tfsent.publish.keras_hub_preset": "tfsent.formats.keras_hub_preset",
    "tfsent.publish.staging": "tfsent.formats.staging",

    # --- search and mining (tfsent/search/) ---
    # tfsent.search is the package itself (its __init__ re-exports top_k_cosine and
    # l2_normalize_rows, what the module gave); tfsent.mine stays the command.

    # --- data kinds and sources (tfsent/data/) ---
    # (new modules only: tfsent.data.kinds, tfsent.data.sources)

    # --- encoders and Hugging Face files (tfsent/encoders/) ---
    "tfsent.encoders.hf_format": "tfsent.encoders.huggingface",
}

_warned = set()


class _AliasLoader(importlib.abc.Loader):
    """Loads an old name as the module now at its new name."""

    def __init__(self, new_name):
        self.new_name = new_name

    def create_module(self, spec):
        module = importlib.import_module(self.new_name)
        self._real_spec = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self._real_spec  # the import system set the alias's spec


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Finds the names of `MOVED` (and nothing else)."""

    def find_spec(self, fullname, path=None, target=None):
        new_name = MOVED.get(fullname)
        if new_name is None:
            return None
        if fullname not in _warned:
            _warned.add(fullname)
            warnings.warn(f"{fullname} has moved to {new_name}; import it from there (the "
                          f"old name will be removed)", FutureWarning, stacklevel=3)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new_name))


def install():
    """Puts the alias finder first on `sys.meta_path`, once (tfsent/__init__.py calls it):
    an old name is the new module even where a stale copy of the old file is importable
    (another checkout's editable install, an old file left behind)."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
