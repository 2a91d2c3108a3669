"""A model's own `truncate_dim` (issue 39; docs/export.md, "A model's own truncate_dim"):
config_sentence_transformers.json's `truncate_dim` read by `load_encoder` and used by
`encode` (cut, then normalised), overridden by the argument (0: the whole embedding),
refused when bad (the error names the file), kept by the tfsent encoder directory, the
Keras config, LoRA's merged copy and the exports (the SavedModel serves it, the
sentence-transformers folder declares it, the whole-embedding formats record it), and the
sizes of evaluation and training. sentence-transformers itself loads the export in the
peer process of tests/test_publish_decoders.py."""

import json
import os
import shutil

import numpy as np
import pytest

from conftest import TINY_VOCAB
from tfsent import formats
from tfsent.encoders import SentenceEncoder, load_encoder, lora, own_settings
from tfsent.errors import ConfigError, InputError
from tfsent.evaluation.runner import MemoEncoder, full_width_for, parse_variants
from tfsent.formats.metadata import read_metadata
from tfsent.matryoshka import FULL_DIM, resolve_truncate_dim
from tfsent.testing import tiny_encoder

SENTENCES = ["a man plays the guitar .", "the dog runs in the park", "a red car",
             "the small child reads a book with the big cat ."]
WIDTH = 16  # the tiny encoder's embedding
OWN = 6  # the folder's truncate_dim
ST_CONFIG = "config_sentence_transformers.json"


def declare(source, target, **entries):
    """A copy of the sentence-transformers folder `source` whose
    config_sentence_transformers.json has `entries` too (what SentenceTransformer(...,
    truncate_dim=D).save writes); returns its path."""
    shutil.copytree(source, target)
    path = os.path.join(target, ST_CONFIG)
    with open(path) as f:
        config = json.load(f)
    config.update(entries)
    with open(path, "w") as f:
        json.dump(config, f)
    return str(target)


def unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{"plain": a tiny random BERT as a sentence-transformers folder with a Normalize
    module, "own": the same declaring truncate_dim 6}."""
    root = tmp_path_factory.mktemp("truncdim")
    encoder = tiny_encoder(TINY_VOCAB, num_layers=2, hidden_dim=WIDTH, max_seq_length=16,
                           seed=7)
    plain = formats.export(encoder, str(root / "plain"), format="sentence_transformers",
                           normalize=True)
    return {"plain": plain, "own": declare(plain, root / "own", truncate_dim=OWN),
            "root": root}


@pytest.fixture(scope="module")
def encoder(folders):
    return load_encoder(folders["own"])


@pytest.fixture(scope="module")
def full(encoder):
    """The whole unnormalised embeddings of SENTENCES."""
    return encoder.encode(SENTENCES, normalize=False, truncate_dim=0, verbose=0)


def test_resolve_truncate_dim_cases():
    assert resolve_truncate_dim(None, None, 16) is None  # nothing asked, nothing declared
    assert resolve_truncate_dim(None, 6, 16) == 6  # the model's own
    assert resolve_truncate_dim(4, 6, 16) == 4  # the argument wins
    assert resolve_truncate_dim(FULL_DIM, 6, 16) is None  # 0: the whole embedding
    assert resolve_truncate_dim(16, 6, 16) is None  # the full width: the same
    for bad, message in ((17, "larger than the embedding"), (-1, ">= 1"),
                         (True, "not an integer"), ("six", "not an integer")):
        with pytest.raises(ConfigError, match=message):
            resolve_truncate_dim(bad, None, 16, "--truncate_dim")


def test_the_folders_truncate_dim_is_encodes_default(encoder, full):
    assert encoder.truncate_dim == OWN and encoder.normalize  # the folder's Normalize
    got = encoder.encode(SENTENCES, verbose=0)
    assert got.shape == (len(SENTENCES), OWN)
    # cut first, then normalised: the first 6 columns of the whole vector, unit length
    np.testing.assert_allclose(got, unit(full[:, :OWN]), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(encoder.encode(SENTENCES, normalize=False, verbose=0),
                                  full[:, :OWN])
    # a hand-checked row: the cut of [3, 4, 12] is [3, 4], normalised [0.6, 0.8]
    np.testing.assert_allclose(unit(np.array([[3.0, 4.0, 12.0]])[:, :2]), [[0.6, 0.8]])


def test_the_argument_overrides_it(encoder, full):
    np.testing.assert_allclose(encoder.encode(SENTENCES, truncate_dim=4, verbose=0),
                               unit(full[:, :4]), rtol=1e-6, atol=1e-7)
    for whole in (0, WIDTH):
        np.testing.assert_allclose(encoder.encode(SENTENCES, truncate_dim=whole, verbose=0),
                                   unit(full), rtol=1e-6, atol=1e-7)
    assert encoder.encode([], verbose=0).shape == (0, OWN)
    assert encoder.encode([], truncate_dim=0, verbose=0).shape == (0, WIDTH)
    with pytest.raises(ConfigError, match="truncate_dim: size 17 is larger"):
        encoder.encode(SENTENCES, truncate_dim=17)


def test_a_folder_without_it_gives_the_whole_embedding(folders, full):
    plain = load_encoder(folders["plain"])
    assert plain.truncate_dim is None
    np.testing.assert_allclose(plain.encode(SENTENCES, verbose=0), unit(full), atol=1e-6)
    null = load_encoder(declare(folders["plain"], folders["root"] / "null",
                                truncate_dim=None))
    assert null.truncate_dim is None
    assert own_settings(folders["own"])["truncate_dim"] == OWN
    assert own_settings(folders["plain"])["truncate_dim"] is None


@pytest.mark.parametrize("value", [0, -3, WIDTH + 1, 6.5, "6", True])
def test_a_bad_truncate_dim_names_the_file(folders, value):
    folder = declare(folders["plain"], folders["root"] / f"bad_{value!r}", truncate_dim=value)
    with pytest.raises(InputError) as info:
        load_encoder(folder)
    assert os.path.join(folder, ST_CONFIG) in str(info.value)
    assert "truncate_dim" in str(info.value)


def test_the_encoder_directory_keras_config_and_lora_keep_it(encoder, folders, full):
    path = str(folders["root"] / "encoder_dir")
    encoder.save_encoder_dir(path)
    again = load_encoder(path)
    assert again.truncate_dim == OWN and own_settings(path)["truncate_dim"] == OWN
    np.testing.assert_allclose(again.encode(SENTENCES, normalize=False, verbose=0),
                               full[:, :OWN], atol=1e-6)
    assert SentenceEncoder.from_config(encoder.get_config()).truncate_dim == OWN
    lora.enable_lora(again, 2)
    assert lora.merge_lora(again).truncate_dim == OWN
    # a bad value written into tfsent_encoder.json is refused naming that file
    meta_path = os.path.join(path, "tfsent_encoder.json")
    with open(meta_path) as f:
        meta = json.load(f)
    with open(meta_path, "w") as f:
        json.dump(dict(meta, truncate_dim=WIDTH + 1), f)
    with pytest.raises(InputError, match="tfsent_encoder.json: truncate_dim 17"):
        load_encoder(path)


def _st_config(path):
    with open(os.path.join(path, ST_CONFIG)) as f:
        return json.load(f)


def test_sentence_transformers_export_declares_it(encoder, folders, full):
    root = folders["root"]
    path = formats.export(encoder, str(root / "st_own"), format="sentence_transformers")
    assert _st_config(path)["truncate_dim"] == OWN
    meta = read_metadata(path)
    assert meta["truncate_dim"] == OWN and meta["embedding_dim"] == OWN
    again = load_encoder(path)
    assert again.truncate_dim == OWN
    np.testing.assert_allclose(again.encode(SENTENCES, verbose=0),
                               unit(full[:, :OWN]), atol=1e-6)
    # the caller's size wins; 0 declares none
    given = formats.export(encoder, str(root / "st_4"), format="sentence_transformers",
                           truncate_dim=4)
    assert _st_config(given)["truncate_dim"] == 4
    whole = formats.export(encoder, str(root / "st_0"), format="sentence_transformers",
                           truncate_dim=0)
    assert "truncate_dim" not in _st_config(whole)
    assert read_metadata(whole)["embedding_dim"] == WIDTH
    with pytest.raises(ConfigError, match="larger than the embedding"):
        formats.export(encoder, str(root / "st_17"), format="sentence_transformers",
                       truncate_dim=WIDTH + 1)
    assert not os.path.exists(root / "st_17")


def test_whole_embedding_formats_record_it_and_refuse_a_size(encoder, folders):
    path = formats.export(encoder, str(folders["root"] / "hf"), format="huggingface")
    meta = read_metadata(path)
    assert meta["truncate_dim"] == OWN and meta["embedding_dim"] == WIDTH
    assert "first 6 dimensions" in meta["truncation"]
    assert not os.path.exists(os.path.join(path, ST_CONFIG))
    with pytest.raises(ConfigError,
                       match="--truncate_dim does not apply to --format=huggingface"):
        formats.check_export("huggingface", str(folders["root"] / "hf_4"),
                             options={"truncate_dim": 4})


def test_saved_model_serves_it(encoder, folders):
    from tfsent.formats.saved_model import export_encoder
    from tfsent.serving import SavedModelEncoder

    path = export_encoder(encoder, str(folders["root"] / "sm"))
    meta = read_metadata(path)
    assert meta["truncate_dim"] == OWN and meta["embedding_dim"] == OWN
    served = SavedModelEncoder(path)
    got = served.encode(SENTENCES, normalize=True)
    assert got.shape == (len(SENTENCES), OWN)
    np.testing.assert_allclose(got, encoder.encode(SENTENCES, verbose=0), atol=1e-5)
    assert served.encode(SENTENCES, truncate_dim=0).shape == (len(SENTENCES), OWN)


def test_methods_cut_as_the_export_and_training_parts_do_not(encoder, full, absl_messages):
    from tfsent.methods import SimCSE
    from tfsent.training.loop import log_own_truncate_dim

    model = SimCSE(encoder, matryoshka_dims=(16, 8))
    np.testing.assert_allclose(model.encode(SENTENCES), full[:, :OWN], atol=1e-6)
    assert model.encode(SENTENCES, truncate_dim=0).shape == (len(SENTENCES), WIDTH)
    log_own_truncate_dim(encoder, model)
    assert any("training uses all 16 dimensions" in m for m in absl_messages)
    assert any("matryoshka_dims=16,8 does not include the encoder's own truncate_dim 6" in m
               for m in absl_messages)
    absl_messages.clear()
    log_own_truncate_dim(encoder, SimCSE(encoder, matryoshka_dims=(16, 6)))
    assert not any("does not include" in m for m in absl_messages)


def test_evaluation_sizes(encoder):
    assert full_width_for(None, "") is None  # the model's own size
    assert full_width_for(8, "") == FULL_DIM and full_width_for(None, "16,8") == FULL_DIM
    assert full_width_for(0, "") == FULL_DIM
    assert parse_variants(truncate_dim=0) == ((None,), (), None)
    assert MemoEncoder(encoder)(SENTENCES).shape == (len(SENTENCES), OWN)
    assert MemoEncoder(encoder, truncate_dim=0)(SENTENCES).shape == (len(SENTENCES), WIDTH)
