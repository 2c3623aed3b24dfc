"""How the biLM's matrix products run: the pluggable product implementation of an execution strategy.

:class:`Products` computes ``x @ W^T`` for the modules (``encoder.py``, ``lstm.py``):

- ``PLAIN``: ``torch`` products on the parameters themselves, differentiable (training,
  the reference path);
- ``Products()``: exact float32, each product through one of the :data:`KERNELS`
  (``torch.mm`` on the weight as stored, ``torch.mm`` on a contiguous copy of ``W^T``,
  oneDNN with the weight prepacked once into its blocked layout) chosen per shape class:
  measured on this machine at first use and cached on disk (``"auto"``, :class:`MeasuredChoices`),
  the fixed rule (``"fixed"``), or one kernel forced; only the order of the sums differs
  between them; no autograd;
- ``Products(torch.bfloat16)``: bfloat16 inputs and weights, float32 sums and outputs: an
  explicit reduced-precision mode (outputs differ by about 0.5% of their largest value),
  chosen only on CPUs with bfloat16 instructions (:func:`usable_bf16`).

:func:`conv_max_gemm` is the character CNN's kernel for the inference strategy: every
convolution width in one product.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import platform
import time
import warnings
import weakref
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from pyelmo.characters import PAD_CHAR
from pyelmo.errors import ConfigError

PAD_ID = PAD_CHAR + 1  # the padding character's id (ids are shifted by +1)
#: Products of fewer multiply-adds (rows x weight size) run faster with plain ``torch.mm``:
#: oneDNN's per-call overhead dominates them (e.g. one row through the small model's projection).
ONEDNN_MIN_WORK = 2**18


def onednn_available() -> bool:
    """Whether this PyTorch build has oneDNN's prepacked-weight linear (x86 and arm CPU builds do)."""
    try:
        return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
                and hasattr(torch.ops.mkldnn, "_linear_pointwise"))
    except (AttributeError, RuntimeError):
        return False


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


# -- the runtime kernel choice --------------------------------------------------------------
#: The exact float32 product implementations: ``torch.mm`` on ``W`` as stored (a transposed
#: operand), ``torch.mm`` on a contiguous copy of ``W^T`` kept once, and oneDNN with ``W``
#: prepacked once into its blocked layout. Which is fastest depends on the CPU, the thread
#: count and the shape: on an AVX2 AMD EPYC oneDNN ran the LSTM's batch-32 products at 2-4x
#: ``torch.mm``, on an AMX Xeon it was no faster, and for one row ``torch.mm`` on ``W^T`` often wins.
KERNELS = ("mm", "mm_t", "onednn")
#: How the kernels are chosen: measured here and cached (``auto``), the fixed rule, or one kernel for all.
KERNEL_POLICIES = ("auto", "fixed", *KERNELS)
#: The environment variable that sets the policy when none is passed (default ``auto``).
KERNELS_ENV = "PYELMO_KERNELS"
#: A product of ``rows`` rows belongs to the first class >= rows (the last class for more rows).
ROW_CLASSES = (1, 8, 64, 256)
#: The rows each class is measured at (the largest at 128 rows, to keep measuring cheap).
MEASURE_ROWS = {1: 1, 8: 8, 64: 64, 256: 128}
#: Timed calls per kernel and shape class: at least 2 and at most ``MEASURE_CALLS``; rounds stop
#: once ``MEASURE_SECONDS`` have passed. The fastest call counts (robust to a busy machine).
MEASURE_CALLS, MEASURE_SECONDS = 6, 0.03
#: Another kernel replaces the fixed rule's (:func:`fixed_kernel`) only if measured this much faster.
MEASURE_MARGIN = 0.1


