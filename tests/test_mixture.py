"""Mixtures of training sources (tfsent/data/mixture.py): the sampler's proportions, one
source per batch, round robin, determinism, resume, 2 replicas == 1, the CLI with two
sources and metrics.json's per-source counts, bad input before any model is loaded."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, TINY_RUN_FLAGS, TINY_VOCAB, build_tiny_method
from tfsent.training.config import Recipe, build_config
from tfsent.data.mixture import SourceMixture, SourceSampler
from tfsent.data.sources import parse_sources
from tfsent.encoders import SentenceTokenizer
from tfsent.errors import ConfigError, InputError
from tfsent.methods import get_method

# Three sources told apart by one marker word that only their sentences hold.
VERBS = ["plays", "runs", "sits", "eats food", "reads a book", "swims", "sleeps",
         "drives a car", "rides a bike", "is happy", "is big", "is small"]
MAN = [f"{d} man {v}" for d in ("a", "the") for v in VERBS]          # 24
DOG = [f"{d} dog {v}" for d in ("a", "the") for v in VERBS[:4]]      # 8
CAT = [f"{d} cat {v}" for d in ("a", "the") for v in VERBS[:6]]      # 12
MARKERS = [TINY_VOCAB.index(w) for w in ("man", "dog", "cat")]
BATCH = 4


@pytest.fixture(scope="module")
def tokenizer():
    return SentenceTokenizer(TINY_VOCAB, True, True, 12)


def row_sources(token_ids):
    """The source (0 man, 1 dog, 2 cat) of each row of a (B, L) token id array."""
    out = []
    for row in np.asarray(token_ids):
        found = [i for i, m in enumerate(MARKERS) if m in row]
        assert len(found) == 1, row
        out.append(found[0])
    return out


def take(ds, n):
    return [tf.nest.map_structure(lambda t: t.numpy(), b) for b in ds.take(n)]


def same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        tf.nest.map_structure(np.testing.assert_array_equal, x, y)


def test_sampler_proportions_and_round_robin():
    counts = SourceSampler([3.0, 1.0], seed=0).counts(20000)
    assert abs(counts[0] / 20000 - 0.75) < 0.015
    assert SourceSampler([3.0, 1.0], seed=0).counts(20000) == counts  # seeded
    assert SourceSampler([3.0, 1.0], seed=1).choices(64).tolist() != \
        SourceSampler([3.0, 1.0], seed=0).choices(64).tolist()
    # Any start of the stream (across numpy blocks) continues the same stream.
    sampler = SourceSampler([1.0, 2.0, 5.0], seed=4)
    whole = sampler.choices(9000)
    np.testing.assert_array_equal(sampler.choices(9000 - 4093, start=4093), whole[4093:])
    assert sampler.counts(5000) == np.bincount(whole[:5000], minlength=3).tolist()
    rr = SourceSampler([1.0, 1.0, 1.0], "round_robin").choices(4100, start=4090)
    assert rr.tolist() == [(i % 3) for i in range(4090, 8190)][:4100]
    # Default weights: proportional to the sources' sizes (ST's ProportionalBatchSampler).
    assert SourceMixture(["man", "dog"], [MAN, DOG]).shares() == [0.75, 0.25]


def test_batch_per_source_follows_the_weights(tokenizer):
    mixture = SourceMixture(["man", "dog", "cat"], [MAN, DOG, CAT], weights=[1, 1, 2],
                            seed=3)
    batches = take(mixture.dataset("sentences", tokenizer, BATCH), 400)
    sources = []
    for b in batches:
        rows = row_sources(b["token_ids"])
        assert len(set(rows)) == 1, rows  # never two sources in one batch
        sources.append(rows[0])
    assert sources == mixture.sampler.choices(400).tolist()
    share = np.bincount(sources, minlength=3) / 400
    np.testing.assert_allclose(share, [0.25, 0.25, 0.5], atol=0.07)
    assert mixture.drawn(400, BATCH)["source_batches"] == dict(
        zip(["man", "dog", "cat"], np.bincount(sources, minlength=3).tolist()))


def test_round_robin_takes_turns(tokenizer):
    mixture = SourceMixture(["man", "dog", "cat"], [MAN, DOG, CAT], sampling="round_robin")
    sources = [row_sources(b["token_ids"])[0]
               for b in take(mixture.dataset("sentences", tokenizer, BATCH), 9)]
    assert sources == [0, 1, 2] * 3
    # With repeat=True no source runs out: the 8-sentence source gave 3 batches of 4
    # (more than one pass) while the others went on.
    assert mixture.drawn(9, BATCH)["source_batches"] == {"man": 3, "dog": 3, "cat": 3}


def test_examples_mixed_within_batches(tokenizer):
    mixture = SourceMixture(["man", "dog"], [MAN, DOG], weights=[1, 1],
                            batch_per_source=False, seed=2)
    batches = take(mixture.dataset("sentences", tokenizer, BATCH), 50)
    rows = [s for b in batches for s in row_sources(b["token_ids"])]
    assert rows == mixture.sampler.choices(50 * BATCH).tolist()
    assert any(len(set(row_sources(b["token_ids"]))) == 2 for b in batches)
    assert mixture.drawn(50, BATCH) == {"source_examples": {
        "man": rows.count(0), "dog": rows.count(1)}}


def test_seeded_and_resumable(tokenizer):
    """A pipeline started at batch k (a resumed run) continues the stream of the same
    seed exactly: sentences one source per batch, duplicate-free triplets (a generator
    per source), and triplets with two hard negatives re-cut into mixed batches; another
    seed draws another stream."""
    triplets_a = [(MAN[i], MAN[i + 1], DOG[i % 8], CAT[i % 12]) for i in range(0, 22, 2)]
    triplets_b = [(CAT[i], CAT[i + 1], MAN[i], DOG[i % 8]) for i in range(0, 12, 2)]
    cases = [("sentences", [MAN, DOG], True, {}),
             ("triplets", [triplets_a, triplets_b], True, {"duplicate_free": True}),
             ("triplets", [triplets_a, triplets_b], False, {})]
    streams = []  # each case's 12 batches of seed 5
    for kind, examples, per_source, kind_args in cases:
        def mixed(seed):
            return SourceMixture(["a", "b"], examples, weights=[2, 1], seed=seed,
                                 batch_per_source=per_source)
        full = take(mixed(5).dataset(kind, tokenizer, BATCH, **kind_args), 12)
        resumed = take(mixed(5).dataset(kind, tokenizer, BATCH, skip_batches=5,
                                        **kind_args), 7)
        same_batches(resumed, full[5:])
        streams.append(full)
    # Re-cut triplets keep each anchor's two negatives with it (anchor-major).
    negatives = full[0]["negative"]["token_ids"]
    assert negatives.shape == (2 * BATCH, 12)
    for i in range(BATCH):
        anchor_source = row_sources(full[0]["anchor"]["token_ids"][i:i + 1])[0]
        # source a's negatives are (dog, cat) rows, source b's (man, dog)
        assert row_sources(negatives[2 * i:2 * i + 2]) == ([1, 2] if anchor_source == 0
                                                           else [0, 1])
    # The sentences case's stream (seed 5, one source per batch) against seed 6's.
    other = take(SourceMixture(["a", "b"], [MAN, DOG], weights=[2, 1], seed=6)
                 .dataset("sentences", tokenizer, BATCH), 12)
    assert any(not np.array_equal(x["token_ids"], y["token_ids"])
               for x, y in zip(streams[0], other))


def test_two_replicas_match_one_replica(mirrored_strategy):
    """Three SGD steps on a mixture's first three global batches of 8: 2 replicas x 4 ==
    1 x 8 (loss and weights). The batches are drawn from the pipeline once and fed to both
    sides as fixed tensors: Keras' fit opens extra iterators on a dataset under a strategy,
    and which shuffle of each source a fresh iterator gets is Keras' and tf.data's business,
    not the mixture's (the stream itself is tested above)."""
    single = build_tiny_method("unsup", tf.distribute.OneDeviceStrategy("/cpu:0"))
    init = [v.numpy() for v in single.trainable_variables]
    batches = list(SourceMixture(["man", "dog"], [MAN, DOG], seed=1).dataset(
        "sentences", single.encoder.tokenizer, 8).take(3))

    def dataset():
        ds = tf.data.Dataset.from_tensors(batches[0])
        for batch in batches[1:]:
            ds = ds.concatenate(tf.data.Dataset.from_tensors(batch))
        return ds

    h1 = single.fit(dataset(), epochs=1, steps_per_epoch=3, verbose=0).history
    mirrored = build_tiny_method("unsup", mirrored_strategy, init)
    assert mirrored.distribute_strategy.num_replicas_in_sync == 2
    h2 = mirrored.fit(dataset(), epochs=1, steps_per_epoch=3, verbose=0).history
    np.testing.assert_allclose(h1["loss"], h2["loss"], rtol=1e-5, atol=1e-5)
    for a, b, w0 in zip(single.trainable_variables, mirrored.trainable_variables, init):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5, err_msg=a.path)
    assert not np.allclose(single.trainable_variables[0].numpy(), init[0])


