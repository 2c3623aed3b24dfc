"""How the biLM's matrix products run: the pluggable product implementation of an execution strategy.

:class:`Products` computes ``x @ W^T`` for the modules (``encoder.py``, ``lstm.py``):

- ``PLAIN``: ``torch`` products on the parameters themselves, differentiable (training,
  the reference path);
- ``Products()``: exact float32, each product through one of the :data:`KERNELS`
  (``torch.mm`` on the weight as stored, ``torch.mm`` on a contiguous copy of ``W^T``,
  oneDNN with the weight prepacked once into its blocked layout) chosen per shape class:
  measured on this machine at first use and cached on disk (``"auto"``, :class:`pyelmo.runtime.autotune.MeasuredChoices`),
  the fixed rule (``"fixed"``), or one kernel forced; only the order of the sums differs
  between them; no autograd;
- ``Products(torch.bfloat16)``: bfloat16 inputs and weights, float32 sums and outputs: an
  explicit reduced-precision mode (outputs differ by about 0.5% of their largest value),
  chosen only on CPUs with bfloat16 instructions (:func:`usable_bf16`).

Small same-shaped products of several weights on their own rows (the two directions of an LSTM
level at one time step) run as one batched product (:class:`EachDirection`,
:data:`BATCHED_MAX_WORK`).

:func:`conv_max_gemm` is the character CNN's kernel for the inference strategy: every
convolution width in one product.
"""

from __future__ import annotations

import functools
import math
import warnings
import weakref
from typing import Callable

import torch
import torch.nn.functional as F

import pyelmo.runtime.autotune as kernelchoice
from pyelmo.modeling.characters import PAD_CHAR
from pyelmo.runtime.autotune import KERNELS, MEASURE_ROWS, kernel_policy, onednn_available, row_class

PAD_ID = PAD_CHAR + 1  # the padding character's id (ids are shifted by +1)
#: Same-shaped products on one set of rows each (the two directions of a biLM level at one time
#: step) of at most this many multiply-adds each run as one batched product on their weights
#: stacked, when no kernel is forced: per-call overhead, not arithmetic, dominates them (the small
#: model's batch-1 LSTM step: 1 x 128 -> 4096 and 1 x 1024 -> 128). Larger ones run one by one
#: through their chosen kernels (and the original model's big weights are not copied again).
BATCHED_MAX_WORK = 2**22


