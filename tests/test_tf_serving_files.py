"""TF Serving's production files (`tfsent.formats.tf_serving`), the Keras-native `export` and the
format registry (`tfsent.formats`): warm-up records parsed with tensorflow-serving-api's
PredictionLog and replayed through TF Serving's TF1 loader in one fresh process; the
batching parameters parsed as TF Serving's BatchingParameters text proto; the registry's
refusals before any work."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import (descriptor_pb2, descriptor_pool, message_factory, text_format,
                             wrappers_pb2)

from conftest import (PROBE, REPO, SENTENCES, WARMUP_REPLAY, tiny_method_encoder,
                      warmup_request_shapes)
from tfsent import formats
from tfsent.formats import tf_serving
from tfsent.formats.metadata import read_metadata
from tfsent.data import beir
from tfsent.encoders import load_encoder
from tfsent.errors import ConfigError, InputError
from tfsent.methods import SimCSE
from tfsent.formats.search_index import export_search_index
from tfsent.serving import SavedModelEncoder

# Runs in a fresh interpreter: tensorflow, tensorflow_text and tensorflow-serving-api only.
REPLAY_SCRIPT = WARMUP_REPLAY + r"""
import json, sys

paths, probe = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {p: {"records": replay_warmup(p),
           "probe": serve_like_tf_serving(p, probe, ("embedding",))["embedding"].tolist()}
       for p in paths}
