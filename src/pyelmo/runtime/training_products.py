"""Differentiable products for training (``train.products = "onednn"``): the token encoder's products
through oneDNN with prepacked weights, forward and backward (:class:`_PrepackedLinear`); the same
math as ``PLAIN`` up to the order of float32 sums.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pyelmo.runtime.plan import fixed_kernel, onednn_available
from pyelmo.runtime.products import Products


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
        return products.kernels["onednn"].run(x, products.weight(w, "onednn"), bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        x, w = ctx.saved_tensors
        products: TrainingProducts = ctx.products
        grad = grad.contiguous()
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = products.kernels["onednn"].run(grad, products.transposed_weight(w))
        if ctx.needs_input_grad[1]:
            grad_w = grad.t().mm(x)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad.sum(0)
        return grad_x, grad_w, grad_b, None


class TrainingProducts(Products):
    """Differentiable products whose token-encoder products of at least the fixed rule's size run
    through oneDNN with prepacked weights (:class:`_PrepackedLinear`), repacked when a weight changes
    (once per optimizer step); under bfloat16 autocast they stay with ``torch``."""

    def __init__(self) -> None:
        super().__init__()
        self.onednn = onednn_available()

    def __repr__(self) -> str:
        return f"TrainingProducts(onednn={self.onednn})"

    def _uses_onednn(self, x: torch.Tensor, w: torch.Tensor) -> bool:
        return (self.onednn and not torch.is_autocast_enabled(x.device.type) and x.device.type == "cpu"
                and fixed_kernel(x.shape[0], tuple(w.shape), True) == "onednn")

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
