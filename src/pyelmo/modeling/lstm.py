"""LSTM with a projection and clipping, as TensorFlow's ``LSTMCell(dim, num_proj, cell_clip, proj_clip)``.

Gates are computed from ``[x, h_prev] W_0 + B`` in TF order i, j, f, o; the forget
bias of +1 is added to ``B`` (once per call, not per step)::

    c = sigmoid(f + 1) * c_prev + sigmoid(i) * tanh(j);   c = clip(c, cell_clip)
    h = (sigmoid(o) * tanh(c)) W_P;                        h = clip(h, proj_clip)

The input-to-gate products of all time steps are computed in one matrix multiply;
only the recurrent product stays in the time loop, over the rows still running. The
matrix products run through a :class:`pyelmo.runtime.products.Products` (``PLAIN``: ``torch``,
differentiable); the inference strategy's time loop (``pyelmo.runtime.options``) uses the same
:meth:`LstmWithProjection.cell` and :meth:`LstmWithProjection.clip_projection`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pyelmo.runtime.products import PLAIN, Products

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
        """Gate pre-activations ``[i, j, f + 1, o]`` and ``c_prev`` -> ``(sigmoid(o) * tanh(c), c)``.

        ``inplace`` (no autograd; the packed strategy's buffers): ``gates`` and ``c_prev`` are
        overwritten, ``c_prev`` becoming ``c``; the same operations, without new buffers.
        """
        def out(buffer: torch.Tensor) -> torch.Tensor | None:
            return buffer if inplace else None

        cell_input = torch.tanh(gates[..., self.dim : 2 * self.dim])
        i, _, f, o = torch.sigmoid(gates, out=out(gates)).chunk(4, dim=-1)  # one sigmoid (j's is unused)
        c = torch.mul(f, c_prev, out=out(c_prev))
        c = torch.addcmul(c, i, cell_input, out=out(c))  # sigmoid(f + 1) c_prev + sigmoid(i) tanh(j)
        if self.cell_clip is not None:
            c = torch.clamp(c, -self.cell_clip, self.cell_clip, out=out(c))
        return torch.tanh(c).mul_(o) if inplace else o * torch.tanh(c), c

    def project(self, hidden: torch.Tensor, products: Products = PLAIN,
                out: torch.Tensor | None = None) -> torch.Tensor:
        """``h = clip(hidden W_P, proj_clip)`` (into ``out`` if given; then without autograd)."""
        if out is None:
            return self.clip_projection(products.mm(hidden, self.projection.weight))
        return self.clip_projection(products.mm(hidden, self.projection.weight, out=out), inplace=True)

    def clip_projection(self, h: torch.Tensor, inplace: bool = False) -> torch.Tensor:
        """``clip(h, proj_clip)`` of projected outputs ``h = hidden W_P`` (``inplace``: no autograd)."""
        if self.proj_clip is None:
            return h
        return h.clamp_(-self.proj_clip, self.proj_clip) if inplace else h.clamp(-self.proj_clip, self.proj_clip)

    def forward(self, inputs: torch.Tensor, batch_sizes: list[int],
                state: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """The differentiable time loop: run over ``inputs (B, T, input_dim)`` whose rows are sorted by descending length.

        ``batch_sizes[t]`` is the number of rows still running at step ``t``; ``state`` is
        ``(h (B, projection_dim), c (B, dim))``. Returns outputs ``(B, T, projection_dim)``
        (zero past each row's end) and each row's state after its last step.
        """
        h, c = state
        batch = inputs.shape[0]
        input_gates = F.linear(inputs, self.input_gates.weight, self.gate_bias()).unbind(1)  # (B, 4 * dim) per step
        outputs, ended_h, ended_c = [], [], []
        for t, n in enumerate(batch_sizes):
            if n < h.shape[0]:  # the last rows have ended: keep their final states
                ended_h.append(h[n:])
                ended_c.append(c[n:])
                h, c = h[:n], c[:n]
            hidden, c = self.cell(input_gates[t][:n] + F.linear(h, self.state_gates.weight), c)
            h = self.project(hidden)
            outputs.append(F.pad(h, (0, 0, 0, batch - n)))
        final_h = torch.cat([h, *reversed(ended_h)])
        final_c = torch.cat([c, *reversed(ended_c)])
        return torch.stack(outputs, dim=1), (final_h, final_c)
