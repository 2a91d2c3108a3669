"""SCD: per-view dropout rates, the loss against NumPy and a hand case, global batch, XLA.

The NumPy reference of the loss is written from docs/methods.md ("SCD"), not from
tfsent/losses.py.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import TINY_VOCAB, mirrored_cpu_strategy
from method_harness import MethodHarness
from tfsent.training.config import BASE_DEFAULTS, build_config
from tfsent.data import pipelines
from tfsent.encoders import DROPOUT_SITES
from tfsent.errors import ConfigError
from tfsent.testing import tiny_encoder
from tfsent.layers.projector import Projector
from tfsent.losses import scd_loss
from tfsent.methods.scd import SCD, SPEC

SENTS = ["a man plays a guitar", "a woman sits on the mat", "the dog runs in the park",
         "a child reads a book", "the cat sleeps", "a man rides a red bike",
         "the woman eats food", "a big tree in the street"]
MAX_LEN = 12


def _encoder(**kwargs):
    args = dict(max_seq_length=MAX_LEN, seed=0)
    args.update(kwargs)
    return tiny_encoder(TINY_VOCAB, **args)


def _batch(tokenizer, sentences=SENTS):
    return tokenizer(list(sentences))


def _inference(model, batch):
    return model.embed(batch, training=False).numpy()


# --------------------------------------------------------------------------------------
# (a), (b): the two views
# --------------------------------------------------------------------------------------

def test_zero_rates_give_identical_views():
    enc = _encoder(dropout=0.1)  # the backbone's own rate is not 0 ...
    model = SCD(enc, dropout_rate_a=0.0, dropout_rate_b=0.0, projector_width=8)
    batch = _batch(enc.tokenizer)
    h_a, h_b = model.views(batch, training=True)
    np.testing.assert_array_equal(h_a.numpy(), h_b.numpy())
    np.testing.assert_allclose(h_a.numpy(), _inference(model, batch), atol=1e-6)
    # ... and training mode is really on: the backbone's default rate changes the output.
    default = model.embed(batch, training=True).numpy()
    assert np.abs(default - _inference(model, batch)).max() > 1e-3


def test_view_a_at_rate_zero_is_inference_view_b_varies():
    enc = _encoder(dropout=0.1)
    model = SCD(enc, dropout_rate_a=0.0, dropout_rate_b=0.15, projector_width=8)
    batch = _batch(enc.tokenizer)
    ref = _inference(model, batch)
    a1, b1 = model.views(batch, training=True)
    a2, b2 = model.views(batch, training=True)
    np.testing.assert_allclose(a1.numpy(), ref, atol=1e-6)
    np.testing.assert_allclose(a2.numpy(), ref, atol=1e-6)
    assert np.abs(b1.numpy() - ref).max() > 1e-3
    assert np.abs(b1.numpy() - b2.numpy()).max() > 1e-3  # fresh masks at every call


# --------------------------------------------------------------------------------------
# (c): dropout rates at each site
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("rate", [0.05, 0.15, 0.3])
def test_dropout_primitive_drops_the_rate(rate):
    """What this proves: the encoder's `_dropout` (the one function every site calls)
    zeroes a `rate` fraction of the elements and rescales the rest by 1/(1-rate). It says
    nothing about where the sites are; the instrumented tests below do."""
    enc = _encoder()
    ones = tf.ones([1000, 1000])
    out = enc._dropout(ones, rate, training=True).numpy()
    frac = float(np.mean(out == 0))
    assert abs(frac - rate) < 0.02, frac
    np.testing.assert_allclose(out[out != 0], 1.0 / (1.0 - rate), rtol=1e-6)
    np.testing.assert_array_equal(enc._dropout(ones, rate, training=False).numpy(), 1.0)
    np.testing.assert_array_equal(enc._dropout(ones, 0.0, training=True).numpy(), 1.0)


@pytest.mark.parametrize("site", DROPOUT_SITES)
def test_each_site_alone_changes_the_output(site):
    """What this proves: a rate given for one site alone (the others at 0) reaches the
    forward pass and changes the embedding; with every site at 0 training mode equals
    inference. It does not prove which tensor the site's dropout acts on."""
    enc = _encoder(dropout=0.1)
    batch = _batch(enc.tokenizer)
    ref = enc(batch, training=False)["embedding"].numpy()
    off = dict.fromkeys(DROPOUT_SITES, 0.0)
    np.testing.assert_allclose(enc(batch, training=True, dropout=off)["embedding"].numpy(),
                               ref, atol=1e-6)
    on = dict(off, **{site: 0.3})
    assert np.abs(enc(batch, training=True, dropout=on)["embedding"].numpy() - ref).max() > 1e-4


