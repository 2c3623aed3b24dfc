"""A task model with its features: it computes the loss of a batch, predicts and scores examples (trained or
loaded).  What differs by kind (gold label ids, predictions in label names, metrics) its kind says."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import torch

from pyelmo.tasks.data import Example
from pyelmo.tasks.features import LayerCache, make_batch
from pyelmo.tasks.static import StaticVectors


class TaskRunner:
    """A :class:`pyelmo.tasks.model.TaskModel` of ``kind`` (a :class:`pyelmo.tasks.kind.TaskKind`) with its
    features; ``saved``: the config.json of a loaded model."""

    def __init__(self, kind, model, labels: list[str], static: StaticVectors | None,
                 cache: LayerCache | None, saved: dict | None = None) -> None:
        self.kind, self.model, self.labels, self.saved = kind, model, labels, saved
        self.label_index = {l: i for i, l in enumerate(labels)}
        self.static, self.cache = static, cache

    def _batch(self, examples, labelled: bool):
        batch = make_batch(examples, self.static, self.cache)
        if labelled:
            batch = replace(batch, labels=self.kind.label_ids(examples, self.label_index, batch.mask.shape[1]))
        return batch

    def loss(self, examples) -> torch.Tensor:
        b = self._batch(examples, True)
        return self.model.loss(b.static, b.layers, b.mask, b.labels)

    def predict(self, examples: Sequence[Example], batch_size: int = 64, desc: str = "") -> list:
        """The kind's prediction per example, in label names (classify: ``(label, probability)``; tag: a tag
        list), in input order."""
        if self.cache is not None:
            self.cache.add([e.tokens for e in examples], desc=f"biLM layers {desc}".strip())
        self.model.eval()
        order = sorted(range(len(examples)), key=lambda i: len(examples[i].tokens))
        out: list = [None] * len(examples)
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            b = self._batch([examples[i] for i in rows], False)
            for i, prediction in zip(rows, self.model.predict(b.static, b.layers, b.mask)):
                out[i] = self.kind.named(prediction, self.labels)
        return out

    def evaluate(self, examples: Sequence[Example], desc: str = "") -> dict:
        """The kind's metrics (percent) on labelled ``examples``."""
        return self.kind.metrics(examples, self.predict(examples, desc=desc))

    def score(self, metrics: dict) -> float:
        """The dev score early stopping maximises (the kind's, percent)."""
        return self.kind.dev_score(metrics)
