"""Diagnostic pictures of an embedding space (needs the `plots` extra: matplotlib).

- `sts_scatter`: gold score vs predicted cosine per STS task, one panel per model
  (ConSERT's Figure 1: an untrained BERT squeezes every pair into a narrow cosine band).
- `cosine_histogram`: cosines of random sentence pairs, one histogram per model (the
  collapse signature: a mass near 1 means every sentence points the same way).
- `align_uniform_plot`: one point per model in the alignment/uniformity plane (SCD's
  Figure 2; lower is better on both axes).

Every function writes one PNG (atomically) and returns its path; `write_plots` writes all
three kinds for one or more models from the SentEval STS data (`tfsent.evaluate
--plots_dir`).
"""

import os

import numpy as np
from absl import logging

from tfsent.errors import ConfigError
from tfsent.evaluation import align_uniform, random_pair_cosines
from tfsent.evaluation.sts import STS_TASKS, _pair_cosines, _read_task, _task_path, correlations

PLOTS_EXTRA = 'pip install "tfsent[plots]"  (from a checkout: pip install -e ".[plots]")'


def require_matplotlib():
    """Imports matplotlib with the file-only Agg backend; a ConfigError naming the extra
    if it is not installed."""
    try:
        import matplotlib  # optional (the plots extra): imported only when plots are asked for
    except ImportError as e:
        raise ConfigError(f"plots need matplotlib, which is not installed: {PLOTS_EXTRA}") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): the backend must be chosen first
    return plt


def check_plots_dir(plots_dir):
    """ConfigError when --plots_dir exists and is not a folder (checked before any
    encoding, so an evaluation's results are never lost to a bad plots path)."""
    if os.path.exists(plots_dir) and not os.path.isdir(plots_dir):
        raise ConfigError(f"--plots_dir={plots_dir} exists and is not a folder")


def _save(fig, path):
    """Lays out, writes `fig` to `path` atomically (temporary name, then rename), closes it."""
    try:
        fig.tight_layout()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = path + ".tmp.png"
        fig.savefig(tmp, dpi=100)
        os.replace(tmp, path)
        return path
    finally:
        require_matplotlib().close(fig)


def sts_scatter(path, task, gold, cosines_by_model, spearman_by_model):
    """Scatter of gold score (x) vs cosine (y), one panel per model, Spearman in titles.

    Args:
        path: PNG to write.
        task: task name for the figure title.
        gold: (N,) gold scores.
        cosines_by_model: dict label -> (N,) predicted cosines.
        spearman_by_model: dict label -> Spearman x100.
    """
    plt = require_matplotlib()
    labels = list(cosines_by_model)
    fig, axes = plt.subplots(1, len(labels), figsize=(4.2 * len(labels), 3.8), squeeze=False,
                             sharey=True)
    for ax, label in zip(axes[0], labels):
        ax.scatter(gold, cosines_by_model[label], s=3, alpha=0.35, color="tab:blue")
        ax.set_title(f"{label}\nSpearman {spearman_by_model[label]:.2f}", fontsize=9)
        ax.set_xlabel("gold score")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("cosine similarity")
    fig.suptitle(task, fontsize=10)
    return _save(fig, path)


def cosine_histogram(path, cosines_by_model, title="cosine of random sentence pairs"):
    """Overlaid histograms of random-pair cosines, one per model, with their means."""
    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    bins = np.linspace(-1.0, 1.0, 81)
    for label, cos in cosines_by_model.items():
        ax.hist(cos, bins=bins, alpha=0.5, label=f"{label} (mean {np.mean(cos):.2f})")
    ax.set_xlabel("cosine similarity")
    ax.set_ylabel("pairs")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return _save(fig, path)


def align_uniform_plot(path, points_by_model, title="alignment / uniformity (STS-B test)"):
    """One labelled point (uniformity, alignment) per model; lower is better on both."""
    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=(5.0, 4.0))
    for label, point in points_by_model.items():
        ax.scatter([point["uniform"]], [point["align"]], s=60)
        ax.annotate(label, (point["uniform"], point["align"]), textcoords="offset points",
                    xytext=(6, 6), fontsize=8)
    ax.set_xlabel("uniformity (lower is better)")
    ax.set_ylabel("alignment (lower is better)")
    ax.set_title(title, fontsize=10)
    ax.margins(0.3)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def write_plots(encode_fns, data_dir, tasks, plots_dir, n_random_pairs=2000):
    """Writes the diagnostic PNGs for one or more models; returns the paths written.

    Args:
        encode_fns: dict label -> encode_fn (list of str -> array), in panel order.
        data_dir: SentEval `downstream` folder.
        tasks: task names; the STS ones present under data_dir get a scatter each.
        plots_dir: output folder.
    """
    require_matplotlib()
    written = []
    sts = [t for t in tasks if t in STS_TASKS and os.path.isdir(_task_path(data_dir, t))]
    sentences = []
    for task in sts:
        subsets = _read_task(data_dir, task, "test")
        s1 = [s for a, _, _ in subsets.values() for s in a]
        s2 = [s for _, b, _ in subsets.values() for s in b]
        gold = np.concatenate([g for _, _, g in subsets.values()])
        cos = {label: _pair_cosines(fn, [(s1, s2)])[0] for label, fn in encode_fns.items()}
        rho = {label: correlations(c, gold)["spearman"] for label, c in cos.items()}
        written.append(sts_scatter(os.path.join(plots_dir, f"sts_{task}.png"), task, gold,
                                   cos, rho))
        sentences += s1 + s2
    if sentences:
        sentences = list(dict.fromkeys(sentences))
        cos = {label: random_pair_cosines(fn(sentences), n_random_pairs)
               for label, fn in encode_fns.items()}
        written.append(cosine_histogram(
            os.path.join(plots_dir, "random_pair_cosines.png"), cos,
            title=f"cosine of {n_random_pairs} random pairs of STS test sentences"))
    if os.path.isdir(_task_path(data_dir, "STSBenchmark")):
        points = {label: align_uniform(fn, data_dir) for label, fn in encode_fns.items()}
        written.append(align_uniform_plot(os.path.join(plots_dir, "align_uniform.png"),
                                          points))
    else:
        logging.warning("no STSBenchmark under %s: skipping the alignment/uniformity plot",
                        data_dir)
    if not written:
        logging.warning("no STS task data under %s: no plot written", data_dir)
    for path in written:
        logging.info("wrote %s", path)
    return written