out["modules"] = sorted({k.split(".")[0] for k in sys.modules
                         if k.split(".")[0] in ("tfsent", "keras_hub")})
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """A tiny SimCSE model after two training steps, exported with `model.export`, and a
    search index of its encoder over five documents, both replayed in one fresh process."""
    root = tmp_path_factory.mktemp("tf_serving")
    model = SimCSE(tiny_method_encoder())
    model.compile(optimizer=keras.optimizers.AdamW(1e-3))
    model.fit(SENTENCES, batch_size=8, epochs=1, steps_per_epoch=2, verbose=0)
    method_path = model.export(str(root / "method"))
    corpus_file = root / "corpus.jsonl"
    corpus_file.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n"
                                   for i, t in enumerate(SENTENCES[:5])))
    search_path = export_search_index(model.encoder, beir.read_corpus(str(corpus_file)),
                                      str(root / "search"), verbose=0)
    r = subprocess.run([sys.executable, "-c", REPLAY_SCRIPT,
                        json.dumps([method_path, search_path]), json.dumps(PROBE)],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    return model, method_path, search_path, json.loads(r.stdout)


def test_method_export_is_served_the_tf_serving_way_as_encode(exports):
    model, method_path, _, served = exports
    assert method_path == os.path.join(os.path.dirname(method_path), "1")
    assert served["modules"] == []  # neither tfsent nor keras_hub in the serving process
    np.testing.assert_allclose(np.array(served[method_path]["probe"]), model.encode(PROBE),
                               atol=1e-5)
    meta = read_metadata(method_path)
    assert meta["method"] == "SimCSE" and meta["pooling"] == model.export_pooling


def test_warmup_records_parse_and_replay_equal_to_encode(exports):
    """PredictionLog records (tensorflow-serving-api's proto) on serving_default, batch 1
    and 8, and count_tokens (batch 8: a client batching by token count calls it first);
    replayed through the TF1 loader they give what encode and the tokenizer give. (No
    prompts in this export: no encode_query / encode_document requests.)"""
    model, method_path, _, served = exports
    records = served[method_path]["records"]
    assert [(r["signature"], len(r["inputs"]["sentences"])) for r in records] == [
        ("serving_default", 1), ("serving_default", 8), ("count_tokens", 8)]
    for record in records:
        sentences = record["inputs"]["sentences"]
        assert sentences == list(tf_serving.WARMUP_SENTENCES[:len(sentences)])
        if record["signature"] == "count_tokens":
            mask = model.encoder.tokenizer(tf.constant(sentences))["padding_mask"]
            assert record["outputs"]["token_count"] == np.sum(mask.numpy(), 1).tolist()
        else:
            np.testing.assert_allclose(np.array(record["outputs"]["embedding"]),
                                       model.encode(sentences), atol=1e-5)


def test_search_export_warms_up_the_search_signature(exports):
    model, _, search_path, served = exports
    records = served[search_path]["records"]
    assert [(r["signature"], len(r["inputs"].get("sentences", r["inputs"].get("queries"))))
            for r in records] == [("serving_default", 1), ("serving_default", 8),
                                  ("search", 1)]
    assert warmup_request_shapes(search_path) == [("serving_default", 1),
                                                  ("serving_default", 8), ("search", 1)]
    search = records[-1]
    assert search["inputs"]["k"] == 1 and search["outputs"]["ids"][0][0].startswith("d")
    np.testing.assert_allclose(np.array(search["outputs"]["embeddings"]),
                               model.encode(search["inputs"]["queries"], normalize=True),
                               atol=1e-5)
    # TF Serving's batching needs a batch dimension on every input (k is a scalar).
    assert not os.path.exists(os.path.join(os.path.dirname(search_path),
                                           tf_serving.BATCHING_FILE))


def _batching_parameters_class():
    """TF Serving's BatchingParameters message (session_bundle_config.proto, package
    tensorflow.serving; not shipped in tensorflow-serving-api), built from its fields."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(
        wrappers_pb2.DESCRIPTOR.serialized_pb))
    proto = descriptor_pb2.FileDescriptorProto(
        name="session_bundle_config.proto", package="tensorflow.serving", syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"])
    message = proto.message_type.add(name="BatchingParameters")
    field = descriptor_pb2.FieldDescriptorProto
    for number, name in enumerate(("max_batch_size", "batch_timeout_micros",
                                   "max_enqueued_batches", "num_batch_threads"), 1):
        message.field.add(name=name, number=number, type=field.TYPE_MESSAGE,
                          label=field.LABEL_OPTIONAL, type_name=".google.protobuf.Int64Value")
    message.field.add(name="thread_pool_name", number=5, type=field.TYPE_MESSAGE,
                      label=field.LABEL_OPTIONAL, type_name=".google.protobuf.StringValue")
    message.field.add(name="allowed_batch_sizes", number=6, type=field.TYPE_INT64,
                      label=field.LABEL_REPEATED)
    message.field.add(name="pad_variable_length_inputs", number=7, type=field.TYPE_BOOL,
                      label=field.LABEL_OPTIONAL)
    pool.Add(proto)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters"))


def test_batching_parameters_file_is_tf_servings_text_proto(exports):
    _, method_path, _, _ = exports
    path = os.path.join(os.path.dirname(method_path), tf_serving.BATCHING_FILE)
    parsed = text_format.Parse(open(path).read(), _batching_parameters_class()())
    assert parsed.max_batch_size.value == 8  # machine C: 157 sentences/s, 115 at 1, 90 at 64
    assert parsed.batch_timeout_micros.value == 2700  # the fixed per-call cost, 2.7 ms
    assert parsed.num_batch_threads.value == 2
    assert parsed.max_enqueued_batches.value == 19  # 500 ms of full batches on 2 threads
    # Every warm-up request fits in one batch (a larger one would be refused).
    assert max(tf_serving.WARMUP_BATCH_SIZES) <= parsed.max_batch_size.value


def test_batching_parameters_follow_the_measurements(tmp_path):
    """Another machine's latencies give other settings; an existing file is kept."""
    fast_batches = tf_serving.batching_parameters({1: 10.0, 8: 24.0, 64: 160.0}, cores=4)
    assert fast_batches == {"max_batch_size": 64, "batch_timeout_micros": 8000,
                            "num_batch_threads": 4, "max_enqueued_batches": 12}
    path = tf_serving.write_batching_parameters(str(tmp_path))
    with open(path, "a") as f:
        f.write("# tuned by hand\n")
    tf_serving.write_batching_parameters(str(tmp_path), fast_batches)
    assert open(path).read().endswith("# tuned by hand\n")


def test_encoder_export_and_the_registrys_refusals(tmp_path, tiny_encoder_dir):
    encoder = load_encoder(tiny_encoder_dir)
    path = encoder.export(str(tmp_path / "enc"), verbose=False)
    assert path == str(tmp_path / "enc" / "1")
    np.testing.assert_allclose(SavedModelEncoder(path).encode(PROBE), encoder.encode(PROBE),
                               atol=1e-5)
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("x")
    with pytest.raises(ConfigError, match="format=bogus: unknown format; valid: "
                                          "tf_saved_model, onnx, litert"):
        encoder.export(str(tmp_path / "a"), format="bogus")
    with pytest.raises(ConfigError, match="format=onnx cannot write 'binary'"):
        formats.export(encoder, str(tmp_path / "b"), format="onnx", quantize="int8,binary")
    with pytest.raises(ConfigError, match="exists and is not an empty directory"):
        formats.export(encoder, str(full), format="litert")
    with pytest.raises(ConfigError, match="input_signature"):
        encoder.export(str(tmp_path / "c"), input_signature=[None])
    missing = formats.ExportFormat("x", "tfsent.formats.not_written_yet:export_x")
    with pytest.raises(ConfigError, match="tfsent.formats.not_written_yet is not in"):
        missing.load_writer()
    assert formats.get_format("saved_model") is formats.FORMATS["tf_saved_model"]
    assert sorted(os.listdir(tmp_path)) == ["enc", "full"]  # nothing else was written
    assert os.listdir(full) == ["keep.txt"]


def test_export_cli_refuses_before_loading_the_model(tmp_path):
    """--model names nothing loadable: each refusal comes before the load."""
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("x")
    for args, message in [(["--format=litert", f"--export_dir={full}"],
                           "exists and is not an empty directory"),
                          (["--format=onnx", "--quantize=binary",
                            f"--export_dir={tmp_path / 'new'}"],
                           "--quantize=binary: --format=onnx cannot write 'binary'")]:
        r = subprocess.run([sys.executable, "-m", "tfsent.export",
                            f"--model={tmp_path / 'no_model'}", *args], cwd=REPO,
                           capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        assert r.returncode == 2 and message in r.stderr, r.stderr[-2000:]
        assert "Traceback" not in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["full"]


def test_every_record_matches_its_writer():
    """What a record says (head, corpus, quantize) is what its writer takes."""
    for entry in formats.FORMATS.values():
        takes = entry.options()
        assert ("head" in takes) == entry.carries_head, entry.name
        assert ("corpus" in takes) == entry.needs_corpus, entry.name
        assert (entry.quantize_kwarg in takes) == bool(entry.quantize_modes), entry.name
        assert entry.description, entry.name


def test_version_counter_and_metadata_reader(tmp_path):
    from tfsent.formats.metadata import metadata_path, read_metadata, write_metadata
    from tfsent.formats.staging import next_version

    assert next_version(tmp_path / "absent") == 1
    for name in ("1", "3", "notes", ".4.tfsent-staging-1"):
        (tmp_path / name).mkdir()
    assert next_version(tmp_path) == 4
    with pytest.raises(InputError, match="no readable tfsent export metadata"):
        read_metadata(tmp_path / "1")
    assert read_metadata(tmp_path / "1", required=False) == {}
    write_metadata(tmp_path / "1", {"format": "onnx"}, {"step": 2})
    assert read_metadata(tmp_path / "1") == {"format": "onnx", "step": 2}
    (tmp_path / "3" / "saved_model.pb").write_bytes(b"")  # a SavedModel version
    write_metadata(tmp_path / "3", {"format": "tf_saved_model"})
    assert metadata_path(tmp_path) == str(tmp_path / "3" / "assets.extra" /
                                          "tfsent_export.json")
    assert read_metadata(tmp_path)["format"] == "tf_saved_model"  # the newest version's
