"""Run configs: recipe files, overrides, validation, LR schedule."""

import glob
import os
import re

import numpy as np
import pytest

from conftest import REPO, TINY_VOCAB
from tfsent.errors import ConfigError
from tfsent.methods import REGISTRY, get_method
from tfsent.training.config import build_config, load_recipe, split_config_overrides
from tfsent.training.schedules import WarmupLinearDecay


@pytest.fixture(scope="module")
def deep_tiny_encoder():
    """A tiny random encoder with 8 layers (CMLM-CSE recipes take 8 extractor layers)."""
    from tfsent.testing import tiny_encoder

    return tiny_encoder(TINY_VOCAB, num_layers=8, hidden_dim=8, num_heads=2,
                        intermediate_dim=8, max_seq_length=16)


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO, "configs", "*.py"))))
def test_every_recipe_builds_for_its_method(path, deep_tiny_encoder):
    """Each recipe's config passes validation and its method's constructor accepts it,
    with a tiny encoder in place of the recipe's (pretrained) one."""
    recipe = load_recipe(path)
    method = recipe.get("method", "simcse_unsup")
    spec = get_method(method)
    config = build_config(spec.defaults, recipe, method=method)
    deep_tiny_encoder.pooling = config.pooling
    model = spec.build(deep_tiny_encoder, config)
    assert model.train_pooling == config.pooling
    assert model.export_pooling == (config.export_pooling or config.pooling)


def test_overrides_parse_to_field_types():
    argv, overrides = split_config_overrides(
        ["prog", "--method=simcse_unsup", "--config.batch_size=8", "--config.jit_compile=false",
         "--config.learning_rate=1e-4", "--config.encoder_dropout=0.2", "--config.pooling=cls"])
    assert argv == ["prog", "--method=simcse_unsup"]
    c = build_config(REGISTRY["simcse_unsup"].defaults, {}, overrides)
    assert (c.batch_size, c.jit_compile, c.learning_rate, c.encoder_dropout, c.pooling) == (
        8, False, 1e-4, 0.2, "cls")


