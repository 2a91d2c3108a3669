"""Diagnostic pictures of an embedding space (needs the `plots` extra: matplotlib).

- `sts_scatter`: gold score vs predicted cosine per STS task, one panel per model
  (ConSERT's Figure 1: an untrained BERT squeezes every pair into a narrow cosine band).
- `cosine_histogram`: cosines of random sentence pairs, one histogram per model (the
  collapse signature: a mass near 1 means every sentence points the same way).
- `align_uniform_plot`: one point per model in the alignment/uniformity plane (SCD's
  Figure 2; lower is better on both axes).

Every function writes one PNG (atomically) and returns its path.
"""

import os

import numpy as np

from tfsent.errors import ConfigError

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
