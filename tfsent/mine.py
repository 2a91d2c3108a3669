"""Hard-negative mining: (anchor, positive) pairs -> (anchor, positive, negative) triplets.

    python -m tfsent.mine --model=NAME_OR_DIR --pairs=PAIRS.tsv [--corpus=SENTENCES.txt] \
        --out=TRIPLETS.tsv [--num_negatives=3] [--range_min=0] [--range_max=N] \
        [--max_score=S] [--margin=M] [--relative_margin=R] [--output_format=triplet|n-tuple]

`--pairs` has two tab-separated columns per line (anchor, positive). Candidates are the
lines of `--corpus` (one sentence per line), else every positive of the pairs file;
duplicates are merged. Every text is embedded once with the encoder (anything
`tfsent.encoders.load_encoder` takes, or an exported SavedModel directory), and for each
distinct anchor the most similar candidates by exact cosine are found chunk by chunk (a
running top-k over candidate chunks: memory grows with chunk sizes and k, never with
anchors x candidates; the embeddings themselves, 1.5 GB for 1M sentences at 384 dims,
are the largest allocation).

Candidates that are never negatives of an anchor: the anchor's own text and every
positive the pairs file gives for that anchor. Ranks count the remaining candidates
(rank 0 = the most similar). From ranks [range_min, range_max) a candidate is kept if
  sim(anchor, neg) <= max_score                              (--max_score)
  sim(anchor, neg) <  sim(anchor, pos) - margin              (--margin)
  sim(anchor, neg) <  sim(anchor, pos) * (1 - relative_margin) (--relative_margin)
(NV-Retriever's TopK-Abs, TopK-MarginPos and TopK-PercPos; sentence-transformers'
`max_score`, `absolute_margin`, `relative_margin`), and the first `--num_negatives` kept
(the hardest) are written. `--output_format=triplet` (default): one row
`anchor<TAB>positive<TAB>negative` per negative, the file `tfsent.train --method=simcse_sup
--config.train_data=FILE` reads; `n-tuple`: one row `anchor<TAB>positive<TAB>neg1..negN`,
anchors with fewer than N negatives left out. How many anchors got fewer negatives than
asked, and which filter removed their candidates, is logged.

`--num_negatives` larger than what any anchor can get (the distinct candidates minus
the fewest excluded texts of an anchor, minus --range_min), or than the rank window, is
an error before the model is loaded; anchors that get fewer for their own reasons (more
positives excluded, filters) are counted in a warning and written with what they got.
"""

import os

import keras
import numpy as np
from absl import app, flags, logging

from tfsent import cli, fsio
from tfsent.data.readers import read_sentences, read_tsv_rows
from tfsent.errors import ConfigError, InputError
from tfsent.search import l2_normalize_rows, top_k_cosine  # noqa: F401  (mine.top_k_cosine)
from tfsent.serving import load_any

OUTPUT_FORMATS = ("triplet", "n-tuple")


# -- pure functions -------------------------------------------------------------------------
def pair_cosines(unit_embeddings, left, right, chunk=65536):
    """cos(e[left[r]], e[right[r]]) per row r of unit-norm embeddings, `chunk` rows at a
    time (no copy of all the pairs' embeddings at once)."""
    out = np.zeros(len(left), np.float32)
    for start in range(0, len(left), chunk):
        a = unit_embeddings[left[start:start + chunk]]
        b = unit_embeddings[right[start:start + chunk]]
        out[start:start + chunk] = np.einsum("ij,ij->i", a, b)
    return out


