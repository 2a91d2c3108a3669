"""Code written against an earlier tfsent keeps working after issue 41's moves: every old
module name of `tfsent._moved.MOVED` imports as the new module itself, with one
FutureWarning; the old `tfsent.training` module's names import from the package; and a
`.keras` file saved before the move (its optimizer and schedule recorded under their old
modules) loads."""

import json
import os
import subprocess
import sys
import zipfile

import keras
import numpy as np
import pytest

from conftest import REPO, TINY_VOCAB
from tfsent.methods import SimCSE
from tfsent.testing import tiny_encoder
from tfsent.training import build_config, make_optimizer
from tfsent.training.optimizers import LARS
from tfsent.training.schedules import WarmupCosineDecay, WarmupLinearDecay

# In a fresh interpreter (nothing imported yet, so each import is a real one): for each old
# name, is it the new module, how many FutureWarnings did two imports give, and what said.
ALIAS_SCRIPT = r"""
import importlib, json, sys, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as at_import:
    warnings.simplefilter("always")
    import tfsent, tfsent.train
from tfsent._moved import MOVED
out = {"import tfsent": [str(w.message) for w in at_import
                         if issubclass(w.category, FutureWarning)], "names": {}}
for old, new in MOVED.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = importlib.import_module(old)
        again = importlib.import_module(old)
    out["names"][old] = {
        "same": first is again is importlib.import_module(new) is sys.modules[old],
        "warnings": [str(w.message) for w in caught if issubclass(w.category, FutureWarning)],
    }
json.dump(out, sys.stdout)
"""
# `import tfsent` then `tfsent.callbacks.X` (no import of tfsent.callbacks): the attribute.
ATTRIBUTE_SCRIPT = r"""
import json, sys, warnings
import tfsent
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cls = tfsent.callbacks.STSDevEvaluation
json.dump([cls.__module__, [str(w.message) for w in caught]], sys.stdout)
"""


def _python(script):
    r = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                       text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def test_old_module_names_are_the_new_modules_with_one_future_warning():
    out = _python(ALIAS_SCRIPT)
    assert out["import tfsent"] == []  # the package and its CLIs use the new names only
    from tfsent._moved import MOVED

    assert {"tfsent.callbacks", "tfsent.config", "tfsent.selection", "tfsent.optimizers",
            "tfsent.distribute", "tfsent.grad_cache"} <= set(out["names"])
    for old, new in MOVED.items():
        got = out["names"][old]
        assert got["same"], old
        assert len(got["warnings"]) == 1, (old, got["warnings"])
        assert f"{old} has moved to {new}" in got["warnings"][0]



def test_an_old_module_name_as_an_attribute_of_tfsent_resolves_through_the_alias():
    module, warned = _python(ATTRIBUTE_SCRIPT)
    assert module == "tfsent.training.callbacks"
    assert len(warned) == 1 and "tfsent.callbacks has moved to tfsent.training.callbacks" \
        in warned[0]


def test_the_old_training_module_names_import_from_the_package():
    from tfsent.training import (RunState, WarmupCosineDecay, WarmupLinearDecay,  # noqa: F401
                                 config_differences, dev_embeddings, prepare_run_dir,
                                 read_json, read_run_config, run, run_finished,
                                 sts_dev_score, write_projector_snapshot)

    assert callable(run)


def _with_old_modules(path, old_path):
    """Copies a .keras file, recording the optimizer and its schedule under the modules
    tfsent saved them from before issue 41 (tfsent.optimizers, tfsent.training)."""
    old_modules = {"LARS": "tfsent.optimizers", "WarmupLinearDecay": "tfsent.training",
                   "WarmupCosineDecay": "tfsent.training"}

    def rewrite(node):
        if isinstance(node, dict):
            if node.get("class_name") in old_modules and "module" in node:
                node["module"] = old_modules[node["class_name"]]
            for value in node.values():
                rewrite(value)
        elif isinstance(node, list):
            for value in node:
                rewrite(value)

    with zipfile.ZipFile(path) as src, zipfile.ZipFile(old_path, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                rewrite(config)
                data = json.dumps(config).encode("utf-8")
            dst.writestr(item, data)


@pytest.mark.parametrize("optimizer,lr_schedule,schedule_class", [
    ("adamw", "linear", WarmupLinearDecay),
    ("lars", "cosine", WarmupCosineDecay),
])
def test_keras_file_with_the_runs_optimizer_loads_after_the_move(tmp_path, optimizer,
                                                                 lr_schedule, schedule_class):
    """A model compiled with the run's optimizer (`make_optimizer`: AdamW or LARS on a
    warmup schedule), trained a step and saved, loads with its optimizer, schedule and
    step, also from a file that names the pre-move modules."""
    config = build_config({}, {"optimizer": optimizer, "lr_schedule": lr_schedule,
                               "warmup_ratio": 0.2, "learning_rate": 1e-3})
    model = SimCSE(tiny_encoder(TINY_VOCAB, max_seq_length=12, seed=1))
    model.compile(optimizer=make_optimizer(config, steps=10))
    model.fit(["a man plays a guitar", "the dog runs", "a cat sleeps", "a child reads"],
              batch_size=4, epochs=1, steps_per_epoch=1, verbose=0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    with zipfile.ZipFile(path) as z:
        saved = json.loads(z.read("config.json"))["compile_config"]["optimizer"]
    assert saved["config"]["learning_rate"]["registered_name"] == \
        f"tfsent>{schedule_class.__name__}"
    old_path = str(tmp_path / "old.keras")
    _with_old_modules(path, old_path)
    want = float(model.optimizer.learning_rate)
    for file in (path, old_path):
        loaded = keras.saving.load_model(file)
        assert isinstance(loaded.optimizer, LARS if optimizer == "lars" else
                          keras.optimizers.AdamW)
        schedule = loaded.optimizer._learning_rate
        assert isinstance(schedule, schedule_class), file
        assert schedule.get_config() == model.optimizer._learning_rate.get_config()
        assert int(loaded.optimizer.iterations.numpy()) == 1
        np.testing.assert_allclose(float(loaded.optimizer.learning_rate), want, rtol=1e-6)