def _instrument(encoder):
    """Wraps `encoder._dropout`; every call records (rate, input rank, fraction of the
    input's non-zero elements that the call zeroed). Returns the record list."""
    calls = []
    original = encoder._dropout

    def recording(x, rate, training):
        out = original(x, rate, training)
        nonzero = x.numpy() != 0
        dropped = np.logical_and(nonzero, out.numpy() == 0)
        calls.append((rate, len(x.shape), dropped.sum() / max(nonzero.sum(), 1)))
        return out

    encoder._dropout = recording
    return calls


def _site_of_call(index):
    """The forward pass calls dropout at the embeddings, then, per transformer layer, at
    the attention probabilities, the attention output and the FFN output."""
    if index == 0:
        return "embeddings"
    return ("attention_probs", "attention_output", "ffn_output")[(index - 1) % 3]


def test_instrumented_forward_drops_each_sites_own_rate():
    """What this proves: in a real forward pass each site's dropout receives that site's
    rate and zeroes that fraction of its (non-zero) input, within 0.02; the attention-probs
    site acts on a rank-4 (B, heads, L, L) tensor, the others on (B, L, H)."""
    enc = _encoder(dropout=0.1)
    batch = _batch(enc.tokenizer, SENTS * 8)  # 64 sentences: ~6k-12k elements per site
    rates = {"embeddings": 0.1, "attention_probs": 0.2, "attention_output": 0.3,
             "ffn_output": 0.4}
    calls = _instrument(enc)
    enc(batch, training=True, dropout=rates)
    assert len(calls) == 1 + 3 * enc.num_layers
    for i, (rate, rank, frac) in enumerate(calls):
        site = _site_of_call(i)
        assert rate == rates[site], (i, site, rate)
        assert rank == (4 if site == "attention_probs" else 3), (i, site, rank)
        assert abs(frac - rate) < 0.02, (i, site, frac)


def test_scd_views_use_rate_a_then_rate_b_at_every_site():
    """What this proves: SCD's view A runs every dropout site at r_A and view B at r_B,
    with the observed dropped fraction at each site within 0.02 of the rate."""
    enc = _encoder(dropout=0.1)
    model = SCD(enc, dropout_rate_a=0.05, dropout_rate_b=0.15, projector_width=8)
    batch = _batch(enc.tokenizer, SENTS * 8)
    calls = _instrument(enc)
    model.views(batch, training=True)
    per_view = 1 + 3 * enc.num_layers
    assert len(calls) == 2 * per_view
    for i, (rate, _, frac) in enumerate(calls):
        expected = 0.05 if i < per_view else 0.15
        assert rate == expected, (i, _site_of_call(i % per_view), rate)
        assert abs(frac - expected) < 0.02, (i, _site_of_call(i % per_view), frac)


# --------------------------------------------------------------------------------------
# (d): the loss
# --------------------------------------------------------------------------------------

