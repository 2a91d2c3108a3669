"""Run configs: recipe files, overrides, validation, LR schedule."""

import glob
import os
import re

import numpy as np
import pytest

from conftest import REPO
from tfsent.config import build_config, load_recipe
from tfsent.errors import ConfigError
from tfsent.methods import REGISTRY, get_method
from tfsent.train import split_config_overrides
from tfsent.training import WarmupLinearDecay


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO, "configs", "*.py"))))
def test_every_recipe_builds_for_its_method(path):
    recipe = load_recipe(path)
    method = recipe.get("method", "simcse_unsup")
    config = build_config(get_method(method).defaults, recipe)
    assert config.batch_size > 0


def test_overrides_parse_to_field_types():
    argv, overrides = split_config_overrides(
        ["prog", "--method=simcse_unsup", "--config.batch_size=8", "--config.jit_compile=false",
         "--config.learning_rate=1e-4", "--config.encoder_dropout=0.2", "--config.pooling=cls"])
    assert argv == ["prog", "--method=simcse_unsup"]
    c = build_config(REGISTRY["simcse_unsup"].defaults, {}, overrides)
    assert (c.batch_size, c.jit_compile, c.learning_rate, c.encoder_dropout, c.pooling) == (
        8, False, 1e-4, 0.2, "cls")


@pytest.mark.parametrize("override,message", [
    ("batch_size=0", "batch_size must be > 0"),
    ("batch_size=big", "expected an integer"),
    ("warmup_ratio=1.5", "warmup_ratio must be in [0, 1]"),
    ("mask_rate=-0.1", "mask_rate must be in [0, 1]"),
    ("encoder_dropout=1.0", "encoder_dropout must be in [0, 1)"),
    ("mixed_precision=fp8", "mixed_precision must be"),
    ("nonsense=1", "unknown field"),
])
def test_bad_overrides_are_named(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        build_config(REGISTRY["cmlm_cse"].defaults, {}, [override])


def test_unknown_method():
    with pytest.raises(ConfigError, match="unknown method 'nope'"):
        get_method("nope")


def test_warmup_linear_decay_values():
    s = WarmupLinearDecay(1.0, total_steps=10, warmup_steps=2)
    got = [float(s(i)) for i in range(11)]
    # warmup: (step+1)/2 for steps 0,1; then 1 - (step-2)/8.
    want = [0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125, 0.0]
    np.testing.assert_allclose(got, want, atol=1e-6)
    flat = WarmupLinearDecay(2.0, total_steps=10, decay=False)
    assert float(flat(7)) == 2.0