def negative_filters(scores, indices, positive_scores, range_min=0, range_max=None,
                     max_score=None, margin=None, relative_margin=None):
    """Which ranked candidates each filter removes.

    Args:
        scores, indices: (R, K) ranked candidates per row (as `top_k_cosine` returns them,
            index -1 = no candidate).
        positive_scores: (R,) sim(anchor, positive) of each row.
        range_min, range_max: rank window [range_min, range_max) (None: to the end).
        max_score: keep only sim <= max_score (None: off).
        margin: keep only sim < positive_score - margin (None: off).
        relative_margin: keep only sim < positive_score * (1 - relative_margin) (None: off).
    Returns:
        dict of (R, K) boolean arrays: "candidate" (a real candidate inside the rank
        window), "max_score", "margin", "relative_margin" (True where that filter removes
        a candidate; all False when the filter is off), and "keep" (a candidate no filter
        removes).
    """
    scores = np.asarray(scores, np.float32)
    positive = np.asarray(positive_scores, np.float32)[:, None]
    ranks = np.arange(scores.shape[1])[None, :]
    in_window = ranks >= range_min
    if range_max is not None:
        in_window &= ranks < range_max
    masks = {"candidate": in_window & (np.asarray(indices) >= 0)}
    off = np.zeros(scores.shape, bool)
    masks["max_score"] = off if max_score is None else scores > max_score
    masks["margin"] = off if margin is None else ~(scores < positive - margin)
    masks["relative_margin"] = (off if relative_margin is None
                                else ~(scores < positive * (1.0 - relative_margin)))
    masks["keep"] = (masks["candidate"] & ~masks["max_score"] & ~masks["margin"]
                     & ~masks["relative_margin"])
    return masks


def first_n(keep, n):
    """(R, K) booleans -> the first `n` True entries of each row (the others False)."""
    keep = np.asarray(keep, bool)
    return keep & (np.cumsum(keep, axis=1) <= n)


def shortfall_report(masks, selected, n):
    """Counts for the log: rows with fewer than `n` selected negatives, rows with none, and
    among the in-window candidates of the short rows how many each filter removed."""
    short = selected.sum(axis=1) < n
    report = {"short": int(short.sum()), "none": int((selected.sum(axis=1) == 0).sum()),
              "window_candidates": int(masks["candidate"][short].sum())}
    for name in ("max_score", "margin", "relative_margin"):
        report[name] = int((masks[name] & masks["candidate"])[short].sum())
    return report


# -- data -----------------------------------------------------------------------------------
def read_pairs(path):
    """`anchor<TAB>positive` per line -> list of (anchor, positive); a malformed row raises
    InputError naming the file and line."""
    pairs = read_tsv_rows(path, ("anchor", "positive"))
    if not pairs:
        raise InputError("no (anchor, positive) pairs (the file is empty or blank)", path=path)
    logging.info("read %d (anchor, positive) pairs from %s", len(pairs), path)
    return pairs


class MiningProblem:
    """The texts of a mining run, deduplicated and indexed.

    `texts` lists the candidates first (indices 0..num_candidates-1) and then the anchors
    and positives that are not candidates, so the candidate embeddings are a prefix of the
    embedding matrix. `anchor_ids`/`positive_ids` index `texts` per pair row;
    `unique_anchors` are the distinct anchor text ids and `row_anchor` maps each row to
    its position there; `exclude` (len(unique_anchors), E) holds the candidate indices no
    anchor may take as a negative (its own text, all of its positives), -1 padded.
    """

    def __init__(self, pairs, corpus=None):
        candidates = list(dict.fromkeys(corpus if corpus is not None
                                        else (p for _, p in pairs)))
        index = {t: i for i, t in enumerate(candidates)}
        self.num_candidates = len(candidates)
        for text in (t for pair in pairs for t in pair):
            index.setdefault(text, len(index))
        self.texts = list(index)
        self.anchor_ids = np.array([index[a] for a, _ in pairs], np.int64)
        self.positive_ids = np.array([index[p] for _, p in pairs], np.int64)
        self.unique_anchors, self.row_anchor = np.unique(self.anchor_ids, return_inverse=True)
        excluded = {int(a): {int(a)} for a in self.unique_anchors}
        for a, p in zip(self.anchor_ids, self.positive_ids):
            excluded[int(a)].add(int(p))
        lists = [sorted(i for i in excluded[int(a)] if i < self.num_candidates)
                 for a in self.unique_anchors]
        width = max(1, max(len(x) for x in lists))
        self.exclude = np.full((len(lists), width), -1, np.int64)
        for row, ids in enumerate(lists):
            self.exclude[row, :len(ids)] = ids
        self.min_excluded = min(len(x) for x in lists)

    def max_negatives(self, range_min=0):
        """The most negatives any anchor can get: the candidates minus the fewest excluded
        candidates of an anchor, minus the skipped ranks. Asking for more is an error;
        anchors that get fewer (more excluded candidates, filters) are counted in the
        log instead."""
        return self.num_candidates - self.min_excluded - range_min


