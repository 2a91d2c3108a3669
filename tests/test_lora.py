"""LoRA (tfsent.encoders.lora, run fields lora_rank / lora_alpha): only the adapters (and
the declared heads) train, the backbone's frozen weights stay bit-identical, every export
holds merged plain kernels equal to the adapted encoder, a resumed run equals an
uninterrupted one, bad settings are refused before any model loads; mixed_bfloat16 steps
on the decoder families (with and without LoRA, with GradCache)."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import TF_SERVING_LOADER, TINY_RUN_FLAGS, TINY_VOCAB
from tfsent.encoders import lora
from tfsent.errors import ConfigError

_LOADER = {}
exec(TF_SERVING_LOADER, _LOADER)  # serve_like_tf_serving: a TF1 session, as TF Serving
serve_like_tf_serving = _LOADER["serve_like_tf_serving"]

PROBE = ["a man plays a guitar", "the dog runs in the park", "", "a woman reads a book"]
LORA = ["lora_rank=2", "lora_alpha=8"]
STEP = ["eval_every=2", "batch_size=8", "max_seq_length=16", "jit_compile=False",
        "learning_rate=5e-3", "eval_max_seq_length=24"]


# -- the merge formula --------------------------------------------------------------------
def test_merged_kernel_is_w_plus_scaled_a_b_by_hand_and_numpy():
    """A 2x2 Dense-like EinsumDense, rank 1, alpha 2 (scale 2): by hand W + 2 a b."""
    layer = keras.layers.EinsumDense("ab,bc->ac", output_shape=2, bias_axes="c")
    layer.build((None, 2))
    layer.kernel.assign([[1.0, 0.0], [0.0, 1.0]])
    layer.enable_lora(1, lora_alpha=2.0)
    layer.lora_kernel_a.assign([[1.0], [2.0]])
    layer.lora_kernel_b.assign([[0.5, -1.0]])
    by_hand = [[1.0 + 2 * 0.5, 0.0 - 2 * 1.0], [0.0 + 2 * 1.0, 1.0 - 2 * 2.0]]
    np.testing.assert_allclose(lora.merged_kernel(layer), by_hand)
    # An attention projection: kernel (in, heads, head_dim), A (in, heads, rank).
    attn = keras.layers.EinsumDense("btd,dnh->btnh", output_shape=(None, 2, 3))
    attn.build((None, None, 4))
    attn.enable_lora(2, lora_alpha=6.0)
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(4, 2, 2)), rng.normal(size=(2, 3))
    attn.lora_kernel_a.assign(a)
    attn.lora_kernel_b.assign(b)
    w = attn._kernel.numpy()
    expected = w + 3.0 * np.einsum("dnr,rh->dnh", a, b)
    np.testing.assert_allclose(lora.merged_kernel(attn), expected, rtol=1e-5, atol=1e-6)
    x = rng.normal(size=(1, 5, 4)).astype("float32")
    np.testing.assert_allclose(attn(x).numpy(), np.einsum("btd,dnh->btnh", x, expected),
                               rtol=1e-4, atol=1e-5)


# -- training: what moves, what stays ---------------------------------------------------
def _build(method, encoder_dir, extra=()):
    from tfsent.methods import get_method
    from tfsent.training import build_model, load_training_data, make_dataset, resolve_config

    config = resolve_config(method, None, [f"encoder={encoder_dir}", *STEP, "steps=2",
                                           *extra])
    spec = get_method(method)
    keras.utils.set_random_seed(0)
    encoder, model, optimizer = build_model(spec, config, 2, jit=False)
    model.compile(optimizer=optimizer, run_eagerly=True)  # tiny: faster than tracing
    dataset = make_dataset(spec, config, encoder, load_training_data(spec, config), 0,
                           os.path.dirname(encoder_dir), model=model)
    return config, encoder, model, dataset


def _train_and_check(method, encoder_dir, extra, heads=()):
    """Two steps; every variable that changed is an adapter or one of `heads`' (path
    prefixes), every adapter's B moved, every frozen backbone weight is bit-identical."""
    config, encoder, model, dataset = _build(method, encoder_dir, extra)
    layers = lora.lora_layers(encoder)
    assert layers and {lyr.name for lyr in layers} == {"query", "value"}
    before = {id(v): np.array(v.numpy()) for v in model.variables}
    history = model.fit(dataset, epochs=1, steps_per_epoch=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    adapters = {id(v) for lyr in layers for v in (lyr.lora_kernel_a, lyr.lora_kernel_b)}
    trainable = {id(v) for v in model.trainable_variables}
    moved = []
    for v in model.variables:
        same = np.array_equal(before[id(v)], v.numpy())
        if id(v) in adapters or (id(v) in trainable and v.path.startswith(heads)):
            continue
        if v.dtype == "int64" or "seed_generator" in v.path or "iteration" in v.path:
            continue  # step counters and the dropout stream
        if not same:
            moved.append(v.path)
    assert not moved, moved
    assert all(not np.array_equal(before[id(lyr.lora_kernel_b)], lyr.lora_kernel_b.numpy())
               for lyr in layers)
    assert not (trainable - adapters - {id(v) for v in model.trainable_variables
                                        if v.path.startswith(heads)})
    return encoder, model


def test_bert_lora_trains_only_adapters_and_export_is_merged(tiny_encoder_dir, tmp_path):
    from tfsent import formats
    from tfsent.encoders import load_encoder

    encoder, model = _train_and_check("simcse_unsup", tiny_encoder_dir, ["lora_rank=2"])
    trainable, total = lora.parameter_counts(model)
    assert 0 < trainable < total / 5
    adapted = encoder.encode(PROBE, max_seq_length=24, normalize=False)
    export = formats.export(encoder, str(tmp_path / "export"), max_seq_length=24)
    served = serve_like_tf_serving(export, PROBE, ("embedding",))["embedding"]
    np.testing.assert_allclose(served, adapted, atol=1e-5)
    stored = tf.train.list_variables(os.path.join(export, "variables", "variables"))
    assert stored and not [name for name, _ in stored if "lora" in name.lower()]
    encoder.save_encoder_dir(str(tmp_path / "encoder"))
    again = load_encoder(str(tmp_path / "encoder"))
    assert not lora.lora_layers(again)
    np.testing.assert_allclose(again.encode(PROBE, max_seq_length=24, normalize=False),
                               adapted, atol=1e-5)
    # The adapted encoder itself is unchanged by the merges: still adapted.
    assert len(lora.lora_layers(encoder)) == len(lora.lora_layers(model.encoder)) > 0
    # Dev selection's best/ copy: merged kernels, loaded back into the adapted encoder
    # (its adapters zeroed, the kernels merged) embeds as the adapted encoder did.
    from tfsent.training.run_dir import RunState

    state = RunState(str(tmp_path / "run"), model, model.optimizer)
    state.save_best(1.0, 2)
    for layer in lora.lora_layers(encoder):
        layer.lora_kernel_b.assign(layer.lora_kernel_b.numpy() + 1.0)
    assert state.load_best()
    assert not any(np.abs(lyr.lora_kernel_b.numpy()).max() for lyr in lora.lora_layers(encoder))
    np.testing.assert_allclose(encoder.encode(PROBE, max_seq_length=24, normalize=False),
                               adapted, atol=1e-5)


@pytest.fixture(scope="module")
def decoder_dirs(tmp_path_factory):
    from hf_decoder_checkpoints import make_embeddinggemma_dir, make_qwen3_embedding_dir

    root = tmp_path_factory.mktemp("decoders")
    return {"qwen3": make_qwen3_embedding_dir(str(root / "qwen3")),
            "gemma3": make_embeddinggemma_dir(str(root / "gemma3"))}


@pytest.mark.parametrize("family, extra", [("qwen3", []),
                                           ("gemma3", ["grad_cache_chunk=4"])])
def test_decoder_lora_bf16_step_is_finite_and_trains_only_adapters(family, extra,
                                                                   decoder_dirs):
    """mixed_bfloat16 + LoRA (gemma3: under GradCache, chunks of 4 of 8 rows): finite
    steps, only adapters (gemma3: and its Dense head) change, the adapters stay float32."""
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        encoder, _ = _train_and_check("simcse_sup", decoder_dirs[family],
                                      ["lora_rank=2", "lora_alpha=4",
                                       "mixed_precision=mixed_bfloat16", *extra],
                                      heads=("dense_head",))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert encoder.backbone.dtype_policy.name == "mixed_bfloat16"
    for layer in lora.lora_layers(encoder):
        assert layer.lora_alpha / layer.lora_rank == 2.0
        assert layer.lora_kernel_a.dtype == layer.lora_kernel_b.dtype == "float32"


@pytest.mark.parametrize("family", ["qwen3", "gemma3"])
def test_decoder_merge_equals_adapted_encode(family, decoder_dirs):
    """float32: random adapters (B non-zero), scale 3; the merged copy (no LoRA layers, the
    Dense head shared) embeds as the adapted encoder does."""
    from tfsent.encoders import load_encoder

    encoder = load_encoder(decoder_dirs[family])
    layers = lora.enable_lora(encoder, 2, alpha=6)
    rng = np.random.default_rng(1)
    for layer in layers:
        layer.lora_kernel_b.assign(rng.normal(size=layer.lora_kernel_b.shape) * 0.1)
    merged = lora.merge_lora(encoder)
    assert not lora.lora_layers(merged) and merged.dense_head is encoder.dense_head
    adapted = encoder.encode(PROBE, normalize=False)
    assert all(np.abs(lora.merged_kernel(lyr) - lyr._kernel.numpy()).max() > 1e-2
               for lyr in layers)  # the adapters matter
    np.testing.assert_allclose(merged.encode(PROBE, normalize=False), adapted, atol=1e-5)


def test_gemma3_bf16_full_fine_tuning_step_is_finite(decoder_dirs):
    """mixed_bfloat16 without LoRA: every backbone weight trains, the step is finite."""
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        _, encoder, model, dataset = _build("simcse_sup", decoder_dirs["gemma3"],
                                            ["mixed_precision=mixed_bfloat16"])
        history = model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert not lora.lora_layers(encoder)
    assert np.isfinite(history.history["loss"]).all()
    assert np.isfinite(history.history["grad_norm"]).all()


# -- a run: resume, export ----------------------------------------------------------------
def _run(tmp, tiny_encoder_dir, name):
    from tfsent import training

    config = training.resolve_config("simcse_unsup", None, [
        f"encoder={tiny_encoder_dir}", *STEP, "steps=2", "eval_every=1", *LORA,
        *[flag[len("--config."):] for flag in TINY_RUN_FLAGS]])
    return training.run("simcse_unsup", config, str(tmp / name))


def test_interrupted_and_resumed_run_equals_uninterrupted(tiny_encoder_dir, tmp_path,
                                                          monkeypatch):
    from tfsent.serving import SavedModelEncoder
    from tfsent.training import loop

    whole = _run(tmp_path, tiny_encoder_dir, "whole")

    class Interrupt(loop.RunCheckpoint):
        def on_epoch_end(self, epoch, logs=None):
            super().on_epoch_end(epoch, logs)
            raise KeyboardInterrupt  # after the step-1 checkpoint

    monkeypatch.setattr(loop, "RunCheckpoint", Interrupt)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, tiny_encoder_dir, "resumed")
    monkeypatch.undo()
    resumed = _run(tmp_path, tiny_encoder_dir, "resumed")
    assert resumed["steps"] == whole["steps"] == 2
    a = SavedModelEncoder(whole["export"]).encode(PROBE)
    b = SavedModelEncoder(resumed["export"]).encode(PROBE)
    np.testing.assert_allclose(a, b, atol=1e-5)
    # The checkpoint holds every variable (adapters with their Adam slots, the frozen
    # backbone), the step and the dropout streams.
    shapes = tf.train.load_checkpoint(os.path.join(tmp_path, "resumed", "checkpoints")) \
        .get_variable_to_shape_map()
    assert any(key.startswith("dropout_streams") for key in shapes)
    assert [16, 2, 2] in shapes.values() and [2, 8] in shapes.values()  # adapters A, B
    assert [len(TINY_VOCAB), 16] in shapes.values()  # and the frozen token table


