"""The dev set's embeddings during training: their STS score (`sts_dev_score`, what the dev
callbacks of `tfsent.training.callbacks` report) and TensorBoard projector snapshots."""

import os

import numpy as np
from google.protobuf import text_format
from tensorboard.plugins import projector

from tfsent import fsio
from tfsent.evaluation.geometry import pair_geometry
from tfsent.evaluation.sts import correlations


def dev_embeddings(model, sentences, batch_size=128, max_seq_length=None, use_head=True):
    """L2-normalised embeddings of `sentences` with `model.encode` (a SentenceMethod: its
    dev pooling and head)."""
    kwargs = {"pooling": model.dev_pooling} if hasattr(model, "dev_pooling") else {}
    return model.encode(list(sentences), batch_size=batch_size, normalize=True,
                        max_seq_length=max_seq_length, use_head=use_head, **kwargs)


def sts_dev_score(model, sents1, sents2, gold, batch_size=128, max_seq_length=None,
                  use_head=True, geometry=False):
    """Spearman and Pearson (x100) of cosine vs gold on dev pairs.

    With `geometry=True` the result also has "alignment" (over pairs scored in the top
    fifth of the gold range), "uniformity" and "random_pair_cosine" (over the distinct
    dev sentences), and "sentences"/"embeddings" (the distinct sentences and their rows).
    """
    unique = list(dict.fromkeys(list(sents1) + list(sents2)))
    emb = dev_embeddings(model, unique, batch_size, max_seq_length, use_head)
    index = {s: i for i, s in enumerate(unique)}
    a = emb[[index[s] for s in sents1]]
    b = emb[[index[s] for s in sents2]]
    cos = np.sum(a * b, axis=1)
    # The evaluator's guarded correlation: NaN (not a scipy warning and garbage) when every
    # cosine is equal, and a NaN score is never "best" (tfsent.training.selection).
    out = correlations(cos, gold)
    if geometry:
        out.update(pair_geometry(a, b, gold, emb), sentences=unique, embeddings=emb)
    return out


def write_projector_snapshot(log_dir, name, sentences, embeddings, max_points=1000):
    """Adds an embedding snapshot for TensorBoard's projector under `log_dir`.

    Writes projector/metadata.tsv (the first `max_points` sentences, one a line),
    projector/NAME.tsv (their vectors) and (re)writes projector_config.pbtxt listing every
    snapshot of the directory. Each file is written to a temporary name and renamed.
    """
    folder = os.path.join(log_dir, "projector")
    os.makedirs(folder, exist_ok=True)
    sentences = list(sentences)[:max_points]
    vectors = np.asarray(embeddings)[:len(sentences)]
    clean = [" ".join(s.split()) or "(empty)" for s in sentences]  # no tabs or newlines
    _write_text_atomic(os.path.join(folder, "metadata.tsv"), "".join(c + "\n" for c in clean))
    _write_text_atomic(os.path.join(folder, f"{name}.tsv"),
                       "".join("\t".join(f"{v:.5g}" for v in row) + "\n" for row in vectors))
    config = projector.ProjectorConfig()
    for file in sorted(f for f in os.listdir(folder) if f.endswith(".tsv")):
        if file == "metadata.tsv":
            continue
        entry = config.embeddings.add()
        entry.tensor_name = file[:-4]
        entry.tensor_path = os.path.join("projector", file)
        entry.metadata_path = os.path.join("projector", "metadata.tsv")
    # What projector.visualize_embeddings writes, but atomically.
    _write_text_atomic(os.path.join(log_dir, "projector_config.pbtxt"),
                       text_format.MessageToString(config))


def _write_text_atomic(path, text):
    fsio.write_file_atomic(path, text.encode("utf-8"))
