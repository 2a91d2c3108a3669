"""SimCSE's constructor arguments: `encoder_dropout` (the run-config field's name) and its
old name `dropout`."""

from conftest import TINY_VOCAB
from method_harness import MethodHarness
from tfsent.methods import CMLMCSE, SimCSE
from tfsent.testing import tiny_encoder


def test_encoder_dropout_is_the_one_name_and_dropout_still_works(absl_messages):
    enc = tiny_encoder(TINY_VOCAB, hidden_dim=16)
    model = SimCSE(enc, encoder_dropout=0.2)
    assert model.encoder_dropout == 0.2
    assert model.get_config()["encoder_dropout"] == 0.2 and "dropout" not in \
        model.get_config()
    assert model.embedding_parts({"token_ids": None})[0][1] == {"dropout": 0.2}
    old = SimCSE(enc, dropout=0.3)
    assert any("now encoder_dropout" in m for m in absl_messages)
    assert old.encoder_dropout == 0.3
    # A config saved before the rename (key "dropout") still loads.
    saved = dict(model.get_config())
    saved["dropout"] = saved.pop("encoder_dropout")
    assert SimCSE.from_config(saved).encoder_dropout == 0.2
    cmlm = CMLMCSE(enc, extractor_layers=1, fusion_layers=1, encoder_dropout=0.0)
    assert cmlm.encoder_dropout == 0.0


class TestSimCSEUnsupervisedHarness(MethodHarness):
    def build(self, encoder):
        return SimCSE(encoder)


class TestSimCSESupervisedHarness(MethodHarness):
    def build(self, encoder):
        return SimCSE(encoder, supervised=True)
