"""The "bank" demonstration: one word, different contexts, different vectors above layer 0."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from pyelmo.errors import InputError
from pyelmo.senses import cosine_matrix, find_word, with_average_layer
from pyelmo.tokenize import tokenize

#: (word, sentences) whose target word is compared across contexts in the printed table.
SEED_PAIRS: list[tuple[str, list[str]]] = [
    ("bank", ["I deposited money in the bank.", "The boat stopped near the river bank."]),
    ("apple", ["I ate an apple.", "Apple released a new iPhone."]),
    ("play", ["Children play in the park.", "The actor will play a role.", "I want to play music."]),
]

#: Several contexts per sense of "bank" for the heatmap and the 2-D projection.
BANK_CONTEXTS: dict[str, list[str]] = {
    "money": [
        "I deposited money in the bank.",
        "The bank approved her loan on Friday.",
        "He opened a savings account at the local bank.",
        "The central bank raised interest rates again.",
        "She withdrew cash from the bank this morning.",
        "The bank charges a fee for every transfer.",
        "Robbers broke into the bank at night.",
        "My bank sent me a new credit card.",
    ],
    "river": [
        "The boat stopped near the river bank.",
        "We had a picnic on the bank of the stream.",
        "Fishermen lined the muddy bank at dawn.",
        "The river overflowed its bank after the storm.",
        "Reeds grew thick along the bank of the lake.",
        "He climbed up the steep bank from the water.",
        "Willows leaned over the grassy bank.",
        "The children slid down the bank into the river.",
    ],
}


@dataclass
class SimilarityRow:
    word: str
    first: str
    second: str
    by_layer: dict[str, float]


def similarity_rows(embedder, word: str | None, sentences: list[str],
                    positions: Sequence[int] | None = None) -> list[SimilarityRow]:
    """Cosine similarity of ``word`` between every pair of ``sentences``, at each layer and the average.

    ``positions``: instead of the first occurrence of ``word``, the token at this index
    (0-based, after tokenization) of each sentence: a later occurrence, or a piece of a
    word the tokenizer splits.
    """
    tokenized = [tokenize(s) for s in sentences]
    if positions is None:
        if not word:
            raise InputError("give the word to compare, or its token positions")
        positions = [find_word(t, word, where=s) for s, t in zip(sentences, tokenized)]
    else:
        if len(positions) != len(sentences):
            raise InputError(f"{len(positions)} token positions for {len(sentences)} sentences")
        for s, t, p in zip(sentences, tokenized, positions):
            if not 0 <= p < len(t):
                raise InputError(f"{s!r}: token position {p} is outside its {len(t)} tokens ({' '.join(t)})")
        word = word or "/".join(dict.fromkeys(t[p] for t, p in zip(tokenized, positions)))
    outputs = embedder.embed_batch(tokenized)
    vectors = np.stack([out[:, p] for p, out in zip(positions, outputs)])
    vectors, names = with_average_layer(vectors)
    sims = {name: cosine_matrix(vectors[:, k]) for k, name in enumerate(names)}
    return [
        SimilarityRow(word, sentences[i], sentences[j], {name: float(sims[name][i, j]) for name in names})
        for i in range(len(sentences)) for j in range(i + 1, len(sentences))
    ]


def format_table(rows: list[SimilarityRow]) -> str:
    """A fixed-width text table of similarity rows."""
    names = list(rows[0].by_layer)
    title = "cosine similarity of the word in two sentences"
    width = max(len(title), *(len(f"{r.word}: {r.first} | {r.second}") for r in rows))
    lines = [f"{title:<{width}}  " + "  ".join(f"{n:>8}" for n in names)]
    for r in rows:
        label = f"{r.word}: {r.first} | {r.second}"
        lines.append(f"{label:<{width}}  " + "  ".join(f"{r.by_layer[n]:8.3f}" for n in names))
    return "\n".join(lines)


def plot_bank(embedder, path: str | os.PathLike) -> Path:
    """Write a PNG: similarity heatmap of "bank" over contexts (top layer), and PCA at layer 0 vs top layer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, sentences = [], []
    for sense, items in BANK_CONTEXTS.items():
        labels += [sense] * len(items)
        sentences += items
    tokenized = [tokenize(s) for s in sentences]
    outputs = embedder.embed_batch(tokenized)
    vectors = np.stack([out[:, find_word(t, "bank")] for t, out in zip(tokenized, outputs)])  # (n, L, D)
    top = vectors.shape[1] - 1

    fig, axes = plt.subplots(1, 3, figsize=(17, 5.5))
    sims = cosine_matrix(vectors[:, top])
    image = axes[0].imshow(sims, cmap="viridis", vmin=min(0.0, float(sims.min())), vmax=1)
    axes[0].set_title(f'"bank": cosine similarity, layer {top}')
    ticks = [f"{lab}: {s[:28]}" for lab, s in zip(labels, sentences)]
    axes[0].set_yticks(range(len(ticks)), ticks, fontsize=6)
    axes[0].set_xticks(range(len(ticks)), [str(i) for i in range(len(ticks))], fontsize=6)
    fig.colorbar(image, ax=axes[0], fraction=0.046)
    colours = {"money": "tab:green", "river": "tab:blue"}
    for ax, layer in ((axes[1], 0), (axes[2], top)):
        points = _pca2(vectors[:, layer])
        for sense in BANK_CONTEXTS:
            chosen = [i for i, lab in enumerate(labels) if lab == sense]
            ax.scatter(points[chosen, 0], points[chosen, 1], c=colours.get(sense), label=sense, s=40, alpha=0.8)
        ax.set_title(f'"bank" in {len(labels)} contexts, PCA of layer {layer}'
                     + ("\n(context-independent: all contexts one point)" if layer == 0 else ""))
        ax.legend()
    fig.tight_layout()
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.png")
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path


def _pca2(x: np.ndarray) -> np.ndarray:
    """First two principal components (zeros when the points do not vary beyond float noise)."""
    centred = x - x.mean(axis=0)
    if np.abs(centred).max() <= 1e-5 * max(float(np.abs(x).max()), 1e-12):
        return np.zeros((len(x), 2))
    u, s, _ = np.linalg.svd(centred, full_matrices=False)
    out = u[:, :2] * s[:2]
    return out if out.shape[1] == 2 else np.pad(out, ((0, 0), (0, 2 - out.shape[1])))
