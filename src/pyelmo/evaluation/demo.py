"""The "bank" demonstration: one word, different contexts, different vectors above layer 0
(in Chinese, 苹果 and 运动: :mod:`pyelmo.evaluation.demo_zh`; the figure: :mod:`pyelmo.evaluation.sensefigure`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from pyelmo.errors import InputError
from pyelmo.evaluation.senses import cosine_matrix, find_word, read_sense_contexts, with_average_layer
from pyelmo.text.tokenize import tokenize

#: (word, sentences) whose target word is compared across contexts in the printed table.
SEED_PAIRS: list[tuple[str, list[str]]] = [
    ("bank", ["I deposited money in the bank.", "The boat stopped near the river bank."]),
    ("apple", ["I ate an apple.", "Apple released a new iPhone."]),
    ("play", ["Children play in the park.", "The actor will play a role.", "I want to play music."]),
]

#: Where the demo's sense contexts are (``demo-LANG.tsv``: ``word<TAB>sense<TAB>sentence`` lines, the form of
#: ``tests/data/senses-*.tsv`` with the sentences as raw text: :func:`pyelmo.evaluation.senses.read_sense_contexts`).
DATA = Path(__file__).with_name("data")

#: Several contexts per sense of each ambiguous word: the same-sense vs different-sense table,
#: the heatmap and projection ("bank") and the bar charts.  The "apple" sentences all start
#: with "Apple", so that layer 0 (which sees the characters) cannot tell the senses apart.
SENSE_CONTEXTS: dict[str, dict[str, list[str]]] = read_sense_contexts(DATA / "demo-en.tsv")


#: The demo languages.
DEMO_LANGUAGES = ("en", "zh")


def demo_data(lang: str = "en") -> tuple[list[tuple[str, list[str]]], dict[str, dict[str, list[str]]], dict[str, str]]:
    """``(SEED_PAIRS, SENSE_CONTEXTS, labels)`` of the demo in ``lang`` (``en`` or ``zh``); ``labels``: how the
    figure names the words when no installed font has their characters (empty: no such words)."""
    if lang == "zh":
        from pyelmo.evaluation import demo_zh

        return demo_zh.SEED_PAIRS, demo_zh.SENSE_CONTEXTS, demo_zh.LATIN_LABELS
    if lang != "en":
        raise InputError(f"the demo is in one of {', '.join(DEMO_LANGUAGES)}, not {lang!r}")
    return SEED_PAIRS, SENSE_CONTEXTS, {}


@dataclass
class SimilarityRow:
    word: str
    first: str
    second: str
    by_layer: dict[str, float]


def similarity_rows(embedder, word: str | None, sentences: list[str],
                    positions: Sequence[int] | None = None, lang: str = "auto") -> list[SimilarityRow]:
    """Cosine similarity of ``word`` between every pair of ``sentences``, at each layer and the average.

    ``positions``: instead of the first occurrence of ``word``, the token at this index
    (0-based, after tokenization) of each sentence: a later occurrence, or a piece of a
    word the tokenizer splits. ``lang``: the language the sentences are tokenized as
    (``ElmoEmbedder.tokenize``).
    """
    tokenized = [embedder.tokenize(s, lang) for s in sentences]
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
    width = max(_columns(title), *(_columns(f"{r.word}: {r.first} | {r.second}") for r in rows))
    lines = [_pad(title, width) + "  " + "  ".join(f"{n:>8}" for n in names)]
    for r in rows:
        label = f"{r.word}: {r.first} | {r.second}"
        lines.append(_pad(label, width) + "  " + "  ".join(f"{r.by_layer[n]:8.3f}" for n in names))
    return "\n".join(lines)


def _columns(text: str) -> int:
    """Terminal columns of ``text`` (wide and full-width characters, e.g. Chinese, take two)."""
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _pad(text: str, width: int) -> str:
    return text + " " * (width - _columns(text))


@dataclass
class SenseSeparation:
    """Mean cosine similarity of a word's vectors over pairs of contexts of the same sense
    (``within``) and of different senses (``across``), per layer and for the layer average."""

    word: str
    senses: dict[str, int]  # sense -> number of contexts
    within: dict[str, float]
    across: dict[str, float]


def context_vectors(embedder, word: str, contexts: dict[str, list[str]],
                    lang: str = "en") -> tuple[np.ndarray, list[str], list[str]]:
    """``(vectors (n, L + 1, D), senses, sentences)`` of ``word`` in every context (tokenized in the
    language ``lang``), the layer average appended as the last layer; contexts in sense order."""
    senses = [sense for sense, items in contexts.items() for _ in items]
    sentences = [s for items in contexts.values() for s in items]
    tokenized = [tokenize(s, lang) for s in sentences]
    outputs = embedder.embed_batch(tokenized)
    vectors = np.stack([out[:, find_word(t, word, where=s)] for s, t, out in zip(sentences, tokenized, outputs)])
    return with_average_layer(vectors)[0], senses, sentences


def sense_separation(embedder, word: str, contexts: dict[str, list[str]]) -> SenseSeparation:
    """Mean same-sense and different-sense cosine similarity of ``word`` per layer."""
    vectors, senses, _ = context_vectors(embedder, word, contexts)
    return separation_of(vectors, word, senses)


def separation_of(vectors: np.ndarray, word: str, senses: list[str]) -> SenseSeparation:
    """:class:`SenseSeparation` of precomputed ``vectors (n, L + 1, D)`` (last: the average)."""
    labels = np.array(senses)
    upper = np.triu(np.ones((len(senses), len(senses)), dtype=bool), k=1)
    same = (labels[:, None] == labels[None, :]) & upper
    diff = (labels[:, None] != labels[None, :]) & upper
    names = [f"layer {i}" for i in range(vectors.shape[1] - 1)] + ["average"]
    within, across = {}, {}
    for k, name in enumerate(names):
        sims = cosine_matrix(vectors[:, k])
        within[name], across[name] = float(sims[same].mean()), float(sims[diff].mean())
    return SenseSeparation(word, {s: senses.count(s) for s in dict.fromkeys(senses)}, within, across)


def format_separation(rows: list[SenseSeparation]) -> str:
    """A text table: per word and layer, mean same-sense vs different-sense similarity."""
    lines = ["mean cosine similarity of the word over pairs of contexts: same sense vs different senses",
             f"{'word':<8}{'layer':<9}{'same':>7}{'different':>11}{'gap':>8}  senses (contexts)"]
    for r in rows:
        senses = ", ".join(f"{s} {n}" for s, n in r.senses.items())
        for name in r.within:
            gap = round(r.within[name] - r.across[name], 3) + 0.0  # no "-0.000"
            lines.append(f"{_pad(r.word, 8)}{name:<9}{r.within[name]:7.3f}{r.across[name]:11.3f}{gap:+8.3f}  {senses}")
            senses = ""
    return "\n".join(lines)


def all_context_vectors(embedder, contexts: dict[str, dict[str, list[str]]] | None = None,
                        lang: str = "en") -> dict[str, tuple]:
    """:func:`context_vectors` of every word of ``contexts`` (default: the ``SENSE_CONTEXTS`` of ``lang``)."""
    contexts = demo_data(lang)[1] if contexts is None else contexts
    return {word: context_vectors(embedder, word, ctx, lang) for word, ctx in contexts.items()}


def pca2(x: np.ndarray) -> np.ndarray:
    """First two principal components (zeros when the points do not vary beyond float noise)."""
    centred = x - x.mean(axis=0)
    if np.abs(centred).max() <= 1e-5 * max(float(np.abs(x).max()), 1e-12):
        return np.zeros((len(x), 2))
    u, s, _ = np.linalg.svd(centred, full_matrices=False)
    out = u[:, :2] * s[:2]
    return out if out.shape[1] == 2 else np.pad(out, ((0, 0), (0, 2 - out.shape[1])))
