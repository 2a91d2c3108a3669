"""ConSERT: augmentation semantics, NT-Xent wiring, FGV direction, short fits."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import TINY_VOCAB, mirrored_cpu_strategy
from method_harness import MethodHarness
from tfsent import losses
from tfsent.data import pipelines
from tfsent.testing import tiny_encoder
from tfsent.errors import ConfigError
from tfsent.layers import augment as A
from tfsent.methods.base import concat_features
from tfsent.methods.consert import SPECS, ConSERT

# Padded batch: 7, 4 and 10 real tokens out of 10.
MASK = np.array([[1] * 7 + [0] * 3, [1] * 4 + [0] * 6, [1] * 10], np.int32)
N_REAL = MASK.sum(1)
B, L, H = 3, 10, 20
X = np.random.default_rng(0).normal(size=(B, L, H)).astype(np.float32) + 3.0  # no zeros
S1, S2 = [3, 7], [4, 9]

ROWS = [("a man plays a guitar", "a man plays music", "entailment"),
        ("a man plays a guitar", "a man sleeps", "contradiction"),
        ("a man plays a guitar", "a man is on the mat", "neutral"),
        ("the dog runs", "a dog runs", "entailment"),
        ("the dog runs", "the dog sleeps", "contradiction"),
        ("a child reads a book", "the child reads", "entailment"),
        ("a child reads a book", "the child swims", "contradiction"),
        ("the cat sleeps", "a cat sleeps", "entailment"),
        ("the cat sleeps", "the cat eats", "neutral")]
SENTS = ["a man plays a guitar", "a woman sits on the mat", "the dog runs in the park",
         "a child reads a book", "the cat sleeps", "a man rides a red bike",
         "the woman eats food", "a big tree in the street"]


def _np(fn, *args):
    return fn(*args).numpy()


# --------------------------------------------------------------------------------------
# Augmentations
# --------------------------------------------------------------------------------------

def test_shuffle_permutes_real_positions_only():
    ids = _np(A.shuffle_position_ids, MASK, S1)
    for b in range(B):
        n = N_REAL[b]
        assert sorted(ids[b, :n].tolist()) == list(range(n))  # a permutation, CLS/SEP in
        np.testing.assert_array_equal(ids[b, n:], np.arange(n, L))  # padding keeps its own
    assert not np.array_equal(ids[:, :], np.tile(np.arange(L), (B, 1)))
    np.testing.assert_array_equal(ids, _np(A.shuffle_position_ids, MASK, S1))
    assert not np.array_equal(ids, _np(A.shuffle_position_ids, MASK, S2))
    # Non-prefix mask: real positions {0, 2, 5} receive a permutation of themselves.
    m = np.array([[1, 0, 1, 0, 0, 1]], np.int32)
    got = _np(A.shuffle_position_ids, m, S1)[0]
    assert sorted(got[[0, 2, 5]].tolist()) == [0, 2, 5]
    np.testing.assert_array_equal(got[[1, 3, 4]], [1, 3, 4])


def test_shuffle_changes_only_positions_in_the_encoder():
    enc = tiny_encoder(TINY_VOCAB, max_seq_length=12, dropout=0.0, seed=1)
    feats = enc.tokenizer(SENTS[:3])
    ids = A.shuffle_position_ids(feats["padding_mask"], S1)
    ident = A.identity_position_ids(feats["padding_mask"])
    ref = enc(feats)["embedding"].numpy()
    np.testing.assert_allclose(enc(feats, position_ids=ident)["embedding"].numpy(), ref,
                               atol=1e-6)
    assert np.abs(enc(feats, position_ids=ids)["embedding"].numpy() - ref).max() > 1e-4


@pytest.mark.parametrize("rate", [0.15, 0.3, 0.5, 0.29])
def test_token_cutoff_zeroes_int_n_r_real_rows(rate):
    out = _np(A.token_cutoff, X, MASK, rate, S1)
    zero_rows = np.all(out == 0, axis=-1)
    for b in range(B):
        n = N_REAL[b]
        assert zero_rows[b].sum() == int(n * rate), (b, n, rate)
        assert not zero_rows[b, n:].any()  # padding untouched
        kept = ~zero_rows[b]
        np.testing.assert_array_equal(out[b][kept], X[b][kept])  # the rest unchanged
    np.testing.assert_array_equal(out, _np(A.token_cutoff, X, MASK, rate, S1))
    if rate >= 0.3:
        assert not np.array_equal(out, _np(A.token_cutoff, X, MASK, rate, S2))


def test_token_cutoff_dynamic_length_uses_the_same_count():
    fn = tf.function(lambda m: A.token_cutoff_mask(m, 0.29, S1),
                     input_signature=[tf.TensorSpec([None, None], tf.int32)])
    got = fn(tf.constant(MASK)).numpy()
    np.testing.assert_array_equal(got.sum(1), [int(n * 0.29) for n in N_REAL])
    np.testing.assert_array_equal(got, A.token_cutoff_mask(MASK, 0.29, S1).numpy())


def test_feature_cutoff_zeroes_same_columns_on_real_tokens():
    rate = 0.2
    out = _np(A.feature_cutoff, X, MASK, rate, S1)
    for b in range(B):
        n = N_REAL[b]
        zero_cols = np.all(out[b, :n] == 0, axis=0)
        assert zero_cols.sum() == int(H * rate)
        # Same columns at every real position and nothing else zeroed.
        np.testing.assert_array_equal(out[b, :n] == 0, np.tile(zero_cols, (n, 1)))
        np.testing.assert_array_equal(out[b, n:], X[b, n:])  # padding untouched
        np.testing.assert_array_equal(out[b, :n][:, ~zero_cols], X[b, :n][:, ~zero_cols])
    cols = [tuple(np.flatnonzero(np.all(out[b, :1] == 0, axis=0))) for b in range(B)]
    assert len(set(cols)) > 1  # drawn per row
    np.testing.assert_array_equal(out, _np(A.feature_cutoff, X, MASK, rate, S1))
    assert not np.array_equal(out, _np(A.feature_cutoff, X, MASK, rate, S2))


def test_dropout_augment_no_rescale_real_rows_only():
    rate = 0.3
    big = np.ones((2, 64, 128), np.float32)
    mask = np.zeros((2, 64), np.int32)
    mask[0, :50] = 1
    mask[1, :20] = 1
    out = _np(A.dropout_augment, big, mask, rate, S1)
    assert set(np.unique(out).tolist()) <= {0.0, 1.0}  # kept elements are NOT rescaled
    real = mask.astype(bool)
    frac = float(np.mean(out[real] == 0))
    assert abs(frac - rate) < 0.02, frac
    assert np.all(out[~real] == 1.0)  # padding untouched
    np.testing.assert_array_equal(out, _np(A.dropout_augment, big, mask, rate, S1))
    assert not np.array_equal(out, _np(A.dropout_augment, big, mask, rate, S2))


def test_none_and_shuffle_leave_x_and_config_roundtrip():
    for kind in ("none", "shuffle"):
        aug = A.Augmentation(kind)
        np.testing.assert_array_equal(aug.apply(tf.constant(X), MASK, S1).numpy(), X)
    assert A.Augmentation("none").position_ids(MASK, S1) is None
    aug = A.Augmentation("token_cutoff", 0.15, name="v1")
    clone = A.Augmentation.from_config(aug.get_config())
    assert (clone.kind, clone.rate) == ("token_cutoff", 0.15)
    with pytest.raises(ConfigError):
        A.Augmentation("crop")


def test_fgv_is_unit_norm_per_real_token():
    g = np.random.default_rng(1).normal(size=(B, L, H)).astype(np.float32)
    d = _np(A.fgv_perturbation, tf.constant(g), MASK, 0.5)
    for b in range(B):
        n = N_REAL[b]
        np.testing.assert_allclose(np.linalg.norm(d[b, :n], axis=-1), 0.5, rtol=1e-5)
        np.testing.assert_allclose(d[b, :n] / 0.5,
                                   g[b, :n] / np.linalg.norm(g[b, :n], axis=-1,
                                                             keepdims=True), atol=1e-6)
        assert np.all(d[b, n:] == 0)


def test_augmentations_compile_with_xla():
    @tf.function(jit_compile=True)
    def run(x, m, seed):
        return (A.token_cutoff(x, m, 0.15, seed), A.feature_cutoff(x, m, 0.2, seed),
                A.dropout_augment(x, m, 0.2, seed), A.shuffle_position_ids(m, seed))

    got = run(tf.constant(X), tf.constant(MASK), tf.constant(S1))
    np.testing.assert_array_equal(got[0].numpy(), _np(A.token_cutoff, X, MASK, 0.15, S1))
    np.testing.assert_array_equal(got[3].numpy(), _np(A.shuffle_position_ids, MASK, S1))


# --------------------------------------------------------------------------------------
# Method wiring
# --------------------------------------------------------------------------------------

def _encoder(seed=0):
    return tiny_encoder(TINY_VOCAB, max_seq_length=12, dropout=0.1, seed=seed)


def test_adversarial_is_a_config_error_in_unsup():
    with pytest.raises(ConfigError):
        ConSERT(_encoder(), mode="unsup", view1_augmentation="adversarial")
    with pytest.raises(ConfigError):
        ConSERT(_encoder(), mode="other")
    ConSERT(_encoder(), mode="joint", view1_augmentation="adversarial")


def test_nt_xent_sum_vs_mean_wiring():
    enc = _encoder()
    feats = enc.tokenizer(SENTS)
    m_sum = ConSERT(enc, mode="unsup", direction_reduction="sum")
    m_mean = ConSERT(enc, mode="unsup", direction_reduction="mean")
    z1, z2 = m_sum.views(feats, True, seeds=(tf.constant(S1), tf.constant(S2)))
    # Without an optimizer both compute_losses and views() use the step-0 seeds.
    loss_sum, logs = m_sum.compute_losses(feats)
    loss_mean, _ = m_mean.compute_losses(feats)
    z1s, z2s = m_sum.views(feats, True)
    ref = float(losses.nt_xent(z1s, z2s, 0.1, "mean"))
    assert float(loss_mean) == pytest.approx(ref, rel=1e-5)
    assert float(loss_sum) == pytest.approx(2 * ref, rel=1e-5)
    assert float(logs["contrastive_loss"]) == float(loss_sum)
    # masked version: all-valid equals nt_xent; invalid rows drop out exactly.
    v = tf.ones([z1.shape[0]])
    assert float(losses.nt_xent(z1, z2, 0.1, "mean", valid=v)) == pytest.approx(
        float(losses.nt_xent(z1, z2, 0.1, "mean")), rel=1e-6)
    keep = np.array([1, 1, 1, 1, 1, 0, 1, 0], np.float32)
    idx = np.flatnonzero(keep)
    assert float(losses.nt_xent(z1, z2, 0.1, "sum", valid=keep)) == pytest.approx(
        float(losses.nt_xent(tf.gather(z1, idx), tf.gather(z2, idx), 0.1, "sum")), rel=1e-5)


def test_views_are_deterministic_and_encoder_dropout_off():
    enc = _encoder()
    feats = enc.tokenizer(SENTS)
    model = ConSERT(enc, mode="unsup", view1_augmentation="none", view2_augmentation="none")
    z1, z2 = model.views(feats, True)
    ref = enc(feats)["embedding"].numpy()
    np.testing.assert_allclose(z1.numpy(), ref, atol=1e-6)  # backbone rate 0.1 not used
    np.testing.assert_allclose(z2.numpy(), ref, atol=1e-6)
    model = ConSERT(enc, mode="unsup")  # feature_cutoff / shuffle
    a1, a2 = model.views(feats, True)
    b1, b2 = model.views(feats, True)
    np.testing.assert_array_equal(a1.numpy(), b1.numpy())
    assert np.abs(a1.numpy() - ref).max() > 1e-4 and np.abs(a2.numpy() - ref).max() > 1e-4


def _nli_batch(tokenizer):
    return next(iter(pipelines.nli_pair_dataset(ROWS, tokenizer, 8, seed=0)))


def test_adversarial_direction_increases_ce_to_first_order():
    enc = tiny_encoder(TINY_VOCAB, max_seq_length=12, dropout=0.0, seed=3)
    model = ConSERT(enc, mode="joint", view2_augmentation="adversarial",
                    adversarial_epsilon=1.0)
    batch = _nli_batch(enc.tokenizer)
    sents = concat_features([batch["premise"], batch["hypothesis"]])
    labels = tf.cast(batch["label"], tf.int32)
    valid = tf.cast(batch["valid"], tf.float32)

    def ce_at(shift):
        fn = None if shift is None else (lambda x, m: x + shift)
        _, ce, _ = model.supervised_pass(sents, labels, False, fn)
        return float(tf.reduce_sum(ce * valid) / tf.reduce_sum(valid))

    _, ce0, _, d = model.adversarial_pass(sents, labels, valid, training=False)
    base = float(tf.reduce_sum(ce0 * valid) / tf.reduce_sum(valid))
    assert base == pytest.approx(ce_at(None), abs=1e-6)
    # The gradient itself, for the predicted directional derivative.
    x0 = {}
    with tf.GradientTape() as tape:
        def cap(x, m):
            tape.watch(x)
            x0["x"] = x
            return x
        _, ce, _ = model.supervised_pass(sents, labels, False, cap)
        loss = tf.reduce_sum(ce * valid) / tf.reduce_sum(valid)
    g = tape.gradient(loss, x0["x"]).numpy()
    predicted = float(np.sum(g * d.numpy()))  # = sum over real tokens of ||g_t||
    real = sents["padding_mask"].numpy().astype(bool)
    assert predicted == pytest.approx(float(np.linalg.norm(g, axis=-1)[real].sum()), rel=1e-4)
    assert predicted > 0
    h = 1e-2
    forward = (ce_at(h * d) - base) / h
    central = (ce_at(h * d) - ce_at(-h * d)) / (2 * h)
    assert forward > 0
    assert central == pytest.approx(predicted, rel=0.05)
    # A random unit-per-token direction gains much less than the FGV one.
    r = tf.random.stateless_normal(d.shape, [1, 2])
    r = A.fgv_perturbation(r, sents["padding_mask"], 1.0)
    assert (ce_at(h * r) - base) / h < forward


# --------------------------------------------------------------------------------------
# Short fits and the registry
# --------------------------------------------------------------------------------------

def test_fit_unsup_xla():
    enc = _encoder()
    model = ConSERT(enc, mode="unsup", view1_augmentation="token_cutoff",
                    view2_augmentation="shuffle")
    model.compile(optimizer=keras.optimizers.AdamW(1e-3), jit_compile=True)
    ds = pipelines.sentence_dataset(SENTS, enc.tokenizer, 8, seed=0)
    hist = model.fit(ds, epochs=1, steps_per_epoch=4, verbose=0).history
    assert set(hist) == {"loss", "contrastive_loss", "grad_norm"}
    assert all(np.isfinite(hist["loss"]))


def test_fit_joint_adversarial():
    """Joint mode with the FGV view and the max(u, v)^2 feature (no XLA: CPU time; the
    augmentations' XLA path is covered above, the joint loss's value below)."""
    enc = _encoder()
    model = ConSERT(enc, mode="joint", view1_augmentation="dropout",
                    view2_augmentation="adversarial", ce_max_feature=True)
    model.compile(optimizer=keras.optimizers.AdamW(1e-3), jit_compile=False)
    ds = pipelines.nli_pair_dataset(ROWS, enc.tokenizer, 8, seed=0)
    before = [v.numpy().copy() for v in model.classifier.trainable_variables]
    hist = model.fit(ds, epochs=1, steps_per_epoch=3, verbose=0).history
    for key in ("loss", "ce_loss", "contrastive_loss", "nli_accuracy"):
        assert np.isfinite(hist[key][0]), key
    after = model.classifier.trainable_variables
    assert any(np.abs(a.numpy() - b).max() > 0 for a, b in zip(after, before))
    assert 0.0 <= model.nli_accuracy(ROWS) <= 100.0


def test_joint_loss_is_ce_plus_alpha_con_and_sup_is_ce():
    enc = tiny_encoder(TINY_VOCAB, max_seq_length=12, dropout=0.0, seed=5)
    joint = ConSERT(enc, mode="joint", alpha=0.15)
    batch = _nli_batch(enc.tokenizer)
    obj, logs = joint.compute_losses(batch)
    assert float(obj) == pytest.approx(float(logs["ce_loss"]) + 0.15 *
                                       float(logs["contrastive_loss"]), rel=1e-6)
    sup = ConSERT(enc, mode="sup")
    sup.classifier.set_weights(joint.classifier.get_weights())
    obj_s, logs_s = sup.compute_losses(batch)
    assert set(logs_s) == {"loss", "ce_loss", "nli_accuracy"}
    assert float(obj_s) == pytest.approx(float(logs["ce_loss"]), rel=1e-6)


def test_registry_entries_build_from_config():
    from tfsent.training.config import BASE_DEFAULTS, build_config

    specs = {spec.name: spec for spec in SPECS}
    assert set(specs) == {"consert", "consert_joint", "consert_sup"}
    assert specs["consert"].data_kind == "sentences"
    assert specs["consert_joint"].data_kind == "nli_pairs"
    assert specs["consert_joint"].defaults["train_data"] == "demo_nli"
    # The unsupervised demo rate (1e-6) is the CPU demo's (docs/results.md, "No-flag runs"); the
    # reference's BERT-base rate is in configs/consert_unsup.py.
    d = specs["consert"].defaults
    assert (d["view1_augmentation"], d["feature_cutoff_rate"], d["view2_augmentation"],
            d["temperature"], d["batch_size"], d["learning_rate"], d["warmup_ratio"],
            d["pooling"]) == ("feature_cutoff", 0.2, "shuffle", 0.1, 32, 1e-6, 0.1, "mean")
    # The supervised modes follow the reference's joint script.
    j = specs["consert_joint"].defaults
    assert (j["view1_augmentation"], j["view2_augmentation"], j["token_cutoff_rate"],
            j["ce_max_feature"], j["encoder_dropout"], j["learning_rate"]) == (
        "none", "token_cutoff", 0.1, True, None, 2e-5)
    for spec in specs.values():
        added = set(spec.defaults) - {"pooling", "batch_size", "learning_rate",
                                      "warmup_ratio", "train_data"}
        assert not added & set(BASE_DEFAULTS), added & set(BASE_DEFAULTS)
        config = build_config(spec.defaults, overrides=["view2_augmentation=token_cutoff",
                                                        "direction_reduction=mean"],
                              method=spec.name)
        model = spec.build(_encoder(), config)
        assert model.direction_reduction == "mean"
        assert model.aug2.rate == spec.defaults["token_cutoff_rate"]


def test_matryoshka_wraps_the_views_nt_xent():
    """Matryoshka composes with ConSERT: the unsup objective is the weighted sum of the
    NT-Xent of the views' prefixes; sup mode (no embedding loss) refuses it."""
    model = ConSERT(_encoder(), matryoshka_dims=(16, 4), matryoshka_weights=(1.0, 0.5))
    rng = np.random.default_rng(0)
    z1, z2 = (tf.constant(rng.normal(size=(6, 16)).astype(np.float32)) for _ in range(2))
    want = sum(w * float(losses.nt_xent(z1[:, :d], z2[:, :d], 0.1, "sum"))
               for d, w in ((16, 1.0), (4, 0.5)))
    assert float(model.contrastive_loss(z1, z2)) == pytest.approx(want, rel=1e-5)
    with pytest.raises(ConfigError, match="mode 'sup'.*cannot take a Matryoshka loss"):
        ConSERT(_encoder(), mode="sup", matryoshka_dims=(16, 4))