@pytest.mark.parametrize("overrides, message", [
    (["train_data=a.txt,b.txt", "source_weights=1"], "source_weights gives 1 weight"),
    (["train_data=a.txt,b.txt", "source_weights=1,2,3"], "source_weights gives 3 weight"),
    (["train_data=a.txt,b.txt", "source_weights=0,1"], "source_weights: every weight"),
    (["train_data=a.txt,b.txt", "source_weights=-1,1"], "source_weights: every weight"),
    (["train_data=a.txt,b.txt", "source_weights=two,1"], "source_weights: 'two' is not"),
    (["train_data=a.txt,,b.txt"], "names an empty source"),
    (["train_data=a.txt,a.txt"], "names a.txt more than once"),
    (["train_data=a.txt,b.txt", "mixture_sampling=random"], "mixture_sampling must be"),
    (["train_data=a.txt,b.txt", "mixture_sampling=round_robin", "source_weights=1,2"],
     "source_weights apply to mixture_sampling=proportional"),
])
def test_bad_mixture_fields(overrides, message):
    with pytest.raises(ConfigError, match=message):
        build_config(get_method("simcse_unsup").defaults, None, overrides,
                     method="simcse_unsup")


def test_bad_mixture_fields_for_the_method():
    with pytest.raises(ConfigError, match="duplicate_free_batches"):
        build_config(get_method("simcse_sup").defaults, None,
                     ["train_data=demo_nli,t.tsv", "batch_per_source=false"],
                     method="simcse_sup")
    with pytest.raises(ConfigError, match="premise-grouped"):
        build_config(get_method("supcon").defaults, None,
                     ["train_data=demo_nli,x.jsonl", "batch_per_source=false"],
                     method="supcon")
    # A recipe gives lists; they are checked the same way.
    recipe = Recipe({"train_data": ["a.txt", "b.txt"], "source_weights": [1, 2.5]}, "r.py")
    config = build_config(get_method("simcse_unsup").defaults, recipe, method="simcse_unsup")
    assert parse_sources(config.train_data) == ["a.txt", "b.txt"]
    for bad, message in [({"train_data": ["a.txt", 3]}, "must be a string"),
                         ({"train_data": ["a.txt", "b.txt"], "source_weights": [1, "x"]},
                          "'x' is not a number"),
                         ({"train_data": ["a.txt", "b.txt"], "source_weights": [1, True]},
                          "True"),
                         ({"train_data": ["a.txt", "b.txt"], "source_weights": [2]},
                          "1 weight")]:
        with pytest.raises(ConfigError, match=message):
            build_config(get_method("simcse_unsup").defaults, Recipe(bad, "r.py"),
                         method="simcse_unsup")


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def test_bad_sources_refused_before_any_model(tmp_path):
    """An empty source, a source the method cannot read, sources of different widths:
    errors naming the source, raised before the run directory or a model exists (the
    encoder named does not even exist as a preset)."""
    from tfsent.training import resolve_config, run

    man = _write(tmp_path / "man.txt", MAN)
    empty = _write(tmp_path / "empty.txt", ["", "  "])
    wide = _write(tmp_path / "wide.tsv", [f"{a}\t{b}\t{c}\t{d}" for a, b, c, d in
                                          zip(MAN, MAN[1:], DOG, CAT)])
    cases = [("simcse_unsup", f"{man},{empty}", InputError, "empty.txt"),
             ("simcse_sup", f"demo_nli,{man}", InputError,
              f"train_data source 2 of 2 \\({man}\\) cannot be read as triplets"),
             ("simcse_sup", f"demo_nli,{wide}", InputError,
              "different numbers of hard negatives"),
             ("supcon", f"demo_nli,{man}", InputError, "source 2 of 2")]
    for method, sources, error, message in cases:
        out = tmp_path / f"run_{method}"
        config = resolve_config(method, None, [f"train_data={sources}",
                                               "encoder=no-such-preset-loaded"])
        with pytest.raises(error, match=message):
            run(method, config, str(out))
        assert not out.exists()


