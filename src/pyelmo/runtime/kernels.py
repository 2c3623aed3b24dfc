"""The kernels of ``x @ W^T``: each one small class, one precision, on ``W`` prepared once for it.

- :class:`TorchMM`: ``torch.mm`` on ``W^T`` (a view of ``W``);
- :class:`OneDNN`: oneDNN's linear with ``W`` prepacked in its blocked layout;
- both in float32 (exact) or bfloat16 (inputs and weights; float32 sums, a bfloat16 result);
- :class:`Int8`: int8 inputs (per row) and weights (per output channel), int32 sums, a float32 result.

Each has ``prepare(w)``, ``product(x, prepared, bias)`` (its own result precision), ``run`` (float32, into
``out``) and ``addmm_`` (``acc += x W^T``). Which kernel runs which product is the execution plan's
(:class:`pyelmo.runtime.products.Products`); the planned linears (:mod:`pyelmo.runtime.linear`) run them
on their prepared weights. A new kernel is a new class here and its entry in :data:`KERNEL_CLASSES`.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Callable

import torch


#: oneDNN's products of up to this many rows run unpadded (the fixed rule's, :data:`pyelmo.runtime.plan.ONEDNN_MAX_ROWS`).
ONEDNN_EXACT_ROWS = 64


@functools.lru_cache(maxsize=4096)
def onednn_rows(rows: int) -> int:
    """``rows`` rounded up to one of a few sizes (exact to :data:`ONEDNN_EXACT_ROWS`, then steps of ~12.5%,
    multiples of 8): oneDNN compiles and keeps a kernel per input shape, so padding the rows bounds its memory."""
    size = rows if rows <= ONEDNN_EXACT_ROWS else ONEDNN_EXACT_ROWS
    while size < rows:
        size = max(size + 8, math.ceil(size * 1.125 / 8) * 8)
    return size


def int8_weights(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``W (out, in)`` quantized to int8 per output channel (symmetric: each row's scale is its largest
    magnitude / 127), two zero columns appended (where :func:`int8_linear`'s inputs carry their range):
    ``(int8 (out, in + 2), float64 scales (out,))``, the numbers :func:`pack_int8` packs."""
    if w.is_meta:
        raise RuntimeError("this weight is an int8 planned linear's placeholder (only its int8 copy is kept): "
                           "it cannot be packed again")
    w = torch.nn.functional.pad(w.detach().float(), (0, 2))
    scales = (w.abs().amax(dim=1).clamp_min(torch.finfo(torch.float32).tiny) / 127).double()
    with warnings.catch_warnings():  # PyTorch marks its quantized tensors as deprecated; their kernels are the ones here
        warnings.simplefilter("ignore")
        q = torch.quantize_per_channel(w, scales, torch.zeros(w.shape[0], dtype=torch.long), 0, torch.qint8)
        return q.int_repr(), scales


def pack_int8(q: torch.Tensor, scales: torch.Tensor) -> object:
    """:func:`int8_weights`' numbers packed for the quantized engine's dynamic linear (``quantized::linear_dynamic``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zeros = torch.zeros(q.shape[0], dtype=torch.long)
        return torch.ops.quantized.linear_prepack(torch._make_per_channel_quantized_tensor(q, scales, zeros, 0), None)


def quantize_int8(w: torch.Tensor) -> object:
    """``W (out, in)`` quantized (:func:`int8_weights`) and packed (:func:`pack_int8`)."""
    return pack_int8(*int8_weights(w))


@functools.lru_cache(maxsize=2)
def _input_range(reduce_range: bool) -> torch.Tensor:
    """``[-1, top]``: the range every int8 input row spans, on which the engine's zero point is a level (zero
    stays exact) and +1 one too: ``levels`` steps of ``1 / k`` (7 bits with ``reduce_range``, else 8)."""
    levels = 127 if reduce_range else 255
    return torch.tensor([-1.0, (levels - levels // 2) / (levels // 2)])


def int8_linear(x: torch.Tensor, packed: object, reduce_range: bool, bias: torch.Tensor | None = None,
                out: torch.Tensor | None = None, accumulate: bool = False) -> torch.Tensor:
    """``x @ W^T (+ bias)`` on a :func:`quantize_int8`-packed ``W``, int32 sums, a float32 result (``reduce_range``:
    7-bit inputs, see :func:`pyelmo.runtime.plan.int8_engine`), into ``out`` (or added to it: ``accumulate``).

    The engine quantizes its input per tensor, on the tensor's range. Each row is scaled to largest magnitude
    1 (and its result back), and the two columns that are zero in ``W`` hold :func:`_input_range`'s bounds in
    every row: the range is the same whatever the rows, so each row is quantized on its own scale, never the
    batch's (a sentence's vectors do not depend on which sentences share its batch)."""
    scale = x.abs().amax(dim=1, keepdim=True).clamp_min_(torch.finfo(torch.float32).tiny)
    scaled = torch.cat((x / scale, _input_range(reduce_range).expand(x.shape[0], 2)), dim=1)
    y = torch.ops.quantized.linear_dynamic(scaled, packed, reduce_range)
    if accumulate:
        return out.addcmul_(y, scale)
    target = y if out is None else out
    return torch.mul(y, scale, out=target) if bias is None else torch.addcmul(bias, y, scale, out=target)


def fix_blas_threads() -> None:
    """Fix the thread count of the BLAS library behind ``torch.mm`` and ``bmm`` (MKL) at PyTorch's: until
    ``torch.set_num_threads`` is called, MKL's dynamic threading picks a count per call at run time, and a
    one-row product's sums then differ from process to process (seen on Intel Xeons). Setting the count
    PyTorch already has turns that off and changes nothing else."""
    torch.set_num_threads(torch.get_num_threads())


def init_vector_math() -> None:
    """Make MKL's first vector-math call here, in this thread alone. ``torch.tanh`` on float CPU tensors is MKL's
    ``vmsTanh``, which ATen runs on the OpenMP threads from 2048 elements on; when two threads made their first
    calls at once, the first call of one could run a less accurate tanh (5e-5 off, on an Intel Xeon with AVX-512
    FP16), and a sentence's vectors then differed from process to process. One element runs in this thread only."""
    torch.tanh(torch.zeros(1))


