"""Swapping a plan's modules into a model: every ``nn.Linear`` for the planned linear of its precision
(:func:`swap_linears`), and a planned product for a weight no ``nn.Linear`` holds (:func:`weight_product`)."""

from __future__ import annotations

import functools
from typing import Callable

import torch
from torch import nn

from pyelmo.runtime.linear import PLANNED
from pyelmo.runtime.products import Products


def weight_product(weight: torch.Tensor, products: Products) -> Callable[[torch.Tensor], torch.Tensor]:
    """``x -> x W^T`` in the products' own result precision for a weight no ``nn.Linear`` holds (the token
    encoder's fused convolutions'): under a plan its planned linear's :meth:`PlannedLinear.native`, made
    here, else the differentiable ``products.mm_native`` (or their ``trained_linear``'s ``product``)."""
    if products.differentiable:
        if products.trained_linear is not None:
            return products.trained_linear.product(weight)
        return functools.partial(products.mm_native, w=weight)
    return PLANNED[products.precision_of(weight)](weight, None, products).native


def swap_linears(model: nn.Module, products: Products,
                 packed: Callable[[str, torch.Tensor], object] | None = None, prefix: str = "") -> nn.Module:
    """Replace every ``nn.Linear`` in ``model`` by the planned linear of its weight's precision under
    ``products``' plan (:data:`PLANNED`), or, under differentiable products, by their ``trained_linear``
    (the same Parameters); ``model`` is changed in place and returned. ``packed(name, weight)``:
    each quantized weight packed (by its ``state_dict`` name), else quantized here."""
    if products.differentiable and products.trained_linear is None:
        raise ValueError("differentiable products swap in their trained_linear: these have none")
    for name, child in list(model.named_children()):
        if not isinstance(child, nn.Linear):  # (a trained linear is one: a plan runs it like any nn.Linear)
            swap_linears(child, products, packed, f"{prefix}{name}.")
        elif products.differentiable:
            setattr(model, name, products.trained_linear(child.weight, child.bias))
        else:
            cls = PLANNED[products.precision_of(child.weight)]
            ready = {} if packed is None or not products.quantizes(child.weight) else \
                {"packed": packed(f"{prefix}{name}.weight", child.weight)}
            setattr(model, name, cls(child.weight, child.bias, products, **ready))
    return model
