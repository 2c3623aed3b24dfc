"""Differentiable products for training: the same math as ``PLAIN``, fewer and larger operations.

:class:`TrainingProducts` is the training strategy's product implementation (``train.products``):
the character convolutions of all widths as one product, both LSTM directions of a level in one
time loop over packed rows (:func:`run_pair_differentiable`), and optionally the token encoder's
products through oneDNN with prepacked weights, forward and backward (:class:`_PrepackedLinear`).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from pyelmo.runtime.products import Products, onednn_available


class _PrepackedLinear(torch.autograd.Function):
    """``x @ W^T (+ b)`` through oneDNN with prepacked weights, forward and backward.

    The forward multiplies by ``W`` packed for oneDNN, the backward's ``grad @ W`` by ``W^T``
    packed the same way (both kept by the :class:`TrainingProducts` until ``W`` changes: once
    per optimizer step); ``W``'s gradient ``grad^T @ x`` is one ``torch.mm``.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,  # type: ignore[override]
                products: TrainingProducts) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        ctx.products, ctx.has_bias = products, bias is not None
        return products.run("onednn", x, products.weight(w, "onednn"), bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        x, w = ctx.saved_tensors
        products: TrainingProducts = ctx.products
        grad = grad.contiguous()
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = products.run("onednn", grad, products.transposed_weight(w))
        if ctx.needs_input_grad[1]:
            grad_w = grad.t().mm(x)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad.sum(0)
        return grad_x, grad_w, grad_b, None


class TrainingProducts(Products):
    """Differentiable products for training with the plain strategy: the same math as ``PLAIN``,
    run faster.

    - the character convolutions of all widths as one product (:func:`conv_max_gemm`, with
      its weights rebuilt under autograd at every call), instead of one ``Conv1d`` per width
      over every character position: only the windows that read a character are computed;
    - the plain strategy runs each LSTM level's two directions in one time loop over packed
      rows (:func:`run_pair_differentiable`, batched ``torch`` products);
    - ``onednn=True``: the token encoder's products through oneDNN with prepacked weights,
      forward and backward (:class:`_PrepackedLinear`); the packing is redone when a weight
      changes, once per optimizer step. ``False``: ``torch`` products (MKL).

    Values and gradients equal ``PLAIN``'s up to the order of float32 sums.
    """

    def __init__(self, onednn: bool = False) -> None:
        super().__init__(None, onednn=onednn and onednn_available())

    @property
    def differentiable(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"TrainingProducts(onednn={self.onednn})"

    def derived(self, owner: torch.nn.Module, build: Callable[[], object]) -> object:
        """``build()`` under autograd at every call: the gradient flows back to ``owner``'s parameters."""
        return build()

    def _uses_onednn(self, x: torch.Tensor, w: torch.Tensor) -> bool:
        # under bfloat16 autocast the products stay with torch, which autocast casts
        return not torch.is_autocast_enabled(x.device.type) and self.onednn and self.kernel(x, w) == "onednn"

    def prepare(self, w: torch.Tensor, kernel: str) -> torch.Tensor:
        """As :meth:`Products.prepare`, and ``"onednn_t"``: ``w^T`` prepacked for oneDNN (the backward's product)."""
        if kernel == "onednn_t":
            return super().prepare(w.detach().t().contiguous(), "onednn")
        return super().prepare(w, kernel)

    def transposed_weight(self, w: torch.Tensor) -> torch.Tensor:
        """``w^T`` prepacked for oneDNN, kept until ``w`` changes."""
        return self.weight(w, "onednn_t")

    def mm(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
           out: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ w.T (+ bias)``, differentiable (into ``out`` if given)."""
        if self._uses_onednn(x, w):
            y = _PrepackedLinear.apply(x, w, bias, self)
        else:
            y = x @ w.t() if bias is None else torch.addmm(bias, x, w.t())
        return y if out is None else out.copy_(y)

    def linear(self, x: torch.Tensor, layer: torch.nn.Linear) -> torch.Tensor:
        """``layer(x)``, differentiable."""
        if not self.onednn:
            return F.linear(x, layer.weight, layer.bias)
        return self.mm(x.reshape(-1, x.shape[-1]), layer.weight, layer.bias).view(*x.shape[:-1], -1)


def packed_positions(batch_sizes: list[int], steps: int, device: torch.device) -> torch.Tensor:
    """Flat ``row * steps + t`` index of each packed position, time-major: step ``t``'s first
    ``batch_sizes[t]`` rows (sorted by descending length), then step ``t + 1``'s."""
    sizes = torch.tensor(batch_sizes, device=device)
    step = torch.repeat_interleave(torch.arange(len(batch_sizes), device=device), sizes)
    starts = torch.cumsum(sizes, 0) - sizes
    return (torch.arange(len(step), device=device) - starts[step]) * steps + step


def run_pair_differentiable(pair: Sequence[torch.nn.Module], x: torch.Tensor, batch_sizes: list[int],
                            h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The forward and backward ``LstmWithProjection`` of one level in one differentiable time loop.

    The same function as running each layer's ``forward`` (the layers' own
    :meth:`~pyelmo.modeling.lstm.LstmWithProjection.cell`, ``gate_bias`` and clipping), with fewer, larger
    operations for autograd to record: both directions in each step's products (``bmm`` over
    the two directions' weights) and gate nonlinearities, packed rows (the input-to-gate
    products of all running positions in one product, split per step as views; no padding).

    ``x (2, B, T, in)``: each direction's inputs, rows sorted by descending length;
    ``batch_sizes[t]``: rows running at step ``t``; ``h (2, B, P)``, ``c (2, B, H)``: initial
    states. Returns outputs ``(2, B, T, P)`` (zero past each row's end) and each row's final
    ``h``, ``c``.
    """
    layer = pair[0]
    _, batch, steps, _ = x.shape
    index = packed_positions(batch_sizes, steps, x.device)
    inputs = x.reshape(2, batch * steps, -1)[:, index]  # (2, n_packed, in)
    input_w = torch.stack([lay.input_gates.weight for lay in pair]).transpose(1, 2)  # (2, in, 4H)
    state_w = torch.stack([lay.state_gates.weight for lay in pair]).transpose(1, 2)  # (2, P, 4H)
    projection_w = torch.stack([lay.projection.weight for lay in pair]).transpose(1, 2)  # (2, H, P)
    bias = torch.stack([lay.gate_bias() for lay in pair])[:, None]  # (2, 1, 4H)
    input_gates = torch.baddbmm(bias, inputs, input_w).split(batch_sizes, dim=1)  # per step (2, n, 4H)
    outputs, ended_h, ended_c = [], [], []
    for t, n in enumerate(batch_sizes):
        if n < h.shape[1]:  # the last rows have ended: keep their final states
            ended_h.append(h[:, n:])
            ended_c.append(c[:, n:])
            h, c = h[:, :n], c[:, :n]
        hidden, c = layer.cell(torch.baddbmm(input_gates[t], h, state_w), c)  # both directions share dim and clips
        h = torch.bmm(hidden, projection_w)
        if layer.proj_clip is not None:
            h = h.clamp(-layer.proj_clip, layer.proj_clip)
        outputs.append(h)
    final_h = torch.cat([h, *reversed(ended_h)], dim=1)
    final_c = torch.cat([c, *reversed(ended_c)], dim=1)
    packed = torch.cat(outputs, dim=1)
    out = packed.new_zeros(2, batch * steps, packed.shape[-1]).index_copy(1, index, packed)
    return out.view(2, batch, steps, -1), final_h, final_c