def test_cli_two_sources(tmp_path, tiny_encoder_dir):
    """simcse_unsup on two sentence files: per-source counts logged at the start and in
    metrics.json, replayed from the seeded stream for the steps taken (4 steps run 2 per
    tf.function call)."""
    man = _write(tmp_path / "man.txt", MAN)
    dog = _write(tmp_path / "dog.txt", DOG)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "tfsent.train", "--method=simcse_unsup",
           f"--output_dir={out}", f"--config.encoder={tiny_encoder_dir}",
           f"--config.train_data={man},{dog}", "--config.source_weights=1,3",
           "--config.max_seq_length=16", "--config.batch_size=4", "--config.steps=4",
           "--config.eval_every=2", "--config.steps_per_execution=2", *TINY_RUN_FLAGS]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"source 0 {man}: 24 examples (sentences), 25.0% of the batches" in result.stderr
    assert f"source 1 {dog}: 8 examples (sentences), 75.0% of the batches" in result.stderr
    metrics = json.load(open(out / "metrics.json"))
    expected = SourceSampler([1, 3], seed=0).counts(4)
    assert metrics["source_batches"] == {man: expected[0], dog: expected[1]}
    assert metrics["source_examples"] == {man: 4 * expected[0], dog: 4 * expected[1]}
    assert metrics["steps"] == 4


