"""Which kernel runs each product, as an execution plan says, and what ran.

- ``PLAIN`` (``Products()``): ``torch`` products on the parameters themselves, differentiable
  (training, the reference path); ``Products(trained_linear=cls)``: differentiable, with ``cls`` the module
  training swaps in for the token encoder's ``nn.Linear`` s (``train.products = "onednn"``:
  :class:`pyelmo.runtime.training_linear.PrepackedTrainingLinear`), which also runs its fused convolution's product;
- ``Products(plan)``: the choices of an :class:`~pyelmo.runtime.plan.ExecutionPlan`, shared by the planned
  linears swapped into a model (:mod:`pyelmo.runtime.linear`): the precision of each weight
  (:meth:`Products.precision_of`), the kernel of each product's row class (:meth:`Products.kernel`: exact
  ``torch.mm`` on ``W`` or a copy of ``W^T``, or oneDNN with ``W`` prepacked; bfloat16; int8), and what
  ran (:attr:`Products.decisions`). The token encoder's fused convolution, which is no ``nn.Linear``, runs
  as a planned linear of its derived weight (:meth:`Products.derived`, kept while the convolutions are unchanged).

The kernels themselves (each one small class, one precision) are :mod:`pyelmo.runtime.kernels`.
"""

from __future__ import annotations

import functools
import weakref
from typing import Callable

import torch

from pyelmo.runtime.kernels import KERNEL_CLASSES, Kernel
from pyelmo.runtime.plan import KERNELS, ExecutionPlan, row_class
from pyelmo.runtime.precision import int8_engine
from pyelmo.runtime.precision import DEFAULT

class Products:
    """``Products()``: differentiable ``torch`` products (``trained_linear``: the module class training swaps in);
    ``Products(plan)``: ``plan``'s choices for the planned linears of a model and its fused convolution (see
    the module docstring).

    :attr:`decisions` records the kernel each shape class ran with, so what ran can be compared with
    the printed plan. The weights :meth:`weight` and :meth:`derived` prepare (the fused convolution's,
    a planned copy of a model) are kept while their parameters are unchanged (in-place update, reload,
    ``.to()`` make them anew).
    """

    def __init__(self, plan: ExecutionPlan | None = None, trained_linear: type[torch.nn.Module] | None = None) -> None:
        if plan is not None and trained_linear is not None:
            raise ValueError("a trained linear is a differentiable products' choice, not a plan's")
        self.plan, self.trained_linear = plan, trained_linear
        self.dtype = plan.dtype if plan is not None else None
        self.onednn = plan is not None and plan.onednn
        #: int8 mode: the products with large weights (:meth:`ExecutionPlan.quantized`) run on int8 weights
        self.int8 = plan is not None and plan.spec.quantizes
        self.int8_reduce_range = self.int8 and int8_engine() != "qnnpack"  # the engine's, decided once
        self.decisions: dict[tuple[int, tuple[int, int]], str] = {}
        self._weights: dict[tuple, tuple[weakref.ref, tuple, torch.Tensor]] = {}
        self._derived: dict[int, tuple[weakref.ref, tuple, object]] = {}

    @property
    def differentiable(self) -> bool:
        return self.plan is None

    @property
    def forced(self) -> bool:
        """Whether one kernel runs every product (no batching of the directions' step products)."""
        return self.plan is not None and self.plan.kernels in KERNELS

    def __repr__(self) -> str:
        trained = f", trained_linear={self.trained_linear.__name__}" if self.trained_linear else ""
        return f"Products({self.plan}{trained})"

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
        if self.plan is None or x.device.type != "cpu" or x.dtype != torch.float32:
            return "mm"
        key = (row_class(x.shape[0]), tuple(w.shape))
        chosen = self.decisions.get(key)
        if chosen is None:
            if self.plan.quantized(key[1]):
                chosen = self.plan.spec.quantized_kernel
            elif self.dtype is not None:  # oneDNN's bfloat16 products need the CPU's bfloat16 instructions
                chosen = "onednn" if self.onednn and self.plan.spec.onednn and self.plan.spec.onednn() else "mm"
            else:
                chosen = self.plan.kernel(x.shape[0], key[1])
            self.decisions[key] = chosen
        return chosen

    @functools.cached_property
    def kernels(self) -> dict[str, Kernel]:
        """The kernels by name, in this path's precision (:mod:`pyelmo.runtime.kernels`)."""
        return {name: make(self.dtype, self.int8_reduce_range) for name, make in KERNEL_CLASSES.items()}

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

    def mm(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
           out: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ w.T (+ bias)`` as float32 (``w`` as stored in a ``Linear``: ``(out, in)``), into ``out`` if given."""
        kernel = self.kernel(x, w)
        return self.kernels[kernel].run(x, self.weight(w, kernel), bias, out)

    def mm_native(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``x @ w.T`` of the differentiable products (:meth:`mm`); a plan's run through its planned linear's
        ``native`` (:func:`pyelmo.runtime.swap.weight_product`)."""
        return self.mm(x, w)


#: Plain differentiable ``torch`` products on the parameters themselves (training, the reference path).
PLAIN = Products()


