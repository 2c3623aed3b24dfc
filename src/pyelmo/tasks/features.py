"""Features of task examples: static-vector ids and the frozen biLM's layers, each computed once.

With the biLM frozen, its layers for a sentence never change, so they are computed once
per distinct sentence (:class:`LayerCache`) and the learned ``ScalarMix`` is applied to
the cached layers in every epoch; epochs then cost only the task model.  This gives the
same representations as running :class:`pyelmo.Elmo` end to end (tested).

With ``context="sentence"`` the biLM runs on each sentence of an example separately
(:func:`sentence_spans`; its states start fresh at each sentence, as in pretraining) and the
sentences' layers are concatenated back in token order, so the task model sees the same
tokens as with ``context="line"``, where the biLM runs on the whole example at once.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from pyelmo.corpus.sentences import sentence_spans
from pyelmo.embedding.vector_cache import VectorCache, plan_vectors_key
from pyelmo.tasks import CONTEXTS
from pyelmo.tasks.data import Example
from pyelmo.tasks.static import StaticVectors, token_rows


class LayerCache:
    """Per distinct sentence (token tuple): its biLM layers ``(L, n, D)``, stored as ``dtype``.

    ``float16`` (the default) halves memory; the task results do not depend on it
    measurably.  ``float32`` keeps the biLM's exact values.  ``context="sentence"``: the biLM
    runs on each sentence of an example (:func:`sentence_spans` with ``max_tokens``) and
    ``cache[tokens]`` concatenates their layers; ``"line"``: on the whole example. ``plan``: the execution
    plan of the biLM's products (:class:`pyelmo.runtime.plan.ExecutionPlan`; default exact float32).
    A biLM planned already (:func:`pyelmo.runtime.planning.plan_model`, by whoever loaded it for this cache)
    runs as it is; any other, as a planned copy (``ElmoEmbedder``).
    """

    def __init__(self, bilm, dtype=np.float16, batch_size: int = 64, progress: bool = True,
                 cache_dir: str | os.PathLike | None = None, fingerprint: str | None = None,
                 context: str = "line", max_tokens: int = 100, plan=None) -> None:
        if context not in CONTEXTS:
            raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
        self.context = context
        self.max_tokens = max_tokens
        self.bilm = bilm
        self.dtype = dtype
        self.batch_size = batch_size
        self.progress = progress
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.fingerprint = fingerprint
        self.layers: dict[tuple[str, ...], np.ndarray] = {}
        self.plan = plan  # the embedder's execution plan (None: the default, exact)
        self._embedder = None  # made on first use, then kept (a plan is applied once)

    def add(self, sentences: Sequence[Sequence[str]], desc: str = "biLM layers") -> None:
        """Compute the layers of the sentences not yet cached (with ``cache_dir``: read them from
        ``cache_dir/layers-<key>.npz`` (:class:`~pyelmo.embedding.vector_cache.VectorCache`) when an earlier run stored the same sentences, else store them there)."""
        pieces = [p for s in sentences for p in self._pieces(s)]
        distinct = list(dict.fromkeys(pieces))
        todo = [p for p in distinct if p not in self.layers]
        if not todo:
            return
        skipped = [f"{n} {what}" for n, what in ((len(pieces) - len(distinct), "repeated"),
                                                  (len(distinct) - len(todo), "computed before")) if n]
        if skipped:  # the bar counts what the biLM runs on, not the lines of the file
            within = f" of {len(sentences)} examples" if len(sentences) != len(pieces) else ""
            desc += f" ({len(todo)} of {len(pieces)} sentences{within}; skipped: {', '.join(skipped)})"
        disk = self._disk_path(todo) if self.cache_dir is not None else None
        stored = VectorCache.load(disk, ("layers", "lengths")) if disk is not None else None
        if stored is not None and stored["lengths"].tolist() == [len(s) for s in todo]:
            offsets = np.concatenate([[0], np.cumsum(stored["lengths"])])
            for i, sent in enumerate(todo):
                self.layers[sent] = stored["layers"][:, offsets[i]:offsets[i + 1]]
            return
        self._compute(todo, desc)
        if disk is not None:
            VectorCache.save(disk, layers=np.concatenate([self.layers[s] for s in todo], axis=1),
                             lengths=np.array([len(s) for s in todo]))

    def _fingerprint(self) -> str:
        """The biLM's fingerprint (given when the biLM was planned before: int8 keeps no float weights)."""
        if self.fingerprint is None:
            from pyelmo.modelio.weights import model_fingerprint

            self.fingerprint = model_fingerprint(self.bilm)
        return self.fingerprint

    def _disk_path(self, todo: list[tuple[str, ...]]) -> Path:
        self._fingerprint()
        what = f"layers:{np.dtype(self.dtype).name}:{self.context}:{self.max_tokens}"
        return VectorCache(self.cache_dir).entry(self.fingerprint, plan_vectors_key(self.plan), what, todo)

    def _compute(self, todo: list[tuple[str, ...]], desc: str) -> None:
        from tqdm import tqdm

        from pyelmo.embedding.embedder import ElmoEmbedder

        if self._embedder is None:
            self._embedder = ElmoEmbedder(self.bilm, batch_size=self.batch_size, plan=self.plan)
        embedder = self._embedder
        if embedder.options.token_cache is not None:  # each call's token vectors its own, as with a new embedder
            embedder.options.token_cache.clear()
        with tqdm(total=len(todo), desc=desc, unit="sent", disable=not self.progress, file=sys.stderr) as bar:
            for sent, emb in zip(todo, embedder.embed_sentences([list(s) for s in todo])):
                self.layers[sent] = emb.astype(self.dtype)
                bar.update(1)

    def _pieces(self, tokens: Sequence[str]) -> list[tuple[str, ...]]:
        """What the biLM runs on for an example: the line, or its sentences."""
        tokens = tuple(tokens)
        if self.context == "line":
            return [tokens]
        return [tokens[a:b] for a, b in sentence_spans(tokens, self.max_tokens)]

    def __getitem__(self, tokens: Sequence[str]) -> np.ndarray:
        pieces = self._pieces(tokens)
        if len(pieces) == 1:
            return self.layers[pieces[0]]
        return np.concatenate([self.layers[p] for p in pieces], axis=1)


