"""LSTM with a projection and clipping, as TensorFlow's ``LSTMCell(dim, num_proj, cell_clip, proj_clip)``.

Gates are computed from ``[x, h_prev] W_0 + B`` in TF order i, j, f, o; the forget
bias of +1 is added to ``B`` (once per call, not per step)::

    c = sigmoid(f + 1) * c_prev + sigmoid(i) * tanh(j);   c = clip(c, cell_clip)
    h = (sigmoid(o) * tanh(c)) W_P;                        h = clip(h, proj_clip)

:func:`run_lstm` is the one time loop, over packed rows (:class:`pyelmo.modeling.rows.PackedRows`:
only the rows still running at each step), for training, evaluation and inference alike: the
input-to-gate products of a block of steps in one product, then per step the recurrent product,
:meth:`LstmWithProjection.cell` and the clipped projection, the layers' own linear modules computing
the products. A :class:`Level` module runs a level's two directions in one loop (their step products
batched, :func:`paired`) or one after the other. ``nn.Linear`` s and a :class:`Level` without a
:class:`Workspace` run differentiable; an execution plan (:func:`pyelmo.runtime.planning.plan_model`) swaps in
its planned linears and a level module with a workspace, and the loop then writes into its buffers.
"""

from __future__ import annotations

from typing import Sequence

import functools
import math

import torch
from torch import nn

from pyelmo.modeling.rows import PackedRows

FORGET_BIAS = 1.0


