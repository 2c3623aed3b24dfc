"""The built-in sample corpus and its contextual vectors, for ``/v1/neighbours``.

About 290 short sentences (``data/sample_corpus.tsv``): the nearest-sense test sentences,
the demo's "bank" contexts and more written for pyelmo, each using one of 16 ambiguous
words in one of two senses. A server tokenizing Chinese (``--lang zh``) has 80 Chinese ones
as well (``data/sample_corpus_zh.tsv``: 8 words such as 苹果, two senses each, segmented as
jieba segments them), so that the Chinese page's words have their contexts. Every token's vectors are computed once per model and plan and kept
in ``user_cache_dir("serve")`` (:class:`~pyelmo.embedding.vector_cache.VectorCache`, keyed by the model
fingerprint, the plan's vectors key and the corpus's tokens), so a restart with the same model reads them back.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Sequence

import numpy as np

from pyelmo.embedding.vector_cache import VectorCache, plan_vectors_key
from pyelmo.paths import user_cache_dir
from pyelmo.evaluation.demo import separation_of
from pyelmo.evaluation.senses import SenseExample, read_sense_examples

def default_cache_dir() -> Path:
    """``$PYELMO_SERVE_CACHE`` or ``~/.cache/pyelmo/serve``."""
    return user_cache_dir("serve", "PYELMO_SERVE_CACHE")


#: The sample corpus of a language besides the English one, by --lang.
LANGUAGE_CORPORA = {"zh": "sample_corpus_zh.tsv"}


def sample_corpus_path(lang: str = "en") -> Path:
    """The English sample corpus, or ``lang``'s own (``LANGUAGE_CORPORA``)."""
    return Path(str(resources.files("pyelmo.serve") / "data" / LANGUAGE_CORPORA.get(lang, "sample_corpus.tsv")))


def sample_corpus_paths(lang: str = "auto") -> list[Path]:
    """The corpus files of a server tokenizing as ``lang``: the English one (every server keeps its
    contexts) and ``lang``'s own when it has one."""
    return [sample_corpus_path()] + ([sample_corpus_path(lang)] if lang in LANGUAGE_CORPORA else [])


@dataclass(frozen=True)
class Neighbour:
    row: int
    sentence: int
    position: int
    similarity: float


class SampleCorpus:
    """Sense-labelled sentences with the vectors of all their tokens at every layer and the average."""

    def __init__(self, examples: Sequence[SenseExample], vectors: np.ndarray) -> None:
        self.examples = list(examples)
        #: (sentence index, token index) of each row of ``vectors``
        self.rows = [(i, p) for i, e in enumerate(self.examples) for p in range(len(e.tokens))]
        self.lowered = np.array([self.examples[i].tokens[p].lower() for i, p in self.rows])
        self._unit = _unit(np.concatenate([vectors, vectors.mean(axis=0, keepdims=True)], axis=0))

    @classmethod
    def load(cls, embedder, fingerprint: str, cache_dir: str | Path | None = None,
             path: str | Path | None = None, lang: str = "auto") -> "SampleCorpus":
        """Read the corpus (``path``, default the files of ``sample_corpus_paths(lang)``) and its vectors
        from the cache, or compute (and cache) them."""
        paths = [Path(path)] if path is not None else sample_corpus_paths(lang)
        examples = [e for p in paths for e in read_sense_examples(p)]
        n_tokens = sum(len(e.tokens) for e in examples)
        cache = VectorCache(cache_dir if cache_dir is not None else default_cache_dir())
        cache_file = cache.entry(fingerprint, plan_vectors_key(embedder.options.plan), "neighbours",
                                 [list(e.tokens) for e in examples])
        stored = cache.load(cache_file, ("vectors",))
        vectors = stored["vectors"] if stored is not None else None
        if vectors is None or vectors.ndim != 3 or vectors.shape[1] != n_tokens or vectors.dtype != np.float32:
            outputs = embedder.embed_sentences([list(e.tokens) for e in examples])
            vectors = np.concatenate(list(outputs), axis=1).astype(np.float32)
            cache.save(cache_file, vectors=vectors)  # an unwritable cache only costs the recomputation next time
        return cls(examples, vectors)

    @property
    def n_layers(self) -> int:
        """Model layers (without the average)."""
        return self._unit.shape[0] - 1

    def contexts(self, word: str) -> np.ndarray:
        """Rows whose token is ``word`` (case-insensitive)."""
        return np.flatnonzero(self.lowered == word.lower())

    def sense_of(self, row: int) -> str | None:
        """``word/sense`` when the token of ``row`` is its sentence's labelled word, else None."""
        example = self.examples[self.rows[row][0]]
        return f"{example.word}/{example.sense}" if self.lowered[row] == example.word.lower() else None

    def unit_vectors(self, rows: np.ndarray) -> np.ndarray:
        """``(L + 1, len(rows), D)`` unit vectors (the last layer is the average)."""
        return self._unit[:, rows]

    def senses(self, word: str, query: np.ndarray, exclude: Sequence[str] = ()) -> dict | None:
        """How each layer (and the average) separates the labelled senses of ``word`` here: the mean
        similarity over pairs of its contexts of the same sense and of different senses (as ``pyelmo demo``
        reports), and the mean similarity of ``query (L + 1, D)`` to each sense's contexts, leaving out the
        sentence ``exclude``. None when the corpus has fewer than two senses of the word."""
        rows = np.array([r for r in self.contexts(word) if self.sense_of(r)], dtype=int)
        labels = [self.sense_of(r) for r in rows]
        if len(set(labels)) < 2:
            return None
        separation = separation_of(self._unit[:, rows].transpose(1, 0, 2), word, labels)
        kept = self._excluding(rows, exclude)
        sims = np.einsum("lnd,ld->ln", self._unit[:, kept], _unit(query))
        names = list(separation.within)
        query_means = {}
        for sense in separation.senses:
            mine = [i for i, r in enumerate(kept) if self.sense_of(r) == sense]
            query_means[sense] = {name: float(sims[k, mine].mean()) for k, name in enumerate(names)} if mine else None
        return {"contexts": separation.senses, "same_sense": separation.within,
                "different_senses": separation.across, "query": query_means}

    def _excluding(self, rows: np.ndarray, exclude: Sequence[str]) -> np.ndarray:
        """``rows`` less those in a sentence whose tokens are ``exclude``."""
        if len(exclude):
            same = [i for i, e in enumerate(self.examples) if list(e.tokens) == list(exclude)]
            if same:
                rows = rows[~np.isin(np.array([self.rows[r][0] for r in rows]), same)]
        return rows

    def nearest(self, query: np.ndarray, rows: np.ndarray, k: int, exclude: Sequence[str] = ()
                ) -> list[list[Neighbour]]:
        """Per layer (and the average), the ``k`` rows most cosine-similar to ``query (L + 1, D)``,
        leaving out contexts in the sentence ``exclude`` (the query's own tokens)."""
        rows = self._excluding(rows, exclude)
        unit_query = _unit(query)
        out = []
        for layer in range(self._unit.shape[0]):
            sims = self._unit[layer, rows] @ unit_query[layer]
            best = np.argsort(-sims, kind="stable")[:k]
            out.append([Neighbour(int(rows[b]), *self.rows[rows[b]], float(sims[b])) for b in best])
        return out


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
