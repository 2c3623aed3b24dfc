"""A word's vectors across contexts: cosine similarities per layer and nearest-sense accuracy."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from pyelmo.errors import InputError
from pyelmo.text.lines import text_lines


@dataclass(frozen=True)
class SenseExample:
    """One labelled use of an ambiguous word."""

    word: str
    sense: str
    tokens: tuple[str, ...]


def sense_rows(path: str | os.PathLike) -> Iterator[tuple[int, str, str, str]]:
    """``(line number, word, sense, sentence)`` of each ``word<TAB>sense<TAB>sentence`` line of a file (blank lines
    are skipped, ``#`` starts a comment)."""
    for number, line in text_lines(path, blank="skip", what="sense examples file"):
        if line.startswith("#"):
            continue
        row = line.split("\t")
        if len(row) != 3:
            raise InputError(f"{path}: line {number}: expected word, sense and sentence separated by tabs")
        yield number, *row


def read_sense_examples(path: str | os.PathLike) -> list[SenseExample]:
    """Read ``word<TAB>sense<TAB>tokenized sentence`` lines (:func:`sense_rows`)."""
    examples = []
    for number, word, sense, sentence in sense_rows(path):
        tokens = tuple(sentence.split())
        find_word(tokens, word, where=f"{path}: line {number}")
        examples.append(SenseExample(word, sense, tokens))
    return examples


def read_sense_contexts(path: str | os.PathLike) -> dict[str, dict[str, list[str]]]:
    """The sentences of each sense of each word, in file order, from ``word<TAB>sense<TAB>sentence`` lines
    (:func:`sense_rows`; the sentences as raw text, tokenized when embedded)."""
    contexts: dict[str, dict[str, list[str]]] = {}
    for _, word, sense, sentence in sense_rows(path):
        contexts.setdefault(word, {}).setdefault(sense, []).append(sentence)
    return contexts


def find_word(tokens: Sequence[str], word: str, where: str = "sentence") -> int:
    """Index of the first token equal to ``word`` (case-insensitive)."""
    lowered = word.lower()
    for i, token in enumerate(tokens):
        if token.lower() == lowered:
            return i
    raise InputError(f"{where}: the word {word!r} is not a token of {' '.join(tokens)!r}")


def with_average_layer(vectors: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Append the mean of the layers (ELMo's default equal mix) and name every layer."""
    names = [f"layer {i}" for i in range(vectors.shape[1])] + ["average"]
    return np.concatenate([vectors, vectors.mean(axis=1, keepdims=True)], axis=1), names


def cosine_matrix(vectors: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarity of the rows of ``vectors (n, D)``."""
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
    return unit @ unit.T


def nearest_sense_accuracy(vectors: np.ndarray, words: Sequence[str], senses: Sequence[str]) -> float:
    """Leave-one-out nearest-sense accuracy of ``vectors (n, D)``.

    Each example is assigned the sense (of the same word) whose centroid of the *other*
    examples is most cosine-similar. Ties (e.g. identical context-free vectors) score
    1 / (number of tied senses), so a context-independent layer sits at chance.
    """
    return float(nearest_sense_scores(vectors, words, senses).mean())


def nearest_sense_scores(vectors: np.ndarray, words: Sequence[str], senses: Sequence[str]) -> np.ndarray:
    """``(n,)``: each example's score in :func:`nearest_sense_accuracy` (1 right, 0 wrong, a share on ties)."""
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
    scores = np.zeros(len(words))
    for i, (word, sense) in enumerate(zip(words, senses)):
        sims = {}
        for candidate in sorted({s for w, s in zip(words, senses) if w == word}):
            others = [j for j, (w, s) in enumerate(zip(words, senses)) if w == word and s == candidate and j != i]
            if others:
                centroid = unit[others].mean(axis=0)
                sims[candidate] = float(centroid @ unit[i] / max(np.linalg.norm(centroid), 1e-12))
        best = max(sims.values())
        winners = [s for s, v in sims.items() if abs(v - best) <= 1e-6]
        scores[i] = (sense in winners) / len(winners)
    return scores


def example_vectors(embedder, examples: Sequence[SenseExample]) -> np.ndarray:
    """``(n_examples, L, D)``: each example's word's vectors at every layer."""
    outputs = embedder.embed_batch([list(e.tokens) for e in examples])
    return np.stack([out[:, find_word(e.tokens, e.word)] for e, out in zip(examples, outputs)])


def sense_accuracy_per_layer(embedder, examples: Sequence[SenseExample]) -> dict[str, float]:
    """Nearest-sense accuracy at every layer and at the layer average."""
    vectors, names = with_average_layer(example_vectors(embedder, examples))
    words, senses = [e.word for e in examples], [f"{e.word}/{e.sense}" for e in examples]
    return {name: nearest_sense_accuracy(vectors[:, k], words, senses) for k, name in enumerate(names)}


def pairwise_auc(vectors: np.ndarray, words: Sequence[str], senses: Sequence[str]) -> dict[str, float]:
    """Per word: the probability that a pair of its contexts of the same sense is more cosine-similar than a pair of
    different senses (ties count half), over all pairs of ``vectors (n, D)``: 0.5 is chance, 1.0 perfect."""
    sims = cosine_matrix(vectors)
    out = {}
    for word in dict.fromkeys(words):
        idx = [i for i, w in enumerate(words) if w == word]
        pairs = [(i, j) for a, i in enumerate(idx) for j in idx[a + 1:]]
        same = np.array([sims[i, j] for i, j in pairs if senses[i] == senses[j]])
        diff = np.array([sims[i, j] for i, j in pairs if senses[i] != senses[j]])
        if len(same) and len(diff):
            wins = (same[:, None] > diff[None, :]).sum() + 0.5 * (same[:, None] == diff[None, :]).sum()
            out[word] = float(wins / (len(same) * len(diff)))
    return out


def sense_auc_per_layer(embedder, examples: Sequence[SenseExample]) -> dict[str, dict[str, float]]:
    """:func:`pairwise_auc` of each word at every layer and at the layer average."""
    vectors, names = with_average_layer(example_vectors(embedder, examples))
    words, senses = [e.word for e in examples], [e.sense for e in examples]
    return {name: pairwise_auc(vectors[:, k], words, senses) for k, name in enumerate(names)}