@functools.lru_cache(maxsize=1)
def bf16_supported() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX512-BF16/AVX512BW, AMX or AVX-NE-CONVERT).

    Without it, bfloat16 products run hundreds of times slower than float32 (0.3 against
    135 GFLOP/s measured on an AVX2-only AMD EPYC), so the bfloat16 modes fall back to
    exact float32 there.
    """
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def usable_bf16(requested: bool) -> bool:
    """``requested``, unless this CPU lacks bfloat16 instructions: then a warning and ``False``."""
    if requested and not bf16_supported():
        warnings.warn("bfloat16 ignored: this CPU has no bfloat16 matrix instructions (AVX512-BF16, AMX or "
                      "AVX-NE-CONVERT), where it would be far slower than float32; computing in exact float32",
                      RuntimeWarning, stacklevel=3)
        return False
    return requested


@functools.lru_cache(maxsize=4096)
def onednn_rows(rows: int) -> int:
    """``rows`` rounded up to one of a few sizes (exact to 16, then steps of ~12.5%, multiples of 8).

    oneDNN compiles and keeps a kernel for every input shape it sees (about 0.6 MB each
    here), so products of freely varying row counts would grow the process's memory with
    every new length; padding the rows to these sizes bounds it.
    """
    size = rows if rows <= 16 else 16
    while size < rows:
        size = max(size + 8, math.ceil(size * 1.125 / 8) * 8)
    return size


class Products:
    """``x @ W^T`` for the modules: exact float32, or with bfloat16 inputs and weights.

    Float32 on CPU: each product runs through one of the :data:`KERNELS`, chosen per shape
    class (row class, weight shape) by ``kernels`` (default ``$PYELMO_KERNELS``, else
    ``"auto"``): ``"auto"`` times the available kernels on the product's own weight once
    (:func:`measure_kernels`, a few ms per class) and keeps the fastest in
    :data:`MEASURED` (on disk, per CPU and PyTorch version); ``"fixed"`` is the rule used
    before measuring existed (oneDNN when available for products of at least
    ``ONEDNN_MIN_WORK`` multiply-adds, else ``torch.mm``); a kernel's name forces it for
    every product. All are exact float32: only the order of the sums differs.
    ``onednn=False`` forces ``torch.mm`` (``kernels="mm"``), ``onednn=True`` the fixed rule.
    With ``dtype=torch.bfloat16``, products run on bfloat16 inputs and weights, through
    oneDNN when available; with ``"auto"``, shape classes measured faster in float32 run exact (:meth:`runs_exact`).

    Prepared weights (transposed, packed and/or cast to bfloat16, and any :meth:`derived`
    weight) are made once per parameter, kept by this object while the parameter lives,
    and remade when it changes (in-place update, reload, ``.to()``). ``differentiable``:
    only ``torch`` products on the parameters themselves (``PLAIN``), which autograd can follow.
    """

    def __init__(self, dtype: torch.dtype | None = None, onednn: bool | None = None,
                 kernels: str | None = None) -> None:
        self.dtype = dtype
        if kernels is None and onednn is not None:
            kernels = "fixed" if onednn else "mm"
        self.policy = kernel_policy(kernels)
        self.onednn = self.policy != "mm" and onednn_available()
        self._weights: dict[tuple, tuple[weakref.ref, tuple, torch.Tensor]] = {}
        self._derived: dict[int, tuple[weakref.ref, tuple, object]] = {}
        self._chosen: dict[tuple, str] = {}

    @property
    def differentiable(self) -> bool:
        return self.dtype is None and self.policy == "mm"

    def __repr__(self) -> str:
        return f"Products(dtype={self.dtype}, kernels={self.policy!r})"

    def derived(self, owner: torch.nn.Module, build: Callable[[], object]) -> object:
        """``build()``'s result for ``owner`` (e.g. its weights rearranged), kept until its parameters change."""
        key = tuple((p.data_ptr(), p._version, p.device) for p in owner.parameters())
        cached = self._derived.get(id(owner))
        if cached is None or cached[0]() is not owner or cached[1] != key:
            with torch.inference_mode(False), torch.no_grad():  # normal tensors: their versions are tracked
                cached = (weakref.ref(owner), key, build())
            self._derived[id(owner)] = cached
        return cached[2]

    @functools.cached_property
    def exact(self) -> Products:
        """The exact float32 products with this object's kernel policy (what :meth:`runs_exact` hands products to)."""
        return Products(None, kernels=self.policy)

    def runs_exact(self, x: torch.Tensor, w: torch.Tensor) -> bool:
        """In the bfloat16 mode with the ``"auto"`` policy: whether ``x @ w.T`` runs as exact float32
        instead, because bfloat16 measured slower for its shape class here (:func:`kernelchoice.precision`)."""
        if self.dtype is None or self.policy != "auto" or x.device.type != "cpu" or x.dtype != torch.float32:
            return False
        key = ("precision", row_class(x.shape[0]), w.shape)
        chosen = self._chosen.get(key) or self._chosen.setdefault(key, kernelchoice.precision(self, key[1], w))
        return chosen == "float32"

    def kernel(self, x: torch.Tensor, w: torch.Tensor) -> str:
        """The kernel that computes ``x @ w.T`` (see the class docstring)."""
        if x.device.type != "cpu" or x.dtype != torch.float32:
            return "mm"
        if self.dtype is not None:
            return "onednn" if self.onednn else "mm"
        if self.policy in KERNELS:
            return self.policy
        rows = row_class(x.shape[0])
        chosen = self._chosen.get((rows, w.shape))
        if chosen is None:
            if self.policy == "fixed":
                chosen = kernelchoice.fixed_kernel(x.shape[0], w)
            else:
                entry = f"threads={torch.get_num_threads()} rows={rows} weight={w.shape[0]}x{w.shape[1]}"
                chosen = kernelchoice.MEASURED.get(
                    entry, lambda: kernelchoice.measure_kernels(self, MEASURE_ROWS[rows], w))
            self._chosen[(rows, w.shape)] = chosen
        return chosen

    def prepare(self, w: torch.Tensor, kernel: str) -> torch.Tensor:
        """``w`` in this path's precision as ``kernel`` takes it: ``W^T`` (a view for ``mm``, a
        contiguous copy for ``mm_t``) or prepacked for oneDNN. Not kept: see :meth:`weight`."""
        prepared = w.detach() if self.dtype is None else w.detach().to(self.dtype)
        if kernel == "onednn":
            return torch.ops.mkldnn._reorder_linear_weight(prepared, 32)
        return prepared.t().contiguous() if kernel == "mm_t" else prepared.t()

    def weight(self, w: torch.Tensor, kernel: str) -> torch.Tensor:
        """:meth:`prepare`'s ``w`` for ``kernel``, made once and kept while ``w`` is unchanged."""
        if kernel == "mm" and self.dtype is None:
            return w.t()  # the parameter itself: autograd follows it (PLAIN)
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

    def product(self, kernel: str, x: torch.Tensor, prepared: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ W^T`` through ``kernel`` on its :meth:`prepare`'d weight, in this path's precision:
        float32 with ``bias`` added, or the bfloat16 mode's bfloat16 result (``bias`` not added)."""
        if kernel == "onednn":
            rows, padded = x.shape[0], onednn_rows(x.shape[0])
            if padded != rows:  # a few shapes only: oneDNN keeps a compiled kernel per shape
                x = torch.cat([x, x.new_zeros(padded - rows, x.shape[1])])
            x = (x if self.dtype is None else x.to(self.dtype)).contiguous()
            exact_bias = bias if self.dtype is None else None
            return torch.ops.mkldnn._linear_pointwise(x, prepared, exact_bias, "none", [], "")[:rows]
        if self.dtype is None:
            return x @ prepared if bias is None else torch.addmm(bias, x, prepared)
        return x.to(self.dtype) @ prepared

    def run(self, kernel: str, x: torch.Tensor, prepared: torch.Tensor,
            bias: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ W^T (+ bias)`` as float32 through ``kernel``, on its :meth:`prepare`'d weight (into ``out``)."""
        if out is not None and self.dtype is None and kernel != "onednn":
            return torch.mm(x, prepared, out=out) if bias is None else torch.addmm(bias, x, prepared, out=out)
        y = self.product(kernel, x, prepared, bias)
        if self.dtype is None:
            return y if out is None else out.copy_(y)
        # the bfloat16 result to float32, then the bias added in float32 (a mixed-precision add is slower)
        y = y.float() if out is None else out.copy_(y)
        return y if bias is None else y.add_(bias)

    def mm(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
           out: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ w.T (+ bias)`` as float32 (``w`` as stored in a ``Linear``: ``(out, in)``), into ``out`` if given."""
        if self.runs_exact(x, w):
            return self.exact.mm(x, w, bias, out)
        kernel = self.kernel(x, w)
        return self.run(kernel, x, self.weight(w, kernel), bias, out)

    def mm_native(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``x @ w.T`` in the products' own result precision: bfloat16 in the bfloat16 mode, else
        as :meth:`mm`. For results that are only compared (a max commutes with the exact
        bfloat16 -> float32 conversion), so the conversion runs on the fewer values that are kept."""
        if self.dtype is None or self.runs_exact(x, w):
            return (self if self.dtype is None else self.exact).mm(x, w)
        kernel = self.kernel(x, w)
        return self.product(kernel, x, self.weight(w, kernel))

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
        if self.dtype is None and kernel != "onednn":
            return acc.addmm_(x, self.weight(w, kernel))
        return acc.add_(self.product(kernel, x, self.weight(w, kernel)))  # a bfloat16 result is added in float32


class EachDirection:
    """``x[d] @ weights[d].T`` for every direction ``d`` (``x (D, n, in)``) at each step of a time loop.

    Made once per loop: the weights' stacked ``W^T`` is looked up once, not at every step. Steps
    of at most :data:`BATCHED_MAX_WORK` multiply-adds per direction run as one batched product on
    it (float32, no kernel forced); larger ones run per direction through their chosen kernels.
    Steps that the bfloat16 mode runs exact (:meth:`Products.runs_exact`) go through ``exact``'s.
    """

    def __init__(self, products: Products, weights: list[torch.Tensor]) -> None:
        self.products, self.weights = products, weights
        batches = products.dtype is None and products.policy not in KERNELS and weights[0].dtype == torch.float32
        self.max_batched_rows = BATCHED_MAX_WORK // weights[0].numel() if batches else 0
        self.stacked = products.stacked(weights) if self.max_batched_rows else None
        self.exact = products.exact.each(weights) if products.dtype is not None and products.policy == "auto" else None

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
PLAIN = Products(None, onednn=False)


def padded_conv_weights(convolutions: torch.nn.ModuleList) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int, int]]]:
    """All convolution filters zero-padded to the widest: ``W (n_filters, widest * emb)`` in
    ``[offset, emb]`` order, the biases, and ``(first column, end column, width)`` of each filter group."""
    widest = max(conv.kernel_size[0] for conv in convolutions)
    blocks, groups, start = [], [], 0
    for conv in convolutions:
        n, _, w = conv.weight.shape  # (n, emb, w)
        blocks.append(F.pad(conv.weight, (0, widest - w)))
        groups.append((start, start + n, w))
        start += n
    weight = torch.cat(blocks).transpose(1, 2).reshape(start, -1).contiguous()
    return weight, torch.cat([conv.bias for conv in convolutions]), groups


