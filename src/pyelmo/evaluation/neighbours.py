"""Nearest neighbours of ambiguous words (paper Table 4).

For each target word: its word2vec nearest words (one vector mixes all senses), next to,
for each of a few hand-written query sentences using one sense, the Brown sentences whose
occurrence of the same word form has the most cosine-similar top-layer biLM vector.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pyelmo.evaluation.common import EvaluationError


@dataclass(frozen=True)
class Query:
    """A sentence using ``word`` (lower-cased form, occurring in ``tokens``) in sense ``sense``."""

    word: str
    sense: str
    sentence: str

    @property
    def tokens(self) -> list[str]:
        return self.sentence.split()

    @property
    def index(self) -> int:
        low = [t.lower() for t in self.tokens]
        if self.word not in low:
            raise EvaluationError(f"query sentence lacks {self.word!r}: {self.sentence!r}")
        return low.index(self.word)


#: The queries: the two "play" sentences are the paper's (Table 4); the rest are ours.
QUERIES: tuple[Query, ...] = (
    Query("play", "sports", "Chico Ruiz made a spectacular play on Alusik 's grounder ."),
    Query("play", "theatre", "Olivia De Havilland signed to do a Broadway play for Garson ."),
    Query("play", "music", "She asked the band to play a slow waltz for the couple ."),
    Query("bank", "river", "They pulled the canoe up on the muddy bank of the river ."),
    Query("bank", "finance", "He borrowed the money from the bank at a high rate of interest ."),
    Query("plant", "industry", "The company will close its steel plant and lay off the workers ."),
    Query("plant", "botany", "Water the plant every morning and keep it in the sun ."),
    Query("spring", "season", "The flowers bloom early in the spring after a mild winter ."),
    Query("spring", "water", "They drank cold water from a spring in the hills ."),
)


def brown_occurrences(brown_dir: str | os.PathLike, words: Sequence[str], max_per_word: int | None = None
                      ) -> dict[str, list[tuple[str, list[str], int]]]:
    """Per word: ``(file id, tokens, index)`` for each Brown sentence containing it (first
    occurrence, case-insensitive exact form), in corpus order, at most ``max_per_word``."""
    from pyelmo.corpus.splits import read_brown

    wanted = set(words)
    out: dict[str, list[tuple[str, list[str], int]]] = {w: [] for w in words}
    for fileid, toks in read_brown(brown_dir):
        tokens = [w for w, _ in toks]
        low = [t.lower() for t in tokens]
        for w in wanted & set(low):
            if max_per_word is None or len(out[w]) < max_per_word:
                out[w].append((fileid, tokens, low.index(w)))
    return out


def evaluate_neighbours(model, brown_dir: str | os.PathLike, static=None, *, queries: Sequence[Query] = QUERIES,
                        k: int = 3, static_k: int = 10, layer: int = -1, max_per_word: int | None = 2000,
                        fingerprint: str | None = None, cache_dir: str | os.PathLike | None = None,
                        batch_size: int = 32, progress: bool = True) -> dict:
    """The nearest Brown sentences of each query (biLM layer ``layer``) and word2vec neighbours."""
    from pyelmo.corpus.splits import brown_categories
    from pyelmo.evaluation.common import token_vectors

    words = sorted({q.word for q in queries})
    occ = brown_occurrences(brown_dir, words, max_per_word)
    genres = brown_categories(brown_dir)
    pool = [(w, fid, toks, i) for w in words for fid, toks, i in occ[w]]
    sents = [p[2] for p in pool] + [q.tokens for q in queries]
    positions = [[p[3]] for p in pool] + [[q.index] for q in queries]
    vecs = token_vectors(model, sents, positions, fingerprint=fingerprint, cache_dir=cache_dir, tag="neighbours",
                         batch_size=batch_size, progress=progress)
    n_layers = vecs.shape[0]
    layer_index = layer % n_layers
    top = vecs[layer_index]
    norm = top / np.maximum(np.linalg.norm(top, axis=1, keepdims=True), 1e-30)
    pool_vecs, query_vecs = norm[: len(pool)], norm[len(pool) :]

    results = []
    for qi, q in enumerate(queries):
        rows = [r for r, p in enumerate(pool) if p[0] == q.word and " ".join(p[2]) != " ".join(q.tokens)]
        sims = pool_vecs[rows] @ query_vecs[qi] if rows else np.zeros(0)
        order = np.argsort(-sims, kind="stable")[:k]
        results.append({
            "word": q.word, "sense": q.sense, "query": q.sentence,
            "neighbours": [{"sentence": " ".join(pool[rows[j]][2]), "file": pool[rows[j]][1],
                            "genre": genres.get(pool[rows[j]][1], ""), "cosine": float(sims[j])} for j in order],
        })
    static_nn = {w: ([{"word": n, "cosine": s} for n, s in static.most_similar(w, static_k)] if static else None)
                 for w in words}
    return {
        "task": "neighbours",
        "data": {"source": "Brown corpus (all files), sentences containing the target form",
                 "occurrences": {w: len(occ[w]) for w in words}, "layer": layer_index},
        "word2vec": static_nn,
        "queries": results,
    }
