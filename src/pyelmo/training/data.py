"""Training data: the files (:func:`resolve_data`) and their order: length-bucketed, shuffled batches in a resumable order, sharded over ranks.

The sentences and batches themselves are ``pyelmo.lm.text`` (shared with perplexity).
The order of an epoch depends only on ``(seed, epoch)``: sentences are shuffled,
cut into pools, each pool is sorted by length and packed into batches, and the batches
are shuffled. ``(epoch, position)`` then names the next batch, so a run can resume.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from pyelmo.text.batching import token_budget_batches
from pyelmo.fileio import PathLike
from pyelmo.lm.vocab import DataError


class DataOrder:
    """The deterministic, resumable sequence of global batches over a ``TokenizedText``."""

    def __init__(self, lengths: np.ndarray, batch_tokens: int, seed: int, min_rows: int = 1,
                 pool_batches: int = 50) -> None:
        self.lengths = lengths
        self.batch_tokens, self.seed, self.min_rows = batch_tokens, seed, min_rows
        mean = float(lengths.mean()) + 2 if len(lengths) else 1.0
        self.pool_size = max(min_rows, int(pool_batches * max(1.0, batch_tokens / mean)))
        self.epoch, self.position = 0, 0
        self._cached: tuple[int, list[np.ndarray]] | None = None

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """All global batches of ``epoch``, each a length-sorted array of sentence indices."""
        if self._cached is not None and self._cached[0] == epoch:
            return self._cached[1]
        rng = np.random.default_rng([self.seed, epoch])
        perm = rng.permutation(len(self.lengths))
        batches: list[np.ndarray] = []
        for p in range(0, len(perm), self.pool_size):
            pool = perm[p:p + self.pool_size]
            pool = pool[np.argsort(self.lengths[pool], kind="stable")]
            batches.extend(token_budget_batches(pool, self.lengths, len(pool), self.batch_tokens, self.min_rows))
        batches = [batches[i] for i in rng.permutation(len(batches))]
        self._cached = (epoch, batches)
        return batches

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed,
                "batch_tokens": self.batch_tokens, "min_rows": self.min_rows}

    def load_state_dict(self, state: dict[str, int]) -> None:
        for key in ("seed", "batch_tokens", "min_rows"):
            if state[key] != getattr(self, key):
                raise DataError(f"checkpoint data order used {key}={state[key]}, this run {getattr(self, key)}")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


def shard(rows: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """This rank's rows of a (length-sorted) global batch: every ``world_size``-th row."""
    return rows[rank::world_size]


@dataclass
class DataFiles:
    train: list[str]
    valid: list[str]


def resolve_data(data_dir: PathLike | None, train: Sequence[PathLike] | None,
                 valid: Sequence[PathLike] | None) -> DataFiles:
    """Training and validation files from a corpus directory and/or explicit file lists."""
    from pyelmo.lm.vocab import text_files

    train_files: list[Path] = []
    valid_files: list[Path] = []
    if data_dir is not None:
        d = Path(data_dir)
        if not d.exists():
            raise DataError(f"data directory not found: {d}")
        train_files = text_files(d, "train")
        if (d / "valid").is_dir():
            valid_files = sorted(p for p in (d / "valid").glob("*.txt") if p.is_file())
    for f in train or []:
        train_files.extend(text_files(f))
    for f in valid or []:
        valid_files.extend(text_files(f))
    if not train_files:
        raise DataError("no training data: give --data DIR or --train FILES")
    return DataFiles([str(p) for p in train_files], [str(p) for p in valid_files])