@pytest.mark.parametrize("override,message", [
    ("batch_size=0", "batch_size must be an integer >= 1"),
    ("batch_size=big", "expected an integer"),
    ("warmup_ratio=1.5", "warmup_ratio must be in [0, 1]"),
    ("mask_rate=-0.1", "mask_rate must be in (0, 1)"),
    ("encoder_dropout=1.0", "encoder_dropout: dropout rate for embeddings must be in [0, 1)"),
    ("mixed_precision=fp8", "mixed_precision must be"),
    ("nonsense=1", "unknown field"),
    ("epochs=inf", "epochs must be >= 0, got inf"),       # was an OverflowError later
    ("learning_rate=nan", "learning_rate must be > 0"),
    ("seed=-5", "seed must be an integer in [0, 4294967295]"),  # NumPy's ValueError before
    ("seed=4294967296", "seed must be an integer in [0,"),
    ("seed=" + "9" * 400, "seed must be an integer in [0,"),  # too big for a float
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


# Values the constructors reject must be rejected by the config too (issue #18), with the
# same ranges: (method, field, rejected value, accepted boundary value).
BOUNDARIES = [
    ("scd", "dropout_rate_a", 1.0, 0.0),
    ("scd", "dropout_rate_b", 1.0, 0.999),
    ("scd", "projector_width", 0, 1),
    ("cmlm_cse", "mask_rate", 0.0, 0.01),
    ("cmlm_cse", "mask_rate", 1.0, 0.99),
    ("cmlm_cse", "mlm_weight", -0.1, 0.0),
    ("cmlm_cse", "encoder_dropout", 1.0, 0.0),
    ("simcse_unsup", "temperature", 0.0, 1e-3),
    ("consert", "token_cutoff_rate", 1.0, 0.0),
    ("consert", "feature_cutoff_rate", -0.1, 0.0),
    ("consert", "view1_augmentation", "adversarial", "dropout"),
    ("consert_joint", "view1_augmentation", "crop", "adversarial"),
    ("consert_joint", "direction_reduction", "max", "mean"),
    ("supcon", "similarity", "l2", "cosine"),
    ("supcon", "max_positives", -1, 1),
    ("supcon", "scl_weight", 1.5, 1.0),
    ("clsr", "export_pooling", "cls_before_pooler", "mean"),
]


@pytest.mark.parametrize("method,field,bad,good", BOUNDARIES)
def test_config_and_constructor_accept_the_same_values(method, field, bad, good,
                                                       deep_tiny_encoder):
    from tfsent.training.config import BASE_DEFAULTS, Config, resolve_encoder_fields

    spec = get_method(method)
    with pytest.raises(ConfigError, match=re.escape(field)):
        build_config(spec.defaults, {field: bad}, method=method)
    # The constructor alone (no config validation) rejects the same value...
    unchecked = Config(BASE_DEFAULTS)
    unchecked.update(spec.defaults)
    unchecked[field] = bad
    resolve_encoder_fields(unchecked)  # the pooling left unset: minilm-l6's (mean)
    deep_tiny_encoder.pooling = unchecked.pooling
    with pytest.raises(ConfigError):
        model = spec.build(deep_tiny_encoder, unchecked)
        if field == "mask_rate":  # read by the data pipeline
            from tfsent.data import pipelines

            pipelines.mask_tokens(deep_tiny_encoder.tokenizer(["a man"]),
                                  deep_tiny_encoder.tokenizer, model.mask_rate, (0, 0))
    # ...and both accept the boundary value.
    config = build_config(spec.defaults, {field: good}, method=method)
    spec.build(deep_tiny_encoder, config)


def test_validation_runs_before_data_or_model():
    """`resolve_config` (the CLI's first step, before any data is read or model built)
    rejects a rate the SCD constructor would reject."""
    from tfsent.training import resolve_config

    with pytest.raises(ConfigError, match=re.escape("dropout_rate_a must be in [0, 1)")):
        resolve_config("scd", None, ["dropout_rate_a=1.0", "train_data=/nonexistent.txt"])


@pytest.mark.parametrize("field,value,expected", [
    ("export_if_worse", "false", "a boolean"),     # the string "false" counted as true
    ("jit_compile", 0, "a boolean"),
    ("batch_size", "64", "an integer"),             # a string where a number is expected
    ("learning_rate", "3e-5", "a number"),
    ("encoder", 5, "a string"),                     # a number where a string is expected
    ("export_pooling", 1, "a string or None"),
    ("temperature", "0.05", "a number"),            # a method field
    ("tie_mlm_embeddings", "true", "a boolean"),
])
def test_recipe_values_are_type_checked(tmp_path, field, value, expected):
    """A recipe value of the wrong type is a ConfigError naming the field and the file."""
    path = tmp_path / "recipe.py"
    path.write_text(f"def get_config():\n    return {{'method': 'cmlm_cse', "
                    f"{field!r}: {value!r}}}\n")
    from tfsent.training import resolve_config

    with pytest.raises(ConfigError, match=re.escape(str(path)) + f".*{field} must be "
                                          + re.escape(expected)):
        resolve_config("cmlm_cse", str(path))


@pytest.mark.parametrize("body, message", [
    ("def get_config():\n    return {'batch': 1}['batch_size']\n",
     "get_config() failed: KeyError: 'batch_size'"),
    ("get_config = {'method': 'cmlm_cse'}\n", "defines no get_config() function"),
])
def test_a_broken_recipe_is_named(tmp_path, body, message):
    """A recipe whose get_config raises, or is not a function: a ConfigError naming the
    file (was a traceback)."""
    path = tmp_path / "recipe.py"
    path.write_text(body)
    from tfsent.training import resolve_config

    with pytest.raises(ConfigError, match=re.escape(str(path)) + ".*" + re.escape(message)):
        resolve_config("cmlm_cse", str(path))


def test_recipe_numbers_of_either_kind_still_pass(tmp_path):
    path = tmp_path / "recipe.py"
    path.write_text("def get_config():\n    return {'epochs': 1, 'steps': 0, "
                    "'temperature': 1, 'export_if_worse': True, 'export_pooling': None}\n")
    from tfsent.training import resolve_config

    config = resolve_config("simcse_unsup", str(path))
    assert (config.epochs, config.temperature, config.export_if_worse) == (1, 1, True)
    # an override of a float field set to an int by the recipe parses as a float
    config = resolve_config("simcse_unsup", str(path), ["temperature=0.5"])
    assert config.temperature == 0.5


def test_method_help_lists_every_method():
    from tfsent.methods import help_text

    text = help_text()
    for name, spec in REGISTRY.items():
        assert f"{name}: {spec.doc}" in text


def test_a_field_of_another_method_says_so():
    with pytest.raises(ConfigError, match="'scl_weight' is not a field of method "
                                          "simcse_unsup \\(it is one of supcon\\)"):
        build_config(get_method("simcse_unsup").defaults, {}, ["scl_weight=0.1"],
                     method="simcse_unsup")


def test_field_help_comes_from_the_spec():
    from tfsent.training.config import help_text

    text = help_text("clsr")
    assert "clsr_head_init = 'identity'  (one of random, identity)" in text  # demo default
    assert "batch_size = 64  (an integer >= 1)" in text
    assert "scl_weight" not in text and "scl_weight" in help_text()