class Kernel:
    """``x @ W^T`` in one precision (``dtype``: ``None`` exact float32, or ``torch.bfloat16``)."""

    def __init__(self, dtype: torch.dtype | None = None) -> None:
        self.dtype = dtype

    def cast(self, w: torch.Tensor) -> torch.Tensor:
        """``w`` detached, in this kernel's precision."""
        return w.detach() if self.dtype is None else w.detach().to(self.dtype)

    def prepare(self, w: torch.Tensor) -> object:
        raise NotImplementedError

    def product(self, x: torch.Tensor, prepared, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ W^T`` in the kernel's result precision: float32 with ``bias``, or bfloat16 (``bias`` not added)."""
        raise NotImplementedError

    def run(self, x: torch.Tensor, prepared, bias: torch.Tensor | None = None,
            out: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ W^T (+ bias)`` as float32 (into ``out``)."""
        y = self.product(x, prepared, bias)
        if self.dtype is None:
            return y if out is None else out.copy_(y)
        # the bfloat16 result to float32, then the bias added in float32 (a mixed-precision add is slower)
        y = y.float() if out is None else out.copy_(y)
        return y if bias is None else y.add_(bias)

    def addmm_(self, acc: torch.Tensor, x: torch.Tensor, prepared) -> torch.Tensor:
        """``acc += x @ W^T`` (a bfloat16 result is added in float32)."""
        return acc.add_(self.product(x, prepared))


class TorchMM(Kernel):
    """``torch.mm`` on ``W^T``, a view of ``W``."""

    def prepare(self, w: torch.Tensor) -> torch.Tensor:
        return self.cast(w).t()

    def product(self, x, prepared, bias=None):
        if self.dtype is None:
            return x @ prepared if bias is None else torch.addmm(bias, x, prepared)
        return x.to(self.dtype) @ prepared

    def run(self, x, prepared, bias=None, out=None):
        if out is not None and self.dtype is None:
            return torch.mm(x, prepared, out=out) if bias is None else torch.addmm(bias, x, prepared, out=out)
        return super().run(x, prepared, bias, out)

    def addmm_(self, acc, x, prepared):
        return acc.addmm_(x, prepared) if self.dtype is None else super().addmm_(acc, x, prepared)


class OneDNN(Kernel):
    """oneDNN's linear on ``W`` prepacked; the rows padded to a few sizes (:func:`onednn_rows`)."""

    def prepare(self, w: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._reorder_linear_weight(self.cast(w), 32)

    def product(self, x, prepared, bias=None):
        rows, padded = x.shape[0], onednn_rows(x.shape[0])
        if padded != rows:  # a few shapes only: oneDNN keeps a compiled kernel per shape
            x = torch.cat([x, x.new_zeros(padded - rows, x.shape[1])])
        x = (x if self.dtype is None else x.to(self.dtype)).contiguous()
        exact_bias = bias if self.dtype is None else None
        return torch.ops.mkldnn._linear_pointwise(x, prepared, exact_bias, "none", [], "")[:rows]


class Int8(Kernel):
    """:func:`int8_linear` on :func:`quantize_int8`'s ``W`` (``reduce_range``: the engine's 7-bit inputs)."""

    def __init__(self, reduce_range: bool) -> None:
        super().__init__(None)
        self.reduce_range = reduce_range

    def prepare(self, w: torch.Tensor) -> object:
        return quantize_int8(w)

    def product(self, x, prepared, bias=None):
        return int8_linear(x, prepared, self.reduce_range, bias)

    def run(self, x, prepared, bias=None, out=None):
        return int8_linear(x, prepared, self.reduce_range, bias, out)

    def addmm_(self, acc, x, prepared):
        return int8_linear(x, prepared, self.reduce_range, out=acc, accumulate=True)


#: The kernels by name, each made for a path's precision (``dtype``: ``None`` exact float32, or
#: ``torch.bfloat16``; ``reduce_range``: the int8 engine's 7-bit inputs), as
#: :meth:`pyelmo.runtime.products.Products.kernels` makes them.
KERNEL_CLASSES: dict[str, Callable[[torch.dtype | None, bool], Kernel]] = {
    "mm": lambda dtype, reduce_range: TorchMM(dtype),
    "onednn": lambda dtype, reduce_range: OneDNN(dtype),
    "int8": lambda dtype, reduce_range: Int8(reduce_range),
}
