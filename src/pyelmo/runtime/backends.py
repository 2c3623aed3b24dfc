"""The backends of the biLM's one time loop (:func:`pyelmo.modeling.lstm.run_lstm`): what differs
between training and inference, passed in the run options, never detected.

- :class:`Differentiable`: every step makes new tensors that autograd follows; ``torch`` products
  (or training's :class:`~pyelmo.runtime.training_products.TrainingProducts`), both directions'
  step products batched; the input-to-gate products of all steps in one product.
- :class:`Inference`: no autograd; the products of an execution plan with prepared weights; the
  loop writes into buffers kept from call to call; the plan says whether a level's two directions
  run together or one after the other.

A loop's products (:class:`DifferentiableSteps`, :class:`InferenceSteps`) are made per level:
``input_gates(a, b)`` (packed rows ``a:b``, bias included), ``recurrent(gates, h)`` (``gates + h Ws^T``)
and ``project(hidden, t)`` (``hidden W_P^T``, step ``t``'s outputs), then ``outputs(steps)``.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Protocol, Sequence

import torch

from pyelmo.runtime import autotune
from pyelmo.runtime.plan import ROW_CLASSES, ExecutionPlan
from pyelmo.runtime.products import PLAIN, Products
from pyelmo.runtime.rows import PackedRows

#: Packed rows (token positions of one direction) per input-to-gate product in the inference loop.
INPUT_GATE_CHUNK_ROWS = 512
#: A level's layers, and a function that runs them over packed rows: ``(layers, inputs, rows, h, c, backend)``.
RunLevel = Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


class Backend(Protocol):
    name: str
    differentiable: bool
    inplace: bool
    fused_conv: bool
    gate_chunk_rows: int | None
    products: Products

    def steps(self, layers: Sequence[torch.nn.Module], inputs: torch.Tensor, rows: PackedRows): ...

    def run_level(self, run: RunLevel, pair: Sequence[torch.nn.Module], x: torch.Tensor, rows: PackedRows,
                  h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


def _stacked_t(weights: list[torch.Tensor]) -> torch.Tensor:
    """``(D, in, out)``: each ``W^T``, stacked (differentiable)."""
    return torch.stack(weights).transpose(1, 2)


class DifferentiableSteps:
    """A differentiable loop's products: new tensors each step, both directions in one ``bmm``."""

    def __init__(self, layers: Sequence[torch.nn.Module], inputs: torch.Tensor) -> None:
        self.inputs = inputs
        self.input_w = _stacked_t([layer.input_gates.weight for layer in layers])
        self.bias = torch.stack([layer.gate_bias() for layer in layers])[:, None]
        self.state_w = _stacked_t([layer.state_gates.weight for layer in layers])
        self.projection_w = _stacked_t([layer.projection.weight for layer in layers])

    def input_gates(self, a: int, b: int) -> torch.Tensor:
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

    def steps(self, layers: Sequence[torch.nn.Module], inputs: torch.Tensor, rows: PackedRows) -> DifferentiableSteps:
        return DifferentiableSteps(layers, inputs)

    def run_level(self, run: RunLevel, pair, x, rows, h, c):
        return run(pair, x, rows, h, c, self)


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

    def __init__(self, layers: Sequence[torch.nn.Module], inputs: torch.Tensor, rows: PackedRows,
                 products: Products, workspace: Workspace) -> None:
        self.inputs, self.products = inputs, products
        self.biases = [layer.gate_bias() for layer in layers]
        self.input_w = [layer.input_gates.weight for layer in layers]
        self.recurrent_w = products.each([layer.state_gates.weight for layer in layers])
        self.projection_w = products.each([layer.projection.weight for layer in layers])
        dim, proj = layers[0].dim, layers[0].projection_dim
        self.out = inputs.new_empty(len(layers), rows.n_packed, proj)
        self.step_out = self.out.split(rows.batch_sizes, dim=1)  # (D, sizes[t], P) views, one per step
        offsets = rows.offsets
        widest = max((offsets[b] - offsets[a] for a, b in rows.gate_blocks(INPUT_GATE_CHUNK_ROWS)), default=0)
        self.gates = workspace.buffer("gates", (len(layers), widest, 4 * dim), inputs)

    def input_gates(self, a: int, b: int) -> torch.Tensor:
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

    def steps(self, layers: Sequence[torch.nn.Module], inputs: torch.Tensor, rows: PackedRows) -> InferenceSteps:
        return InferenceSteps(layers, inputs, rows, self.products, self.workspace)

    def directions(self, rows: int, layer: torch.nn.Module) -> tuple[str, Callable[[float], None] | None]:
        """How a level's two directions run for a batch of ``rows`` rows, and (autotune, while measuring)
        a function that takes the call's cost."""
        if self.plan.directions != "autotune":
            return self.plan.directions, None
        if layer.state_gates.weight.device.type != "cpu":
            return "together", None
        shape = (layer.input_gates.in_features, layer.dim, layer.projection_dim)
        return autotune.directions(rows, shape, self.products.dtype)

    def explain(self, weights: dict[str, torch.Tensor], layer: torch.nn.Module) -> dict:
        """The plan as it applies to a model: per product weight (by name) and row class the kernel (and
        precision) its products run with (``bmm``: a time step's products of both directions batched),
        and per row class the directions' order. Decided by the same calls the products make (an
        autotuned plan measures what it has not measured yet)."""
        products, table = self.products, []
        step = {layer.state_gates.weight.data_ptr(), layer.projection.weight.data_ptr()}
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
                precision = ("int8" if products.quantizes(w) else
                             "float32" if exact or products.dtype is None else "bfloat16")
                table.append({"product": name, "weight": list(w.shape), "rows": _rows_label(rows), "kernel": kernel,
                              "precision": precision})
        shape = (layer.input_gates.in_features, layer.dim, layer.projection_dim)
        orders = {}
        for rows in ROW_CLASSES:
            if self.plan.directions != "autotune":
                orders[rows] = self.plan.directions
            else:
                entry = autotune.directions_entry(rows, shape, products.dtype)
                orders[rows] = autotune.MEASURED.lookup(entry) or "measured on the first calls"
        return {"plan": self.plan.summary(), "products": table,
                "directions": {_rows_label(r): order for r, order in orders.items()}}

    def run_level(self, run: RunLevel, pair, x, rows, h, c):
        """``run`` over both directions at once, or one after the other, as :meth:`directions` says."""
        order, timed = self.directions(rows.batch, pair[0])
        start = time.perf_counter()
        if order == "together":
            result = run(pair, x, rows, h, c, self)
        else:
            each = [run([layer], x[d : d + 1], rows, h[d : d + 1], c[d : d + 1], self) for d, layer in enumerate(pair)]
            result = tuple(torch.cat(parts) for parts in zip(*each))
        if timed is not None:
            timed((time.perf_counter() - start) / max(rows.n_packed, 1))
        return result
