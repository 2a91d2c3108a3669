"""TF Serving's production files beside a SavedModel export: warm-up requests and batching
parameters (`tfsent.formats.saved_model` writes both; docs/export.md shows the server command).

Warm-up (`WARMUP_FILE`, in each version's `assets.extra/`): TF Serving replays these
requests when it loads a version (`--enable_model_warmup`, on by default) before the version
takes traffic, so the first real request does not pay for the lazy initialisation (kernel
selection, oneDNN primitives, memory pools; under `jit_compile` the XLA compilation of the
shapes it hits). The file is a TFRecord of `tensorflow.serving.PredictionLog` records, each a
`PredictRequest` on one signature with string inputs (a search request adds int32 scalars
`k`, `rerank_top`): by default `serving_default` on
`WARMUP_SENTENCES[:1]` (batch 1) and on all 8 of them (batch 8); an encoder export adds
`encode_query` / `encode_document` (when it has those prompts) and `count_tokens` (batch
8), a cross-encoder warms up `score` and `count_pair_tokens` instead, a search index adds
`search` (and `search_reranked`). The records are serialised here from TF's own
`TensorProto` and a few lines of protobuf wire format (the field numbers of
tensorflow_serving/apis/{prediction_log,predict,model}.proto), so writing them does not
need `tensorflow-serving-api`; the tests parse them with that package's `PredictionLog`.

Batching (`BATCHING_FILE`, next to the version directories, for
`--enable_batching --batching_parameters_file=...`): a `BatchingParameters` text proto
(tensorflow_serving/servables/tensorflow/session_bundle_config.proto) derived from the
serving latencies measured in benchmarks/serve_latency.py (`MEASURED_P50_MS`, see
`batching_parameters`). It is written only when absent: a file tuned for the server's own
hardware is kept by later exports.
"""

import os

import numpy as np
import tensorflow as tf

from tfsent import fsio

WARMUP_FILE = "tf_serving_warmup_requests"
BATCHING_FILE = "batching_parameters.txt"
WARMUP_SENTENCES = (
    "A man is playing a guitar.",
    "Two dogs run through a snowy field while their owner watches from the porch.",
    "",
    "Le café était fermé à Noël.",
    "What is the capital of France?",
    "The committee postponed its decision on the new budget until further figures on "
    "tax revenue, public spending and the expected growth of the regional economy are "
    "available next spring.",
    "ok",
    "東京は日本の首都です。",
)
WARMUP_BATCH_SIZES = (1, 8)

# benchmarks/README.md, machine C (2 cores, AVX-512), second run: the plain export in a TF1
# session as TF Serving's loader runs it, one caller, p50 ms per request of `batch` sentences
# from the wiki prefix (the batch-64 cell as 64 / its 90.1 sentences per second).
MEASURED_P50_MS = {1: 8.7, 8: 50.9, 64: 64 / 90.1 * 1000}
MEASURED_CORES = 2
# The longest a request may wait in the queue before TF Serving refuses it (UNAVAILABLE),
# so a client can retry elsewhere instead of waiting behind a backlog.
QUEUE_BUDGET_MS = 500.0


def warmup_requests(signature="serving_default", input_name="sentences",
                    batch_sizes=WARMUP_BATCH_SIZES, extra_inputs=None):
    """[(signature, {input name: numpy array})] for `write_warmup_requests`: one request
    per batch size, the first `size` of WARMUP_SENTENCES as the string input, plus
    `extra_inputs` (e.g. {"k": np.int32(1)} for a search signature)."""
    requests = []
    for size in batch_sizes:
        inputs = {input_name: np.array([s.encode("utf-8") for s in WARMUP_SENTENCES[:size]],
                                       dtype=object)}
        inputs.update(extra_inputs or {})
        requests.append((signature, inputs))
    return requests


