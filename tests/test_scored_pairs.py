"""Scored pairs: CoSENT, AnglE and CosineSimilarityLoss against NumPy transcriptions and
hand-computed cases, the scored-pair readers (bad rows name file and line), and a tiny
training run that learns a toy set's order."""

import math

import keras
import numpy as np
import pytest

from conftest import TINY_VOCAB
from method_harness import MethodHarness
from tfsent import losses
from tfsent.data import kinds, pipelines, readers
from tfsent.errors import ConfigError, InputError
from tfsent.methods import ScoredPairs, get_method
from tfsent.testing import tiny_encoder
from tfsent.training.config import build_config


# -- NumPy transcriptions (written from the formulas in docs/methods.md) -------------------

def np_cos(u, v):
    return np.array([a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a, b in zip(u, v)])


def np_cosent(sims, scores, scale):
    total = 1.0
    for i in range(len(sims)):
        for j in range(len(sims)):
            if scores[i] > scores[j]:
                total += math.exp(scale * (sims[j] - sims[i]))
    return math.log(total)


def np_angle_sim(u, v):
    out = []
    for x, y in zip(u.astype(np.float64), v.astype(np.float64)):
        h = len(x) // 2
        zx, zy = x[:h] + 1j * x[h:], y[:h] + 1j * y[h:]
        q = zx * np.conj(zy) / np.sum(np.abs(zy) ** 2)      # element-wise u / v
        q *= np.linalg.norm(y) / np.linalg.norm(x)           # rescaled by |v| / |u|
        out.append(abs(np.sum(q.real + q.imag)))
    return np.array(out)


RNG = np.random.default_rng(0)
U, V = RNG.normal(size=(7, 6)), RNG.normal(size=(7, 6))
SCORES = np.array([4.5, 1.0, 3.2, 1.0, 0.0, 5.0, 2.2])


@pytest.mark.parametrize("scale", [1.0, 20.0])
def test_cosent_matches_numpy(scale):
    sims = np_cos(U, V)
    got = float(losses.cosent_loss(losses.pairwise_cosine(U.astype(np.float16),
                                                          V.astype(np.float16)),
                                   SCORES, scale))
    np.testing.assert_allclose(got, np_cosent(np_cos(U.astype(np.float16).astype(np.float64),
                                                     V.astype(np.float16).astype(np.float64)),
                                              SCORES, scale), rtol=1e-4)
    assert got == pytest.approx(float(losses.cosent_loss(sims, SCORES, scale)), rel=1e-2)


def test_cosent_hand_computed():
    # one ordered pair (0 over 1): log(1 + exp(0.1 - 0.5))
    assert float(losses.cosent_loss([0.5, 0.1], [2.0, 1.0], 1.0)) == pytest.approx(
        math.log(1 + math.exp(-0.4)), rel=1e-6)
    # ties give no term: pairs (0, 1) and (0, 2) only
    got = float(losses.cosent_loss([0.9, 0.2, 0.4], [3.0, 1.0, 1.0], 2.0))
    assert got == pytest.approx(math.log(1 + math.exp(-1.4) + math.exp(-1.0)), rel=1e-5)
    # all scores equal: log(1) = 0
    assert float(losses.cosent_loss([0.9, 0.2], [1.0, 1.0])) == 0.0


def test_angle_similarity_matches_numpy_and_hand_cases():
    np.testing.assert_allclose(losses.angle_similarity(U, V), np_angle_sim(U, V), rtol=1e-5)
    # u = 1 (a=1, b=0): v = i gives |0 - 1| = 1; v = 1 + i gives 0; u = v gives 1.
    got = losses.angle_similarity(np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 2.0]]),
                                  np.array([[0.0, 1.0], [1.0, 1.0], [1.0, 2.0]]))
    np.testing.assert_allclose(got, [1.0, 0.0, 1.0], atol=1e-6)
    assert losses.angle_similarity(U[:1] * 3.0, V[:1]).numpy() == pytest.approx(
        losses.angle_similarity(U[:1], V[:1] * 0.5).numpy()[0], rel=1e-5)  # scale-free