def check_options(num_negatives, range_min, range_max, max_score, margin, relative_margin,
                  output_format):
    """Raises ConfigError naming the flag for option values that cannot work."""
    if num_negatives < 1:
        raise ConfigError(f"--num_negatives must be >= 1, got {num_negatives}")
    if range_min < 0:
        raise ConfigError(f"--range_min must be >= 0, got {range_min}")
    if range_max is not None and range_max - range_min < num_negatives:
        raise ConfigError(f"the rank window [--range_min={range_min}, --range_max="
                          f"{range_max}) holds {max(0, range_max - range_min)} candidates, "
                          f"fewer than --num_negatives={num_negatives}")
    if max_score is not None and not -1.0 <= max_score <= 1.0:
        raise ConfigError(f"--max_score is a cosine, in [-1, 1]; got {max_score}")
    if margin is not None and margin < 0:
        raise ConfigError(f"--margin must be >= 0, got {margin}")
    if relative_margin is not None and not 0.0 <= relative_margin < 1.0:
        raise ConfigError(f"--relative_margin must be in [0, 1), got {relative_margin}")
    if output_format not in OUTPUT_FORMATS:
        raise ConfigError(f"--output_format must be one of {OUTPUT_FORMATS}, got "
                          f"{output_format!r}")


def check_available(problem, num_negatives, range_min, candidates_source):
    """Raises ConfigError when `num_negatives` is more than any anchor of `problem` can
    get (see `MiningProblem.max_negatives`)."""
    available = problem.max_negatives(range_min)
    if num_negatives > available:
        raise ConfigError(
            f"--num_negatives={num_negatives} is more than any anchor can get: "
            f"{problem.num_candidates} distinct candidates ({candidates_source}), minus "
            f"{problem.min_excluded} that are the anchor or its positives, minus "
            f"--range_min={range_min}, leaves {max(0, available)}")


def mine_hard_negatives(encoder, pairs, corpus=None, num_negatives=3, range_min=0,
                        range_max=None, max_score=None, margin=None, relative_margin=None,
                        batch_size=64, query_chunk=256, candidate_chunk=16384, verbose=1,
                        candidates_source="the positives of the pairs"):
    """Mines hard negatives for (anchor, positive) pairs; see the module docstring.

    Args:
        encoder: an object with `encode(sentences, batch_size=, normalize=, verbose=)`.
        pairs: list of (anchor, positive) strings.
        corpus: candidate sentences (None: the positives of `pairs`).
        num_negatives, range_min, range_max, max_score, margin, relative_margin: see
            `negative_filters`; range_max None searches range_min + 10 * num_negatives
            ranks.
        batch_size: encoding batch size; query_chunk, candidate_chunk: see `top_k_cosine`.
        verbose: 1 shows progress bars, 0 none.
        candidates_source: how the candidates are named in errors.
    Returns:
        a list, per pair row, of its negatives (strings, hardest first; possibly fewer
        than num_negatives), and the shortfall report (`shortfall_report`).
    """
    check_options(num_negatives, range_min, range_max, max_score, margin, relative_margin,
                  "triplet")
    problem = MiningProblem(pairs, corpus)
    check_available(problem, num_negatives, range_min, candidates_source)
    return mine_problem(encoder, problem, num_negatives, range_min, range_max, max_score,
                        margin, relative_margin, batch_size, query_chunk, candidate_chunk,
                        verbose)


