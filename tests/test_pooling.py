"""Poolers against NumPy, padding invariance, the in-graph tokenizer, and the encoder's
forward pass against keras-hub's own BertBackbone."""

import numpy as np
import pytest
import tensorflow as tf

from tfsent.encoders import DROPOUT_SITES, POOLINGS, SentenceEncoder, SentenceTokenizer, pool
from tfsent.testing import tiny_encoder
from tfsent.errors import ConfigError

WORDS = ("a the man woman dog cat plays runs sits on in park guitar mat big small "
         "cafe ab ##cd ##s").split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
MAX_LEN = 16

SENTENCES = ["a man plays the guitar in the park", "", "the dog sits", "cats",
             "a big small woman runs on a mat"]


def ids(*words):
    return [VOCAB.index(w) for w in words]


@pytest.fixture(scope="module")
def encoder():
    return tiny_encoder(VOCAB, num_layers=3, max_seq_length=MAX_LEN, seed=3)


def tokenizer(pad_to_max_length=True, max_seq_length=MAX_LEN, **kwargs):
    return SentenceTokenizer(VOCAB, max_seq_length=max_seq_length,
                             pad_to_max_length=pad_to_max_length, **kwargs)


# --------------------------------------------------------------------------------------
# NumPy poolers, from docs/methods.md "Poolings"
# --------------------------------------------------------------------------------------

def np_masked_mean(x, m):
    m = m.astype(np.float64)[:, :, None]
    return (x * m).sum(1) / m.sum(1)


def np_pool(name, hs, mask, kernel, bias):
    hs = [np.asarray(h, np.float64) for h in hs]
    last = hs[-1]
    if name == "cls":
        return np.tanh(last[:, 0] @ kernel + bias)
    if name == "cls_before_pooler":
        return last[:, 0]
    if name == "mean":
        return np_masked_mean(last, mask)
    if name == "mean_no_cls":
        m = mask.copy()
        m[:, 0] = 0
        return np_masked_mean(last, m)
    if name == "first_last_avg":  # layer 1 output + last layer
        return np_masked_mean((hs[1] + last) / 2, mask)
    if name == "emb_last_avg":  # embedding output + last layer
        return np_masked_mean((hs[0] + last) / 2, mask)
    if name == "last2_avg":
        return np_masked_mean((hs[-2] + last) / 2, mask)
    if name == "last_token":  # right padding here: the row's last real position
        return last[np.arange(len(last)), mask.sum(1) - 1]
    raise AssertionError(name)


def test_tokenized_batch_layout():
    feats = tokenizer()(SENTENCES)
    tok = feats["token_ids"].numpy()
    mask = feats["padding_mask"].numpy()
    assert tok.shape == (5, MAX_LEN) and mask.shape == (5, MAX_LEN)
    assert tok[1, :2].tolist() == [CLS, SEP] and mask[1].tolist() == [1, 1] + [0] * 14
    assert tok[2, :5].tolist() == [CLS] + ids("the", "dog", "sits") + [SEP]
    assert tok[3, :4].tolist() == [CLS] + ids("cat", "##s") + [SEP]
    assert mask.sum(1).tolist() == [10, 2, 5, 4, 10]
    assert (tok[mask == 0] == PAD).all()


def test_every_pooler_matches_numpy(encoder):
    feats = tokenizer()(SENTENCES)
    mask = feats["padding_mask"].numpy()
    assert mask.sum(1).min() == 2 and mask.sum(1).max() < MAX_LEN  # "" and real padding
    out = encoder(feats, output_hidden_states=True)
    hs = [h.numpy() for h in out["hidden_states"]]
    assert len(hs) == encoder.num_layers + 1 == 4
    dense = encoder.backbone.pooled_dense
    kernel, bias = dense.kernel.numpy(), dense.bias.numpy()
    embs = {}
    for name in POOLINGS:
        got = encoder(feats, pooling=name)["embedding"].numpy()
        assert got.shape == (5, 16)
        np.testing.assert_allclose(got, np_pool(name, hs, mask, kernel, bias), atol=1e-5,
                                   err_msg=name)
        # The pure function agrees with the model call.
        np.testing.assert_allclose(pool(name, out["hidden_states"], feats["padding_mask"],
                                        dense).numpy(), got, atol=1e-6, err_msg=name)
        embs[name] = got
    # The poolers are really different from each other (guards against a test that passes
    # because everything collapsed to one pooler).
    names = list(POOLINGS)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not np.allclose(embs[a], embs[b], atol=1e-3), (a, b)
    # Mask-aware: including padding in the mean gives a different answer.
    naive = hs[-1].mean(1)
    assert not np.allclose(embs["mean"], naive, atol=1e-3)