def test_angle_loss_is_cosent_on_angle_similarity_plus_weighted_cosine():
    expected = np_cosent(np_angle_sim(U, V), SCORES, 20.0)
    assert float(losses.angle_loss(U, V, SCORES)) == pytest.approx(expected, rel=1e-4)
    expected += 0.5 * np_cosent(np_cos(U, V), SCORES, 20.0)
    assert float(losses.angle_loss(U, V, SCORES, cosine_weight=0.5)) == pytest.approx(
        expected, rel=1e-4)


def test_cosine_similarity_loss_matches_numpy_and_hand_case():
    targets = SCORES / 5.0
    np.testing.assert_allclose(float(losses.cosine_similarity_loss(U, V, targets)),
                               np.mean((np_cos(U, V) - targets) ** 2), rtol=1e-5)
    # cos 1 vs 0.8 and cos 0 vs 0.2: (0.04 + 0.04) / 2
    got = losses.cosine_similarity_loss([[1.0, 0.0], [1.0, 0.0]], [[2.0, 0.0], [0.0, 3.0]],
                                        [0.8, 0.2])
    assert float(got) == pytest.approx(0.04, rel=1e-5)


# sentence-transformers' own losses on the same embeddings and scores (peer venv, torch):
# the formula tfsent trains with is the one its users know by these names.
_ST_LOSSES = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
import torch
from sentence_transformers.sentence_transformer import losses as st
d = json.load(sys.stdin)
u, v = torch.tensor(d["u"]), torch.tensor(d["v"])
scores = torch.tensor(d["scores"])
out = {"cosent": st.CoSENTLoss(None), "angle": st.AnglELoss(None),
       "cosine": st.CosineSimilarityLoss(None)}
labels = {"cosent": scores, "angle": scores, "cosine": scores / 5.0}
json.dump({k: float(f.compute_loss_from_embeddings([u, v], labels[k])) for k, f in out.items()},
          sys.stdout)