def _varint(value):
    """Protobuf base-128 varint of a non-negative int."""
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number, payload):
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def prediction_log(signature, inputs):
    """The serialised `tensorflow.serving.PredictionLog` holding a PredictRequest on
    `signature` with `inputs` ({name: array}, each made a TensorProto by TF)."""
    model_spec = _field(3, signature.encode("utf-8"))  # ModelSpec.signature_name = 3
    request = _field(1, model_spec)  # PredictRequest.model_spec = 1
    for name, value in inputs.items():  # PredictRequest.inputs = 2, map<string, TensorProto>
        entry = _field(1, name.encode("utf-8")) + _field(
            2, tf.make_tensor_proto(value).SerializeToString())
        request += _field(2, entry)
    predict_log = _field(1, request)  # PredictLog.request = 1
    return _field(6, predict_log)  # PredictionLog.predict_log = 6


def write_warmup_requests(version_dir, requests):
    """Writes `requests` ([(signature, inputs)]) as `assets.extra/WARMUP_FILE` of the
    SavedModel folder `version_dir` (a staging folder: the caller renames it into place)."""
    os.makedirs(os.path.join(version_dir, "assets.extra"), exist_ok=True)
    path = os.path.join(version_dir, "assets.extra", WARMUP_FILE)
    with tf.io.TFRecordWriter(path) as writer:
        for signature, inputs in requests:
            writer.write(prediction_log(signature, inputs))
    return path


def batching_parameters(p50_ms=None, cores=MEASURED_CORES, queue_budget_ms=QUEUE_BUDGET_MS):
    """TF Serving's batching settings derived from measured latencies `p50_ms` ({batch size:
    p50 ms per request}, default MEASURED_P50_MS) on a machine with `cores` cores:

    - max_batch_size: the measured batch size with the most sentences per second (8 on
      machine C: 157/s against 115/s at batch 1 and 90/s at batch 64, where padding every
      sentence to the longest of 64 unsorted ones costs more than the batch saves);
    - batch_timeout_micros: the per-call overhead a request saves by joining a batch, the
      intercept of the line through the batch-1 and batch-8 latencies (2.7 ms of 8.7): a
      request never waits longer for company than company saves it;
    - num_batch_threads: one per core (batches run in parallel, each on its own core);
    - max_enqueued_batches: as many full batches as the threads finish in
      `queue_budget_ms`.
    No `allowed_batch_sizes`: the graph takes any batch size, and padding a batch up to an
    allowed size would only add sentences to compute.
    """
    p50_ms = dict(MEASURED_P50_MS if p50_ms is None else p50_ms)
    best = max(p50_ms, key=lambda size: size / p50_ms[size])
    per_sentence = (p50_ms[8] - p50_ms[1]) / 7
    overhead_ms = max(p50_ms[1] - per_sentence, 0.0)
    return {"max_batch_size": int(best),
            "batch_timeout_micros": int(round(overhead_ms * 10)) * 100,
            "num_batch_threads": int(cores),
            "max_enqueued_batches": max(1, int(queue_budget_ms * cores / p50_ms[best]))}


def batching_parameters_text(params):
    """`params` as the BatchingParameters text proto TF Serving's
    --batching_parameters_file reads (Int64Value fields: `name { value: N }`)."""
    lines = ["# TF Serving batching (BatchingParameters text proto), derived by "
             "tfsent.formats.tf_serving.batching_parameters",
             "# from latencies measured in benchmarks/serve_latency.py; tune "
             "num_batch_threads to the server's cores."]
    lines += [f"{name} {{ value: {value} }}" for name, value in params.items()]
    return "\n".join(lines) + "\n"


def write_batching_parameters(export_dir, params=None):
    """Writes BATCHING_FILE into `export_dir` (next to the versions) unless it is there
    already; returns its path."""
    path = os.path.join(export_dir, BATCHING_FILE)
    if not os.path.exists(path):
        fsio.write_file_atomic(path, batching_parameters_text(params or batching_parameters()))
    return path