# --------------------------------------------------------------------------------------
# Joint objective as the reference computes it (issue #18)
# --------------------------------------------------------------------------------------

def np_nt_xent_sum(a, b, tau):
    """The reference's `_contrastive_loss_forward` (AdvCLSoftmaxLoss): rows normalised,
    loss_a = CE over [a.b^T, a.a^T - self] with label i, loss_b the same from b; returns
    loss_a + loss_b (each a mean over the B anchors)."""
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    total = 0.0
    for x, y in ((a, b), (b, a)):
        logits = np.concatenate([x @ y.T, x @ x.T - 1e9 * np.eye(len(x))], 1) / tau
        m = logits.max(1, keepdims=True)
        lse = (m + np.log(np.exp(logits - m).sum(1, keepdims=True)))[:, 0]
        total += float(np.mean(lse - np.diag(logits[:, :len(x)])))
    return total


def _pair_batch(tokenizer, rows):
    """A batch of NLI pairs in the pipeline's format, in the order given (all valid)."""
    premises = sorted({r[0] for r in rows})
    return {"premise": tokenizer([r[0] for r in rows]),
            "hypothesis": tokenizer([r[1] for r in rows]),
            "label": tf.constant([pipelines.NLI_LABEL_IDS[r[2]] for r in rows], tf.int32),
            "premise_id": tf.constant([premises.index(r[0]) for r in rows], tf.int32),
            "valid": tf.ones([len(rows)], tf.float32)}


