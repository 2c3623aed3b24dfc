"""Which kernel runs each product, as an execution plan says, and what ran.

``Products(plan)``: the choices of an :class:`~pyelmo.runtime.plan.ExecutionPlan`, shared by the planned
linears swapped into a model (:mod:`pyelmo.runtime.linear`): the precision of each weight
(:meth:`Products.precision_of`), the kernel of each product's row class (:meth:`Products.kernel`: exact
``torch.mm`` on ``W`` or oneDNN with ``W`` prepacked; bfloat16; int8), and what ran (:attr:`Products.decisions`).
The token encoder's fused convolution, which is no ``nn.Linear``, runs as a planned linear of its derived
weight (:meth:`Products.derived`, kept while the convolutions are unchanged).

The kernels themselves (each one small class, one precision) are :mod:`pyelmo.runtime.kernels`.
"""

from __future__ import annotations

import functools
import weakref
from typing import Callable

import torch

from pyelmo.runtime.kernels import KERNEL_CLASSES, Kernel, fix_blas_threads, init_vector_math
from pyelmo.runtime.plan import ExecutionPlan, row_class
from pyelmo.runtime.precision import DEFAULT, int8_engine


class Products:
    """``plan``'s choices for the planned linears of a model and its fused convolution (see the module docstring).

    :attr:`decisions` records the kernel each shape class ran with, so what ran can be compared with
    the printed plan. What :meth:`derived` builds (the fused convolution's planned product) is kept while
    its owner's parameters are unchanged (in-place update, reload, ``.to()`` make it anew).
    """

    def __init__(self, plan: ExecutionPlan) -> None:
        self.plan = plan
        self.dtype = plan.dtype
        self.onednn = plan.onednn
        #: int8 mode: the products with large weights (:meth:`ExecutionPlan.quantized`) run on int8 weights
        self.int8 = plan.spec.quantizes
        self.int8_reduce_range = self.int8 and int8_engine() != "qnnpack"  # the engine's, decided once
        self.decisions: dict[tuple[int, tuple[int, int]], str] = {}
        self._derived: dict[int, tuple[weakref.ref, tuple, object]] = {}
        fix_blas_threads()  # the plan's torch products: the same sums in every process
        init_vector_math()  # and the same tanh

    def __repr__(self) -> str:
        return f"Products({self.plan})"

    def derived(self, owner: torch.nn.Module, build: Callable[[], object]) -> object:
        """``build()``'s result for ``owner`` (e.g. its weights rearranged), kept until its parameters change."""
        key = tuple((p.data_ptr(), p._version, p.device) for p in owner.parameters())
        cached = self._derived.get(id(owner))
        if cached is None or cached[0]() is not owner or cached[1] != key:
            with torch.inference_mode(False), torch.no_grad():  # normal tensors: their versions are tracked
                cached = (weakref.ref(owner), key, build())
            self._derived[id(owner)] = cached
        return cached[2]

    def quantizes(self, w: torch.Tensor) -> bool:
        """Whether the products with ``w`` run in int8 (the plan's :meth:`ExecutionPlan.quantized`)."""
        return self.int8 and self.plan.quantized(tuple(w.shape))

    def precision_of(self, w: torch.Tensor) -> str:
        """The precision the products with ``w`` run in: ``int8`` (:meth:`quantizes`), ``bfloat16`` or ``float32``
        (the name of their planned linear class, :data:`pyelmo.runtime.linear.PLANNED`)."""
        lowered = self.quantizes(w) or self.dtype is not None
        return self.plan.precision if lowered else DEFAULT.name

    def kernel(self, x: torch.Tensor, w: torch.Tensor) -> str:
        """The kernel that computes ``x @ w.T``: the plan's."""
        if x.device.type != "cpu" or x.dtype != torch.float32:
            return "mm"
        key = (row_class(x.shape[0]), tuple(w.shape))
        chosen = self.decisions.get(key)
        if chosen is None:
            if self.plan.quantized(key[1]):
                chosen = self.plan.spec.quantized_kernel
            elif self.dtype is not None:  # oneDNN's bfloat16 products need the CPU's bfloat16 instructions
                chosen = "onednn" if self.onednn and self.plan.spec.onednn and self.plan.spec.onednn() else "mm"
            else:
                chosen = self.plan.kernel(key[0], key[1])  # one kernel per row class
            self.decisions[key] = chosen
        return chosen

    @functools.cached_property
    def kernels(self) -> dict[str, Kernel]:
        """The kernels by name, in this path's precision (:mod:`pyelmo.runtime.kernels`)."""
        return {name: make(self.dtype, self.int8_reduce_range) for name, make in KERNEL_CLASSES.items()}

    def prepare(self, w: torch.Tensor, kernel: str) -> object:
        """``w`` as ``kernel`` takes it, in this path's precision (a planned linear keeps it)."""
        return self.kernels[kernel].prepare(w)