@pytest.mark.parametrize("name", POOLINGS)
def test_padding_does_not_change_embedding(encoder, name):
    sentence = "the dog sits on a mat"
    longer = "a man plays the big guitar in the park on a small mat"
    results = []
    for pad_to_max in (False, True):
        tok = tokenizer(pad_to_max_length=pad_to_max)
        alone = tok([sentence])
        batch = tok([longer, sentence, ""])
        if not pad_to_max:
            assert alone["token_ids"].shape[1] == 8  # no padding at all
        assert batch["token_ids"].shape[1] > 8
        results.append(encoder(alone, pooling=name)["embedding"].numpy()[0])
        results.append(encoder(batch, pooling=name)["embedding"].numpy()[1])
    for r in results[1:]:
        np.testing.assert_allclose(r, results[0], atol=1e-5)


def test_unknown_pooling_raises_config_error(encoder):
    feats = tokenizer()(["a man"])
    with pytest.raises(ConfigError):
        encoder(feats, pooling="max")
    with pytest.raises(ConfigError):
        pool("max", [tf.zeros((1, 2, 3))] * 2, tf.ones((1, 2), tf.int32))
    with pytest.raises(ConfigError):
        SentenceEncoder(encoder.backbone, encoder.tokenizer, pooling="cls_after_pooler")


# --------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("pad_to_max", [False, True])
def test_tokenizer_truncates_long_text(pad_to_max):
    text = " ".join(["the dog"] * 60)
    feats = tokenizer(pad_to_max)([text, "a man"])
    tok = feats["token_ids"].numpy()
    assert tok.shape == (2, MAX_LEN)
    assert tok[0, 0] == CLS and tok[0, -1] == SEP
    assert tok[0, 1:-1].tolist() == ids("the", "dog") * 7
    assert feats["padding_mask"].numpy()[0].tolist() == [1] * MAX_LEN
    assert tok[1, :4].tolist() == [CLS] + ids("a", "man") + [SEP]


def test_tokenizer_empty_and_whitespace_only():
    texts = ["", " ", "   \t \n  ", "\r\n", "\u00a0", "\u3000 \u2003"]
    for pad_to_max in (False, True):
        feats = tokenizer(pad_to_max)(texts)
        tok = feats["token_ids"].numpy()
        mask = feats["padding_mask"].numpy()
        for row, text in enumerate(texts):
            assert tok[row, :2].tolist() == [CLS, SEP], repr(text)
            assert (tok[row, 2:] == PAD).all() and mask[row].sum() == 2, repr(text)
        assert tok.shape[1] == (MAX_LEN if pad_to_max else 2)


def test_tokenizer_unicode_space_separators_are_whitespace():
    # HF BERT's _is_whitespace counts every Unicode Zs character (no-break space, em space,
    # ideographic space...) as whitespace, not as a word character.
    tok = tokenizer(False)
    for sep in ("\u00a0", "\u2003", "\u202f", "\u3000"):
        got = tok([f"a{sep}man"])["token_ids"].numpy()[0].tolist()
        assert got == [CLS] + ids("a", "man") + [SEP], repr(sep)