def test_joint_contrastive_term_is_premises_plus_hypotheses_separately():
    """L_con = NT-Xent(premise views) + NT-Xent(hypothesis views): an entailed
    hypothesis is never a negative of its premise. View 1 is the CE pass, view 2 token
    cutoff (the reference's joint script); no dropout, so both are reproducible here."""
    enc = tiny_encoder(TINY_VOCAB, max_seq_length=12, dropout=0.0, seed=6)
    model = ConSERT(enc, mode="joint", view1_augmentation="none",
                    view2_augmentation="token_cutoff", token_cutoff_rate=0.3,
                    ce_max_feature=True, alpha=0.15)
    batch = _pair_batch(enc.tokenizer, [r for r in ROWS if r[2] == "entailment"] * 2)
    objective, logs = model.compute_losses(batch, training=True)
    seed2 = model.step_seeds()[1]
    both = concat_features([batch["premise"], batch["hypothesis"]])  # as the model stacks
    view1 = np.split(enc(both, pooling="mean")["embedding"].numpy(), 2)
    view2 = np.split(enc(both, pooling="mean", training=True, dropout=0.0,
                         embedding_fn=lambda x, m: A.token_cutoff(x, m, 0.3, seed2))[
        "embedding"].numpy(), 2)
    views = {"premise": (view1[0], view2[0]), "hypothesis": (view1[1], view2[1])}
    want = sum(np_nt_xent_sum(*views[side], 0.1) for side in views)
    assert float(logs["contrastive_loss"]) == pytest.approx(want, rel=1e-5)
    assert float(objective) == pytest.approx(float(logs["ce_loss"]) + 0.15 * want, rel=1e-5)


