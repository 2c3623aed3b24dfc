"""Training data: tokenized sentences in flat arrays, length-bucketed batches, a resumable order.

Every sentence is one batch row inside ``<S>`` ... ``</S>`` (the biLM adds the markers)
and starts from zero LSTM states. Sentences longer than ``max_length`` tokens become
several chunks, each its own row. A batch holds at most ``batch_tokens`` padded
positions (rows x (longest + 2)), but at least ``min_rows`` rows.

The order of an epoch depends only on ``(seed, epoch)``: sentences are shuffled,
cut into pools, each pool is sorted by length and packed into batches, and the batches
are shuffled. ``(epoch, position)`` then names the next batch, so a run can resume.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from pyelmo.characters import token_to_ids
from pyelmo.vocab import BOS_ID, EOS_ID, DataError, Vocabulary, read_lines

PathLike = str | os.PathLike
PAD_TARGET = -1


class TokenizedText:
    """Sentences (chunks) of some files as indices into a table of distinct words."""

    def __init__(self, files: Sequence[PathLike], vocab: Vocabulary, max_length: int = 100,
                 max_chars: int = 50, max_sentences: int = 0) -> None:
        type_index: dict[str, int] = {}
        flat: list[int] = []
        starts = [0]
        for tokens in read_lines(files):
            ids = [type_index.setdefault(t, len(type_index)) for t in tokens]
            for i in range(0, len(ids), max_length):
                flat.extend(ids[i:i + max_length])
                starts.append(len(flat))
                if max_sentences and len(starts) - 1 >= max_sentences:
                    break
            if max_sentences and len(starts) - 1 >= max_sentences:
                break
        if len(starts) == 1:
            raise DataError(f"no sentences in {', '.join(str(f) for f in files)}")
        self.types = list(type_index)
        self.tokens = np.asarray(flat, dtype=np.int64)
        self.starts = np.asarray(starts, dtype=np.int64)
        self.lengths = np.diff(self.starts)
        # vocabulary id of each word; the last row is padding
        self.type_vocab = torch.tensor([vocab.id(t) for t in self.types] + [PAD_TARGET], dtype=torch.long)
        table = torch.tensor([token_to_ids(t, max_chars) for t in self.types], dtype=torch.int16)
        self.char_table = torch.cat([table.view(-1, max_chars), table.new_zeros(1, max_chars)])

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def n_tokens(self) -> int:
        return int(self.lengths.sum())

    def sentence(self, i: int) -> list[str]:
        return [self.types[t] for t in self.tokens[self.starts[i]:self.starts[i + 1]]]

    def batch(self, rows: Sequence[int]) -> "Batch":
        """Character ids and targets of the sentences ``rows`` (in that order)."""
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self.lengths[rows]
        steps = int(lengths.max()) if len(rows) else 0
        pad = len(self.types)
        matrix = np.full((len(rows), steps), pad, dtype=np.int64)
        offsets = np.arange(steps)
        valid = offsets[None, :] < lengths[:, None]
        matrix[valid] = self.tokens[(self.starts[rows][:, None] + offsets[None, :])[valid]]
        matrix = torch.from_numpy(matrix)
        char_ids = self.char_table[matrix].long()
        targets = torch.full((len(rows), steps + 2), PAD_TARGET, dtype=torch.long)
        targets[:, 0] = BOS_ID
        targets[:, 1:-1] = self.type_vocab[matrix]
        targets[torch.arange(len(rows)), torch.from_numpy(lengths) + 1] = EOS_ID
        return Batch(char_ids, targets)


@dataclass
class Batch:
    """``char_ids (B, T, C)`` without sentence markers; ``targets (B, T + 2)`` vocabulary ids of
    ``<S> w_1 ... w_n </S>`` with ``PAD_TARGET`` after each row's end."""

    char_ids: torch.Tensor
    targets: torch.Tensor

    @property
    def n_predictions(self) -> int:
        """Predictions per direction: one per token plus one for ``</S>`` (or ``<S>``)."""
        return int(self.targets[:, 1:].ge(0).sum())


def pack_batches(order: np.ndarray, lengths: np.ndarray, batch_tokens: int, min_rows: int) -> list[np.ndarray]:
    """Cut ``order`` (already sorted by length) into batches under the token budget."""
    batches: list[np.ndarray] = []
    start = 0
    n = len(order)
    while start < n:
        end = start + 1
        longest = lengths[order[start]]
        while end < n:
            longest_next = max(longest, lengths[order[end]])
            if end - start >= min_rows and (end - start + 1) * (longest_next + 2) > batch_tokens:
                break
            longest = longest_next
            end += 1
        batches.append(order[start:end])
        start = end
    if len(batches) > 1 and len(batches[-1]) < min_rows:
        need = min_rows - len(batches[-1])
        if len(batches[-2]) - need >= min_rows:  # move the previous batch's longest rows over
            batches[-1] = np.concatenate([batches[-2][-need:], batches[-1]])
            batches[-2] = batches[-2][:-need]
        else:
            last = batches.pop()
            batches[-1] = np.concatenate([batches[-1], last])
    return batches


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
            batches.extend(pack_batches(pool, self.lengths, self.batch_tokens, self.min_rows))
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


def eval_batches(lengths: np.ndarray, batch_tokens: int, min_rows: int = 1) -> list[np.ndarray]:
    """Batches for evaluation: all sentences sorted by length, no shuffling."""
    order = np.argsort(lengths, kind="stable")
    return pack_batches(order, lengths, batch_tokens, min_rows)
