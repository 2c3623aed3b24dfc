"""Packed rows: the one row layout of the biLM's time loop (training, evaluation and inference).

Rows are sorted by descending length; step ``t`` runs the first ``batch_sizes[t]`` sorted rows,
stored time-major at packed rows ``offsets[t] : offsets[t] + batch_sizes[t]``, so no padding
position is ever computed. The backward direction reads the same positions in reversed order
within each row, so both directions share the step sizes.
"""

from __future__ import annotations

import torch


class PackedRows:
    """The packed-row index of a batch of ``lengths`` (each at most ``steps``).

    ``forward_src[k]`` / ``backward_src[k]`` is the flat ``row * steps + position`` index (in the
    caller's row order) that packed row ``k`` reads in the forward / backward direction.
    """

    def __init__(self, lengths: torch.Tensor, steps: int) -> None:
        device = lengths.device
        self.batch, self.steps = len(lengths), steps
        self.order = torch.argsort(lengths, descending=True, stable=True)
        self.restore = torch.argsort(self.order)
        self.sorted_lengths = lengths[self.order]
        longest = int(self.sorted_lengths[0]) if len(lengths) else 0
        sizes = (self.sorted_lengths[None, :] > torch.arange(longest, device=device)[:, None]).sum(-1)
        self.batch_sizes: list[int] = sizes.tolist()
        self.offsets: list[int] = [0] + torch.cumsum(sizes, 0).tolist()
        step = torch.repeat_interleave(torch.arange(len(self.batch_sizes), device=device), sizes)
        sorted_row = torch.arange(len(step), device=device) - torch.tensor(self.offsets[:-1], dtype=torch.long,
                                                                         device=device)[step]
        row = self.order[sorted_row]
        self.forward_src = row * steps + step
        self.backward_src = row * steps + self.sorted_lengths[sorted_row] - 1 - step
        self._blocks: dict[int | None, list[tuple[int, int]]] = {}

    @property
    def n_packed(self) -> int:
        return self.offsets[-1]

    def gate_blocks(self, chunk_rows: int | None) -> list[tuple[int, int]]:
        """Blocks of steps ``(t0, t1)`` whose input-to-gate products run as one product: consecutive steps
        of at most ``chunk_rows`` packed rows in all (a larger step alone); ``None``: one block. Computed
        once per chunk size (every level of a call asks)."""
        if chunk_rows not in self._blocks:
            self._blocks[chunk_rows] = self._gate_blocks(chunk_rows)
        return self._blocks[chunk_rows]

    def _gate_blocks(self, chunk_rows: int | None) -> list[tuple[int, int]]:
        n = len(self.batch_sizes)
        if chunk_rows is None:
            return [(0, n)] if n else []
        offsets, blocks, t0 = self.offsets, [], 0
        while t0 < n:
            t1 = t0 + 1
            while t1 < n and offsets[t1 + 1] - offsets[t0] <= chunk_rows:
                t1 += 1
            blocks.append((t0, t1))
            t0 = t1
        return blocks

    def sort(self, state: torch.Tensor) -> torch.Tensor:
        """``(D, B, ...)`` states from the caller's row order to the sorted order."""
        return state[:, self.order].contiguous()

    def unsort(self, state: torch.Tensor) -> torch.Tensor:
        return state[:, self.restore]

    def both_directions(self, forward: torch.Tensor) -> torch.Tensor:
        """``(2, n_packed, ...)`` from the forward direction's packed rows: the backward direction reads
        the same positions in its own order."""
        position = torch.empty(self.batch * self.steps, dtype=torch.long, device=forward.device)
        position[self.forward_src] = torch.arange(self.n_packed, device=forward.device)
        return torch.stack([forward, forward[position[self.backward_src]]])

    def assemble(self, levels: list[torch.Tensor]) -> torch.Tensor:
        """``(L + 1, B, steps, 2P)`` in the caller's row order from each level's packed ``(2, n_packed, P)``
        (zero past each row's end); differentiable."""
        proj = levels[0].shape[-1]
        layers = levels[0].new_zeros(len(levels), self.batch * self.steps, 2 * proj)
        for k, x in enumerate(levels):
            layers[k, self.forward_src, :proj] = x[0]
            layers[k, self.backward_src, proj:] = x[1]
        return layers.view(len(levels), self.batch, self.steps, 2 * proj)