def test_consert_nli_modes_read_shuffled_pairs_supcon_grouped(tmp_path):
    """ConSERT's NLI modes read ordinary shuffled batches (an anchor's own premise text is
    rarely among its batch's other rows); SupCon-SBERT keeps premise-grouped batches."""
    from tfsent.training.config import build_config
    from tfsent.methods import get_method
    from tfsent.training import make_dataset

    words = TINY_VOCAB[7:]
    rows = [(f"the {words[p]} {words[p + 1]}", f"a {words[p]} {words[h]}", label)
            for p in range(30) for h, label in ((2, "entailment"), (3, "neutral"),
                                                (4, "contradiction"))]
    enc = tiny_encoder(TINY_VOCAB, max_seq_length=8)
    index = {(r[0], r[1]): i for i, r in enumerate(rows)}
    copies = {}
    for method in ("consert_joint", "consert_sup", "supcon"):
        spec = get_method(method)
        config = build_config(spec.defaults, {"batch_size": 9}, method=method)
        ds = make_dataset(spec, config, enc, rows, 0, str(tmp_path))
        seen, same = [], []
        for batch in ds.take(len(rows) // 9):  # one epoch
            pids = batch["premise_id"].numpy()[batch["valid"].numpy() > 0]
            same.append(np.mean([np.sum(pids == p) - 1 for p in pids]))
            seen += pids.tolist()
        copies[method] = float(np.mean(same))
        assert sorted(np.bincount(np.int64(seen)).tolist()) == [3] * 30  # each row once
    assert copies["supcon"] == pytest.approx(2.0)  # every premise's 3 rows together
    assert copies["consert_joint"] < 0.5 and copies["consert_sup"] < 0.5


def test_joint_two_replicas_match_one_replica():
    """One SGD step of the joint loss on a global batch of 8: 2 replicas x 4 give the same
    logged losses and weights as 1 x 8 (premise and hypothesis views are gathered apart).
    Views `none` and encoder dropout 0: deterministic (augmentation seeds depend on the
    replica). ReductionToOneDevice: see tests/test_scd.py's mirrored_strategy."""
    mirrored = mirrored_cpu_strategy(tf.distribute.ReductionToOneDevice())
    rows = ROWS[:8]
    results = []
    init = None
    for strategy in (tf.distribute.get_strategy(), mirrored):
        with strategy.scope():
            enc = tiny_encoder(TINY_VOCAB, max_seq_length=12, dropout=0.0, seed=8)
            model = ConSERT(enc, mode="joint", view1_augmentation="none",
                            view2_augmentation="none", ce_max_feature=True, alpha=0.5)
            model.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=False)
            model.optimizer.build(model.trainable_variables)
        if init is None:
            init = [v.numpy() for v in model.trainable_variables]
        for v, w in zip(model.trainable_variables, init):
            v.assign(w)
        batch = _pair_batch(enc.tokenizer, rows)
        hist = model.fit(tf.data.Dataset.from_tensors(batch), epochs=1, steps_per_epoch=1,
                         verbose=0).history
        results.append((hist, [v.numpy() for v in model.trainable_variables]))
    (h1, w1), (h2, w2) = results
    for key in ("loss", "ce_loss", "contrastive_loss", "nli_accuracy"):
        np.testing.assert_allclose(h1[key][0], h2[key][0], rtol=1e-5, atol=1e-5, err_msg=key)
    for a, b, w0 in zip(w1, w2, init):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert any(not np.allclose(a, w0) for a, w0 in zip(w1, init))


class TestConSERTUnsupervisedHarness(MethodHarness):
    def build(self, encoder):
        return ConSERT(encoder, mode="unsup")


class TestConSERTJointHarness(MethodHarness):
    def build(self, encoder):
        return ConSERT(encoder, mode="joint")


class TestConSERTSupervisedHarness(MethodHarness):
    def build(self, encoder):
        return ConSERT(encoder, mode="sup")