class LstmWithProjection(nn.Module):
    """One direction of one biLM layer."""

    def __init__(self, input_dim: int, dim: int, projection_dim: int,
                 cell_clip: float | None, proj_clip: float | None) -> None:
        super().__init__()
        self.dim, self.projection_dim = dim, projection_dim
        self.cell_clip, self.proj_clip = cell_clip, proj_clip
        self.input_gates = nn.Linear(input_dim, 4 * dim)  # W_0[:input_dim], B
        self.state_gates = nn.Linear(projection_dim, 4 * dim, bias=False)  # W_0[input_dim:]
        self.projection = nn.Linear(dim, projection_dim, bias=False)  # W_P_0

    def gate_bias(self) -> torch.Tensor:
        """``B`` with the forget bias added to the f block."""
        forget = torch.zeros_like(self.input_gates.bias)
        forget[2 * self.dim : 3 * self.dim] = FORGET_BIAS
        return self.input_gates.bias + forget

    def cell(self, gates: torch.Tensor, c_prev: torch.Tensor,
             inplace: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Gate pre-activations ``[i, j, f + 1, o]`` and ``c_prev`` -> ``(sigmoid(o) * tanh(c), c)``. ``inplace`` (no
        autograd): the same operations, written over ``gates`` (the result in its j block) and ``c_prev``."""
        if inplace:  # no new tensors: a step's new tensors of many rows cost their page faults
            i, j, f, o = gates.chunk(4, dim=-1)
            for gate in (i, f, o):
                gate.sigmoid_()
            c = c_prev.mul_(f).addcmul_(i, j.tanh_())
            if self.cell_clip is not None:
                c.clamp_(-self.cell_clip, self.cell_clip)
            return torch.tanh(c, out=j).mul_(o), c
        cell_input = torch.tanh(gates[..., self.dim : 2 * self.dim])
        i, _, f, o = torch.sigmoid(gates).chunk(4, dim=-1)  # one sigmoid (j's is unused)
        c = torch.addcmul(f * c_prev, i, cell_input)  # sigmoid(f + 1) c_prev + sigmoid(i) tanh(j)
        if self.cell_clip is not None:
            c = torch.clamp(c, -self.cell_clip, self.cell_clip)
        return o * torch.tanh(c), c

    def clip_projection(self, h: torch.Tensor, inplace: bool = False) -> torch.Tensor:
        """``clip(h, proj_clip)`` of projected outputs ``h = hidden W_P`` (``inplace``: no autograd)."""
        if self.proj_clip is None:
            return h
        return h.clamp_(-self.proj_clip, self.proj_clip) if inplace else h.clamp(-self.proj_clip, self.proj_clip)


class Workspace:
    """Buffers the loop reuses from call to call (no autograd): a large buffer allocated afresh at every
    call costs its page faults every time (glibc returns large allocations to the system when freed)."""

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def buffer(self, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """An uninitialised ``shape`` tensor of ``like``'s dtype and device, kept as ``name`` (grown when needed)."""
        size = math.prod(shape)
        kept = self._buffers.get(name)
        if kept is None or kept.numel() < size or kept.dtype != like.dtype or kept.device != like.device:
            kept = self._buffers[name] = like.new_empty(size)
        return kept[:size].view(shape)


class StackedLinears:
    """The same product of a level's directions ``d`` (``nn.Linear`` s), each on its own rows ``x[d]``
    (``x (D, n, in)``), as one differentiable batched product on their stacked ``W^T`` (``out`` unused)."""

    def __init__(self, linears: Sequence[nn.Linear]) -> None:
        self.stacked = torch.stack([linear.weight for linear in linears]).transpose(1, 2)

    def affine(self, x: torch.Tensor, biases: Sequence[torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
        return torch.baddbmm(torch.stack(list(biases))[:, None], x, self.stacked)

    def add_to(self, acc: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(acc, x, self.stacked)

    def product(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return torch.bmm(x, self.stacked)


def paired(linears: Sequence[nn.Module]) -> StackedLinears:
    """The products of ``linears`` (one per direction, same shape) over each direction's rows: a module that
    runs them its own way says so with a ``pair(linears)`` method (a plan's planned linears), else
    :class:`StackedLinears`."""
    pair = getattr(linears[0], "pair", None)
    if pair is not None:
        return pair(linears)
    if any(hasattr(linear, "pair") for linear in linears):
        raise ValueError("a level's directions must all be planned, or none")
    return StackedLinears(linears)


def lstm_step(layer: LstmWithProjection, state_gates, projection, gates: torch.Tensor, h: torch.Tensor,
              c: torch.Tensor, out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One time step of the rows still running, both directions (or one): ``gates (D, n, 4H)`` (``x W_0[:in] + B``,
    added to in place), ``h (D, n, P)``, ``c (D, n, H)`` -> the new ``h`` and ``c``. With ``out`` (no autograd), ``h``
    is written into it, and the cell is computed in place: over ``gates`` and ``c``.
    ``state_gates``, ``projection``: the directions' products (:func:`paired`)."""
    hidden, c = layer.cell(state_gates.add_to(gates, h), c, inplace=out is not None)  # gates + h W_0[in:]
    h = layer.clip_projection(projection.product(hidden, out=out), inplace=out is not None)  # hidden W_P, clipped
    return h, c


def run_lstm(layers: Sequence[LstmWithProjection], inputs: torch.Tensor, rows: PackedRows,
             h: torch.Tensor, c: torch.Tensor, workspace: Workspace | None = None,
             chunk_rows: int | None = None, steps=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run the layers of one level (both directions, or one) over packed ``inputs (D, n_packed, in)``.

    ``h (D, B, P)`` and ``c (D, B, H)``: initial states, rows in sorted order. Returns the packed outputs
    ``(D, n_packed, P)`` and each row's final ``h`` and ``c``. The directions share ``dim`` and the clips, so the gate nonlinearities run once over them.
    ``chunk_rows``: packed rows per input-to-gate product (``None``: all steps in one). ``steps`` (with a
    workspace): what runs each :func:`lstm_step` (``steps.bind(layers, state_gates, projection)``, e.g. on
    fixed buffers, as CUDA graphs); ``None``: called directly.
    """
    layer, inplace = layers[0], workspace is not None
    input_gates = paired([each.input_gates for each in layers])  # x W_0[:in] + B, per direction
    state_gates = paired([each.state_gates for each in layers])  # h W_0[in:]
    projection = paired([each.projection for each in layers])  # hidden W_P
    bias = [each.gate_bias() for each in layers]
    if steps is not None and inplace:
        step = steps.bind(layers, state_gates, projection)
    else:
        step = functools.partial(lstm_step, layer, state_gates, projection)
    sizes, offsets = rows.batch_sizes, rows.offsets
    blocks = rows.gate_blocks(chunk_rows)
    if inplace:  # no autograd: the products write into buffers
        out = inputs.new_empty(len(layers), rows.n_packed, layer.projection_dim)
        step_out = out.split(sizes, dim=1)
        widest = max((offsets[b] - offsets[a] for a, b in blocks), default=0)
        gate_buffer = workspace.buffer("gates", (len(layers), widest, 4 * layer.dim), inputs)
        c = c.clone()  # the steps write over their c: the caller's stays as it was
    outputs, ended_h, ended_c = [], [], []
    for t0, t1 in blocks:
        a, b = offsets[t0], offsets[t1]
        block = input_gates.affine(inputs[:, a:b], bias, out=gate_buffer[:, : b - a] if inplace else None)
        for t, gates in enumerate(block.split(sizes[t0:t1], dim=1), start=t0):  # (D, n, 4H) per step
            n = sizes[t]
            if n < h.shape[1]:  # the last rows have ended: keep their final states
                ended_h.append(h[:, n:])
                ended_c.append(c[:, n:])
                h, c = h[:, :n], c[:, :n]
            h, c = step(gates, h, c, step_out[t] if inplace else None)
            outputs.append(h)
    final_h = torch.cat([h, *reversed(ended_h)], dim=1)
    final_c = torch.cat([c, *reversed(ended_c)], dim=1)
    if not inplace:
        out = torch.cat(outputs, dim=1) if outputs else inputs.new_empty(len(layers), 0, layer.projection_dim)
    return out, final_h, final_c


class Level(nn.Module):
    """How a level's two directions (``layers``, one per direction) run :func:`run_lstm`: a module without
    weights. ``workspace`` (no autograd): the loop writes into its buffers, ``chunk_rows`` packed rows per
    input-to-gate product, ``steps`` runs its time steps (:func:`run_lstm`); without one, the differentiable
    loop. A plan swaps in its own."""

    def __init__(self, workspace: Workspace | None = None, chunk_rows: int | None = None, steps=None) -> None:
        super().__init__()
        self.workspace, self.chunk_rows, self.steps = workspace, chunk_rows, steps

    @property
    def differentiable(self) -> bool:
        """Without a workspace, autograd through the loop; with one (a plan's), no autograd, and the products
        (the plan's) pick their precision themselves."""
        return self.workspace is None

    def forward(self, layers: Sequence[LstmWithProjection], inputs: torch.Tensor, rows: PackedRows,
                h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        raise NotImplementedError


class Together(Level):
    """Both directions in one loop, their step products batched (the differentiable path, and the plans' default)."""

    def forward(self, layers, inputs, rows, h, c):
        return run_lstm(layers, inputs, rows, h, c, self.workspace, self.chunk_rows, self.steps)


class Apart(Level):
    """One direction after the other (a plan's choice where one direction's products run faster alone)."""

    def forward(self, layers, inputs, rows, h, c):
        each = [run_lstm([layer], inputs[d : d + 1], rows, h[d : d + 1], c[d : d + 1], self.workspace,
                         self.chunk_rows, self.steps) for d, layer in enumerate(layers)]
        return tuple(torch.cat(parts) for parts in zip(*each))


#: The level module of each of a plan's ``level_order`` values (:data:`pyelmo.runtime.rules.LEVEL_ORDERS`).
LEVELS = {"together": Together, "apart": Apart}