def np_scd_loss(h_a, h_b, p_a, p_b, tau, alpha, beta, lambd, eps=1e-5):
    """docs/methods.md "SCD", in float64 loops:
    L_S = mean_i cos(h_A_i, h_B_i) / tau;
    bn = per-feature (x - mean) / sqrt(biased var + eps) over the batch, no scale/offset;
    C = bn(p_A)^T bn(p_B) / B;
    L_C = sum_j (1 - C_jj)^2 + lambda * sum_{j != k} C_jk^2;  L = alpha L_S + beta L_C."""
    h_a, h_b, p_a, p_b = (np.asarray(x, np.float64) for x in (h_a, h_b, p_a, p_b))
    b, w = p_a.shape
    cos = [h_a[i] @ h_b[i] / (np.sqrt(h_a[i] @ h_a[i]) * np.sqrt(h_b[i] @ h_b[i]))
           for i in range(b)]
    l_s = sum(cos) / b / tau

    def bn(p):
        out = np.zeros_like(p)
        for j in range(w):
            col = p[:, j]
            mean = sum(col) / b
            var = sum((v - mean) ** 2 for v in col) / b
            out[:, j] = (col - mean) / np.sqrt(var + eps)
        return out

    za, zb = bn(p_a), bn(p_b)
    l_c = 0.0
    for j in range(w):
        for k in range(w):
            c_jk = sum(za[i, j] * zb[i, k] for i in range(b)) / b
            l_c += (1.0 - c_jk) ** 2 if j == k else lambd * c_jk ** 2
    return alpha * l_s + beta * l_c, l_s, l_c


@pytest.mark.parametrize("seed,tau,alpha,beta,lambd", [
    (0, 0.05, 1.0, 0.005225, 0.012), (1, 0.1, 0.7, 0.3, 0.5), (2, 1.0, 0.0, 1.0, 1.0)])
def test_scd_loss_matches_numpy(seed, tau, alpha, beta, lambd):
    rng = np.random.default_rng(seed)
    h_a, h_b = rng.normal(size=(6, 5)), rng.normal(size=(6, 5))
    p_a, p_b = rng.normal(size=(6, 7)) * 3 + 1, rng.normal(size=(6, 7))
    # Correlate the views a little so the diagonal is not pure noise.
    p_b = 0.6 * p_a + 0.4 * p_b
    got = scd_loss(*(tf.constant(x, tf.float32) for x in (h_a, h_b, p_a, p_b)),
                   tau, alpha, beta, lambd)
    want = np_scd_loss(h_a, h_b, p_a, p_b, tau, alpha, beta, lambd)
    for g, w, name in zip(got, want, ("L", "L_S", "L_C")):
        assert g.dtype == tf.float32
        np.testing.assert_allclose(float(g), w, rtol=1e-5, atol=1e-5, err_msg=name)


def test_scd_loss_hand_case():
    """B = 2, W = 2, tau = 0.5, alpha = 1, beta = 0.1, lambda = 0.5.

    L_S: cos(h_A_1, h_B_1) = cos((1,0), (1,0)) = 1; cos(h_A_2, h_B_2) = cos((0,1), (1,1))
      = 1/sqrt(2); L_S = (1 + 0.70711)/2 / 0.5 = 1.70711.
    bn with B = 2: a column (u, v) has mean (u+v)/2 and biased var ((u-v)/2)^2 = 1 for every
      column below, so bn = (+-1) * s with s = 1/sqrt(1 + 1e-5); let k = s^2 = 1/(1 + 1e-5).
      p_A columns (1,3), (0,2) -> bn(p_A) = s [[-1,-1], [1,1]];
      p_B columns (5,3), (2,4) -> bn(p_B) = s [[1,-1], [-1,1]].
    C = bn(p_A)^T bn(p_B) / 2: C_00 = k(-1-1)/2 = -k, C_01 = k(1+1)/2 = k,
      C_10 = -k, C_11 = k.
    L_C = (1 - (-k))^2 + (1 - k)^2 + 0.5 (k^2 + k^2) = 2 + 3k^2 = 4.99994 (k ~ 0.99999).
    L = 1.70711 + 0.1 * 4.99994 = 2.20710.
    """
    h_a = [[1.0, 0.0], [0.0, 1.0]]
    h_b = [[1.0, 0.0], [1.0, 1.0]]
    p_a = [[1.0, 0.0], [3.0, 2.0]]
    p_b = [[5.0, 2.0], [3.0, 4.0]]
    loss, l_s, l_c = scd_loss(*(tf.constant(x) for x in (h_a, h_b, p_a, p_b)),
                              temperature=0.5, alpha=1.0, beta=0.1, lambd=0.5)
    k = 1.0 / (1.0 + 1e-5)
    want_s = (1.0 + 1.0 / np.sqrt(2.0)) / 2.0 / 0.5
    want_c = 2.0 + 3.0 * k ** 2
    np.testing.assert_allclose(float(l_s), want_s, rtol=1e-6)
    np.testing.assert_allclose(float(l_c), want_c, rtol=1e-6)
    np.testing.assert_allclose(float(loss), want_s + 0.1 * want_c, rtol=1e-6)
    np.testing.assert_allclose(float(loss), 2.20710, atol=1e-5)