@dataclass
class Batch:
    """Padded tensors of a batch: ``static`` ids (B, T), ``layers`` (B, L, T, D), ``mask`` (B, T)."""

    static: torch.Tensor | None
    layers: torch.Tensor | None
    mask: torch.Tensor
    labels: torch.Tensor | None


def make_batch(examples: Sequence[Example], static: StaticVectors | None, cache: LayerCache | None,
               windows: Sequence[tuple[int, int]] | None = None) -> Batch:
    """Pad ``examples`` into a :class:`Batch` (without labels: their kind adds them, ``TaskKind.label_ids``).
    ``windows``: per example, only its tokens ``[a, b)`` (their layers those of the whole example)."""
    windows = windows or [(0, len(e.tokens)) for e in examples]
    lengths = [b - a for a, b in windows]
    B, T = len(examples), max(lengths)
    mask = torch.zeros(B, T, dtype=torch.bool)
    for i, n in enumerate(lengths):
        mask[i, :n] = True
    static_ids = None
    if static is not None:
        static_ids = torch.zeros(B, T, dtype=torch.long)
        for i, e in enumerate(examples):
            a, b = windows[i]
            static_ids[i, : lengths[i]] = torch.from_numpy(token_rows(static, e.tokens[a:b]))
    layers = None
    if cache is not None:
        first = cache[examples[0].tokens]
        arr = np.zeros((B, first.shape[0], T, first.shape[2]), dtype=np.float32)
        for i, e in enumerate(examples):
            a, b = windows[i]
            arr[i, :, : lengths[i]] = cache[e.tokens][:, a:b]
        layers = torch.from_numpy(arr)
    return Batch(static_ids, layers, mask, None)
