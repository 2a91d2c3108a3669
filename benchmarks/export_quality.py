"""What each serving format keeps of the model: STS-B and SICK-R test Spearman of an encoder
through tfsent's ONNX and LiteRT exports (fp32 and int8), against `encode` (TensorFlow).

    python benchmarks/export_quality.py --json=quality.json [--model=minilm-l6
        --formats=onnx,onnx_int8,litert_fp32,litert_int8 --data_dir=../shared/data
        --tasks=STSBenchmark,SICKRelatedness --max_seq_length=256 --batch_size=32]

Each format is exported by tfsent's own exporter (tfsent.formats.onnx / .litert) into a
temporary folder and run as its users run it: the exported `tokenizer.json` (Hugging Face
`tokenizers`, truncation at the export's max length, padding to the batch's longest
sentence), then one ONNX Runtime `session.run` / one ai-edge-litert Interpreter call per
batch. The figures are tfsent.evaluation.sts.evaluate_sts's (Spearman x100 of the cosine
similarities); retention is the format's figure over `encode`'s. The JSON also has each
format's lowest and mean cosine to `encode` over the first --cosine_sentences distinct
sentences of STS-B test, and the machine. Quality only: no timing (serve_latency.py times the same
files).
"""

import os
import shutil
import sys
import tempfile

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

FLAGS = flags.FLAGS
FORMATS = ("onnx", "onnx_int8", "litert_fp32", "litert_int8")
flags.DEFINE_string("json", None, "Where to write the results (JSON).")
flags.DEFINE_string("model", "minilm-l6", "The encoder: any form tfsent.evaluate --model takes.")
flags.DEFINE_list("formats", list(FORMATS), "Formats to measure: " + ", ".join(FORMATS))
flags.DEFINE_string("data_dir", os.path.join(os.path.dirname(common.REPO_DIR), "shared",
                                             "data"),
                    "SentEval data folder (STS/, SICK/).")
flags.DEFINE_list("tasks", ["STSBenchmark", "SICKRelatedness"], "STS tasks (test split).")
flags.DEFINE_integer("max_seq_length", 256, "Truncation length of `encode` and every export.")
flags.DEFINE_integer("batch_size", 32, "Sentences per runtime call.")
flags.DEFINE_integer("cosine_sentences", 256, "Sentences of the cosine check.")


def validate_flags():
    """Raises app.UsageError naming the offending flag, before any model is loaded."""
    if not FLAGS.json:
        raise app.UsageError("--json is required (where to write the results)")
    unknown = [f for f in FLAGS.formats if f not in FORMATS]
    if unknown or not FLAGS.formats:
        raise app.UsageError(f"--formats: unknown {unknown or 'empty list'}; known: "
                             f"{', '.join(FORMATS)}")
    for name in ("max_seq_length", "batch_size", "cosine_sentences"):
        if getattr(FLAGS, name) < 1:
            raise app.UsageError(f"--{name} must be >= 1, got {getattr(FLAGS, name)}")
    if not os.path.isdir(FLAGS.data_dir):
        raise app.UsageError(f"--data_dir={FLAGS.data_dir} is not a folder")


def tokenized(directory, length):
    """A function (list of str -> {name: int64 array}) tokenizing as the export's users do."""
    import numpy as np
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
    tokenizer.enable_truncation(length)
    tokenizer.enable_padding()

    def encode(batch):
        rows = tokenizer.encode_batch(list(batch))
        return {"input_ids": np.array([r.ids for r in rows], np.int64),
                "attention_mask": np.array([r.attention_mask for r in rows], np.int64),
                "token_type_ids": np.array([r.type_ids for r in rows], np.int64)}

    return encode