def test_scd_loss_is_float32_for_half_inputs():
    rng = np.random.default_rng(3)
    xs = [tf.constant(rng.normal(size=(4, 6)), tf.float16) for _ in range(4)]
    out = scd_loss(*xs)
    assert all(t.dtype == tf.float32 and np.isfinite(float(t)) for t in out)


# --------------------------------------------------------------------------------------
# (e): global batch on 2 replicas == one replica
# --------------------------------------------------------------------------------------

class _DistinctViewsSCD(SCD):
    """SCD whose view B gets a fixed per-feature offset on its embedding output: with
    dropout at 0 the two views then differ deterministically, so the self-contrast term has
    a real gradient (with identical views its gradient is 0 up to rounding)."""

    def views(self, batch, training):
        h_a = self.embed(batch, training, dropout=self.dropout_rate_a)
        h_b = self.embed(batch, training, dropout=self.dropout_rate_b,
                         embedding_fn=lambda x, mask: x + tf.linspace(-2.0, 2.0, x.shape[-1]))
        return h_a, h_b


@pytest.fixture(scope="module")
def mirrored_strategy():
    """2 logical CPUs, reducing through one device (no collective all-reduce); its own
    collective keys all the same (conftest.mirrored_cpu_strategy). The gradient reduction is
    still a sum over replicas, which is all the equivalence depends on."""
    return mirrored_cpu_strategy(tf.distribute.ReductionToOneDevice())


def _build_for_equivalence(cls, strategy, weights=None):
    # Mean pooling: a random tiny encoder's [CLS] states hardly vary across sentences, so
    # the projector's BatchNorm divides by a near-zero batch variance and the step becomes
    # too ill-conditioned to compare two summation orders at 1e-5.
    with strategy.scope():
        enc = _encoder(dropout=0.0, num_layers=1)
        model = cls(enc, dropout_rate_a=0.0, dropout_rate_b=0.0, projector_width=16,
                    alpha=1.0, beta=0.5, lambd=0.1, temperature=0.05, train_pooling="mean")
        model.compile(optimizer=keras.optimizers.SGD(0.1), jit_compile=False)
        model.optimizer.build(model.trainable_variables)
    if weights is not None:
        for v, w in zip(model.weights, weights):
            v.assign(w)
    return model


def test_two_replicas_match_one_replica(mirrored_strategy):
    """One SGD step on a global batch of 8: 2 replicas x 4 == 1 replica x 8 in the logged
    losses, every weight (the projector's included: its gradient is divided by the replica
    count) and the projector's BatchNorm moving statistics. Dropout is 0 in both views, so
    both runs are deterministic; the subclass only changes `views` (so that L_S has a
    gradient); the gather, projector, loss and train_step are SCD's own."""
    cls = _DistinctViewsSCD
    single = _build_for_equivalence(cls, tf.distribute.get_strategy())
    init = [v.numpy() for v in single.weights]
    batch = next(iter(pipelines.sentence_dataset(SENTS, single.encoder.tokenizer, 8,
                                                 shuffle=False)))
    ds = tf.data.Dataset.from_tensors(batch)
    h1 = single.fit(ds, epochs=1, steps_per_epoch=1, verbose=0).history
    mirrored = _build_for_equivalence(cls, mirrored_strategy, init)
    assert mirrored.distribute_strategy.num_replicas_in_sync == 2
    h2 = mirrored.fit(ds, epochs=1, steps_per_epoch=1, verbose=0).history
    assert set(h1) == {"loss", "self_contrast_loss", "decorrelation_loss", "grad_norm"}
    for key in set(h1) - {"grad_norm"}:  # grad_norm is per replica (see SentenceMethod)
        np.testing.assert_allclose(h1[key][0], h2[key][0], rtol=1e-5, atol=1e-5, err_msg=key)
    assert h1["self_contrast_loss"][0] < 0.99 / 0.05  # the views really differ
    for a, b in zip(single.weights, mirrored.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5, err_msg=a.path)
    changed = {v.path for v, w0 in zip(single.weights, init) if not np.allclose(v.numpy(), w0)}
    assert any(p.startswith("projector/dense") for p in changed)
    assert any("moving_mean" in p for p in changed)
    assert any(p.startswith("transformer_layer") for p in changed)


