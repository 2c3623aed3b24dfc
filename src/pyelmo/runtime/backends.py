"""The backends of the biLM's one time loop (:func:`pyelmo.modeling.lstm.run_lstm`): what differs
between training and inference, passed in the run options, never detected. They run the loop's
matrix products on the weights the loop hands them (:class:`LevelWeights`: tensors, not modules) and
say how a level's directions run (:meth:`Inference.directions`); the LSTM's math is the loop's.

- :class:`Differentiable`: every step makes new tensors that autograd follows; ``torch`` products
  (or training's :class:`~pyelmo.runtime.training_products.TrainingProducts`), both directions'
  step products batched; the input-to-gate products of all steps in one product.
- :class:`Inference`: no autograd; the products of an execution plan with prepared weights; the
  loop writes into buffers kept from call to call; the plan says whether a level's two directions
  run together or one after the other.

A loop's products (:class:`DifferentiableSteps`, :class:`InferenceSteps`) are made per level from its
:class:`LevelWeights`:
``inputs_to_gates(a, b)`` (packed rows ``a:b``, bias included), ``recurrent(gates, h)`` (``gates + h Ws^T``)
and ``project(hidden, t)`` (``hidden W_P^T``, step ``t``'s outputs), then ``outputs(steps)``.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import ContextManager, Iterator, Protocol

import torch

from pyelmo.runtime import autotune
from pyelmo.runtime.plan import ROW_CLASSES, ExecutionPlan
from pyelmo.runtime.precision import DEFAULT
from pyelmo.runtime.products import PLAIN, Products
from pyelmo.runtime.rows import PackedRows

#: Packed rows (token positions of one direction) per input-to-gate product in the inference loop.
INPUT_GATE_CHUNK_ROWS = 512


@dataclass(frozen=True)
class LevelWeights:
    """The weights of one LSTM level's products, one per direction run: the input-to-gate ``input_w (4H, in)``
    and its ``bias (4H,)`` (forget bias included), the state-to-gate ``state_w (4H, P)``, ``projection_w (P, H)``."""

    input_w: list[torch.Tensor]
    bias: list[torch.Tensor]
    state_w: list[torch.Tensor]
    projection_w: list[torch.Tensor]

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(input dim, cell dim H, projection dim P)``."""
        return self.input_w[0].shape[1], self.state_w[0].shape[0] // 4, self.projection_w[0].shape[0]


class Backend(Protocol):
    name: str
    differentiable: bool
    inplace: bool
    fused_conv: bool
    gate_chunk_rows: int | None
    products: Products

    def steps(self, weights: LevelWeights, inputs: torch.Tensor, rows: PackedRows): ...

    def directions(self, rows: PackedRows, shape: tuple[int, int, int], device: torch.device) -> ContextManager[str]: ...


def _stacked_t(weights: list[torch.Tensor]) -> torch.Tensor:
    """``(D, in, out)``: each ``W^T``, stacked (differentiable)."""
    return torch.stack(weights).transpose(1, 2)


