"""Training's oneDNN products (``train.products = "onednn"``): :class:`PrepackedTrainingLinear`, the module the
trainer swaps in at start for the token encoder's ``nn.Linear`` s (:func:`pyelmo.runtime.swap.swap_linears`
with differentiable products naming it, ``Products(trained_linear=PrepackedTrainingLinear)``), and
:meth:`PrepackedTrainingLinear.product` for the fused convolution's weight, which no ``nn.Linear`` holds.

Both compute ``x W^T (+ b)`` through oneDNN on ``W`` prepacked, forward and backward (the same math as
``torch`` up to the order of float32 sums); products below the fixed rule's size, under autocast or off
the CPU run as ``torch`` products.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from pyelmo.runtime.kernels import OneDNN
from pyelmo.runtime.plan import fixed_kernel, onednn_available

_ONEDNN = OneDNN()  # exact float32


class PackedWeight:
    """``W`` and ``W^T`` prepacked for oneDNN, made on first use and kept while ``W`` is unchanged (its storage
    and version: once per optimizer step). A copy of its module packs anew."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._packs: dict[bool, torch.Tensor] = {}

    def __deepcopy__(self, memo) -> PackedWeight:
        return PackedWeight()

    def get(self, w: torch.Tensor, transposed: bool = False) -> torch.Tensor:
        """``w`` (or ``w^T``: the backward's product) prepacked for oneDNN."""
        key = (w.data_ptr(), w._version, w.device)
        if key != self._key:
            self._key, self._packs = key, {}
        if transposed not in self._packs:
            self._packs[transposed] = _ONEDNN.prepare(w.detach().t().contiguous() if transposed else w)
        return self._packs[transposed]


class _PrepackedProduct(torch.autograd.Function):
    """``x @ W^T (+ b)`` on ``W`` prepacked; the backward's ``grad @ W`` on ``W^T`` prepacked, ``W``'s gradient
    ``grad^T @ x`` one ``torch.mm``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,  # type: ignore[override]
                packed: PackedWeight) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        ctx.packed, ctx.has_bias = packed, bias is not None
        return _ONEDNN.run(x, packed.get(w), bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        x, w = ctx.saved_tensors
        grad = grad.contiguous()
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = _ONEDNN.run(grad, ctx.packed.get(w, transposed=True))
        if ctx.needs_input_grad[1]:
            grad_w = grad.t().mm(x)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad.sum(0)
        return grad_x, grad_w, grad_b, None


def _uses_onednn(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether ``x @ w^T`` runs through oneDNN: on the CPU, no autocast, at least the fixed rule's size."""
    return (x.device.type == "cpu" and not torch.is_autocast_enabled("cpu")
            and fixed_kernel(x.shape[0], tuple(w.shape), True) == "onednn")


def prepacked_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, packed: PackedWeight) -> torch.Tensor:
    """``x @ w^T (+ bias)``, differentiable, through oneDNN on ``packed`` where :func:`_uses_onednn`."""
    if not onednn_available():
        return F.linear(x, w, bias)
    flat = x.reshape(-1, x.shape[-1])
    if _uses_onednn(flat, w):
        y = _PrepackedProduct.apply(flat, w, bias, packed)
    else:
        y = flat @ w.t() if bias is None else torch.addmm(bias, flat, w.t())
    return y.view(*x.shape[:-1], -1)


class PrepackedTrainingLinear(nn.Linear):
    """An ``nn.Linear`` (its own Parameters, so the optimizer, ``state_dict`` and checkpoints are unchanged)
    whose products run through oneDNN on its weight prepacked once per optimizer step, forward and backward."""

    def __init__(self, weight: nn.Parameter, bias: nn.Parameter | None) -> None:
        nn.Module.__init__(self)
        self.out_features, self.in_features = weight.shape
        self.weight = weight
        self.register_parameter("bias", bias)
        self.packed = PackedWeight()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return prepacked_linear(x, self.weight, self.bias, self.packed)

    @staticmethod
    def product(weight: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """``x -> x W^T`` for a weight no ``nn.Linear`` holds (derived anew at every call: packed per call)."""
        return functools.partial(prepacked_linear, w=weight, bias=None, packed=PackedWeight())