# --------------------------------------------------------------------------------------
# (f): fit with XLA; config plumbing
# --------------------------------------------------------------------------------------

def test_fit_with_xla_logs_the_three_metrics():
    """Both views at their default rates, jit_compile=True. One layer and plain SGD: XLA
    compile time dominates on a CPU (AdamW's update roughly doubles it)."""
    enc = _encoder(num_layers=1)
    model = SCD(enc, projector_width=32)
    model.compile(optimizer=keras.optimizers.SGD(1e-3), jit_compile=True)
    ds = pipelines.sentence_dataset(SENTS, enc.tokenizer, 4)
    hist = model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0).history
    assert set(hist) == {"loss", "self_contrast_loss", "decorrelation_loss", "grad_norm"}
    for key, values in hist.items():
        assert np.isfinite(values[0]), key


def test_registry_entry_builds_from_a_run_config():
    assert SPEC.name == "scd" and SPEC.data_kind == "sentences"
    # the base fields SCD overrides on purpose; every other default is SCD's own
    new_fields = set(SPEC.defaults) - {"pooling", "eval_data", "divergence_drop",
                                       "learning_rate", "steps", "eval_every"}
    assert not new_fields & set(BASE_DEFAULTS)
    config = build_config(SPEC.defaults, {}, ["projector_width=8", "scd_lambda=0.02",
                                              "pooling=cls_before_pooler"], method="scd")
    model = SPEC.build(_encoder(), config)
    assert isinstance(model, SCD)
    assert (model.dropout_rate_a, model.dropout_rate_b) == (0.05, 0.15)
    assert model.lambd == 0.02 and model.projector.width == 8 and model.alpha == 0.1
    assert model.train_pooling == model.export_pooling == "cls_before_pooler"
    assert config.get("divergence_drop") == 5.0


def test_matryoshka_is_a_clear_error():
    """SCD's loss goes through its projector: no Matryoshka, said clearly by the
    constructor and by the config."""
    with pytest.raises(ConfigError, match="SCD cannot take a Matryoshka loss"):
        SCD(_encoder(), matryoshka_dims=(16, 8), projector_width=8)
    with pytest.raises(ConfigError, match="'matryoshka_dims' is not a field of method scd"):
        build_config(SPEC.defaults, {}, ["matryoshka_dims=16,8"], method="scd")


def test_get_config_round_trips():
    model = SCD(_encoder(), dropout_rate_a=0.1, dropout_rate_b=0.2, alpha=0.5, beta=0.01,
                lambd=0.02, temperature=0.1, projector_width=8, train_pooling="mean")
    config = model.get_config()
    assert config["dropout_rate_a"] == 0.1 and config["projector_width"] == 8
    proj = Projector.from_config(model.projector.get_config())
    proj.build((None, 16))
    assert proj.get_config() == model.projector.get_config()
    assert len(proj.weights) == len(model.projector.weights)
    with pytest.raises(Exception, match="dropout_rate_b"):
        SCD(_encoder(), dropout_rate_b=1.0)


class TestSCDHarness(MethodHarness):
    def build(self, encoder):
        return SCD(encoder, projector_width=32)
