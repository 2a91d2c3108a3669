"""On-disk cache of a frozen encoder's sentence embeddings (CLSR trains on it).

An entry is keyed by the encoder's identity (its name, plus size and modification time of
every file when it is a directory), the pooling, max_seq_length and a hash of the sentences
in order; change any of them and the key changes. Entries are `.npy` arrays (no pickle)
with a JSON sidecar, written to temporary names and renamed.
"""

import hashlib
import json
import os

import numpy as np
from absl import logging

from tfsent.encoders.loading import SHORT_NAMES, resolve_short_name


def encoder_identity(name):
    """A string identifying an encoder: its name, and for a directory its files' sizes and
    modification times (retraining into the same directory changes the identity)."""
    path = resolve_short_name(name) if name in SHORT_NAMES else name
    if not os.path.isdir(path):
        return name
    stats = []
    for root, _, files in sorted(os.walk(path)):
        for f in sorted(files):
            st = os.stat(os.path.join(root, f))
            stats.append(f"{os.path.relpath(os.path.join(root, f), path)}:{st.st_size}:"
                         f"{int(st.st_mtime)}")
    return name + "|" + ";".join(stats)


def cache_key(encoder_name, pooling, max_seq_length, sentences):
    """sha256 over everything the cached embeddings depend on."""
    h = hashlib.sha256()
    h.update(json.dumps([encoder_identity(encoder_name), pooling, int(max_seq_length)]).encode())
    for s in sentences:
        h.update(s.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:32]


def cached_embeddings(cache_dir, encoder_name, pooling, max_seq_length, sentences, compute):
    """Returns (embeddings, hit): loads the entry for this key, or calls `compute(sentences)`
    and stores the result. Logs which of the two happened."""
    key = cache_key(encoder_name, pooling, max_seq_length, sentences)
    path = os.path.join(cache_dir, f"{key}.npy")
    if os.path.exists(path):
        emb = np.load(path, allow_pickle=False)
        if emb.shape[0] == len(sentences):
            logging.info("embedding cache hit: reusing %s (%d x %d)", path, *emb.shape)
            return emb, True
        logging.warning("embedding cache entry %s has the wrong size; recomputing", path)
    logging.info("embedding cache miss: encoding %d sentences with %s (%s pooling)",
                 len(sentences), encoder_name, pooling)
    emb = np.asarray(compute(sentences), np.float32)
    os.makedirs(cache_dir, exist_ok=True)
    tmp = path + f".tmp-{os.getpid()}.npy"
    np.save(tmp, emb, allow_pickle=False)
    os.replace(tmp, path)
    meta = {"encoder": encoder_name, "pooling": pooling, "max_seq_length": int(max_seq_length),
            "n": len(sentences), "dim": int(emb.shape[1])}
    with open(path[:-4] + ".json.tmp", "w") as f:
        json.dump(meta, f)
    os.replace(path[:-4] + ".json.tmp", path[:-4] + ".json")
    return emb, False
