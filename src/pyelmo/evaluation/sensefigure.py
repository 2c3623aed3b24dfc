"""The demo's figure (``pyelmo demo --plot``): a word's contexts by sense, as a heatmap, a projection and
bars of same-sense vs different-sense similarity per layer."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from pyelmo.evaluation.demo import all_context_vectors, pca2, separation_of
from pyelmo.evaluation.senses import cosine_matrix

#: The PNG "Software" text the demo's figure carries: ``pyelmo demo`` replaces a file that has it.
FIGURE_MARK = "pyelmo demo"
#: bar charts per row of the sense figure
BAR_COLUMNS = 4


def plot_senses(embedder, path: str | os.PathLike, contexts: dict[str, dict[str, list[str]]] | None = None) -> Path:
    """Embed ``contexts`` (default ``SENSE_CONTEXTS``) and write the figure of :func:`write_sense_figure`."""
    return write_sense_figure(all_context_vectors(embedder, contexts), path)


def plot_bank(embedder, path: str | os.PathLike) -> Path:
    """The demo figure (see :func:`plot_senses`); kept under its old name."""
    return plot_senses(embedder, path)


def write_sense_figure(data: dict[str, tuple], path: str | os.PathLike, labels: dict[str, str] | None = None) -> Path:
    """Write a PNG from :func:`all_context_vectors` output: for the first word ("bank"), the
    top-layer similarity heatmap (contexts ordered by sense, colour scale fitted to the
    off-diagonal values) and a PCA projection of the top layer; for every word, bars of
    same-sense vs different-sense similarity per layer. ``labels``: words to name otherwise when no
    installed font has their characters (then the heatmap rows show numbers and senses only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pyelmo.evaluation.demo_zh import chinese_font

    font = chinese_font() if labels else None
    # the Chinese font first: matplotlib took no glyph from a font after DejaVu Sans (a .ttc collection's face)
    with plt.rc_context({"font.sans-serif": [font, "DejaVu Sans"]} if font else {}):
        return _write_sense_figure(plt, data, Path(path), labels if labels and not font else None)


def is_demo_figure(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a PNG that :func:`write_sense_figure` wrote (its text chunks precede the image data)."""
    with open(path, "rb") as fh:
        head = fh.read(4096)
    return head.startswith(b"\x89PNG") and FIGURE_MARK.encode() in head.split(b"IDAT")[0]


def _write_sense_figure(plt, data: dict[str, tuple], path: Path, latin: dict[str, str] | None) -> Path:
    def name(word: str) -> str:
        return latin.get(word, word) if latin else word

    first = next(iter(data))
    vectors, senses, sentences = data[first]
    top = vectors.shape[1] - 2  # the last is the average

    cols = min(len(data), BAR_COLUMNS)
    bar_rows = -(-len(data) // cols)
    fig = plt.figure(figsize=(19, 7 + 5 * bar_rows))
    grid = fig.add_gridspec(1 + bar_rows, cols, height_ratios=[1.35] + [1] * bar_rows, hspace=0.3 + 0.1 * bar_rows,
                            wspace=0.3, bottom=0.07 / bar_rows)
    heat = fig.add_subplot(grid[0, : max(1, cols - 1)])
    _heatmap(fig, heat, vectors[:, top], senses, sentences, f'"{name(first)}"', top, numbers_only=bool(latin))
    if len(data) > 1:
        _projection(fig.add_subplot(grid[0, -1]), vectors[:, top], senses, f'"{name(first)}"', top)
    for col, (word, (vecs, word_senses, _)) in enumerate(data.items()):
        ax = fig.add_subplot(grid[1 + col // cols, col % cols])
        _separation_bars(ax, vecs, word, word_senses, f'"{name(word)}"', ylabel=col % cols == 0)
        if col == 0:
            fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=10,
                       bbox_to_anchor=(0.5, 0.0))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.png")
    try:
        fig.savefig(tmp, dpi=100, bbox_inches="tight", metadata={"Software": FIGURE_MARK})
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path


def _heatmap(fig, heat, vectors: np.ndarray, senses: list[str], sentences: list[str], title: str, top: int,
             numbers_only: bool) -> None:
    """Cosine similarity of the contexts' ``vectors`` (one layer), grouped by sense; the colour scale fitted to
    the off-diagonal values."""
    sims = cosine_matrix(vectors)
    off = ~np.eye(len(sims), dtype=bool)
    lo, hi = float(sims[off].min()), float(sims[off].max())
    if hi - lo < 1e-6:
        lo, hi = lo - 1e-3, hi + 1e-3
    shown = np.where(off, sims, np.nan)
    image = heat.imshow(shown, cmap="viridis", vmin=lo, vmax=hi)
    heat.set_title(f'{title}: cosine similarity at layer {top}, contexts grouped by sense\n'
                   f'(colour scale fitted: {lo:.3f} to {hi:.3f}; diagonal left blank)', fontsize=11)
    heat.set_yticks(range(len(sentences)), [f"{i}. [{s}]" + ("" if numbers_only else f" {t}")
                                            for i, (s, t) in enumerate(zip(senses, sentences))], fontsize=9)
    heat.set_xticks(range(len(sentences)), [str(i) for i in range(len(sentences))], fontsize=8)
    bounds = [i for i in range(1, len(senses)) if senses[i] != senses[i - 1]]
    for b in bounds:
        heat.axhline(b - 0.5, color="white", lw=2)
        heat.axvline(b - 0.5, color="white", lw=2)
    fig.colorbar(image, ax=heat, fraction=0.03, pad=0.01)


def _projection(pca, vectors: np.ndarray, senses: list[str], title: str, top: int) -> None:
    """The contexts' ``vectors`` (one layer) on their first two principal components, coloured by sense."""
    points = pca2(vectors)
    for k, sense in enumerate(dict.fromkeys(senses)):
        chosen = [i for i, s in enumerate(senses) if s == sense]
        pca.scatter(points[chosen, 0], points[chosen, 1], color=f"C{k}", label=sense, s=50, alpha=0.85)
        for i in chosen:
            pca.annotate(str(i), points[i], fontsize=8, xytext=(3, 3), textcoords="offset points")
    pca.set_title(f'{title}: PCA of layer {top}\n(numbers: heatmap rows)', fontsize=11)
    pca.legend(fontsize=9)


def _separation_bars(ax, vecs: np.ndarray, word: str, senses: list[str], title: str, ylabel: bool) -> None:
    """Per layer, bars of the mean same-sense and different-sense similarity, the gap above them."""
    sep = separation_of(vecs, word, senses)
    names = list(sep.within)
    x = np.arange(len(names))
    within = [sep.within[n] for n in names]
    across = [sep.across[n] for n in names]
    ax.bar(x - 0.2, within, 0.4, label="same sense", color="tab:green")
    ax.bar(x + 0.2, across, 0.4, label="different senses", color="tab:gray")
    values = within + across
    low, high = min(values), max(values)
    pad = max(0.05 * (high - low), 0.01)
    ax.set_ylim(low - 3 * pad, min(1.0, high) + 3 * pad)
    for xi, w, a in zip(x, within, across):
        ax.annotate(f"{round(w - a, 3) + 0.0:+.3f}", (xi, max(w, a)), ha="center", va="bottom", fontsize=9,
                    xytext=(0, 3), textcoords="offset points")
    ax.set_xticks(x, names, fontsize=9)
    if ylabel:
        ax.set_ylabel("mean cosine similarity (axis fitted)", fontsize=9)
    ax.set_title(f'{title}\n{", ".join(f"{s} {n}" for s, n in sep.senses.items())} contexts: '
                 "mean similarity,\nsame vs different sense (gap above)", fontsize=10)
