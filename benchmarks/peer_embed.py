"""The real clients of tfsent's exports: sentence-transformers and transformers on PyTorch.

Runs in the peer venv (peer_env.py); tfsent itself never imports torch:

    PEER_PYTHON benchmarks/peer_embed.py --jobs=JOBS.json

JOBS.json is a list of jobs, each writing one .npy array (`out`):
  {"kind": "sentence_transformers", "model_dir": D, "sentences": S.json, "out": O.npy}
      SentenceTransformer(D).encode(sentences), exactly as a user calls it; with
      "encode": "query" | "document", its encode_query / encode_document (the export's
      prompts applied by sentence-transformers); with "backend": "onnx" and "model_kwargs"
      ({"file_name": "onnx/..."}), its ONNX backend (the `serving` peer profile has it).
  {"kind": "transformers", "model_dir": D, "sentences": S.json, "pooling": P,
   "max_seq_length": N, "normalize": bool, "out": O.npy}
      AutoTokenizer + AutoModel (the bare Hugging Face export) and tfsent's pooling P
      written here in torch: mean, cls (the model's pooler output), cls_before_pooler,
      mean_no_cls, first_last_avg, emb_last_avg, last2_avg.
  {"kind": "transformers_ids", "model_dir": D, "inputs": I.npz, "out": O.npy}
      AutoModel on given token_ids / padding_mask (families without a tokenizer here):
      the last hidden state.
Prints one result line (common.emit_result): per job, the loading report (missing /
unexpected / mismatched weights, the model class, modules) and the output shape.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def _masked_mean(x, mask):
    m = mask.unsqueeze(-1).to(x.dtype)
    return (x * m).sum(1) / m.sum(1).clamp(min=1.0)


def tfsent_pooling(pooling, outputs, mask):
    """tfsent's poolers (tfsent/encoders/pooling.py, docs/methods.md "Poolings") over
    transformers' outputs."""
    hidden = outputs.hidden_states  # (embeddings, layer 1, ..., layer L)
    last = outputs.last_hidden_state
    if pooling == "mean":
        return _masked_mean(last, mask)
    if pooling == "cls":
        return outputs.pooler_output
    if pooling == "cls_before_pooler":
        return last[:, 0]
    if pooling == "mean_no_cls":
        keep = mask.clone()
        keep[:, 0] = 0
        return _masked_mean(last, keep)
    if pooling == "first_last_avg":
        return _masked_mean((hidden[1] + last) / 2.0, mask)
    if pooling == "emb_last_avg":
        return _masked_mean((hidden[0] + last) / 2.0, mask)
    if pooling == "last2_avg":
        return _masked_mean((hidden[-2] + last) / 2.0, mask)
    raise SystemExit(f"unknown pooling {pooling!r}")


def _load_auto_model(model_dir):
    from transformers import AutoModel

    model, info = AutoModel.from_pretrained(model_dir, output_loading_info=True)
    model.eval()
    report = {"model_class": type(model).__name__,
              **{k: sorted(map(str, v)) for k, v in info.items()}}
    return model, report


def run_transformers(job, sentences):
    """Bare transformer + tfsent's pooling, in batches of 64 padded to their longest."""
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(job["model_dir"])
    model, report = _load_auto_model(job["model_dir"])
    chunks = []
    with torch.no_grad():
        for start in range(0, len(sentences), 64):
            batch = tokenizer(sentences[start:start + 64], padding=True, truncation=True,
                              max_length=job["max_seq_length"], return_tensors="pt")
            outputs = model(**batch, output_hidden_states=True)
            emb = tfsent_pooling(job["pooling"], outputs, batch["attention_mask"])
            if job.get("normalize"):
                emb = torch.nn.functional.normalize(emb, dim=-1)
            chunks.append(emb)
    report["tokenizer_class"] = type(tokenizer).__name__
    return torch.cat(chunks).numpy(), report


def run_transformers_ids(job):
    import numpy as np
    import torch

    model, report = _load_auto_model(job["model_dir"])
    inputs = np.load(job["inputs"])
    with torch.no_grad():
        out = model(input_ids=torch.tensor(inputs["token_ids"], dtype=torch.long),
                    attention_mask=torch.tensor(inputs["padding_mask"], dtype=torch.long))
    return out.last_hidden_state.numpy(), report


def run_sentence_transformers(job, sentences):
    from sentence_transformers import SentenceTransformer

    kwargs = {}
    if job.get("backend", "torch") != "torch":  # e.g. "onnx" (optimum + onnxruntime)
        kwargs = {"backend": job["backend"], "model_kwargs": job.get("model_kwargs") or {}}
    model = SentenceTransformer(job["model_dir"], device="cpu", **kwargs)
    encode = {"query": model.encode_query, "document": model.encode_document}.get(
        job.get("encode"), model.encode)
    emb = encode(sentences, batch_size=64, convert_to_numpy=True)
    dim = (model.get_embedding_dimension() if hasattr(model, "get_embedding_dimension")
           else model.get_sentence_embedding_dimension())
    report = {"modules": [type(m).__name__ for m in model], "dimension": dim,
              "max_seq_length": model.max_seq_length}
    if kwargs:  # the file the backend runs (it exports one itself when none is found)
        report["model_path"] = str(getattr(model[0].auto_model, "model_path", ""))
    return emb, report


def main(argv=None):
    """Runs every job of --jobs; emits {"jobs": [report, ...], "versions": {...}}."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", required=True, help="JSON list of jobs (see the module doc)")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: default)")
    args = p.parse_args(argv)
    import numpy as np
    import sentence_transformers
    import torch
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    with open(args.jobs, encoding="utf-8") as f:
        jobs = json.load(f)
    reports = []
    for job in jobs:
        sentences = None
        if "sentences" in job:
            with open(job["sentences"], encoding="utf-8") as f:
                sentences = json.load(f)
        if job["kind"] == "sentence_transformers":
            emb, report = run_sentence_transformers(job, sentences)
        elif job["kind"] == "transformers":
            emb, report = run_transformers(job, sentences)
        elif job["kind"] == "transformers_ids":
            emb, report = run_transformers_ids(job)
        else:
            raise SystemExit(f"unknown job kind {job['kind']!r}")
        np.save(job["out"], np.asarray(emb, np.float32))
        reports.append(dict(report, kind=job["kind"], out=job["out"], shape=list(emb.shape)))
    common.emit_result({"jobs": reports,
                        "versions": {"torch": torch.__version__,
                                     "transformers": transformers.__version__,
                                     "sentence_transformers": sentence_transformers.__version__}})


if __name__ == "__main__":
    main()