def test_tokenizer_invalid_utf8_does_not_crash():
    tok = tokenizer(False)
    feats = tok(tf.constant([b"ab\xffcd", b"\xff\xfe", b"the \xc3 dog"]))
    got = feats["token_ids"].numpy()
    # HF clean_text: the replacement character is dropped, so "ab\xffcd" reads as "abcd".
    assert got[0, :4].tolist() == [CLS] + ids("ab", "##cd") + [SEP]
    assert got[1, :2].tolist() == [CLS, SEP] and feats["padding_mask"].numpy()[1].sum() == 2
    assert got[2, :4].tolist() == [CLS] + ids("the", "dog") + [SEP]


def test_tokenizer_strips_accents():
    tok = tokenizer(False, strip_accents=True)
    a = tok(["café", "CAFÉ", "cafe"])["token_ids"].numpy()
    assert a[0].tolist() == [CLS] + ids("cafe") + [SEP]
    assert a[0].tolist() == a[1].tolist() == a[2].tolist()
    # Without stripping, "café" is not in the vocabulary.
    b = SentenceTokenizer(VOCAB, strip_accents=False, max_seq_length=MAX_LEN,
                          pad_to_max_length=False)(["café"])["token_ids"].numpy()
    assert b[0].tolist() == [CLS, UNK, SEP]


# --------------------------------------------------------------------------------------
# Forward pass vs keras-hub, and per-call dropout
# --------------------------------------------------------------------------------------

def test_forward_equals_keras_hub_backbone():
    encoder = tiny_encoder(VOCAB, num_layers=2, max_seq_length=MAX_LEN, seed=4)
    # A freshly initialised FFN (kernels ~ N(0, 0.02)) sees pre-activations near 0, where
    # exact and tanh-approximate GELU agree to ~1e-7, and its output is tiny next to the
    # residual; scale both FFN kernels so the activation choice visibly matters.
    for layer in encoder.backbone.transformer_layers:
        for dense, scale in ((layer._feedforward_intermediate_dense, 8.0),
                             (layer._feedforward_output_dense, 20.0)):
            dense.kernel.assign(dense.kernel * scale)
    enc = SentenceEncoder(encoder.backbone, encoder.tokenizer, pooling="cls",
                          activation="gelu_approximate")
    feats = tokenizer()(SENTENCES)
    ref = encoder.backbone({"token_ids": feats["token_ids"],
                            "segment_ids": feats["segment_ids"],
                            "padding_mask": feats["padding_mask"]})
    ours = enc(feats)
    mask = feats["padding_mask"].numpy().astype(bool)
    seq, ref_seq = ours["sequence_output"].numpy(), ref["sequence_output"].numpy()
    np.testing.assert_allclose(seq[mask], ref_seq[mask], atol=1e-5)
    np.testing.assert_allclose(seq, ref_seq, atol=1e-5)
    np.testing.assert_allclose(ours["embedding"].numpy(), ref["pooled_output"].numpy(),
                               atol=1e-5)
    # The exact-GELU encoder (HF's activation) is a different function: the comparison above
    # is not trivially true.
    exact = encoder(feats)["sequence_output"].numpy()
    assert np.abs(exact - ref_seq).max() > 2e-4  # 20x the tolerance above


def test_dropout_rates_per_call(encoder):
    feats = tokenizer()(SENTENCES)
    assert encoder.default_dropout == pytest.approx(0.1)
    ref = encoder(feats, output_hidden_states=True)["hidden_states"][-1].numpy()
    ref_again = encoder(feats, training=False)["sequence_output"].numpy()
    np.testing.assert_array_equal(ref, ref_again)
    # Inference ignores the dropout argument.
    np.testing.assert_array_equal(
        encoder(feats, training=False, dropout=0.5)["sequence_output"].numpy(), ref)
    zero = dict.fromkeys(DROPOUT_SITES, 0.0)
    for spec in (zero, 0.0):
        out = encoder(feats, training=True, dropout=spec)["sequence_output"].numpy()
        np.testing.assert_allclose(out, ref, atol=1e-6)
    # Backbone default (0.1) in training mode, and each site on its own, change the output.
    assert np.abs(encoder(feats, training=True)["sequence_output"].numpy() - ref).max() > 1e-3
    for site in DROPOUT_SITES:
        spec = dict(zero, **{site: 0.2})
        out = encoder(feats, training=True, dropout=spec)["sequence_output"].numpy()
        assert np.abs(out - ref).max() > 1e-3, site
    # Two training calls draw different masks.
    a = encoder(feats, training=True, dropout=0.2)["embedding"].numpy()
    b = encoder(feats, training=True, dropout=0.2)["embedding"].numpy()
    assert not np.allclose(a, b)


