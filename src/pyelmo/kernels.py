"""How the biLM's matrix products run: the pluggable product implementation of an execution strategy.

:class:`Products` computes ``x @ W^T`` for the modules (``encoder.py``, ``lstm.py``):

- ``PLAIN``: ``torch`` products on the parameters themselves, differentiable (training,
  the reference path);
- ``Products(onednn=True)``: oneDNN with every weight reordered once into its blocked
  layout, 2-4x the speed of ``torch.mm`` (MKL) on the LSTM's shapes on the AMD CPUs
  measured, in float32 (only the order of the sums differs); no autograd;
- ``Products(torch.bfloat16)``: bfloat16 inputs and weights, float32 sums and outputs: an
  explicit reduced-precision mode (outputs differ by about 0.5% of their largest value),
  chosen only on CPUs with bfloat16 instructions (:func:`usable_bf16`).

A new implementation (another kernel library, a runtime choice per shape) is a class with
the same methods. :func:`conv_max_gemm` is the character CNN's kernel for the inference
strategy: every convolution width in one product.
"""

from __future__ import annotations

import functools
import math
import warnings
import weakref
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from pyelmo.characters import PAD_CHAR

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


class Products:
    """``x @ W^T`` for the modules: exact float32, or with bfloat16 inputs and weights.

    On CPU the products run through oneDNN with each weight prepacked once into its
    blocked layout (``onednn=None``: when the build has it). Here, in float32, that is 2-4x
    faster than ``torch.mm`` (MKL) for the LSTM's shapes at the same precision: only the
    order of the sums differs. Float32 products too small to gain (fewer than
    ``ONEDNN_MIN_WORK`` multiply-adds) stay on ``torch.mm``. ``onednn=False`` forces
    ``torch.mm`` throughout.

    Prepared weights (packed and/or cast to bfloat16, and any :meth:`derived` weight) are
    made once per parameter, kept by this object while the parameter lives, and remade when
    it changes (in-place update, reload, ``.to()``). ``differentiable``: only ``torch``
    products on the parameters themselves (``PLAIN``), which autograd can follow.
    """

    def __init__(self, dtype: torch.dtype | None = None, onednn: bool | None = None) -> None:
        self.dtype = dtype
        self.onednn = onednn_available() if onednn is None else onednn
        self._weights: dict[tuple[int, bool], tuple[weakref.ref, tuple, torch.Tensor]] = {}
        self._derived: dict[int, tuple[weakref.ref, tuple, object]] = {}

    @property
    def differentiable(self) -> bool:
        return self.dtype is None and not self.onednn

    def __repr__(self) -> str:
        return f"Products(dtype={self.dtype}, onednn={self.onednn})"

    def derived(self, owner: torch.nn.Module, build: Callable[[], object]) -> object:
        """``build()``'s result for ``owner`` (e.g. its weights rearranged), kept until its parameters change."""
        key = tuple((p.data_ptr(), p._version, p.device) for p in owner.parameters())
        cached = self._derived.get(id(owner))
        if cached is None or cached[0]() is not owner or cached[1] != key:
            with torch.inference_mode(False), torch.no_grad():  # normal tensors: their versions are tracked
                cached = (weakref.ref(owner), key, build())
            self._derived[id(owner)] = cached
        return cached[2]

    def _uses_onednn(self, x: torch.Tensor, w: torch.Tensor) -> bool:
        if not (self.onednn and x.device.type == "cpu" and x.dtype == torch.float32):
            return False
        return self.dtype is not None or x.numel() // max(x.shape[-1], 1) * w.numel() >= ONEDNN_MIN_WORK

    def weight(self, w: torch.Tensor, packed: bool) -> torch.Tensor:
        """``w`` in this path's precision, prepacked for oneDNN if ``packed``."""
        key = (w.data_ptr(), w._version)  # a new dtype, device or shape means new storage
        cached = self._weights.get((id(w), packed))
        if cached is None or cached[0]() is not w or cached[1] != key:
            prepared = w.detach() if self.dtype is None else w.detach().to(self.dtype)
            if packed:
                prepared = torch.ops.mkldnn._reorder_linear_weight(prepared, 32)
            cached = (weakref.ref(w), key, prepared)
            self._weights[(id(w), packed)] = cached
        return cached[2]

    def mm(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ w.T (+ bias)`` as float32 (``w`` as stored in a ``Linear``: ``(out, in)``)."""
        if self._uses_onednn(x, w):
            rows, padded = x.shape[0], onednn_rows(x.shape[0])
            if padded != rows:  # a few shapes only: oneDNN keeps a compiled kernel per shape
                x = torch.cat([x, x.new_zeros(padded - rows, x.shape[1])])
            x = (x if self.dtype is None else x.to(self.dtype)).contiguous()
            exact_bias = bias if self.dtype is None else None
            y = torch.ops.mkldnn._linear_pointwise(x, self.weight(w, packed=True), exact_bias, "none", [], "")[:rows]
            if self.dtype is None:
                return y
        elif self.dtype is None:
            return x @ w.t() if bias is None else torch.addmm(bias, x, w.t())
        else:
            y = x.to(self.dtype) @ self.weight(w, packed=False).t()
        y = y.float()
        return y if bias is None else y.add_(bias)

    def linear(self, x: torch.Tensor, layer: torch.nn.Linear) -> torch.Tensor:
        """``layer(x)`` through these products."""
        if self.differentiable:
            return F.linear(x, layer.weight, layer.bias)
        return self.mm(x, layer.weight, layer.bias)

    def _plain(self, x: torch.Tensor, w: torch.Tensor) -> bool:
        return self.dtype is None and not self._uses_onednn(x, w)

    def addmm(self, bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``out = bias + x @ w.T``."""
        if self._plain(x, w):
            return torch.addmm(bias, x, w.t(), out=out)
        return out.copy_(self.mm(x, w, bias))

    def addmm_(self, acc: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``acc += x @ w.T``."""
        if self._plain(x, w):
            return acc.addmm_(x, w.t())
        return acc.add_(self.mm(x, w))

    def mm_out(self, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``out = x @ w.T``."""
        if self._plain(x, w):
            return torch.mm(x, w.t(), out=out)
        return out.copy_(self.mm(x, w))


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
        return products.prepacked_mm(x, products.weight(w, packed=True), bias)

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
        return not torch.is_autocast_enabled(x.device.type) and super()._uses_onednn(x, w)

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
