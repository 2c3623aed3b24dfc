"""A level's time steps on fixed buffers, and on a CUDA device as CUDA graphs (the plan's ``steps``).

A time step (:func:`pyelmo.modeling.lstm.lstm_step`: the recurrent product, the cell, the projection) is a dozen
small kernels; on a GPU each is a launch from Python, which costs more than its arithmetic at a step's few rows.
:class:`StaticSteps` runs a level's steps on buffers that stay put (the rows' ``h``, ``c`` and gates, per level),
so that the step of each row count can be captured once as a CUDA graph and replayed: per step, one copy of the
gates in, one replay, one copy of ``h`` out. A row count is captured at its first step (which runs eagerly, on
the capture's stream), in one memory pool shared by all the graphs: what a graph allocates is freed within it,
and the graphs run one after the other. Replays run the same kernels on the same shapes as the eager steps.
Without capture (``capture=False``, the plan's ``static`` steps) the same buffers run eagerly: the CPU runs
and tests this path.
"""

from __future__ import annotations

import functools
import time
from typing import Sequence

import torch

from pyelmo.modeling.lstm import LstmWithProjection, lstm_step


class LevelBuffers:
    """The fixed buffers of one level's directions, for up to ``rows`` rows, and the graphs captured on them
    (by row count). ``owners``: what the graphs read (the layers and their paired products), held so that a
    buffer set is never taken for another level's."""

    def __init__(self, owners: tuple, gates: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> None:
        self.owners = owners
        # a call's first step's shapes (its most rows), and a spare row: a step's view of a buffer is then laid out
        # as the loop's own outputs are (not contiguous), and ATen's batched products round the same way
        self.gates, self.h, self.c = (x.new_zeros(x.shape[0], x.shape[1] + 1, x.shape[2]) for x in (gates, h, c))
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}

    def fits(self, owners: tuple, rows: int, like: torch.Tensor) -> bool:
        same = self.owners[0] == owners[0] and self.owners[1] is owners[1] and self.owners[2] is owners[2]
        return (same and self.h.shape[1] > rows and self.h.device == like.device and self.h.dtype == like.dtype)


class StaticSteps:
    """Runs :func:`~pyelmo.modeling.lstm.lstm_step` on :class:`LevelBuffers` (see the module docstring); a
    level module's ``steps`` (:func:`pyelmo.modeling.lstm.run_lstm`). ``capture``: on a CUDA device, each row
    count's step captured as a CUDA graph and replayed. :attr:`captures` and :attr:`capture_seconds` count
    the captures made."""

    def __init__(self, capture: bool = False) -> None:
        self.capture = capture
        self.captures = 0
        self.capture_seconds = 0.0
        self._levels: dict[tuple[int, ...], LevelBuffers] = {}
        self._pool = None
        self._stream = None

    def __getstate__(self) -> dict:  # copied or pickled: the buffers and graphs are made again on first use
        return {"capture": self.capture}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["capture"])

    def bind(self, layers: Sequence[LstmWithProjection], state_gates, projection):
        """The step function of one :func:`~pyelmo.modeling.lstm.run_lstm` call: ``step(gates, h, c, out)``. Its
        buffers are found at the call's first step (which has all its rows), and its initial states copied in;
        later steps run on them (``h``, ``c``: the views the previous step returned)."""
        owners, level = (tuple(layers), state_gates, projection), None

        def step(gates: torch.Tensor, h: torch.Tensor, c: torch.Tensor, out: torch.Tensor):
            nonlocal level
            if level is None:
                level = self._buffers(owners, gates, h, c)
                level.h[:, : h.shape[1]].copy_(h)
                level.c[:, : c.shape[1]].copy_(c)
            return self._step(level, gates, out)
        return step

    def _buffers(self, owners: tuple, gates: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> LevelBuffers:
        key = tuple(id(layer) for layer in owners[0])
        level = self._levels.get(key)
        if level is None or not level.fits(owners, gates.shape[1], h):  # new, grown, moved: its graphs go too
            level = self._levels[key] = LevelBuffers(owners, gates, h, c)
        return level

    def _step(self, level: LevelBuffers, gates: torch.Tensor, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = gates.shape[1]
        fixed_h, fixed_c, fixed_gates = level.h[:, :rows], level.c[:, :rows], level.gates[:, :rows]
        fixed_gates.copy_(gates)
        graph = level.graphs.get(rows)
        if graph is not None:
            graph.replay()
        else:
            run = functools.partial(_fixed_step, level.owners, fixed_gates, fixed_h, fixed_c)
            if self.capture and self.captures_on(gates.device):
                level.graphs[rows] = self._captured(run)
            else:
                run()
        out.copy_(fixed_h)
        return fixed_h, fixed_c

    @staticmethod
    def captures_on(device: torch.device) -> bool:
        """Whether steps on ``device`` are captured (CUDA graphs: a CUDA device)."""
        return device.type == "cuda"

    def _captured(self, run) -> torch.cuda.CUDAGraph:
        """``run()`` (the step itself, and the warm-up a capture needs), then captured as a graph."""
        start = time.perf_counter()
        if self._pool is None:
            self._pool, self._stream = torch.cuda.graph_pool_handle(), torch.cuda.Stream()
        graph = torch.cuda.CUDAGraph()
        self._stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self._stream):  # a capture runs on a stream of its own
            run()
            graph.capture_begin(pool=self._pool)
            try:
                run()  # recorded, not run
            finally:
                graph.capture_end()
        torch.cuda.current_stream().wait_stream(self._stream)
        self.captures += 1
        self.capture_seconds += time.perf_counter() - start
        return graph


def _fixed_step(owners: tuple, gates: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> None:
    """One step on the fixed buffers, in place: ``h`` is read before the projection overwrites it."""
    layers, state_gates, projection = owners
    _, new_c = lstm_step(layers[0], state_gates, projection, gates, h, c, out=h)
    c.copy_(new_c)


def level_steps(mode: str) -> StaticSteps | None:
    """The ``steps`` of a plan's level module for its ``steps`` mode (:data:`pyelmo.runtime.rules.STEP_MODES`)."""
    return None if mode == "eager" else StaticSteps(capture=mode == "graphs")
