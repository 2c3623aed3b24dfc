"""Planning a model: an execution plan's modules swapped in for the model's own, once, at load, the way
``torch.ao.quantization.quantize_dynamic`` swaps ``nn.Linear`` s by a mapping of module types
(:func:`plan_model`); and the plan as it applies to a model, for ``pyelmo env`` (:func:`explain`).

The model (:mod:`pyelmo.modeling`) knows nothing of plans: every ``nn.Linear`` becomes the planned linear of its
precision (:mod:`pyelmo.runtime.linear`), each level module one of the plan's order with buffers of its own
(:class:`~pyelmo.modeling.lstm.Workspace`), the token encoder's convolutions the fused product on a planned
linear of their padded weights (:class:`PlannedConvMax`).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from pyelmo.modeling.encoder import ConvMax, FusedConvMax, padded_conv_weights
from pyelmo.modeling.lstm import LEVELS, Level, Workspace
from pyelmo.runtime.linear import PLANNED, PlannedLinear
from pyelmo.runtime.options import RunOptions
from pyelmo.runtime.plan import ROW_CLASSES
from pyelmo.runtime.products import Products
from pyelmo.runtime.steps import level_steps

#: Packed rows (token positions of one direction) per input-to-gate product in the planned loop.
INPUT_GATE_CHUNK_ROWS = 512


class PlannedConvMax(FusedConvMax):
    """The fused convolutions on a planned linear of their padded weights (its results in the plan's
    precision), made once and kept while the convolutions are unchanged (``Products.derived``)."""

    def __init__(self, products: Products) -> None:
        super().__init__()
        self.products = products

    def fused(self, convolutions: nn.ModuleList) -> tuple:
        return self.products.derived(convolutions, lambda: self._planned(convolutions))

    def _planned(self, convolutions: nn.ModuleList) -> tuple:
        weight, bias, groups = padded_conv_weights(convolutions)
        product = PLANNED[self.products.precision_of(weight)](weight, None, self.products).native
        return product, bias, groups, max(width for _, _, width in groups)


def swap_modules(model: nn.Module, mapping: dict[type, Callable[[str, nn.Module], nn.Module]],
                 prefix: str = "") -> nn.Module:
    """Replace every child of ``model`` (at any depth) that is an instance of a type of ``mapping`` by
    ``mapping[type](name, child)`` (``name``: its ``state_dict`` prefix); ``model`` is changed in place and
    returned. A replaced child's own children are not visited."""
    for name, child in list(model.named_children()):
        make = next((make for kind, make in mapping.items() if isinstance(child, kind)), None)
        if make is None:
            swap_modules(child, mapping, f"{prefix}{name}.")
        else:
            setattr(model, name, make(f"{prefix}{name}", child))
    return model


def plan_model(model: nn.Module, options: RunOptions,
               packed: Callable[[str, torch.Tensor], object] | None = None) -> nn.Module:
    """``model`` with the plan of the inference ``options`` swapped in, in place, once (see the module docstring):
    it then computes no gradients (its parameters frozen, its level modules running in place) and runs with
    ``options.products`` only (other run options may share them: :meth:`RunOptions.inference`).
    ``load_state_dict`` (an unplanned model's keys) still works: the planned linears prepare their weights
    again (int8: quantized again). ``packed(name, weight)``: each quantized weight packed, e.g. from numbers
    kept on disk, else quantized here."""
    def linear(name: str, child: nn.Linear) -> PlannedLinear:
        cls = PLANNED[products.precision_of(child.weight)]
        ready = {} if packed is None or not products.quantizes(child.weight) else \
            {"packed": packed(f"{name}.weight", child.weight)}
        return cls(child.weight, child.bias, products, **ready)

    products = options.products
    if products is None:
        raise ValueError("plan_model takes inference run options (RunOptions.inference(...))")
    if planned_products(model) is not None:
        raise ValueError("this model is planned already: a plan is applied once, to a model loaded for it")
    swap_modules(model, {
        nn.Linear: linear,
        Level: lambda name, child: LEVELS[options.plan.level_order](Workspace(), INPUT_GATE_CHUNK_ROWS,
                                                                    level_steps(options.plan.steps)),
        ConvMax: lambda name, child: PlannedConvMax(products),
    })
    return model.requires_grad_(False)


def planned_products(model: nn.Module) -> Products | None:
    """The products of the plan swapped into ``model`` (:func:`plan_model`), or None if it has none."""
    return next((m.products for m in model.modules() if isinstance(m, PlannedLinear)), None)


def explain(products: Products, named: dict[str, nn.Module | torch.Tensor], step: set[str]) -> dict:
    """The plan of ``products`` as it applies to a model: per product (``named``: a planned linear, or a weight
    no linear holds, by name) and row class the kernel and precision it runs with (``bmm``: a time step's
    products of both directions batched, for the products named in ``step``), and per row class the order of a
    level's directions. Decided by the same calls the products make."""
    table = []
    for name, product in named.items():
        for rows in ROW_CLASSES:
            kernel, precision, batched = _runs(products, product, rows)
            batched = batched if name in step else 0
            if batched >= rows:
                kernel = "bmm"
            elif batched > _previous_class(rows):  # the class's smaller steps run batched
                kernel = f"bmm to {batched} rows, else {kernel}"
            table.append({"product": name, "weight": list(product.shape), "rows": _rows_label(rows),
                          "kernel": kernel, "precision": precision})
    plan = products.plan
    return {"plan": plan.summary(), "products": table,
            "level_order": {_rows_label(r): plan.level_order for r in ROW_CLASSES}}


def _runs(products: Products, product: nn.Module | torch.Tensor, rows: int) -> tuple[str, str, int]:
    """The kernel, precision and batched rows (:meth:`PlannedLinear.batched_rows`) of ``rows`` rows."""
    if isinstance(product, PlannedLinear):
        device = "cpu" if product.weight.is_meta else product.weight.device
        x = torch.zeros(rows, product.in_features, device=device)
        return product.kernel(x), product.precision, product.batched_rows()
    x = torch.zeros(rows, product.shape[1], device=product.device)
    return products.kernel(x, product), products.precision_of(product), 0


def _previous_class(row_class: int) -> int:
    """The largest row count of the class below ``row_class`` (0 for the first)."""
    index = ROW_CLASSES.index(row_class)
    return ROW_CLASSES[index - 1] if index else 0


def _rows_label(row_class: int) -> str:
    return f"<={row_class}" if row_class < ROW_CLASSES[-1] else f">{ROW_CLASSES[-2]}"