def mine_problem(encoder, problem, num_negatives, range_min=0, range_max=None,
                 max_score=None, margin=None, relative_margin=None, batch_size=64,
                 query_chunk=256, candidate_chunk=16384, verbose=1):
    """`mine_hard_negatives` on a prepared, checked `MiningProblem` (same arguments and
    result)."""
    depth = range_max if range_max is not None else range_min + 10 * num_negatives
    depth = min(depth, problem.num_candidates)
    num_rows = len(problem.anchor_ids)
    logging.info("mining: %d pairs, %d distinct anchors, %d candidates, %d texts to embed, "
                 "top %d per anchor", num_rows, len(problem.unique_anchors),
                 problem.num_candidates, len(problem.texts), depth)
    embeddings = np.asarray(encoder.encode(problem.texts, batch_size=batch_size,
                                           normalize=True, verbose=verbose), np.float32)
    embeddings /= np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    bar = None
    if verbose:
        bar = keras.utils.Progbar(len(problem.unique_anchors), unit_name="anchor")
    scores, indices = top_k_cosine(
        embeddings[problem.unique_anchors], embeddings[:problem.num_candidates], depth,
        exclude=problem.exclude, query_chunk=query_chunk, candidate_chunk=candidate_chunk,
        on_chunk=None if bar is None else bar.add)
    positive_scores = pair_cosines(embeddings, problem.anchor_ids, problem.positive_ids)
    row_scores, row_indices = scores[problem.row_anchor], indices[problem.row_anchor]
    masks = negative_filters(row_scores, row_indices, positive_scores, range_min, range_max,
                             max_score, margin, relative_margin)
    selected = first_n(masks["keep"], num_negatives)
    negatives = [[problem.texts[i] for i in row_indices[r][selected[r]]]
                 for r in range(num_rows)]
    return negatives, shortfall_report(masks, selected, num_negatives)


def log_report(report, num_rows, num_negatives, hint):
    """Logs how many pair rows got fewer negatives than asked and which filter removed
    their candidates."""
    if not report["short"]:
        logging.info("every one of the %d pairs got %d negatives", num_rows, num_negatives)
        return
    logging.warning(
        "%d of %d pairs got fewer than %d negatives (%d got none). Among the %d candidates "
        "in their rank window: %d above --max_score, %d not below the positive by "
        "--margin, %d not below the positive by --relative_margin (a candidate can fail "
        "several); the others were taken. %s", report["short"], num_rows, num_negatives,
        report["none"], report["window_candidates"], report["max_score"], report["margin"],
        report["relative_margin"], hint)


def format_rows(pairs, negatives, output_format, num_negatives):
    """Output rows (tuples of strings): one (anchor, positive, negative) per negative, or
    for "n-tuple" one (anchor, positive, neg1..negN) per pair with all N negatives."""
    rows = []
    for (anchor, positive), negs in zip(pairs, negatives):
        if output_format == "triplet":
            rows += [(anchor, positive, n) for n in negs]
        elif len(negs) == num_negatives:
            rows.append((anchor, positive, *negs))
    return rows


def write_rows(path, rows):
    """Writes tab-separated rows to `path` atomically (a temporary file, fsynced, renamed)."""
    fsio.write_file_atomic(path, "".join("\t".join(row) + "\n" for row in rows)
                           .encode("utf-8"))