class DifferentiableSteps:
    """A differentiable loop's products: new tensors each step, both directions in one ``bmm``."""

    def __init__(self, weights: LevelWeights, inputs: torch.Tensor) -> None:
        self.inputs = inputs
        self.input_w = _stacked_t(weights.input_w)
        self.bias = torch.stack(weights.bias)[:, None]
        self.state_w = _stacked_t(weights.state_w)
        self.projection_w = _stacked_t(weights.projection_w)

    def inputs_to_gates(self, a: int, b: int) -> torch.Tensor:
        return torch.baddbmm(self.bias, self.inputs[:, a:b], self.input_w)

    def recurrent(self, gates: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(gates, h, self.state_w)

    def project(self, hidden: torch.Tensor, t: int) -> torch.Tensor:
        return torch.bmm(hidden, self.projection_w)

    def outputs(self, steps: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(steps, dim=1)


class Differentiable:
    """Autograd through the loop (training, the reference path); ``products`` runs the token encoder's
    products (``PLAIN``, or training's), ``fused_conv`` computes every convolution width in one product."""

    name, differentiable, inplace, gate_chunk_rows = "differentiable", True, False, None

    def __init__(self, products: Products = PLAIN, fused_conv: bool = False) -> None:
        if not products.differentiable:
            raise ValueError("the differentiable backend needs differentiable products")
        self.products, self.fused_conv = products, fused_conv

    def __repr__(self) -> str:
        return f"Differentiable({self.products!r}, fused_conv={self.fused_conv})"

    def steps(self, weights: LevelWeights, inputs: torch.Tensor, rows: PackedRows) -> DifferentiableSteps:
        return DifferentiableSteps(weights, inputs)

    def directions(self, rows: PackedRows, shape: tuple[int, int, int], device: torch.device) -> ContextManager[str]:
        """A level's directions run together (one loop, both directions' products batched)."""
        return contextlib.nullcontext("together")


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


class InferenceSteps:
    """An inference loop's products: the plan's kernels on prepared weights, in place into buffers."""

    def __init__(self, weights: LevelWeights, inputs: torch.Tensor, rows: PackedRows,
                 products: Products, workspace: Workspace) -> None:
        self.inputs, self.products = inputs, products
        self.biases = weights.bias
        self.input_w = weights.input_w
        self.recurrent_w = products.each(weights.state_w)
        self.projection_w = products.each(weights.projection_w)
        _, dim, proj = weights.shape
        directions = len(weights.input_w)
        self.out = inputs.new_empty(directions, rows.n_packed, proj)
        self.step_out = self.out.split(rows.batch_sizes, dim=1)  # (D, sizes[t], P) views, one per step
        offsets = rows.offsets
        widest = max((offsets[b] - offsets[a] for a, b in rows.gate_blocks(INPUT_GATE_CHUNK_ROWS)), default=0)
        self.gates = workspace.buffer("gates", (directions, widest, 4 * dim), inputs)

    def inputs_to_gates(self, a: int, b: int) -> torch.Tensor:
        block = self.gates[:, : b - a]
        for d, w in enumerate(self.input_w):
            self.products.mm(self.inputs[d, a:b], w, self.biases[d], out=block[d])
        return block

    def recurrent(self, gates: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return self.recurrent_w.addmm_(gates, h)

    def project(self, hidden: torch.Tensor, t: int) -> torch.Tensor:
        return self.projection_w.mm_out(hidden, out=self.step_out[t])

    def outputs(self, steps: list[torch.Tensor]) -> torch.Tensor:
        return self.out


def _previous_class(row_class: int) -> int:
    """The largest row count of the class below ``row_class`` (0 for the first)."""
    index = ROW_CLASSES.index(row_class)
    return ROW_CLASSES[index - 1] if index else 0


def _rows_label(row_class: int) -> str:
    return f"<={row_class}" if row_class < ROW_CLASSES[-1] else f">{ROW_CLASSES[-2]}"


class Inference:
    """The products of an execution plan, in place, no autograd (see the module docstring)."""

    name, differentiable, inplace, fused_conv, gate_chunk_rows = "inference", False, True, True, INPUT_GATE_CHUNK_ROWS

    def __init__(self, plan: ExecutionPlan) -> None:
        self.plan, self.products, self.workspace = plan, Products(plan), Workspace()

    def __repr__(self) -> str:
        return f"Inference({self.plan.summary()})"

    def steps(self, weights: LevelWeights, inputs: torch.Tensor, rows: PackedRows) -> InferenceSteps:
        return InferenceSteps(weights, inputs, rows, self.products, self.workspace)

    @contextlib.contextmanager
    def directions(self, rows: PackedRows, shape: tuple[int, int, int], device: torch.device) -> Iterator[str]:
        """How a level of ``shape`` (:attr:`LevelWeights.shape`) runs its two directions over ``rows``
        (``"together"`` or ``"apart"``), for the ``with`` block that runs it; an autotuned plan times
        the block (per packed row) while it measures the orders."""
        if self.plan.directions != "autotune":
            yield self.plan.directions
            return
        if device.type != "cpu":
            yield "together"
            return
        order, timed = autotune.directions(rows.batch, shape, self.products.dtype)
        start = time.perf_counter()
        yield order
        if timed is not None:
            timed((time.perf_counter() - start) / max(rows.n_packed, 1))

    def explain(self, weights: dict[str, torch.Tensor], level: LevelWeights) -> dict:
        """The plan as it applies to a model: per product weight (by name) and row class the kernel (and
        precision) its products run with (``bmm``: a time step's products of both directions batched),
        and per row class the directions' order. Decided by the same calls the products make (an
        autotuned plan measures what it has not measured yet)."""
        products, table = self.products, []
        step = {level.state_w[0].data_ptr(), level.projection_w[0].data_ptr()}
        for name, w in weights.items():
            for rows in ROW_CLASSES:
                x = torch.zeros(rows, w.shape[1], device="cpu" if w.is_meta else w.device)  # meta: released to int8
                exact = products.runs_exact(x, w)
                runs = products.exact if exact else products
                kernel = runs.kernel(x, w)
                batched = runs.each([w, w]).max_batched_rows if w.data_ptr() in step else 0
                if batched >= rows:
                    kernel = "bmm"
                elif batched > _previous_class(rows):  # the class's smaller steps run batched
                    kernel = f"bmm to {batched} rows, else {kernel}"
                lowered = products.quantizes(w) or not exact and products.dtype is not None
                precision = self.plan.precision if lowered else DEFAULT.name
                table.append({"product": name, "weight": list(w.shape), "rows": _rows_label(rows), "kernel": kernel,
                              "precision": precision})
        shape, orders = level.shape, {}
        for rows in ROW_CLASSES:
            if self.plan.directions != "autotune":
                orders[rows] = self.plan.directions
            else:
                entry = autotune.directions_entry(rows, shape, products.dtype)
                orders[rows] = autotune.MEASURED.lookup(entry) or "measured on the first calls"
        return {"plan": self.plan.summary(), "products": table,
                "directions": {_rows_label(r): order for r, order in orders.items()}}