def format_encode_fn(name, encoder, tmp):
    """Exports `encoder` as format `name` under `tmp`; returns its encode_fn (list of str ->
    (N, D) array, batches of --batch_size through the runtime)."""
    import numpy as np

    length = encoder.clamp_length(FLAGS.max_seq_length)
    directory = os.path.join(tmp, name)
    if name.startswith("onnx"):
        import onnxruntime as ort

        from tfsent.formats import onnx as onnx_format

        int8 = name == "onnx_int8"
        onnx_format.export_onnx(encoder, directory, quantize=("int8",) if int8 else (),
                                max_seq_length=length)
        session = ort.InferenceSession(
            os.path.join(directory, onnx_format.INT8_FILE if int8 else onnx_format.ONNX_FILE),
            providers=["CPUExecutionProvider"])
        inputs = [i.name for i in session.get_inputs()]

        def run(feeds):
            return session.run(["embedding"], {k: feeds[k] for k in inputs})[0]
    else:
        from tfsent.formats import litert

        litert.export_litert(encoder, directory,
                             quantize="int8" if name == "litert_int8" else "",
                             max_seq_length=length)
        model = os.path.join(directory, litert.MODEL_FILE)

        def run(feeds):
            return litert.run_litert(model, feeds["input_ids"],
                                     feeds["attention_mask"])["embedding"]
    tokenize = tokenized(directory, length)

    def encode_fn(sentences):
        sentences = list(sentences)
        return np.concatenate([run(tokenize(sentences[i:i + FLAGS.batch_size]))
                               for i in range(0, len(sentences), FLAGS.batch_size)])

    return encode_fn


def main(argv):
    """Exports each format, evaluates it and `encode`, writes --json, prints the table."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    validate_flags()
    from tfsent.data import senteval
    from tfsent.encoders import load_encoder
    from tfsent.evaluation import sts

    encoder = load_encoder(FLAGS.model, max_seq_length=FLAGS.max_seq_length)

    def reference(sentences):
        return encoder.encode(list(sentences), batch_size=FLAGS.batch_size, verbose=0)

    first, second, _ = senteval.read_stsbenchmark(FLAGS.data_dir, "test")
    probe = list(dict.fromkeys(list(first) + list(second)))[:FLAGS.cosine_sentences]
    rows = {"encode": sts.evaluate_sts(reference, FLAGS.data_dir, FLAGS.tasks)}
    expected = reference(probe)
    agreement = {}
    tmp = tempfile.mkdtemp(prefix="tfsent-export-quality-")
    try:
        for name in FLAGS.formats:
            encode_fn = format_encode_fn(name, encoder, tmp)
            rows[name] = sts.evaluate_sts(encode_fn, FLAGS.data_dir, FLAGS.tasks)
            c = sts.cosine_rows(encode_fn(probe), expected)
            agreement[name] = {"min_cosine": float(c.min()), "mean_cosine": float(c.mean())}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    figures = {name: {task: r[task]["spearman"] for task in FLAGS.tasks}
               for name, r in rows.items()}
    retention = {name: {task: 100 * figures[name][task] / figures["encode"][task]
                        for task in FLAGS.tasks} for name in FLAGS.formats}
    result = {"model": FLAGS.model, "max_seq_length": FLAGS.max_seq_length,
              "spearman": figures, "retention_percent": retention,
              "cosine_to_encode": agreement, "cosine_sentences": len(probe),
              "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])}
    common.write_result(FLAGS.json, result)
    common.print_table(
        ["path"] + [f"{t} (retained)" for t in FLAGS.tasks] + ["min / mean cosine"],
        [["encode (TF)"] + [f"{figures['encode'][t]:.2f}" for t in FLAGS.tasks] + ["-"]]
        + [[name] + [f"{figures[name][t]:.2f} ({retention[name][t]:.2f}%)"
                     for t in FLAGS.tasks]
           + [f"{agreement[name]['min_cosine']:.4f} / {agreement[name]['mean_cosine']:.5f}"]
           for name in FLAGS.formats],
        title=f"STS test Spearman x100 of {FLAGS.model} through each export "
              f"(max_seq_length {FLAGS.max_seq_length})")
    print(f"wrote {FLAGS.json}")


if __name__ == "__main__":
    app.run(main)