def kernel_policy(name: str | None = None) -> str:
    """``name``, else ``$PYELMO_KERNELS``, else ``"auto"``; checked (:class:`ConfigError` if unknown)."""
    name = name or os.environ.get(KERNELS_ENV) or "auto"
    if name not in KERNEL_POLICIES:
        raise ConfigError(f"kernel policy must be one of {', '.join(KERNEL_POLICIES)} (${KERNELS_ENV}), got {name!r}")
    if name == "onednn" and not onednn_available():
        raise ConfigError("oneDNN kernels were asked for, but this PyTorch build has no oneDNN")
    return name


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """This CPU's model name and a short hash of its feature flags (e.g. ``AMD EPYC [3f2a...]``)."""
    name, flags = "", ""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = (part.strip() for part in line.partition(":"))
            if key in ("model name", "Hardware") and not name:
                name = value
            elif key in ("flags", "Features") and not flags:
                flags = value
    except OSError:
        pass
    name = name or platform.processor() or platform.machine() or "unknown CPU"
    return f"{name} [{hashlib.sha1(flags.encode()).hexdigest()[:12]}]" if flags else name


def machine_key() -> dict[str, str]:
    """What a measured choice holds for: this CPU and this PyTorch."""
    return {"cpu": cpu_model(), "torch": torch.__version__}


def kernel_cache_path() -> Path:
    """The measured choices: ``$PYELMO_KERNEL_CACHE/choices.json`` or ``~/.cache/pyelmo/kernels/choices.json``."""
    from pyelmo.paths import user_cache_dir

    return user_cache_dir("kernels", "PYELMO_KERNEL_CACHE") / "choices.json"


def read_choices(path: Path, key: dict[str, str]) -> dict[str, str]:
    """The choices stored at ``path`` for ``key``; none if the file is missing, unreadable,
    corrupt, or measured on another CPU or PyTorch."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or any(data.get(k) != v for k, v in key.items()):
        return {}
    choices = data.get("choices")
    return {k: v for k, v in choices.items() if v in KERNELS} if isinstance(choices, dict) else {}


class MeasuredChoices:
    """The measured kernel per shape class on this machine: once per process, kept on disk.

    Entries are keyed by thread count, row class and weight shape; the file also holds the
    :func:`machine_key`, and a file measured on another CPU or PyTorch is ignored and
    replaced. It is written atomically; if it cannot be written the choices hold for this
    process only.
    """

    def __init__(self) -> None:
        self._key: dict[str, str] | None = None
        self._choices: dict[str, str] = {}

    def get(self, entry: str, measure: Callable[[], str]) -> str:
        """The stored choice for ``entry``, else ``measure()``'s, stored."""
        key = machine_key()
        if key != self._key:
            self._key, self._choices = key, read_choices(kernel_cache_path(), key)
        if entry not in self._choices:
            self._choices[entry] = measure()
            self._save()
        return self._choices[entry]

    def _save(self) -> None:
        from pyelmo.fileio import write_json_atomic

        path = kernel_cache_path()
        merged = {**read_choices(path, self._key), **self._choices}  # keep what other processes measured
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, {**self._key, "choices": dict(sorted(merged.items()))})
        except OSError:
            pass


#: This process's measured choices.
MEASURED = MeasuredChoices()


