"""Planned linear layers: an ``nn.Linear``'s ``x W^T + b`` as an execution plan runs it, swapped in for a
model's ``nn.Linear`` s once, at load (:func:`pyelmo.runtime.planning.plan_model`), as
``torch.ao.quantization.quantize_dynamic`` swaps its dynamic linears: the model's code does not change; an
``nn.Linear`` is the differentiable path.
One class per precision, owning its prepared weight (for the kernels :class:`~pyelmo.runtime.products.Products`
picks per row class), registered by :func:`planned`: a new precision or engine is one new class.
:class:`PlannedPair` runs the same product of a level's directions, each on its own rows (what
:func:`pyelmo.modeling.lstm.paired` asks a planned linear for: :meth:`PlannedLinear.pair`); a block of many rows
on its distinct rows only (:func:`distinct_rows`)."""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import torch
from torch import nn

from pyelmo.runtime.kernels import quantize_int8
from pyelmo.runtime.plan import ONEDNN_MAX_ROWS
from pyelmo.runtime.products import Products
from pyelmo.runtime.rules import WEIGHT_ALIGNMENT


#: A block of more than :data:`~pyelmo.runtime.plan.ONEDNN_MAX_ROWS` rows runs on its distinct rows
#: (:meth:`PlannedPair.affine`) when they are at most this share of its rows (above it, little is saved).
DISTINCT_MAX_SHARE = 0.9

#: From this many elements on, a pair's weights are stacked as stored for its batched products (:attr:`PlannedPair.stacked`).
STACK_AS_STORED_MIN = 2**21

#: The planned linear class of each precision name (:func:`planned`).
PLANNED: dict[str, type[PlannedLinear]] = {}


def planned(name: str) -> Callable[[type[PlannedLinear]], type[PlannedLinear]]:
    """Register a :class:`PlannedLinear` class as the one that runs the products of precision ``name``."""
    def register(cls: type[PlannedLinear]) -> type[PlannedLinear]:
        cls.precision = name
        PLANNED[name] = cls
        return cls
    return register