"""


def test_losses_equal_sentence_transformers_on_the_same_embeddings():
    import json
    import subprocess

    from test_publish_peer import peer_python

    rng = np.random.default_rng(1)
    u = rng.normal(size=(16, 8)).astype(np.float32)
    v = (u + rng.normal(size=(16, 8))).astype(np.float32)
    scores = rng.integers(0, 6, size=16).astype(np.float32)  # ties included
    r = subprocess.run([peer_python(), "-c", _ST_LOSSES], capture_output=True, text=True,
                       input=json.dumps({"u": u.tolist(), "v": v.tolist(),
                                         "scores": scores.tolist()}), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    st = json.loads(r.stdout)
    ours = {"cosent": losses.cosent_loss(losses.pairwise_cosine(u, v), scores),
            "angle": losses.angle_loss(u, v, scores),
            "cosine": losses.cosine_similarity_loss(u, v, scores / 5.0)}
    for name, value in ours.items():
        assert float(value) == pytest.approx(st[name], rel=1e-5), name

# -- readers --------------------------------------------------------------------------------

def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_tsv_reader_and_bad_rows(tmp_path):
    good = _write(tmp_path, "pairs.tsv", "a cat\ta  dog\t3.5\n\nx\ty\t0\n")
    assert readers.read_scored_training_pairs(good) == [("a cat", "a dog", 3.5),
                                                        ("x", "y", 0.0)]
    for text, message in [("a\tb\n", "3 tab-separated"), ("a\tb\t1\nc\td\thigh\n", "number"),
                          ("a\t \t1\n", "empty sentence")]:
        bad = _write(tmp_path, "bad.tsv", text)
        with pytest.raises(InputError, match=message) as err:
            readers.read_scored_training_pairs(bad)
        assert "bad.tsv" in str(err.value) and "line" in str(err.value)


def test_stsb_and_sick_files_by_name(tmp_path):
    sts = _write(tmp_path, "sts-mine.csv",
                 "g\tf\t2012\t1\t4.2\tA plane.\tAn air plane.\textra\n"
                 "g\tf\t2012\t2\t0.5\tA man.\tA dog.\n")
    assert readers.read_scored_training_pairs(sts) == [("A plane.", "An air plane.", 4.2),
                                                       ("A man.", "A dog.", 0.5)]
    bad = _write(tmp_path, "sts-bad.csv", "g\tf\t2012\t1\t4.2\tA plane.\tB\ng\tf\t2\tfive\tx\ty\tz\n")
    with pytest.raises(InputError, match=r"sts-bad.csv.*line 2|line 2.*sts-bad.csv"):
        readers.read_scored_training_pairs(bad)
    sick = _write(tmp_path, "SICK_mine.txt", "pair_ID\tsentence_A\tsentence_B\t"
                  "relatedness_score\tentailment_judgment\n1\tA b\tC d\t4.5\tNEUTRAL\n")
    assert readers.read_scored_training_pairs(sick) == [("A b", "C d", 4.5)]
    bad = _write(tmp_path, "SICK_bad.txt", "header\n1\tA b\n")
    with pytest.raises(InputError, match="SICK_bad.txt"):
        readers.read_scored_training_pairs(bad)


def test_named_sources_and_refusals(tmp_path):
    with pytest.raises(ConfigError, match="demo dev set"):
        readers.read_scored_training_pairs("demo")
    with pytest.raises(ConfigError, match="eval_data_dir"):
        readers.read_scored_training_pairs("stsb")
    with pytest.raises(ConfigError, match="scored pairs come from"):
        readers.read_scored_training_pairs("beir:somewhere")
    out = _write(tmp_path, "range.tsv", "a\tb\t1\nc\td\t7\n")
    config = build_config(get_method("scored_pairs").defaults,
                          {"method": "scored_pairs", "train_data": out}, [])
    with pytest.raises(InputError, match=r"pair 2 of the 2 read \(sentence1 'c'\) has score "
                                         r"7.0, outside .*\[0.0, 5.0\]"):
        kinds.read_training_examples("scored_pairs", out, config)


def test_stsb_train_from_shared_data():
    from conftest import shared_data_or_skip
    data_dir = shared_data_or_skip()
    rows = readers.read_scored_training_pairs("stsb", data_dir)
    assert len(rows) == 5749 and all(0.0 <= y <= 5.0 for _, _, y in rows)


# -- the method -----------------------------------------------------------------------------

class TestScoredPairsHarness(MethodHarness):
    def build(self, encoder):
        return ScoredPairs(encoder, loss="angle", angle_cosine_weight=0.5)


def test_bad_settings_and_raw_rows():
    encoder = tiny_encoder(TINY_VOCAB, hidden_dim=16, max_seq_length=12)
    with pytest.raises(ConfigError, match="score_min"):
        ScoredPairs(encoder, score_min=5, score_max=0)
    with pytest.raises(ConfigError, match="loss"):
        ScoredPairs(encoder, loss="mse")
    model = ScoredPairs(encoder)
    model.compile(optimizer="adam")
    with pytest.raises(InputError, match=r"x\[1\]: score 9.0 is outside"):
        model.fit([("a", "b", 1.0), ("c", "d", 9.0)], batch_size=2, verbose=0)


# A toy set: "cat"/"dog" sentences pairs; same animal = 5, different = 0.
TOY = [(f"the {a} {v}", f"a {b} {w}", 5.0 if a == b else 0.0)
       for a in ("cat", "dog", "man") for b in ("cat", "dog", "man")
       for v, w in (("runs", "sleeps"), ("sleeps", "plays"))]


def test_training_learns_the_toy_order():
    """CoSENT on the toy set (AnglE and CosineSimilarityLoss train in the harness): the
    loss goes down and same-animal pairs move above different-animal ones."""
    keras.utils.set_random_seed(0)
    encoder = tiny_encoder(TINY_VOCAB, hidden_dim=16, max_seq_length=8, dropout=0.0)
    model = ScoredPairs(encoder, loss="cosent")
    model.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=False)
    s1, s2, y = (np.array(c) for c in zip(*TOY))

    def margin():  # mean cos of the score-5 pairs minus that of the score-0 pairs
        cos = np.sum(model.encode(list(s1), normalize=True) *
                     model.encode(list(s2), normalize=True), axis=1)
        return cos[y == 5].mean() - cos[y == 0].mean()

    batches = pipelines.scored_pair_dataset(TOY, encoder.tokenizer, 18, seed=0)
    batch = next(iter(batches))
    before_loss, before_margin = float(model.compute_losses(batch)[0]), margin()
    model.fit(batches, epochs=1, steps_per_epoch=40, verbose=0)
    assert float(model.compute_losses(batch)[0]) < 0.5 * before_loss
    assert margin() > before_margin + 0.2
