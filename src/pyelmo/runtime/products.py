"""How the biLM's matrix products run: ``x @ W^T`` for the modules, as an execution plan says.

- ``PLAIN`` (``Products()``): ``torch`` products on the parameters themselves, differentiable
  (training, the reference path);
- ``Products(plan)``: the inference products of an :class:`~pyelmo.runtime.plan.ExecutionPlan`: exact
  float32 through the kernel the plan gives each shape (``torch.mm`` on ``W`` or a copy of ``W^T``,
  or oneDNN with ``W`` prepacked), or bfloat16 inputs and weights with float32 sums, or (int8) the
  products with the weights the plan names on int8 copies of them and int8 inputs; no autograd.

The kernels themselves (each one small class, one precision) are :mod:`pyelmo.runtime.kernels`; here is
which of them runs each product, the weights prepared for them and kept, and what ran (:attr:`Products.decisions`).

Small same-shaped products of several weights on their own rows (the two directions of an LSTM
level at one time step) run as one batched product (:class:`EachDirection`).
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import replace
from typing import Callable

import torch
import torch.nn.functional as F

from pyelmo.runtime import autotune
from pyelmo.runtime.kernels import Int8, Kernel, OneDNN, TorchMM
from pyelmo.runtime.kernels import int8_linear, onednn_rows, quantize_int8  # noqa: F401 (their old home)
from pyelmo.runtime.plan import KERNELS, ExecutionPlan, int8_engine, row_class
from pyelmo.runtime.precision import DEFAULT

#: Same-shaped step products of at most this many multiply-adds each (the two directions of a
#: level at one time step) run as one batched product on their weights stacked, when no kernel is
#: forced: per-call overhead, not arithmetic, dominates them. Larger ones run one by one.
BATCHED_MAX_WORK = 2**22


class Products:
    """``x @ W^T`` for the modules: ``Products()`` differentiable ``torch`` products, ``Products(plan)``
    the inference products of ``plan`` (see the module docstring).

    Prepared weights (transposed, packed and/or cast to bfloat16, and any :meth:`derived` weight)
    are made once per parameter, kept while the parameter lives, and remade when it changes
    (in-place update, reload, ``.to()``). :attr:`decisions` records the kernel each shape class
    ran with, so what ran can be compared with the printed plan.
    """

    def __init__(self, plan: ExecutionPlan | None = None) -> None:
        self.plan = plan
        self.dtype = plan.dtype if plan is not None else None
        self.onednn = plan is not None and plan.onednn
        #: int8 mode: the products with large weights (:meth:`ExecutionPlan.quantized`) run on int8 weights
        self.int8 = plan is not None and plan.spec.quantizes
        self.int8_reduce_range = self.int8 and int8_engine() != "qnnpack"  # the engine's, decided once
        self.decisions: dict[tuple[int, tuple[int, int]], str] = {}
        self._weights: dict[tuple, tuple[weakref.ref, tuple, torch.Tensor]] = {}
        self._derived: dict[int, tuple[weakref.ref, tuple, object]] = {}
        self._precisions: dict[tuple, str] = {}

    @property
    def differentiable(self) -> bool:
        return self.plan is None

    @property
    def forced(self) -> bool:
        """Whether one kernel runs every product (no batching of the directions' step products)."""
        return self.plan is not None and self.plan.kernels in KERNELS

    def __repr__(self) -> str:
        return f"Products({self.plan})"

    def derived(self, owner: torch.nn.Module, build: Callable[[], object]) -> object:
        """``build()``'s result for ``owner`` (e.g. its weights rearranged), kept until its parameters change;
        differentiable products rebuild it under autograd at every call."""
        if self.differentiable:
            return build()
        key = tuple((p.data_ptr(), p._version, p.device) for p in owner.parameters())
        cached = self._derived.get(id(owner))
        if cached is None or cached[0]() is not owner or cached[1] != key:
            with torch.inference_mode(False), torch.no_grad():  # normal tensors: their versions are tracked
                cached = (weakref.ref(owner), key, build())
            self._derived[id(owner)] = cached
        return cached[2]

    @functools.cached_property
    def exact(self) -> Products:
        """The exact float32 products of this plan's kernel rule (where the bfloat16 mode hands products)."""
        return Products(replace(self.plan, precision=DEFAULT.name))

    def quantizes(self, w: torch.Tensor) -> bool:
        """Whether the products with ``w`` run in int8 (the plan's :meth:`ExecutionPlan.quantized`)."""
        return self.int8 and self.plan.quantized(tuple(w.shape))

    def release(self, w: torch.nn.Parameter, packed: object | None = None) -> torch.nn.Parameter:
        """int8 mode: pack the weight ``w`` now (or take it ``packed``: :mod:`pyelmo.runtime.int8_cache`) and return
        a placeholder without storage (a ``meta`` tensor of its shape) for the caller to put in its place, so that
        the int8 copy is the only one in memory. The products keep running on the packed weight through the
        placeholder."""
        if not self.quantizes(w):
            raise ValueError("only the weights that the int8 products quantize can be released")
        packed = self.prepare(w, self.plan.spec.quantized_kernel) if packed is None else packed
        placeholder = torch.nn.Parameter(torch.empty(w.shape, device="meta"), requires_grad=False)
        self._weights[(id(placeholder), self.plan.spec.quantized_kernel)] = (weakref.ref(placeholder), (0, 0), packed)
        return placeholder

    def runs_exact(self, x: torch.Tensor, w: torch.Tensor) -> bool:
        """In the bfloat16 mode of an autotuned plan: whether ``x @ w.T`` runs as exact float32 instead,
        because bfloat16 measured slower for its shape class here."""
        if self.dtype is None or not self.plan.autotune or x.device.type != "cpu" or x.dtype != torch.float32:
            return False
        key = (row_class(x.shape[0]), tuple(w.shape))
        if key not in self._precisions:
            self._precisions[key] = autotune.precision(self, key[0], w)
        return self._precisions[key] == DEFAULT.name

    def kernel(self, x: torch.Tensor, w: torch.Tensor) -> str:
        """The kernel that computes ``x @ w.T``: the plan's (measured under autotune)."""
        if self.plan is None or x.device.type != "cpu" or x.dtype != torch.float32:
            return "mm"
        key = (row_class(x.shape[0]), tuple(w.shape))
        chosen = self.decisions.get(key)
        if chosen is None:
            if self.plan.quantized(key[1]):
                chosen = self.plan.spec.quantized_kernel
            elif self.dtype is not None:  # oneDNN's bfloat16 products need the CPU's bfloat16 instructions
                chosen = "onednn" if self.onednn and self.plan.spec.onednn and self.plan.spec.onednn() else "mm"
            elif self.plan.autotune:
                chosen = autotune.kernel(self, key[0], w)
            else:
                chosen = self.plan.kernel(x.shape[0], key[1])
            self.decisions[key] = chosen
        return chosen

    @functools.cached_property
    def kernels(self) -> dict[str, Kernel]:
        """The kernels by name, in this path's precision (:mod:`pyelmo.runtime.kernels`)."""
        return {"mm": TorchMM(self.dtype), "mm_t": TorchMM(self.dtype, copy=True), "onednn": OneDNN(self.dtype),
                "int8": Int8(self.int8_reduce_range)}

    def prepare(self, w: torch.Tensor, kernel: str) -> object:
        """``w`` as ``kernel`` takes it, in this path's precision. Not kept: see :meth:`weight`."""
        return self.kernels[kernel].prepare(w)

    def weight(self, w: torch.Tensor, kernel: str) -> torch.Tensor:
        """:meth:`prepare`'s ``w`` for ``kernel``, made once and kept while ``w`` is unchanged."""
        if kernel == "mm" and self.dtype is None:
            return w.t()  # the parameter itself: autograd follows it
        key = (w.data_ptr(), w._version)  # a new dtype, device or shape means new storage
        cached = self._weights.get((id(w), kernel))
        if cached is None or cached[0]() is not w or cached[1] != key:
            cached = (weakref.ref(w), key, self.prepare(w, kernel))
            self._weights[(id(w), kernel)] = cached
        return cached[2]

    def stacked(self, weights: list[torch.Tensor]) -> torch.Tensor:
        """``(len(weights), in, out)``: each weight's ``W^T``, stacked contiguous for one batched product;
        made once and kept while the weights are unchanged."""
        key = tuple((w.data_ptr(), w._version) for w in weights)
        slot = (*(id(w) for w in weights), "stacked")
        cached = self._weights.get(slot)
        if cached is None or cached[0]() is not weights[0] or cached[1] != key:
            cached = (weakref.ref(weights[0]), key, torch.stack([w.detach().t() for w in weights]).contiguous())
            self._weights[slot] = cached
        return cached[2]

    def each(self, weights: list[torch.Tensor]) -> EachDirection:
        """The products ``x[d] @ weights[d].T`` of every direction ``d`` in a time loop (:class:`EachDirection`)."""
        return EachDirection(self, weights)

    def product(self, kernel: str, x: torch.Tensor, prepared, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ W^T`` through ``kernel`` in its result precision (:meth:`pyelmo.runtime.kernels.Kernel.product`)."""
        return self.kernels[kernel].product(x, prepared, bias)

    def run(self, kernel: str, x: torch.Tensor, prepared, bias: torch.Tensor | None = None,
            out: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ W^T (+ bias)`` as float32 through ``kernel``, on its :meth:`prepare`'d weight (into ``out``)."""
        return self.kernels[kernel].run(x, prepared, bias, out)

    def mm(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
           out: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ w.T (+ bias)`` as float32 (``w`` as stored in a ``Linear``: ``(out, in)``), into ``out`` if given."""
        if self.runs_exact(x, w):
            return self.exact.mm(x, w, bias, out)
        kernel = self.kernel(x, w)
        return self.kernels[kernel].run(x, self.weight(w, kernel), bias, out)

    def mm_native(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``x @ w.T`` in the products' own result precision: bfloat16 in the bfloat16 mode, else
        as :meth:`mm`. For results that are only compared (a max commutes with the exact
        bfloat16 -> float32 conversion), so the conversion runs on the fewer values that are kept."""
        if self.dtype is None or self.runs_exact(x, w):
            return (self if self.dtype is None else self.exact).mm(x, w)
        kernel = self.kernel(x, w)
        return self.kernels[kernel].product(x, self.weight(w, kernel))

    def linear(self, x: torch.Tensor, layer: torch.nn.Linear) -> torch.Tensor:
        """``layer(x)`` through these products."""
        if self.differentiable:
            return F.linear(x, layer.weight, layer.bias)
        return self.mm(x, layer.weight, layer.bias)

    def addmm_(self, acc: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``acc += x @ w.T``."""
        if self.runs_exact(x, w):
            return self.exact.addmm_(acc, x, w)
        kernel = self.kernel(x, w)
        return self.kernels[kernel].addmm_(acc, x, self.weight(w, kernel))


class EachDirection:
    """``x[d] @ weights[d].T`` for every direction ``d`` (``x (D, n, in)``) at each step of a time loop.

    Made once per loop: the weights' stacked ``W^T`` is looked up once, not at every step. Steps
    of at most :data:`BATCHED_MAX_WORK` multiply-adds per direction run as one batched product on
    it (float32, no kernel forced); larger ones run per direction through their chosen kernels.
    Steps that the bfloat16 mode runs exact (:meth:`Products.runs_exact`) go through ``exact``'s.
    """

    def __init__(self, products: Products, weights: list[torch.Tensor]) -> None:
        self.products, self.weights = products, weights
        batches = (products.dtype is None and not products.forced and not products.quantizes(weights[0])
                   and weights[0].dtype == torch.float32)
        self.max_batched_rows = BATCHED_MAX_WORK // weights[0].numel() if batches else 0
        self.stacked = products.stacked(weights) if self.max_batched_rows else None
        self.exact = products.exact.each(weights) if products.dtype is not None and products.plan.autotune else None

    def runs_exact(self, x: torch.Tensor) -> bool:
        return self.exact is not None and self.products.runs_exact(x[0], self.weights[0])  # x (D, n, in)

    def batched(self, rows: int) -> bool:
        """Whether a step of ``rows`` rows runs as one batched product."""
        return rows <= self.max_batched_rows

    def addmm_(self, acc: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``acc[d] += x[d] @ weights[d].T`` for each ``d`` (``acc (D, n, out)``)."""
        if self.runs_exact(x):
            return self.exact.addmm_(acc, x)
        if self.batched(x.shape[1]):
            return acc.baddbmm_(x, self.stacked)
        for d, w in enumerate(self.weights):
            self.products.addmm_(acc[d], x[d], w)
        return acc

    def mm_out(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``out[d] = x[d] @ weights[d].T`` for each ``d`` (``out (D, n, out)``)."""
        if self.runs_exact(x):
            return self.exact.mm_out(x, out)
        if self.batched(x.shape[1]):
            return torch.bmm(x, self.stacked, out=out)
        for d, w in enumerate(self.weights):
            self.products.mm(x[d], w, out=out[d])
        return out


#: Plain differentiable ``torch`` products on the parameters themselves (training, the reference path).
PLAIN = Products()


