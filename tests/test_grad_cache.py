"""GradCache: chunked embedding with replayed dropout gives the plain loss's gradients."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import TINY_VOCAB
from tfsent.testing import tiny_encoder
from tfsent.errors import ConfigError
from tfsent.methods import CMLMCSE, SCD, SimCSE, SupConSBERT

SENTENCES = ["the cat sat on the mat", "a dog runs", "the bird sings a song", "cats and dogs",
             "the mat is red", "a song for the dog", "birds fly", "the red cat runs",
             "dogs sit", "a cat and a bird", "the song is long", "a dog on a mat"]


def _features(encoder, sentences):
    return encoder.tokenizer(tf.constant(sentences))


def _compare(model, batch, chunk, atol=1e-5, jit=None):
    """Max difference between plain and GradCache gradients, relative to each gradient's
    scale when it is above 1 (float32 sums in another order: a table row whose gradient
    is ~37 differs by ~1.5e-5 in a graph), and the logs; `jit` None runs eagerly,
    True/False inside tf.functions with/without XLA (SCD's plain gradients differ by up to
    2.5e-4 between eager and a graph, GradCache or not)."""
    variables = model.trainable_variables

    def wrap(fn):  # both sides in the same mode: TF's graph rewrites change float32 sums
        run = lambda b: fn(b, variables)  # noqa: E731
        return run if jit is None else tf.function(run, jit_compile=jit)

    model.set_grad_cache(0)
    plain, plain_logs = wrap(model.gradients)(batch)
    model.set_grad_cache(chunk)
    cached, cached_logs = wrap(model.grad_cache_gradients)(batch)
    assert len(plain) == len(cached)
    worst = 0.0
    for var, a, b in zip(variables, plain, cached):
        assert (a is None) == (b is None), var.path
        if a is not None:
            a, b = tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy()
            assert np.abs(a).max() > 0 or np.abs(b).max() == 0
            scale = max(1.0, float(np.abs(a).max()))
            worst = max(worst, float(np.abs(a - b).max()) / scale)
    assert worst <= atol, worst
    np.testing.assert_allclose(float(plain_logs["loss"]), float(cached_logs["loss"]),
                               rtol=1e-5)
    return worst


@pytest.mark.parametrize("chunk", [1, 5, 12])
def test_simcse_sup_gradients_equal_plain(chunk):
    encoder = tiny_encoder(TINY_VOCAB, dropout=0.0)
    model = SimCSE(encoder, supervised=True)
    n = len(SENTENCES)
    batch = {"anchor": _features(encoder, SENTENCES),
             "positive": _features(encoder, SENTENCES[1:] + SENTENCES[:1]),
             "negative": _features(encoder, SENTENCES[::-1])}
    assert n % 5  # chunk 5 leaves a smaller last chunk
    _compare(model, batch, chunk)


@pytest.mark.parametrize("chunk,jit", [(2, True), (5, False)])
def test_chunk_loop_in_a_graph_equals_plain(chunk, jit):
    """In a tf.function the equal chunks between the first and the last run in a
    tf.while_loop (12 rows: chunk 2 -> 1 + a loop of 5, here under XLA; chunk 5 -> 1 + 1 +
    a remainder of 2, without); the gradients, sparse embedding rows included, still
    match. (The other two pairings, chunk 2 without XLA and chunk 5 with it, were dropped
    for CI time: 65 s of a loaded run.)"""
    from tfsent.methods.grad_cache import chunk_segments as _chunk_segments

    assert _chunk_segments(12, 2) == [(0, 2, 1), (2, 2, 5)]
    assert _chunk_segments(12, 5) == [(0, 5, 1), (5, 5, 1), (10, 2, 1)]
    encoder = tiny_encoder(TINY_VOCAB, dropout=0.0)
    model = SimCSE(encoder, supervised=True)
    batch = {"anchor": _features(encoder, SENTENCES),
             "positive": _features(encoder, SENTENCES[1:] + SENTENCES[:1]),
             "negative": _features(encoder, SENTENCES[::-1])}
    _compare(model, batch, chunk, jit=jit)


def test_chunk_segments():
    from tfsent.methods.grad_cache import chunk_segments as _chunk_segments

    assert _chunk_segments(3, 8) == [(0, 3, 1)]
    assert _chunk_segments(8, 8) == [(0, 8, 1)]
    assert _chunk_segments(17, 8) == [(0, 8, 1), (8, 8, 1), (16, 1, 1)]
    assert _chunk_segments(1024, 64) == [(0, 64, 1), (64, 64, 15)]
    with pytest.raises(ValueError, match="static per-replica batch size"):
        _chunk_segments(None, 8)


def test_supcon_head_and_encoder_gradients_equal_plain():
    encoder = tiny_encoder(TINY_VOCAB, dropout=0.0, pooling="mean_no_cls")
    model = SupConSBERT(encoder, scl_weight=0.3, temperature=1.0)
    batch = {"premise": _features(encoder, SENTENCES[:8]),
             "hypothesis": _features(encoder, SENTENCES[4:]),
             "label": tf.constant([0, 1, 2, 0, 0, 1, 2, 2]),
             "premise_id": tf.constant([0, 0, 0, 1, 1, 2, 2, 3]),
             "valid": tf.ones([8])}
    _compare(model, batch, 3)


@pytest.mark.parametrize("jit", [None, False])
def test_scd_projector_and_encoder_gradients_equal_plain(jit):
    """Two parts with different encoder kwargs, each its own chunk loop in a graph."""
    encoder = tiny_encoder(TINY_VOCAB, dropout=0.0)
    model = SCD(encoder, dropout_rate_a=0.0, dropout_rate_b=0.0, projector_width=32)
    _compare(model, _features(encoder, SENTENCES), 4, jit=jit)


@pytest.mark.parametrize("jit", [False, True])
def test_dropout_masks_are_replayed(jit):
    """With dropout on, GradCache's gradient equals autodiff through the same chunked
    forward pass (same seed state): the second pass of every chunk redraws its masks.
    jit=False: the reference eagerly, GradCache in a graph (Keras's dropout); jit=True:
    both under XLA (the forward's Threefry masks)."""
    encoder = tiny_encoder(TINY_VOCAB, dropout=0.2)
    model = SimCSE(encoder, supervised=False, grad_cache_chunk=4)  # 12 rows: 1 + loop of 2
    batch = _features(encoder, SENTENCES)
    seed = encoder.seed_generator.state
    start = seed.numpy().copy()
    variables = model.trainable_variables

    def reference_gradients(batch):  # the same chunks, differentiated directly
        with tf.GradientTape() as tape:
            views = []
            for features, kwargs in model.embedding_parts(batch):
                views.append(tf.concat([
                    model.embed({k: v[i:i + 4] for k, v in features.items()}, True, **kwargs)
                    for i in range(0, len(SENTENCES), 4)], axis=0))
            loss, _ = model.loss_from_embeddings(views, batch)
        return tape.gradient(loss, variables), loss, views

    if jit:
        reference_gradients = tf.function(reference_gradients, jit_compile=True)
    reference, loss, views = reference_gradients(batch)
    end = seed.numpy().copy()

    seed.assign(start)
    # in a graph: chunks 4..7 run in the tf.while_loop, their masks come from saved states
    cached, logs = tf.function(lambda b: model.grad_cache_gradients(b, variables),
                               jit_compile=jit)(batch)
    np.testing.assert_array_equal(seed.numpy(), end)  # the stream advanced as one pass would
    np.testing.assert_allclose(float(logs["loss"]), float(loss), rtol=1e-6)
    assert not np.allclose(views[0].numpy(), views[1].numpy())  # dropout did act
    for var, a, b in zip(variables, reference, cached):
        if a is not None:
            np.testing.assert_allclose(tf.convert_to_tensor(b).numpy(),
                                       tf.convert_to_tensor(a).numpy(), atol=1e-5,
                                       err_msg=var.path)


def test_fit_with_grad_cache_under_xla():
    encoder = tiny_encoder(TINY_VOCAB, dropout=0.1)
    model = SimCSE(encoder, grad_cache_chunk=3)
    model.compile(optimizer=keras.optimizers.AdamW(1e-3), jit_compile=True)
    data = tf.data.Dataset.from_tensor_slices(SENTENCES).repeat().batch(6, drop_remainder=True)
    data = data.map(encoder.tokenizer)
    history = model.fit(data, steps_per_epoch=3, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert history.history["grad_norm"][0] > 0


def test_unsupported_method_and_bad_chunk():
    encoder = tiny_encoder(TINY_VOCAB)
    with pytest.raises(ConfigError, match="does not support GradCache"):
        CMLMCSE(encoder, extractor_layers=1, fusion_layers=1, grad_cache_chunk=8)
    with pytest.raises(ConfigError, match="grad_cache_chunk must be an integer"):
        SimCSE(encoder, grad_cache_chunk=-1)


@pytest.mark.parametrize("policy,chunk,jit", [("mixed_bfloat16", 0, True),
                                              ("mixed_bfloat16", 0, False),
                                              ("mixed_float16", 3, False),
                                              ("mixed_float16", 2, False)])
def test_mixed_precision_trains_with_float32_losses(policy, chunk, jit, monkeypatch):
    """Both mixed policies train (float16 with loss scaling, here through GradCache; chunk 2
    of 6 rows runs the chunk loop; bfloat16 with and without XLA: under XLA the dropout
    sites draw float32 uniforms from Threefry for bfloat16 values, without it Keras's
    dropout runs); the encoder computes in the low precision, the losses come out in
    float32."""
    from tfsent.encoders import model as encoder_model
    from tfsent.losses import info_nce

    threefry_values = []

    def threefry_dropout(x, rate, seed):  # the real one, its input dtypes recorded
        threefry_values.append(x.dtype.name)
        return real_threefry(x, rate, seed)
    real_threefry = encoder_model.threefry_dropout
    monkeypatch.setattr(encoder_model, "threefry_dropout", threefry_dropout)
    keras.mixed_precision.set_global_policy(policy)
    try:
        encoder = tiny_encoder(TINY_VOCAB, dropout=0.1)
        model = SimCSE(encoder, grad_cache_chunk=chunk)
        optimizer = keras.optimizers.AdamW(1e-3)
        if policy == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        model.compile(optimizer=optimizer, jit_compile=jit)
        data = tf.data.Dataset.from_tensor_slices(SENTENCES).repeat()
        data = data.batch(6, drop_remainder=True).map(encoder.tokenizer)
        history = model.fit(data, steps_per_epoch=2, epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"]).all()
        # The traced step's dropout sites drew Threefry masks for bfloat16 values (XLA only).
        assert set(threefry_values) == ({"bfloat16"} if jit else set())
        z = model.embed(encoder.tokenizer(tf.constant(SENTENCES[:4])), True)
        assert z.dtype == policy.split("_")[1]
        assert info_nce(z, z).dtype == tf.float32
    finally:
        keras.mixed_precision.set_global_policy("float32")