# -- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize("method, overrides, message", [
    ("simcse_unsup", ["lora_rank=-1"], "lora_rank"),
    ("simcse_unsup", ["lora_rank=two"], "lora_rank: expected an integer"),
    ("simcse_unsup", ["lora_alpha=8"], "lora_alpha=8.0 is set but lora_rank is 0"),
    ("clsr", ["lora_rank=4"], "lora_rank=4: method clsr takes no LoRA: its encoder is frozen"),
    ("cross_encoder", ["lora_rank=4"], "method cross_encoder takes no LoRA: the cross-enc"),
    ("simcse_unsup", ["lora_alpha=-1", "lora_rank=2"], "lora_alpha"),
])
def test_bad_lora_settings_are_refused_before_loading(method, overrides, message,
                                                      tiny_encoder_dir, monkeypatch):
    from tfsent.training import config as config_lib, loop

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(loop, "load_encoder", no_loading)
    with pytest.raises(ConfigError, match=message):
        config_lib.resolve_config(method, None, [f"encoder={tiny_encoder_dir}", *overrides])


def test_lora_rank_in_a_recipe_must_be_an_int(tmp_path):
    from tfsent.training import config as config_lib

    recipe = tmp_path / "recipe.py"
    recipe.write_text("def get_config():\n    return {'lora_rank': 1.5}\n")
    with pytest.raises(ConfigError, match="lora_rank"):
        config_lib.resolve_config("simcse_unsup", str(recipe))


def test_float16_on_gemma3_is_refused_bfloat16_accepted(decoder_dirs):
    from tfsent.training import config as config_lib

    with pytest.raises(ConfigError, match="mixed_precision=mixed_float16: the gemma3 family"):
        config_lib.resolve_config("simcse_unsup", None, [
            f"encoder={decoder_dirs['gemma3']}", "mixed_precision=mixed_float16"])
    config = config_lib.resolve_config("simcse_unsup", None, [
        f"encoder={decoder_dirs['gemma3']}", "mixed_precision=mixed_bfloat16", "lora_rank=8"])
    assert config.lora_rank == 8