def test_cli_retrieval_mixes_beir_pairs_with_nli(tmp_path, tiny_encoder_dir):
    """--method=retrieval on beir:DIR:train + demo_nli, one source per batch; NLI rows carry
    a contradiction column the BEIR pairs lack, refused before any model until
    hard_negatives=false keeps both sources' (anchor, positive) columns."""
    from test_pairs import tiny_beir_with_train
    from tfsent.training import resolve_config, run

    folder = tiny_beir_with_train(tmp_path / "tiny")
    sources = f"beir:{folder}:train,demo_nli"
    config = resolve_config("retrieval", None, [f"train_data={sources}",
                                                "encoder=no-such-preset-loaded"])
    with pytest.raises(InputError, match="hard_negatives=false"):
        run("retrieval", config, str(tmp_path / "refused"))
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "tfsent.train", "--method=retrieval", f"--output_dir={out}",
           f"--config.encoder={tiny_encoder_dir}", f"--config.train_data={sources}",
           "--config.hard_negatives=false", f"--config.eval_data=beir:{folder}:dev",
           "--config.max_seq_length=12", "--config.batch_size=4", "--config.steps=4",
           "--config.eval_every=2", "--config.learning_rate=1e-3", *TINY_RUN_FLAGS]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"source 0 beir:{folder}:train:" in result.stderr
    metrics = json.load(open(out / "metrics.json"))
    assert sorted(metrics["source_batches"]) == sorted([f"beir:{folder}:train", "demo_nli"])
    assert sum(metrics["source_batches"].values()) == 4
    assert "ndcg@10" in metrics["dev_final"]