def test_threefry_dropout_masks():
    """`threefry_dropout` (under XLA): about `rate` of the values zeroed, the rest scaled by
    1 / (1 - rate); one seed one mask whatever the dtype; seeds one apart (the seed
    generator's steps) and other keys give masks that agree as independent ones would
    (0.9^2 + 0.1^2 = 0.82 of positions)."""
    from tfsent.encoders.model import threefry_dropout

    drop = tf.function(threefry_dropout, jit_compile=True)
    ones = tf.ones([2000, 500])  # 1e6 values: the zeroed share's std is 3e-4

    def mask(seed, x=ones):
        out = drop(x, 0.1, tf.constant(seed, tf.int32))
        return out.numpy().astype(np.float32) != 0, out

    a, out = mask([7, 0])
    assert abs(1 - a.mean() - 0.1) < 0.002
    np.testing.assert_allclose(out.numpy()[a], 1 / 0.9, rtol=1e-6)
    np.testing.assert_array_equal(mask([7, 0])[0], a)  # stateless: same seed, same mask
    half, out16 = mask([7, 0], tf.ones([2000, 500], tf.bfloat16))
    assert out16.dtype == tf.bfloat16
    np.testing.assert_array_equal(half, a)  # float32 uniforms whatever x's dtype
    for other in ([7, 1], [8, 0], [-3, 12345]):
        agree = (mask(other)[0] == a).mean()
        assert abs(agree - 0.82) < 0.003, (other, agree)


def test_forward_dropout_is_threefry_under_xla_and_keras_otherwise(encoder):
    """The forward's dropout sites draw `threefry_dropout` masks from the encoder's seed
    generator while XLA compiles (XLA:CPU's Philox is 5x slower; docs/methods.md, "Dropout
    masks under XLA"), Keras's own dropout in plain graphs and eagerly."""
    from tfsent.encoders.model import in_xla_compilation, threefry_dropout

    seen = []  # what tracing saw, per jit_compile
    for jit in (True, False):
        tf.function(lambda: seen.append(in_xla_compilation()) or tf.constant(0),  # noqa: B023
                    jit_compile=jit)()
    assert seen == [True, False] and not in_xla_compilation()
    feats = tokenizer()(SENTENCES)
    ids, seg = feats["token_ids"], feats["segment_ids"]
    rates = dict(dict.fromkeys(DROPOUT_SITES, 0.0), embeddings=0.3)
    plain = encoder.embed(ids, seg, training=False)
    state = encoder.seed_generator.state
    start = state.numpy().copy()
    got = {}
    for jit in (True, False):
        state.assign(start)
        got[jit] = tf.function(lambda: encoder.embed(ids, seg, training=True, rates=rates),
                               jit_compile=jit)().numpy()
    want = tf.function(threefry_dropout, jit_compile=True)(plain, 0.3, start).numpy()
    np.testing.assert_array_equal(got[True] == 0, want == 0)  # the same mask
    np.testing.assert_allclose(got[True], want, rtol=1e-5, atol=1e-6)  # fused or not
    np.testing.assert_array_equal(state.numpy(), start + [0, 1])  # one draw, as Keras's
    keras_zeroed = got[False] == 0
    assert 0.2 < keras_zeroed.mean() < 0.4
    assert (keras_zeroed != (want == 0)).any()  # another generator's mask
    with pytest.raises(ValueError, match="only inside an XLA-compiled function"):
        threefry_dropout(plain, 0.3, start)


def test_bad_dropout_spec_raises(encoder):
    feats = tokenizer()(["a man"])
    with pytest.raises(ConfigError):
        encoder(feats, training=True, dropout={"attention": 0.1})
    with pytest.raises(ConfigError):
        encoder(feats, training=True, dropout=1.0)