def owned(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` detached, contiguous and aligned to :data:`WEIGHT_ALIGNMENT` (copied unless it is): the products
    read the same layout wherever the weights were loaded from."""
    w = weight.detach()
    if w.is_contiguous() and (w.device.type != "cpu" or w.data_ptr() % WEIGHT_ALIGNMENT == 0):
        return w
    return w.clone(memory_format=torch.contiguous_format)


class PlannedLinear(nn.Module):
    """``x W^T + b`` through the kernels ``products`` picks per row class, on ``W`` prepared for them.

    ``forward(x)`` is ``nn.Linear``'s; :meth:`affine` (another bias, into ``out``), :meth:`product` and
    :meth:`add_to` are the in-place forms the inference loop runs. No autograd."""

    precision = ""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, products: Products,
                 persistent: bool = True) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.products = products
        self.register_buffer("bias", None if bias is None else bias.detach(), persistent)
        self._prepared: dict[str, object] = {}
        self._pairs: dict[tuple[int, ...], tuple[tuple[int, ...], PlannedPair]] = {}
        #: Counts the changes of the weights (``.to()``, ``load_state_dict``): a pair made before is made again.
        self.generation = 0

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, precision={self.precision}"

    @property
    def shape(self) -> tuple[int, int]:
        return self.out_features, self.in_features

    def kernel(self, x: torch.Tensor) -> str:
        """The kernel that runs ``x``'s rows (the plan's, recorded in ``products.decisions``)."""
        return self.products.kernel(x, self.weight)

    def prepared(self, kernel: str) -> object:
        """``W`` as ``kernel`` takes it, made on first use and kept."""
        if kernel not in self._prepared:
            self._prepared[kernel] = self.products.prepare(self.weight, kernel)
        return self._prepared[kernel]

    def affine(self, x: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor | None = None) -> torch.Tensor:
        """``x W^T (+ bias)`` as float32, into ``out`` if given."""
        kernel = self.kernel(x)
        return self.products.kernels[kernel].run(x, self.prepared(kernel), bias, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = self.affine(x.reshape(-1, x.shape[-1]), self.bias)
        return flat.view(*x.shape[:-1], -1)

    def product(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``x W^T`` (no bias) as float32, into ``out`` if given."""
        return self.affine(x, None, out)

    def add_to(self, acc: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``acc += x W^T``."""
        kernel = self.kernel(x)
        return self.products.kernels[kernel].addmm_(acc, x, self.prepared(kernel))

    def native(self, x: torch.Tensor) -> torch.Tensor:
        """``x W^T`` in the kernel's own result precision (bfloat16 in the bfloat16 mode): for results that
        are only compared (a max commutes with the exact conversion to float32, made on fewer values)."""
        kernel = self.kernel(x)
        return self.products.kernels[kernel].product(x, self.prepared(kernel))

    def _apply(self, fn, recurse=True):  # moved or cast (``.to()``): prepared again on first use
        self.refresh()
        return super()._apply(fn, recurse)

    def __getstate__(self):  # copied: oneDNN's packed weights (opaque tensors) are left out, prepared again
        state = super().__getstate__()
        state["_prepared"] = {k: v for k, v in self._prepared.items() if not getattr(v, "is_mkldnn", False)}
        state["_pairs"] = {}
        return state

    def _load_from_state_dict(self, *args):  # new weights (``load_state_dict``): likewise
        super()._load_from_state_dict(*args)
        self.refresh()

    def refresh(self) -> None:
        """Forget the prepared weights (the weights changed): made again on first use."""
        self._prepared.clear()
        self.generation += 1

    def batched_rows(self) -> int:
        """Up to how many rows a step product of several directions runs as one batched product (0: never)."""
        return 0

    def pair(self, linears: Sequence[PlannedLinear]) -> PlannedPair:
        """:class:`PlannedPair` of ``linears`` (this one first), made once."""
        key, generations = tuple(id(linear) for linear in linears), tuple(linear.generation for linear in linears)
        kept = self._pairs.get(key)
        if kept is None or kept[0] != generations:
            kept = self._pairs[key] = (generations, PlannedPair(linears))
        return kept[1]


@planned("float32")
class ExactLinear(PlannedLinear):
    """Exact float32: ``torch.mm`` on ``W^T`` or oneDNN with ``W`` prepacked, as the plan says; the
    directions' small step products batched where the plan batches."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, products: Products,
                 persistent: bool = True) -> None:
        super().__init__(weight, bias, products, persistent)
        self.register_buffer("weight", owned(weight), persistent)

    def batched_rows(self) -> int:
        return self.products.plan.batched_rows(self.shape) if self.weight.dtype == torch.float32 else 0


@planned("bfloat16")
class BFloat16Linear(PlannedLinear):
    """bfloat16 inputs and weights, float32 sums."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, products: Products) -> None:
        super().__init__(weight, bias, products)
        self.register_buffer("weight", owned(weight))


@planned("int8")
class Int8Linear(PlannedLinear):
    """int8 weights (per output channel) and inputs (per row, on a fixed range), int32 sums
    (:func:`pyelmo.runtime.kernels.int8_linear`); only the int8 copy of ``W`` is kept."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, products: Products,
                 packed: object | None = None) -> None:
        super().__init__(weight, bias, products)
        self._prepared[products.plan.spec.quantized_kernel] = quantize_int8(weight) if packed is None else packed
        self.weight = torch.empty(weight.shape, device="meta")  # the shape the plan decides by; no storage

    def _apply(self, fn, recurse=True):  # the int8 copy is the only one: kept as it is (int8 runs on the CPU)
        self.generation += 1
        return nn.Module._apply(self, fn, recurse)

    def _load_from_state_dict(self, state_dict, prefix, metadata, strict, missing, unexpected, errors):
        key = prefix + "weight"  # an nn.Linear's float weight: not kept, quantized again
        weight = state_dict.get(key)
        nn.Module._load_from_state_dict(self, {k: v for k, v in state_dict.items() if k != key}, prefix, metadata,
                                        strict, missing, unexpected, errors)
        if weight is None:
            missing.extend([key] if strict else [])
        elif tuple(weight.shape) != self.shape:
            errors.append(f"size mismatch for {key}: {tuple(weight.shape)} given, {self.shape} here")
        else:
            self.refresh()
            self._prepared[self.products.plan.spec.quantized_kernel] = quantize_int8(weight.detach().float().cpu())


@functools.lru_cache(maxsize=8)
def _key_multipliers(halves: int, device: torch.device) -> torch.Tensor:
    """``halves`` fixed pseudo-random int64 multipliers in [1, 2^31) (the same in every process)."""
    generator = torch.Generator().manual_seed(0x5EED)
    with torch.inference_mode(False):
        return torch.randint(1, 2**31, (halves,), generator=generator, dtype=torch.int64).to(device)


def row_keys(x: torch.Tensor) -> torch.Tensor:
    """An int64 key of each row of float32 ``x (n, k)``, ``k < 2^15``: its bits as 16-bit integers times
    :func:`_key_multipliers`, summed (exact integer sums, no overflow): equal rows, equal keys; distinct rows
    rarely."""
    halves = x.view(torch.int16).long()
    return halves @ _key_multipliers(halves.shape[1], x.device)


def distinct_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The distinct rows of float32 ``x (n, k)``, bit for bit, and each row's place among them: ``(distinct,
    inverse)``, ``distinct[inverse]`` the same bits as ``x``; the distinct rows in the order of their keys
    (:func:`row_keys`), each the first of its equal rows. ``None`` if two distinct rows share a key (checked),
    or for another dtype or ``k >= 2^15``."""
    if x.dtype != torch.float32 or x.shape[1] >= 2**15:
        return None
    x = x.contiguous()
    keys, inverse = torch.unique(row_keys(x), return_inverse=True)
    rows = torch.arange(x.shape[0], device=x.device)
    first = torch.full_like(keys, x.shape[0]).scatter_reduce_(0, inverse, rows, "amin")
    bits = x.view(torch.int32)
    if not torch.equal(bits[first[inverse]], bits):  # a collision
        return None
    return x[first], inverse


class PlannedPair:
    """The same product of a level's directions ``d``, each on its own rows ``x[d]`` (``x (D, n, in)``): steps of at
    most :meth:`PlannedLinear.batched_rows` rows as one batched product on the stacked ``W^T``, larger
    ones apart."""

    def __init__(self, linears: Sequence[PlannedLinear]) -> None:
        self.linears = list(linears)
        self.max_batched_rows = linears[0].batched_rows()

    @functools.cached_property
    def stacked(self) -> torch.Tensor:
        """W^T of each direction, stacked (D, in, out): made contiguous for weights of fewer than
        :data:`STACK_AS_STORED_MIN` elements (MKL's one-row products, on weights that stay in cache, run faster on
        it than on W), else a view of the weights stacked as stored (as fast there, and a plain copy, several times
        cheaper to make than a transposed one). Made at the first batched product: a pair that never batches (the
        input-to-gate products) does not pay for it."""
        weights = [linear.weight for linear in self.linears]
        if weights[0].numel() >= STACK_AS_STORED_MIN:
            return torch.stack(weights).transpose(1, 2)
        return torch.stack([w.t() for w in weights])

    def affine(self, x: torch.Tensor, biases: Sequence[torch.Tensor], out: torch.Tensor) -> torch.Tensor:
        """``out[d] = x[d] W_d^T + biases[d]``, direction by direction (large products). On the CPU, a block of
        more than :data:`~pyelmo.runtime.plan.ONEDNN_MAX_ROWS` rows whose distinct rows (:func:`distinct_rows`)
        are at most :data:`DISTINCT_MAX_SHARE` of them runs on those, each result copied to its rows (a text's
        repeated words are equal token vectors): equal rows, the same bits."""
        search = x.shape[1] > ONEDNN_MAX_ROWS and x.device.type == "cpu"  # a GPU would wait for the search
        for d, linear in enumerate(self.linears):
            found = distinct_rows(x[d]) if search else None
            if found is not None and found[0].shape[0] <= DISTINCT_MAX_SHARE * x.shape[1]:
                torch.index_select(linear.affine(found[0], biases[d]), 0, found[1], out=out[d])
            else:
                linear.affine(x[d], biases[d], out=out[d])
        return out

    def add_to(self, acc: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``acc[d] += x[d] W_d^T``. A batched product runs on ``x`` made contiguous, into a result of its own, then
        added (copied, in :meth:`product`): ATen's batched products round by the layout of their operands, which
        then is the same wherever the rows and the sums live (a call's initial states or a step's outputs, the
        loop's buffers or fixed ones)."""
        if x.shape[1] <= self.max_batched_rows:
            return acc.add_(torch.bmm(x.contiguous(), self.stacked))
        for d, linear in enumerate(self.linears):
            linear.add_to(acc[d], x[d])
        return acc

    def product(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``out[d] = x[d] W_d^T``."""
        if x.shape[1] <= self.max_batched_rows:
            return out.copy_(torch.bmm(x.contiguous(), self.stacked))
        for d, linear in enumerate(self.linears):
            linear.product(x[d], out=out[d])
        return out