# -- CLI ------------------------------------------------------------------------------------
def _mine_from_flags():
    """Checks the flags and inputs, loads --model, mines, writes --out; returns the rows."""
    FLAGS = flags.FLAGS
    if not FLAGS.pairs:
        raise ConfigError("--pairs is required (a file of anchor<TAB>positive lines)")
    if not FLAGS.out:
        raise ConfigError("--out is required (where to write the mined rows)")
    check_options(FLAGS.num_negatives, FLAGS.range_min, FLAGS.range_max, FLAGS.max_score,
                  FLAGS.margin, FLAGS.relative_margin, FLAGS.output_format)
    for name in ("query_chunk", "candidate_chunk", "batch_size"):
        if FLAGS[name].value < 1:
            raise ConfigError(f"--{name} must be >= 1, got {FLAGS[name].value}")
    out_dir = os.path.dirname(os.path.abspath(FLAGS.out))
    if not os.path.isdir(out_dir):
        raise InputError("the directory of --out does not exist", path=out_dir)
    fsio.check_new_file(FLAGS.out, "--out", overwrite=FLAGS.overwrite,
                        inputs=[FLAGS.pairs, FLAGS.corpus])
    pairs = read_pairs(FLAGS.pairs)
    corpus = read_sentences(FLAGS.corpus) if FLAGS.corpus else None
    source = f"--corpus={FLAGS.corpus}" if FLAGS.corpus else f"the positives of {FLAGS.pairs}"
    # Refuse an impossible --num_negatives before loading the model.
    problem = MiningProblem(pairs, corpus)
    check_available(problem, FLAGS.num_negatives, FLAGS.range_min, source)
    encoder = load_any(FLAGS.model, FLAGS.pooling, FLAGS.max_seq_length)
    negatives, report = mine_problem(
        encoder, problem, FLAGS.num_negatives, FLAGS.range_min, FLAGS.range_max,
        FLAGS.max_score, FLAGS.margin, FLAGS.relative_margin, FLAGS.batch_size,
        FLAGS.query_chunk, FLAGS.candidate_chunk, verbose=1 if FLAGS.progress else 0)
    hint = "Raise --range_max (the ranks searched) or loosen the filters to get more."
    log_report(report, len(pairs), FLAGS.num_negatives, hint)
    rows = format_rows(pairs, negatives, FLAGS.output_format, FLAGS.num_negatives)
    if FLAGS.output_format == "n-tuple" and report["short"]:
        logging.warning("n-tuple rows need %d negatives each: %d pairs left out",
                        FLAGS.num_negatives, report["short"])
    if not rows:
        raise InputError("no pair got a negative that passes the filters; nothing written "
                         "(loosen --max_score/--margin/--relative_margin or raise "
                         "--range_max)", path=FLAGS.pairs)
    write_rows(FLAGS.out, rows)
    return rows


def main(argv):
    """CLI entry point: mine, write --out, print a one-line summary (a bad flag or input:
    `error: ...` on stderr, exit status 2)."""
    rows = cli.run_command(_mine_from_flags, argv)
    print(f"wrote {len(rows)} {flags.FLAGS.output_format} rows to {flags.FLAGS.out}")


def _define_flags():
    """The command's flags (defined only when it runs as a command)."""
    flags.DEFINE_string("model", "minilm-l6", "Encoder: preset name, checkpoint or tfsent "
                        "directory, minilm-l6, or an exported SavedModel directory.")
    flags.DEFINE_string("pooling", None, "Pooling (default: the model directory's, else mean).")
    flags.DEFINE_integer("max_seq_length", None, "Tokenizer truncation length (default: the "
                         "model directory's, else 128).")
    flags.DEFINE_string("pairs", None, "anchor<TAB>positive per line.")
    flags.DEFINE_string("corpus", None, "Candidate sentences, one per line (default: the "
                        "positives of --pairs).")
    flags.DEFINE_string("out", None, "Output .tsv (a new file; never one of the inputs).")
    flags.DEFINE_bool("overwrite", False, "Replace --out if it exists (never --pairs or "
                      "--corpus).")
    flags.DEFINE_integer("num_negatives", 3, "Negatives per pair.")
    flags.DEFINE_integer("range_min", 0, "Skip this many of the most similar candidates.")
    flags.DEFINE_integer("range_max", None, "Consider only candidates ranked below this "
                         "(default: range_min + 10 * num_negatives).")
    flags.DEFINE_float("max_score", None, "Keep only negatives with cosine <= this.")
    flags.DEFINE_float("margin", None, "Keep only negatives with cosine < cos(anchor, "
                       "positive) - margin.")
    flags.DEFINE_float("relative_margin", None, "Keep only negatives with cosine < "
                       "cos(anchor, positive) * (1 - relative_margin); NV-Retriever: 0.05.")
    flags.DEFINE_enum("output_format", "triplet", list(OUTPUT_FORMATS),
                      "triplet: anchor, positive, negative per row (one row per negative); "
                      "n-tuple: anchor, positive, neg1..negN per row.")
    flags.DEFINE_integer("batch_size", 64, "Encoding batch size.")
    flags.DEFINE_integer("query_chunk", 256, "Anchors per similarity block.")
    flags.DEFINE_integer("candidate_chunk", 16384, "Candidates per similarity block.")
    flags.DEFINE_bool("progress", True, "Show progress bars.")


if __name__ == "__main__":
    _define_flags()
    app.run(main)
