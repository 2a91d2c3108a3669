"""SavedModel export: versioned atomic layout, signatures, parity in a fresh process."""

import json
import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import (REPO, TF_SERVING_LOADER, WARMUP_REPLAY, minilm_or_skip,
                      serve_in_fresh_process, warmup_request_shapes)
from tfsent.encoders import load_encoder
from tfsent.formats.metadata import list_versions, read_metadata
from tfsent.formats.saved_model import export_encoder
from tfsent.serving import SavedModelEncoder

SENTENCES = ["A man is playing a guitar.", "", "   ", "Le café était fermé à Noël.",
             "word " * 400, "Two dogs run through a snowy field."]

def _cos(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return np.sum(a * b, axis=1)


@pytest.fixture(scope="module")
def minilm_export(tmp_path_factory):
    minilm_or_skip()
    export_dir = str(tmp_path_factory.mktemp("export") / "D")
    r = subprocess.run([sys.executable, "-m", "tfsent.export", "--model=minilm-l6",
                        "--pooling=mean", f"--export_dir={export_dir}"], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    # stdout is the version written; the next steps (how to load and evaluate it) on stderr
    version = os.path.join(export_dir, "1")
    assert r.stdout.splitlines() == [version]
    assert f'  load:     tf.saved_model.load("{version}")' in r.stderr
    assert f"  evaluate: python -m tfsent.evaluate --model={version} " in r.stderr
    return export_dir


def test_fresh_process_serving_matches_encode(minilm_export):
    served = serve_in_fresh_process(os.path.join(minilm_export, "1"), SENTENCES)
    assert served["modules"] == []  # neither tfsent nor keras_hub was imported
    encoder = load_encoder("minilm-l6", pooling="mean", max_seq_length=256)
    ref = encoder.encode(SENTENCES, batch_size=4)
    emb = np.array(served["embedding"], np.float32)
    assert emb.shape == ref.shape == (len(SENTENCES), 384)
    assert _cos(emb, ref).min() >= 0.99999
    norm = np.array(served["normalized"])
    np.testing.assert_allclose(np.linalg.norm(norm, axis=1), 1.0, atol=1e-5)


def test_encode_ids_signature_gives_same_vectors(minilm_export):
    loaded = tf.saved_model.load(os.path.join(minilm_export, "1"))
    encoder = load_encoder("minilm-l6", pooling="mean", max_seq_length=256,
                           pad_to_max_length=False)
    feats = encoder.tokenize(SENTENCES)
    by_ids = loaded.signatures["encode_ids"](token_ids=feats["token_ids"],
                                             padding_mask=feats["padding_mask"])
    by_str = loaded.signatures["serving_default"](sentences=tf.constant(SENTENCES))
    np.testing.assert_allclose(by_ids["embedding"].numpy(), by_str["embedding"].numpy(),
                               atol=1e-5)


def test_saved_model_cli_lists_both_signatures(minilm_export):
    cli = shutil.which("saved_model_cli") or os.path.join(os.path.dirname(sys.executable),
                                                          "saved_model_cli")
    r = subprocess.run([cli, "show", "--dir", os.path.join(minilm_export, "1"), "--all"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "signature_def['serving_default']" in r.stdout
    assert "signature_def['encode_ids']" in r.stdout
    assert "signature_def['count_tokens']" in r.stdout
    assert "sentences" in r.stdout and "token_ids" in r.stdout


def test_versions_and_no_partial_directory(tmp_path, tiny_encoder_dir):
    enc = load_encoder(tiny_encoder_dir)
    export_dir = str(tmp_path / "exports")
    # Leftovers: a killed export's marked staging folder (removed by the next export), an
    # unmarked folder and a live process's export in progress (both left alone).
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        for version, pid in ((7, dead.pid), (8, live.pid)):
            stage = os.path.join(export_dir, f".{version}.tfsent-staging-{pid}")
            os.makedirs(os.path.join(stage, "new"))
            with open(os.path.join(stage, "tfsent-staging.json"), "w") as f:
                json.dump({"tfsent": 1, "target": str(version), "pid": pid,
                           "host": socket.gethostname()}, f)
        os.makedirs(os.path.join(export_dir, ".tmp-export-7-999"))  # not tfsent's marker
        assert export_encoder(enc, export_dir).endswith(os.sep + "1")
        assert export_encoder(enc, export_dir, pooling="cls_before_pooler").endswith(
            os.sep + "2")
        assert list_versions(export_dir) == [1, 2]
        assert sorted(os.listdir(export_dir)) == [
            f".8.tfsent-staging-{live.pid}", ".tmp-export-7-999", "1", "2",
            "batching_parameters.txt"]
        for version in ("1", "2"):  # TF Serving's warm-up requests came with each version
            assert os.path.getsize(os.path.join(export_dir, version, "assets.extra",
                                                "tf_serving_warmup_requests")) > 0
    finally:
        live.kill()
        live.wait()
    meta = read_metadata(os.path.join(export_dir, "2"))
    assert meta["pooling"] == "cls_before_pooler"


def test_export_after_encode_calls(tmp_path, tiny_encoder_dir):
    """encode() caches tf.functions on the encoder; they must not break or bloat exports."""
    enc = load_encoder(tiny_encoder_dir)
    enc.encode(["a man plays"], max_seq_length=8)
    enc.encode(["a man plays"], pooling="cls_before_pooler")
    path = export_encoder(enc, str(tmp_path / "e"), max_seq_length=12)
    meta = read_metadata(path)
    assert meta["max_seq_length"] == 12


def test_encode_function_gives_what_encode_gives(tiny_encoder_dir):
    """The public traced function: strings in, un-normalised (N, H) float32 out, equal to
    `encode(normalize=False)`; cached per (pooling, clamped length, jit), pooling checked."""

    from tfsent.errors import ConfigError

    enc = load_encoder(tiny_encoder_dir, pooling="mean")
    fn = enc.encode_function()
    assert fn is enc.encode_function("mean", enc.tokenizer.max_seq_length, jit_compile=False)
    long = enc.encode_function(max_seq_length=10_000)  # clamped to the position table
    assert long is enc.encode_function("mean", enc.clamp_length(10_000)) and long is not fn
    out = fn(tf.constant(SENTENCES)).numpy()
    assert out.dtype == np.float32 and out.shape == (len(SENTENCES), enc.hidden_dim)
    np.testing.assert_allclose(out, enc.encode(SENTENCES, normalize=False), atol=1e-5)
    assert not np.allclose(np.linalg.norm(out, axis=1), 1.0)
    with pytest.raises(ConfigError, match="pool"):
        enc.encode_function("no_such_pooling")


def test_xla_export_and_encode_match_plain(tmp_path, tiny_encoder_dir):
    """jit_compile=True pads batches to bucketed shapes (rows to a power of two, width to
    WIDTH_BUCKETS) and runs XLA: the served and encoded vectors equal the plain ones, in a
    fresh process too, for batch sizes that need row padding (3 -> 4) and for none."""
    from tfsent.encoders import WIDTH_BUCKETS

    enc = load_encoder(tiny_encoder_dir, pooling="mean")
    plain = enc.encode(SENTENCES, batch_size=3)
    for batch_size in (3, 4, 6):
        xla = enc.encode(SENTENCES, batch_size=batch_size, jit_compile=True)
        np.testing.assert_allclose(xla, plain, atol=1e-5)
    # encode_function(jit_compile=True) runs the same XLA function as encode: traced once
    # for both, so a bucket shape compiled by one is not compiled again by the other.
    strings_fn = enc.encode_function(jit_compile=True)
    np.testing.assert_allclose(strings_fn(tf.constant(SENTENCES)).numpy(),
                               enc.encode(SENTENCES, normalize=False), atol=1e-5)
    shared = enc._encode_cache.functions["xla_forward", "mean", enc.tokenizer.max_seq_length]
    assert shared.experimental_get_tracing_count() == 1
    path = export_encoder(enc, str(tmp_path / "x"), jit_compile=True)
    meta = read_metadata(path)
    assert meta["jit_compile"] is True
    served = serve_in_fresh_process(path, SENTENCES)
    assert served["modules"] == []
    np.testing.assert_allclose(np.array(served["embedding"], np.float32), plain, atol=1e-5)
    assert list(WIDTH_BUCKETS) == sorted(WIDTH_BUCKETS) and len(WIDTH_BUCKETS) == 32


def test_call_in_buckets_shapes():
    from tfsent.encoders import call_in_buckets
    from tfsent.encoders.buckets import bucket_width

    seen = []

    def fn(ids, mask):
        seen.append((tuple(ids.shape), int(tf.reduce_sum(mask))))
        return {"out": tf.cast(ids[:, :1], tf.float32)}

    for rows, length, max_len, want in [(3, 5, 128, (4, 8)), (64, 17, 128, (64, 24)),
                                        (65, 100, 128, (128, 104)), (1, 78, 80, (1, 80)),
                                        (2, 130, 256, (2, 144)), (2, 257, 512, (2, 288))]:
        ids = tf.ones([rows, length], tf.int32)
        out = call_in_buckets(fn, {"token_ids": ids, "padding_mask": ids}, max_len)
        assert out["out"].shape == (rows, 1)
        assert seen[-1] == (want, rows * length)  # padding is masked out
        assert bucket_width(length, max_len) == want[1]  # the Python twin agrees


def test_count_tokens_signature_and_the_client_batching_by_it(tmp_path, tiny_encoder_dir):
    """`count_tokens` gives each string's tokens at the serving truncation length (the
    tokenizer's padding mask); SavedModelEncoder batches by it, most tokens first, and
    returns rows in input order equal to `encode`."""

    from test_encoders import BY_TOKENS
    from tfsent.errors import ConfigError

    enc = load_encoder(tiny_encoder_dir, pooling="mean")
    path = export_encoder(enc, str(tmp_path / "e"), max_seq_length=12)
    model = SavedModelEncoder(path)
    counts = model._loaded.signatures["count_tokens"](sentences=tf.constant(BY_TOKENS))
    counts = counts["token_count"].numpy()
    assert counts.tolist() == [3, 8, 4, 12, 2, 4, 3]  # 12: the export's truncation
    np.testing.assert_array_equal(counts, enc.tokenize_all(BY_TOKENS, 12).lengths)
    np.testing.assert_array_equal(model._lengths(BY_TOKENS), counts)  # what it sorts by
    out = model.encode(BY_TOKENS, batch_size=2)
    np.testing.assert_allclose(out, enc.encode(BY_TOKENS, normalize=False, max_seq_length=12),
                               atol=1e-5)
    with pytest.raises(ConfigError, match="batch_size must be >= 1"):
        model.encode(BY_TOKENS, batch_size=0)


def test_savedmodel_encoder_empty_input_has_the_embedding_width(tmp_path, tiny_encoder_dir):
    """encode([]) -> (0, D) like SentenceEncoder.encode([]); D is the served embedding's
    width, a head's output width included."""
    from tfsent.layers.heads import MLPEncoder

    enc = load_encoder(tiny_encoder_dir)
    plain = SavedModelEncoder(export_encoder(enc, str(tmp_path / "plain")))
    assert plain.encode([]).shape == enc.encode([]).shape == (0, enc.hidden_dim)
    assert plain.encode(["a man"]).shape == (1, enc.hidden_dim)
    head = MLPEncoder(7, 5)
    head.build((None, enc.hidden_dim))
    headed = SavedModelEncoder(export_encoder(enc, str(tmp_path / "head"), head=head))
    assert headed.encode([]).shape == (0, 5)
    assert headed.encode(["a man", "a dog"]).shape == (2, 5)


def test_signatures_serve_an_empty_batch_with_every_pooling(tmp_path, tiny_encoder_dir):
    """The signatures take `sentences: string[None]`: a batch of none gives (0, D) with
    every pooling (the first-token poolings indexed past the width-0 padding once)."""
    enc = load_encoder(tiny_encoder_dir)
    for pooling in ("cls", "cls_before_pooler", "mean", "last_token"):
        loaded = tf.saved_model.load(export_encoder(enc, str(tmp_path / pooling),
                                                    pooling=pooling, query_prompt="q: "))
        for name in ("serving_default", "encode_query"):
            out = loaded.signatures[name](sentences=tf.constant([], tf.string))
            assert out["embedding"].shape == (0, enc.hidden_dim), (pooling, name)
        one = loaded.signatures["serving_default"](sentences=tf.constant(["a man"]))
        np.testing.assert_allclose(one["embedding"].numpy(), enc.encode(
            ["a man"], pooling=pooling, normalize=False), atol=1e-5)


def test_served_as_tf_serving_with_a_head_and_each_weight_saved_once(tmp_path,
                                                                      tiny_encoder_dir):
    """TF Serving's loader (TF1 session, saver_def restore) finds every variable, a head's
    included, and the checkpoint holds each weight once: the Keras variables are not saved
    beside the tf.Variables the graph reads."""
    from tfsent.layers.heads import MLPEncoder

    enc = load_encoder(tiny_encoder_dir, pooling="mean")
    head = MLPEncoder(7, 5)
    head.build((None, enc.hidden_dim))
    path = export_encoder(enc, str(tmp_path / "e"), head=head)
    served = serve_in_fresh_process(path, SENTENCES)
    expected = head(enc.encode(SENTENCES)).numpy()
    np.testing.assert_allclose(np.array(served["embedding"], np.float32), expected, atol=1e-5)
    weight_bytes = sum(v.numpy().nbytes for v in enc.backbone.weights + head.weights)
    saved = sum(os.path.getsize(os.path.join(root, f)) for root, _, files in
                os.walk(os.path.join(path, "variables")) for f in files)
    assert weight_bytes <= saved < 2 * weight_bytes  # saved twice was over 2x


# Serves the sentences on the three signatures and replays the export's warm-up records.
PROMPT_SCRIPT = WARMUP_REPLAY + r"""
import json, sys
path, sentences = sys.argv[1], json.loads(sys.argv[2])
out = {name: serve_like_tf_serving(path, sentences, ("embedding",), name)["embedding"].tolist()
       for name in ("serving_default", "encode_query", "encode_document")}
out["warmup"] = replay_warmup(path)
json.dump(out, sys.stdout)
"""


def test_query_and_document_prompts_are_signatures(tmp_path, tiny_encoder_dir):
    """encode_query / encode_document prepend the export's prompts before tokenizing, served
    the TF Serving way; without prompts they equal serving_default."""
    enc = load_encoder(tiny_encoder_dir)
    path = export_encoder(enc, str(tmp_path / "e"), query_prompt="query: ",
                          document_prompt="passage: ")
    texts = ["a man plays a guitar", "the dog runs"]
    r = subprocess.run([sys.executable, "-c", PROMPT_SCRIPT, path, json.dumps(texts)],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    served = json.loads(r.stdout)
    warmup = served.pop("warmup")
    served = {k: np.array(v) for k, v in served.items()}
    np.testing.assert_allclose(served["encode_query"],
                               enc.encode(["query: " + t for t in texts]), atol=1e-5)
    np.testing.assert_allclose(served["encode_document"],
                               enc.encode(["passage: " + t for t in texts]), atol=1e-5)
    assert not np.allclose(served["encode_query"], served["serving_default"], atol=1e-3)
    meta = read_metadata(path)
    assert (meta["query_prompt"], meta["document_prompt"]) == ("query: ", "passage: ")
    model = SavedModelEncoder(path)
    np.testing.assert_allclose(model.encode_query(texts), served["encode_query"], atol=1e-6)
    plain = SavedModelEncoder(export_encoder(enc, str(tmp_path / "plain")))
    np.testing.assert_allclose(plain.encode_query(texts), plain.encode(texts), atol=1e-6)
    np.testing.assert_allclose(plain.encode_document(texts), plain.encode(texts), atol=1e-6)
    # TF Serving warms up the signatures a retrieval model's clients call (the prompt ones
    # only when the export has prompts) and count_tokens; replayed through the TF1 loader,
    # each record gives what the encoder gives on its sentences with that signature's prompt.
    prompts = {"serving_default": "", "encode_query": "query: ",
               "encode_document": "passage: "}
    for record in warmup:
        sentences = record["inputs"]["sentences"]
        if record["signature"] == "count_tokens":
            mask = enc.tokenizer(tf.constant(sentences))["padding_mask"]
            assert record["outputs"]["token_count"] == np.sum(mask.numpy(), 1).tolist()
        else:
            prompt = prompts[record["signature"]]
            np.testing.assert_allclose(np.array(record["outputs"]["embedding"]),
                                       enc.encode([prompt + t for t in sentences]),
                                       atol=1e-5, err_msg=record["signature"])
    assert warmup_request_shapes(path) == [
        ("serving_default", 1), ("serving_default", 8), ("encode_query", 1),
        ("encode_query", 8), ("encode_document", 1), ("encode_document", 8),
        ("count_tokens", 8)]
    assert warmup_request_shapes(plain.path) == [
        ("serving_default", 1), ("serving_default", 8), ("count_tokens", 8)]