def conv_max_gemm(char_embedding: torch.nn.Embedding, convolutions: torch.nn.ModuleList, char_ids: torch.Tensor,
                  products: Products) -> torch.Tensor:
    """Every convolution's max over positions (bias included, before the activation): ``(N, C) -> (N, n_filters)``.

    One product ``windows (N * positions, widest * emb) @ W^T`` gives every filter's
    response at every window start; each filter group's max runs over its valid starts
    ``0 .. C - width`` (the zero-padded tail is left out), and the bias comes after the
    max (it commutes with it). Windows that start after the rows' last
    non-padding character hold padding characters only: they all give one response per
    filter, computed once instead of at each of those starts.
    """
    weight, bias, groups = products.derived(convolutions, lambda: padded_conv_weights(convolutions))
    n_tokens, n_chars = char_ids.shape
    emb = char_embedding.embedding_dim
    widest = weight.shape[1] // emb
    # window starts computed one by one: 0 .. (the last non-padding character of any row)
    positions = torch.arange(1, n_chars + 1, device=char_ids.device)
    starts = max(int((char_ids.ne(PAD_ID) * positions).amax()) if n_tokens else 0, 1)
    kept = min(n_chars, starts + widest - 1)  # the characters those windows read; zeros after the row's end
    chars = F.pad(char_embedding(char_ids[:, :kept]), (0, 0, 0, starts + widest - 1 - kept))
    windows = chars.unfold(1, widest, 1).transpose(2, 3).reshape(n_tokens * starts, widest * emb)
    responses = products.mm_native(windows, weight).view(n_tokens, starts, -1)  # bfloat16 in the bfloat16 mode
    padding_window = char_embedding.weight[PAD_ID].repeat(widest)[None]  # (1, widest * emb)
    padding_response = products.mm_native(padding_window, weight)[0]
    if starts <= n_chars - widest:  # every filter's windows are valid, and some hold padding only: one max
        # (under autograd ``max``, whose backward scatters to the argmax, rather than ``amax``'s tie masks)
        pooled = responses.max(dim=1).values if responses.requires_grad else responses.amax(dim=1)
        return torch.maximum(pooled, padding_response).float() + bias
    pooled = []
    for a, b, w in groups:
        group = responses[:, : min(starts, n_chars - w + 1), a:b].amax(dim=1)
        if starts <= n_chars - w:  # some valid windows hold padding only
            group = torch.maximum(group, padding_response[a:b])
        pooled.append(group)
    return torch.cat(pooled, dim=1).float() + bias