def row_class(rows: int) -> int:
    """The row class of a product of ``rows`` rows (see :data:`ROW_CLASSES`)."""
    for size in ROW_CLASSES:
        if rows <= size:
            return size
    return ROW_CLASSES[-1]


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
    oneDNN when available.

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
        self._weights: dict[tuple[int, str], tuple[weakref.ref, tuple, torch.Tensor]] = {}
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
                chosen = fixed_kernel(x.shape[0], w)
            else:
                entry = f"threads={torch.get_num_threads()} rows={rows} weight={w.shape[0]}x{w.shape[1]}"
                chosen = MEASURED.get(entry, lambda: measure_kernels(self, MEASURE_ROWS[rows], w))
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

    def run(self, kernel: str, x: torch.Tensor, prepared: torch.Tensor,
            bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ W^T (+ bias)`` as float32 through ``kernel``, on its :meth:`prepare`'d weight."""
        if kernel == "onednn":
            rows, padded = x.shape[0], onednn_rows(x.shape[0])
            if padded != rows:  # a few shapes only: oneDNN keeps a compiled kernel per shape
                x = torch.cat([x, x.new_zeros(padded - rows, x.shape[1])])
            x = (x if self.dtype is None else x.to(self.dtype)).contiguous()
            exact_bias = bias if self.dtype is None else None
            y = torch.ops.mkldnn._linear_pointwise(x, prepared, exact_bias, "none", [], "")[:rows]
            if self.dtype is None:
                return y
        elif self.dtype is None:
            return x @ prepared if bias is None else torch.addmm(bias, x, prepared)
        else:
            y = x.to(self.dtype) @ prepared
        y = y.float()
        return y if bias is None else y.add_(bias)

    def mm(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ w.T (+ bias)`` as float32 (``w`` as stored in a ``Linear``: ``(out, in)``)."""
        kernel = self.kernel(x, w)
        return self.run(kernel, x, self.weight(w, kernel), bias)

    def linear(self, x: torch.Tensor, layer: torch.nn.Linear) -> torch.Tensor:
        """``layer(x)`` through these products."""
        if self.differentiable:
            return F.linear(x, layer.weight, layer.bias)
        return self.mm(x, layer.weight, layer.bias)

    def _torch_kernel(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor | None:
        """``W^T`` when ``x @ w.T`` runs as a float32 ``torch`` product (``out=`` works), else ``None``."""
        kernel = self.kernel(x, w)
        return self.weight(w, kernel) if self.dtype is None and kernel != "onednn" else None

    def addmm(self, bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``out = bias + x @ w.T``."""
        wt = self._torch_kernel(x, w)
        if wt is not None:
            return torch.addmm(bias, x, wt, out=out)
        return out.copy_(self.mm(x, w, bias))

    def addmm_(self, acc: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``acc += x @ w.T``."""
        wt = self._torch_kernel(x, w)
        if wt is not None:
            return acc.addmm_(x, wt)
        return acc.add_(self.mm(x, w))

    def mm_out(self, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``out = x @ w.T``."""
        wt = self._torch_kernel(x, w)
        if wt is not None:
            return torch.mm(x, wt, out=out)
        return out.copy_(self.mm(x, w))


def time_kernels(products: Products, rows: int, w: torch.Tensor) -> dict[str, float]:
    """Seconds of each available float32 kernel for ``rows`` rows times ``w.T`` on this machine, now.

    Each kernel runs on ``w`` itself (prepared for it, then dropped) and random inputs, in
    interleaved rounds after one warm-up round; each kernel's fastest call counts.
    """
    candidates = [k for k in KERNELS if k != "onednn" or onednn_available()]
    with torch.no_grad():
        x = torch.randn(rows, w.shape[1])
        prepared = {k: products.prepare(w, k) for k in candidates}
        best = dict.fromkeys(candidates, math.inf)
        start = time.perf_counter()
        for calls in range(MEASURE_CALLS + 1):
            for k in candidates:
                began = time.perf_counter()
                products.run(k, x, prepared[k])
                if calls:
                    best[k] = min(best[k], time.perf_counter() - began)
            if calls >= 2 and time.perf_counter() - start > MEASURE_SECONDS:
                break
    return best


def fixed_kernel(rows: int, w: torch.Tensor) -> str:
    """The fixed rule: oneDNN (when available) for products of at least ``ONEDNN_MIN_WORK`` multiply-adds."""
    return "onednn" if onednn_available() and rows * w.numel() >= ONEDNN_MIN_WORK else "mm"


def measure_kernels(products: Products, rows: int, w: torch.Tensor) -> str:
    """The fastest float32 kernel for ``rows`` rows times ``w.T`` here (:func:`time_kernels`); the fixed
    rule's kernel unless another is at least ``MEASURE_MARGIN`` faster (near-ties are measuring noise)."""
    return choose_kernel(time_kernels(products, rows, w), rows, w)


def choose_kernel(seconds: dict[str, float], rows: int, w: torch.Tensor) -> str:
    """The kernel to keep given each kernel's ``seconds``: see :func:`measure_kernels`."""
    fastest, default = min(seconds, key=seconds.__getitem__), fixed_kernel(rows, w)
    return fastest if seconds[fastest] < (1 - MEASURE_MARGIN) * seconds[default] else default


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
    responses = products.mm(windows, weight).view(n_tokens, starts, -1)
    padding_window = char_embedding.weight[PAD_ID].repeat(widest)[None]  # (1, widest * emb)
    padding_response = products.mm(padding_window, weight)[0]
    if starts <= n_chars - widest:  # every filter's windows are valid, and some hold padding only: one max
        # (under autograd ``max``, whose backward scatters to the argmax, rather than ``amax``'s tie masks)
        pooled = responses.max(dim=1).values if responses.requires_grad else responses.amax(dim=1)
        return torch.maximum(pooled, padding_response) + bias
    pooled = []
    for a, b, w in groups:
        group = responses[:, : min(starts, n_chars - w + 1), a:b].amax(dim=1)
        if starts <= n_chars - w:  # some valid windows hold padding only
            group = torch.maximum(group, padding_response[a:b])
        pooled.append(group)
    return torch.cat(pooled, dim=1) + bias


# -- autograd-capable products (training) ---------------------------------------------------
class _PrepackedLinear(torch.autograd.Function):
    """``x @ W^T (+ b)`` through oneDNN with prepacked weights, forward and backward.

    The forward multiplies by ``W`` packed for oneDNN, the backward's ``grad @ W`` by ``W^T``
    packed the same way (both kept by the :class:`TrainingProducts` until ``W`` changes: once
    per optimizer step); ``W``'s gradient ``grad^T @ x`` is one ``torch.mm``.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,  # type: ignore[override]
                products: TrainingProducts) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        ctx.products, ctx.has_bias = products, bias is not None
        return products.prepacked_mm(x, products.weight(w, "onednn"), bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        x, w = ctx.saved_tensors
        products: TrainingProducts = ctx.products
        grad = grad.contiguous()
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = products.prepacked_mm(grad, products.transposed_weight(w), None)
        if ctx.needs_input_grad[1]:
            grad_w = grad.t().mm(x)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad.sum(0)
        return grad_x, grad_w, grad_b, None


class TrainingProducts(Products):
    """Differentiable products for training with the plain strategy: the same math as ``PLAIN``,
    run faster.

    - the character convolutions of all widths as one product (:func:`conv_max_gemm`, with
      its weights rebuilt under autograd at every call), instead of one ``Conv1d`` per width
      over every character position: only the windows that read a character are computed;
    - the plain strategy runs each LSTM level's two directions in one time loop over packed
      rows (:func:`run_pair_differentiable`, batched ``torch`` products);
    - ``onednn=True``: the token encoder's products through oneDNN with prepacked weights,
      forward and backward (:class:`_PrepackedLinear`); the packing is redone when a weight
      changes, once per optimizer step. ``False``: ``torch`` products (MKL).

    Values and gradients equal ``PLAIN``'s up to the order of float32 sums.
    """

    def __init__(self, onednn: bool = False) -> None:
        super().__init__(None, onednn=onednn and onednn_available())
        self._transposed: dict[int, tuple[weakref.ref, tuple, torch.Tensor]] = {}

    @property
    def differentiable(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"TrainingProducts(onednn={self.onednn})"

    def derived(self, owner: torch.nn.Module, build: Callable[[], object]) -> object:
        """``build()`` under autograd at every call: the gradient flows back to ``owner``'s parameters."""
        return build()

    def _uses_onednn(self, x: torch.Tensor, w: torch.Tensor) -> bool:
        # under bfloat16 autocast the products stay with torch, which autocast casts
        return not torch.is_autocast_enabled(x.device.type) and self.onednn and self.kernel(x, w) == "onednn"

    def transposed_weight(self, w: torch.Tensor) -> torch.Tensor:
        """``w^T`` prepacked for oneDNN, kept until ``w`` changes."""
        key = (w.data_ptr(), w._version)
        cached = self._transposed.get(id(w))
        if cached is None or cached[0]() is not w or cached[1] != key:
            with torch.no_grad():
                packed = torch.ops.mkldnn._reorder_linear_weight(w.detach().t().contiguous(), 32)
            cached = (weakref.ref(w), key, packed)
            self._transposed[id(w)] = cached
        return cached[2]

    @staticmethod
    def prepacked_mm(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """``x @ W^T (+ bias)`` with ``W`` prepacked, rows padded to :func:`onednn_rows` sizes."""
        rows, padded = x.shape[0], onednn_rows(x.shape[0])
        if padded != rows:
            x = torch.cat([x, x.new_zeros(padded - rows, x.shape[1])])
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")[:rows]

    def mm(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ w.T (+ bias)``, differentiable."""
        if self._uses_onednn(x, w):
            return _PrepackedLinear.apply(x, w, bias, self)
        return x @ w.t() if bias is None else torch.addmm(bias, x, w.t())

    def linear(self, x: torch.Tensor, layer: torch.nn.Linear) -> torch.Tensor:
        """``layer(x)``, differentiable."""
        if not self.onednn:
            return F.linear(x, layer.weight, layer.bias)
        return self.mm(x.reshape(-1, x.shape[-1]), layer.weight, layer.bias).view(*x.shape[:-1], -1)


def packed_positions(batch_sizes: list[int], steps: int, device: torch.device) -> torch.Tensor:
    """Flat ``row * steps + t`` index of each packed position, time-major: step ``t``'s first
    ``batch_sizes[t]`` rows (sorted by descending length), then step ``t + 1``'s."""
    sizes = torch.tensor(batch_sizes, device=device)
    step = torch.repeat_interleave(torch.arange(len(batch_sizes), device=device), sizes)
    starts = torch.cumsum(sizes, 0) - sizes
    return (torch.arange(len(step), device=device) - starts[step]) * steps + step


def run_pair_differentiable(pair: Sequence[torch.nn.Module], x: torch.Tensor, batch_sizes: list[int],
                            h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The forward and backward ``LstmWithProjection`` of one level in one differentiable time loop.

    The same function as running each layer's ``forward`` (the layers' own
    :meth:`~pyelmo.lstm.LstmWithProjection.cell`, ``gate_bias`` and clipping), with fewer, larger
    operations for autograd to record: both directions in each step's products (``bmm`` over
    the two directions' weights) and gate nonlinearities, packed rows (the input-to-gate
    products of all running positions in one product, split per step as views; no padding).

    ``x (2, B, T, in)``: each direction's inputs, rows sorted by descending length;
    ``batch_sizes[t]``: rows running at step ``t``; ``h (2, B, P)``, ``c (2, B, H)``: initial
    states. Returns outputs ``(2, B, T, P)`` (zero past each row's end) and each row's final
    ``h``, ``c``.
    """
    layer = pair[0]
    _, batch, steps, _ = x.shape
    index = packed_positions(batch_sizes, steps, x.device)
    inputs = x.reshape(2, batch * steps, -1)[:, index]  # (2, n_packed, in)
    input_w = torch.stack([lay.input_gates.weight for lay in pair]).transpose(1, 2)  # (2, in, 4H)
    state_w = torch.stack([lay.state_gates.weight for lay in pair]).transpose(1, 2)  # (2, P, 4H)
    projection_w = torch.stack([lay.projection.weight for lay in pair]).transpose(1, 2)  # (2, H, P)
    bias = torch.stack([lay.gate_bias() for lay in pair])[:, None]  # (2, 1, 4H)
    input_gates = torch.baddbmm(bias, inputs, input_w).split(batch_sizes, dim=1)  # per step (2, n, 4H)
    outputs, ended_h, ended_c = [], [], []
    for t, n in enumerate(batch_sizes):
        if n < h.shape[1]:  # the last rows have ended: keep their final states
            ended_h.append(h[:, n:])
            ended_c.append(c[:, n:])
            h, c = h[:, :n], c[:, :n]
        hidden, c = layer.cell(torch.baddbmm(input_gates[t], h, state_w), c)  # both directions share dim and clips
        h = torch.bmm(hidden, projection_w)
        if layer.proj_clip is not None:
            h = h.clamp(-layer.proj_clip, layer.proj_clip)
        outputs.append(h)
    final_h = torch.cat([h, *reversed(ended_h)], dim=1)
    final_c = torch.cat([c, *reversed(ended_c)], dim=1)
    packed = torch.cat(outputs, dim=1)
    out = packed.new_zeros(2, batch * steps, packed.shape[-1]).index_copy(1, index, packed)
    return out.view(2, batch, steps, -1), final_h, final_c
