"""The backends of the biLM's one time loop (:func:`pyelmo.modeling.lstm.run_lstm`): what differs
between training and inference, passed in the run options, never detected. The loop's products are
the model's own linear modules; a backend says how the model runs around them:

- :class:`Differentiable`: autograd through every step (the model's ``nn.Linear`` s, or training's oneDNN
  linears swapped in for the token encoder's: :mod:`pyelmo.runtime.training_linear`); ``products`` runs the
  fused convolution's product (``torch``, or their ``trained_linear``'s).
- :class:`Inference`: no autograd; the model with an execution plan applied (its planned linears,
  :mod:`pyelmo.runtime.linear`), the loop writing into buffers kept from call to call
  (:attr:`Inference.workspace`); whether a level's two directions run together or one after the other is
  the plan's level module, swapped in with its linears (:class:`pyelmo.modeling.lstm.Level`).
"""

from __future__ import annotations

import math
from typing import Callable, Protocol

import torch
from torch import nn

from pyelmo.runtime.linear import PlannedLinear
from pyelmo.runtime.plan import ROW_CLASSES, ExecutionPlan
from pyelmo.runtime.products import PLAIN, Products

#: Packed rows (token positions of one direction) per input-to-gate product in the inference loop.
INPUT_GATE_CHUNK_ROWS = 512


class Backend(Protocol):
    name: str
    differentiable: bool
    fused_conv: bool
    gate_chunk_rows: int | None
    products: Products
    workspace: Workspace | None


class Differentiable:
    """Autograd through the loop (training, the reference path); ``products`` runs the fused convolution's
    product (``PLAIN``, or training's), ``fused_conv`` computes every convolution width in one product."""

    name, differentiable, gate_chunk_rows, workspace = "differentiable", True, None, None

    def __init__(self, products: Products = PLAIN, fused_conv: bool = False) -> None:
        if not products.differentiable:
            raise ValueError("the differentiable backend needs differentiable products")
        self.products, self.fused_conv = products, fused_conv

    def __repr__(self) -> str:
        return f"Differentiable({self.products!r}, fused_conv={self.fused_conv})"


class Workspace:
    """Buffers the inference loop reuses from call to call: a large buffer allocated afresh at every
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


def _previous_class(row_class: int) -> int:
    """The largest row count of the class below ``row_class`` (0 for the first)."""
    index = ROW_CLASSES.index(row_class)
    return ROW_CLASSES[index - 1] if index else 0


def _rows_label(row_class: int) -> str:
    return f"<={row_class}" if row_class < ROW_CLASSES[-1] else f">{ROW_CLASSES[-2]}"


class Inference:
    """The products of an execution plan, in place, no autograd (see the module docstring)."""

    name, differentiable, fused_conv, gate_chunk_rows = "inference", False, True, INPUT_GATE_CHUNK_ROWS

    def __init__(self, plan: ExecutionPlan) -> None:
        self.plan, self.products, self.workspace = plan, Products(plan), Workspace()

    def __repr__(self) -> str:
        return f"Inference({self.plan.summary()})"

    def planned(self, model: nn.Module, build: Callable[[], nn.Module]) -> nn.Module:
        """``build()``: a copy of ``model`` with this plan applied, made once and kept while ``model``'s
        parameters are unchanged (for a model run here that its owner did not plan)."""
        return self.products.derived(model, build)

    def explain(self, products: dict[str, nn.Module | torch.Tensor], step: set[str],
                shape: tuple[int, int, int]) -> dict:
        """The plan as it applies to a model: per product (by name: a planned linear, or a weight run by
        :attr:`products`) and row class the kernel (and precision) it runs with (``bmm``: a time step's
        products of both directions batched, for the products named in ``step``), and per row class the
        order of a level of ``shape``'s directions. Decided by the same calls the products make."""
        table = []
        for name, product in products.items():
            for rows in ROW_CLASSES:
                kernel, precision, batched = self._runs(product, rows)
                batched = batched if name in step else 0
                if batched >= rows:
                    kernel = "bmm"
                elif batched > _previous_class(rows):  # the class's smaller steps run batched
                    kernel = f"bmm to {batched} rows, else {kernel}"
                weight = list(product.shape)
                table.append({"product": name, "weight": weight, "rows": _rows_label(rows), "kernel": kernel,
                              "precision": precision})
        return {"plan": self.plan.summary(), "products": table,
                "level_order": {_rows_label(r): self.plan.level_order for r in ROW_CLASSES}}

    def _runs(self, product: nn.Module | torch.Tensor, rows: int) -> tuple[str, str, int]:
        """The kernel, precision and batched rows (:meth:`PlannedLinear.batched_rows`) of ``rows`` rows."""
        if isinstance(product, PlannedLinear):
            device = "cpu" if product.weight.is_meta else product.weight.device
            x = torch.zeros(rows, product.in_features, device=device)
            return product.kernel(x), product.precision, product.batched_rows()
        x = torch.zeros(rows, product.shape[1], device=product.device)
        return self.products.kernel(x, product), self.products.precision_of(product), 0
