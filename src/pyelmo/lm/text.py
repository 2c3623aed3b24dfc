"""Sentences of text files as language-model batches: character ids and next-word targets.

Every sentence is one batch row inside ``<S>`` ... ``</S>`` (the biLM adds the markers)
and starts from zero LSTM states. Sentences longer than ``max_length`` tokens become
several chunks, each its own row. A batch holds at most ``batch_tokens`` padded
positions (rows x (longest + 2)), but at least ``min_rows`` rows. Used for training
(``pyelmo.training``) and for perplexity (``pyelmo.lm.model``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from pyelmo.text.batching import token_budget_batches
from pyelmo.modeling.characters import token_to_ids
from pyelmo.fileio import PathLike
from pyelmo.lm.vocab import BOS_ID, EOS_ID, DataError, Vocabulary, read_lines

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


def eval_batches(lengths: np.ndarray, batch_tokens: int, min_rows: int = 1) -> list[np.ndarray]:
    """Batches for evaluation: all sentences sorted by length, no shuffling."""
    order = np.argsort(lengths, kind="stable")
    return token_budget_batches(order, lengths, len(order), batch_tokens, min_rows)
