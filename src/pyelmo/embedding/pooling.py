"""Sentence vectors: a sentence's token vectors pooled into one (masked mean: its own tokens, never padding)."""

from __future__ import annotations

import numpy as np

from pyelmo.errors import InputError

POOLINGS = ("mean",)


def mean_pool(vectors: np.ndarray) -> np.ndarray:
    """One sentence's vector: the mean of ``vectors`` (``(..., n_tokens, D)``) over its tokens, as TF Hub ELMo's
    ``default`` output; float32, summed in float64; zeros for a sentence without tokens."""
    total = vectors.sum(axis=-2, dtype=np.float64)
    return (total / max(vectors.shape[-2], 1)).astype(np.float32)


def check_pool(pool: str | None) -> None:
    if pool is not None and pool not in POOLINGS:
        raise InputError(f"pool must be None or one of {', '.join(POOLINGS)}, got {pool!r}")
