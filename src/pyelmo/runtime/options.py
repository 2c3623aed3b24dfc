"""How ``BiLM.forward`` executes: the options object and the two execution strategies.

The modules (``encoder.py``, ``lstm.py``, ``bilm.py``) own the model's math; a strategy
only decides how rows are laid out and how the products run:

- ``"plain"`` (:class:`PaddedRows`, the default): padded ``(B, T)`` rows sorted by length,
  one direction after the other, ``torch`` products, every convolution width on its
  own. Differentiable: training and the reference path.
- ``"packed"`` (:class:`PackedRows`, inference): the token encoder once per distinct token
  (optionally through a :class:`~pyelmo.modeling.encoder.TokenCache` across calls), every
  convolution width in one product with all-padding windows computed once; packed rows
  (only the rows still running at each step, no padding); both directions of a level in
  one time loop, the gate nonlinearities once over both, or one after the other where that
  measures faster on this machine (:func:`directions`), into preallocated buffers. No autograd.

The product implementation is a separate, pluggable piece (:class:`pyelmo.runtime.products.Products`:
``torch.mm``, oneDNN prepacked, chosen per shape by measuring on the machine at hand;
bfloat16). :class:`RunOptions` holds the choice together
with the token cache and, in stateful mode, the carried LSTM states; it belongs to whoever
runs the model (``ElmoEmbedder``, ``Elmo``), never to the model.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import torch

import pyelmo.runtime.autotune as kernelchoice
from pyelmo.modeling.encoder import TokenCache, TokenEncoder, encode_distinct
from pyelmo.runtime.autotune import DIRECTIONS, row_class
from pyelmo.runtime.products import PLAIN, Products, usable_bf16
from pyelmo.runtime.training_products import TrainingProducts, run_pair_differentiable
from pyelmo.modeling.lstm import LstmWithProjection

STRATEGIES = ("plain", "packed")
#: Packed rows (token positions of one direction) per input-to-gate product in the packed LSTM loop.
INPUT_GATE_CHUNK_ROWS = 512


class CarriedStates:
    """Stateful mode: the LSTM states ``(h (2, L, rows, P), c (2, L, rows, H))`` each batch row
    reached in the previous call; a smaller batch continues its rows and keeps the others."""

    def __init__(self) -> None:
        self.h: torch.Tensor | None = None
        self.c: torch.Tensor | None = None

    def reset(self) -> None:
        """Forget the carried states: the next call starts from zeros."""
        self.h = self.c = None

    def fill(self, h: torch.Tensor, c: torch.Tensor) -> None:
        """Write the carried states into the first rows of the zero states ``h``, ``c``."""
        if self.h is not None:
            rows = min(h.shape[2], self.h.shape[2])
            h[:, :, :rows] = self.h[:, :, :rows]
            c[:, :, :rows] = self.c[:, :, :rows]

    def update(self, h: torch.Tensor, c: torch.Tensor) -> None:
        """Carry the final states ``h``, ``c`` of a call (and the earlier rows it did not reach)."""
        h, c = h.detach(), c.detach()
        if self.h is not None and self.h.shape[2] > h.shape[2]:
            h = torch.cat([h, self.h[:, :, h.shape[2]:]], dim=2)
            c = torch.cat([c, self.c[:, :, c.shape[2]:]], dim=2)
        self.h, self.c = h, c


class Workspace:
    """Buffers the packed strategy reuses from call to call (inference only, like the token cache).

    A large buffer allocated afresh at every call costs its page faults every time: glibc
    returns allocations above its mmap threshold (at most 32 MB) to the system when they
    are freed, e.g. the original model's 67 MB of gate pre-activations per block of steps.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def buffer(self, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """An uninitialised ``shape`` tensor of ``like``'s dtype and device, kept as ``name`` (grown when needed)."""
        size = math.prod(shape)
        kept = self._buffers.get(name)
        if kept is None or kept.numel() < size or kept.dtype != like.dtype or kept.device != like.device:
            kept = self._buffers[name] = like.new_empty(size)
        return kept[:size].view(shape)


@dataclass
class RunOptions:
    """How one ``BiLM.forward`` call runs (see the module docstring); the default is the plain strategy.

    ``strategy``: ``"plain"`` or ``"packed"``; ``products``: the product implementation;
    ``token_cache``: token vectors kept across calls (packed only); ``states``: carried LSTM
    states (stateful mode) or ``None`` (stateless: every sentence starts from zeros);
    ``workspace``: buffers kept across calls (packed only); ``directions``: how the packed loop
    runs a level's two directions, ``"together"``, ``"apart"`` or ``"auto"`` (:func:`directions`).
    """

    strategy: str = "plain"
    products: Products = PLAIN
    token_cache: TokenCache | None = None
    states: CarriedStates | None = None
    workspace: Workspace | None = None
    directions: str = "auto"

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.directions not in ("auto", *DIRECTIONS):
            raise ValueError(f"directions must be one of auto, {', '.join(DIRECTIONS)}, got {self.directions!r}")
        if self.strategy == "plain" and (self.token_cache is not None or self.workspace is not None
                                         or not self.products.differentiable):
            raise ValueError("the plain strategy runs differentiable torch products, no token cache and no workspace")

    @classmethod
    def inference(cls, *, stateful: bool = False, token_cache_size: int = 0, bf16: bool = False,
                  onednn: bool | None = None, kernels: str | None = None,
                  device: str | torch.device = "cpu", directions: str = "auto") -> RunOptions:
        """The packed strategy. ``bf16``: bfloat16 products (a warning and exact float32 on a CPU
        without bfloat16 instructions); ``kernels``: how the float32 products' kernels are chosen
        (:class:`~pyelmo.runtime.products.Products`: ``"auto"``, measured here, by default); ``onednn=False``:
        ``torch.mm`` only; ``directions``: see the class docstring."""
        on_cpu = torch.device(device).type == "cpu"
        dtype = torch.bfloat16 if (bf16 and (not on_cpu or usable_bf16(True))) else None
        return cls("packed", Products(dtype, onednn, kernels), TokenCache(token_cache_size) if token_cache_size > 0 else None,
                   CarriedStates() if stateful else None, Workspace(), directions)

    @property
    def stateful(self) -> bool:
        return self.states is not None

    @property
    def dtype(self) -> torch.dtype:
        """The products' input precision."""
        return self.products.dtype or torch.float32


# -- row layouts ----------------------------------------------------------------------------
def reverse_within_lengths(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each row's first ``lengths[b]`` steps of ``x (B, T, ...)``; padding stays in place."""
    steps = torch.arange(x.shape[1], device=x.device)
    index = torch.where(steps < lengths[:, None], lengths[:, None] - 1 - steps, steps)
    return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x))


class SortedRows:
    """Rows sorted by descending length: ``batch_sizes[t]`` rows still run at step ``t``."""

    def __init__(self, lengths: torch.Tensor, steps: int) -> None:
        self.batch, self.steps = len(lengths), steps
        self.order = torch.argsort(lengths, descending=True, stable=True)
        self.restore = torch.argsort(self.order)
        self.sorted_lengths = lengths[self.order]
        longest = int(self.sorted_lengths[0]) if len(lengths) else 0
        sizes = (self.sorted_lengths[None, :] > torch.arange(longest, device=lengths.device)[:, None]).sum(-1)
        self.sizes = sizes
        self.batch_sizes: list[int] = sizes.tolist()

    def sort(self, state: torch.Tensor) -> torch.Tensor:
        """``(2, B, ...)`` states from the caller's row order to the sorted order."""
        return state[:, self.order].contiguous()

    def unsort(self, state: torch.Tensor) -> torch.Tensor:
        return state[:, self.restore]


class PaddedRows(SortedRows):
    """The plain strategy: ``(2, B, T, ·)`` per direction, rows sorted, the backward direction
    reversed within each row's length. Differentiable."""

    def encode(self, encoder: TokenEncoder, char_ids: torch.Tensor, full_mask: torch.Tensor,
               options: RunOptions) -> torch.Tensor:
        products = options.products  # training's products: the convolutions as one product (differentiable)
        mask = full_mask[self.order]
        # only the positions within each row's length are encoded; padding positions stay zero (an all-zero
        # "token" would also make the fused convolution compute every position for the words sharing its chunk)
        real = encode_distinct(encoder, char_ids[self.order][mask], products,
                               fused_conv=isinstance(products, TrainingProducts))
        tokens = real.new_zeros(*mask.shape, real.shape[-1]).index_put((mask,), real)
        return torch.stack([tokens, reverse_within_lengths(tokens, self.sorted_lengths)])

    def run_level(self, pair: list[LstmWithProjection], x: torch.Tensor, h: torch.Tensor, c: torch.Tensor,
                  options: RunOptions) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if isinstance(options.products, TrainingProducts):  # training: both directions in one loop, packed rows
            return run_pair_differentiable(pair, x, self.batch_sizes, h, c)
        runs = [layer(x[d], self.batch_sizes, (h[d], c[d])) for d, layer in enumerate(pair)]
        return (torch.stack([out for out, _ in runs]), torch.stack([s[0] for _, s in runs]),
                torch.stack([s[1] for _, s in runs]))

    def assemble(self, levels: list[torch.Tensor]) -> torch.Tensor:
        """``(L + 1, B, T, 2P)`` in the caller's row order from each level's ``(2, B, T, P)``."""
        return torch.stack([torch.cat([x[0], reverse_within_lengths(x[1], self.sorted_lengths)], dim=-1)[self.restore]
                            for x in levels])


class PackedRows(SortedRows):
    """The packed strategy: only the rows still running at each step, time-major.

    Step ``t`` runs the first ``batch_sizes[t]`` sorted rows, stored at packed rows
    ``offsets[t] : offsets[t] + batch_sizes[t]``. ``forward_src[k]`` / ``backward_src[k]``
    is the flat ``row * T + position`` index (in the caller's row order) that packed row
    ``k`` reads in the forward / backward direction: the backward direction is the same
    positions in reversed order, so both directions share the step sizes.
    """

    def __init__(self, lengths: torch.Tensor, steps: int) -> None:
        super().__init__(lengths, steps)
        device = lengths.device
        self.offsets: list[int] = [0] + torch.cumsum(self.sizes, 0).tolist()
        step = torch.repeat_interleave(torch.arange(len(self.batch_sizes), device=device), self.sizes)
        sorted_row = torch.arange(len(step), device=device) - torch.tensor(self.offsets[:-1], device=device)[step]
        row = self.order[sorted_row]
        self.forward_src = row * steps + step
        self.backward_src = row * steps + self.sorted_lengths[sorted_row] - 1 - step

    @property
    def n_packed(self) -> int:
        return self.offsets[-1]

    def gate_blocks(self) -> list[tuple[int, int]]:
        """The blocks of steps ``(t0, t1)`` whose input-to-gate products run as one product: consecutive
        steps of at most :data:`INPUT_GATE_CHUNK_ROWS` packed rows in all (a larger step alone)."""
        offsets, blocks, t0 = self.offsets, [], 0
        while t0 < len(self.batch_sizes):
            t1 = t0 + 1
            while t1 < len(self.batch_sizes) and offsets[t1 + 1] - offsets[t0] <= INPUT_GATE_CHUNK_ROWS:
                t1 += 1
            blocks.append((t0, t1))
            t0 = t1
        return blocks

    def encode(self, encoder: TokenEncoder, char_ids: torch.Tensor, full_mask: torch.Tensor,
               options: RunOptions) -> torch.Tensor:
        flat_ids = char_ids.reshape(self.batch * self.steps, char_ids.shape[-1])
        tokens = encode_distinct(encoder, flat_ids[self.forward_src], options.products, options.token_cache,
                                 fused_conv=True)  # (n_packed, P)
        position = torch.empty(self.batch * self.steps, dtype=torch.long, device=char_ids.device)
        position[self.forward_src] = torch.arange(self.n_packed, device=char_ids.device)
        return torch.stack([tokens, tokens[position[self.backward_src]]])

    def run_level(self, pair: list[LstmWithProjection], x: torch.Tensor, h: torch.Tensor, c: torch.Tensor,
                  options: RunOptions) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        order, timed = directions(pair, self.batch, options)
        start = time.perf_counter()
        if order == "together":
            outputs = run_packed_pair(pair, x, self, h, c, options.products, options.workspace)
        else:
            outputs = torch.cat([run_packed_pair([layer], x[d : d + 1], self, h[d : d + 1], c[d : d + 1],
                                                 options.products, options.workspace) for d, layer in enumerate(pair)])
        if timed is not None:
            timed((time.perf_counter() - start) / max(self.n_packed, 1))
        return outputs, h, c

    def assemble(self, levels: list[torch.Tensor]) -> torch.Tensor:
        proj = levels[0].shape[-1]
        layers = levels[0].new_zeros(len(levels), self.batch * self.steps, 2 * proj)
        for k, x in enumerate(levels):
            layers[k, self.forward_src, :proj] = x[0]
            layers[k, self.backward_src, proj:] = x[1]
        return layers.view(len(levels), self.batch, self.steps, 2 * proj)


def directions(pair: list[LstmWithProjection], rows: int, options: RunOptions
               ) -> tuple[str, Callable[[float], None] | None]:
    """How the packed loop runs ``pair``'s two directions for a batch of ``rows`` rows, and a function
    that takes the call's cost if it is timed: ``options.directions``, or for ``"auto"`` under the
    ``"auto"`` kernel policy on CPU the order measured faster on this machine for the batch's row
    class (timed on the first calls themselves, :meth:`~pyelmo.runtime.autotune.MeasuredChoices.trial`,
    and kept with the kernel choices), else ``"together"`` (the fixed rule). Both orders compute the same."""
    products = options.products
    if options.directions != "auto":
        return options.directions, None
    if products.policy != "auto" or pair[0].state_gates.weight.device.type != "cpu":
        return "together", None
    layer = pair[0]
    entry = (f"directions precision={str(products.dtype or torch.float32).removeprefix('torch.')} "
             f"threads={torch.get_num_threads()} rows={row_class(rows)} "
             f"lstm={layer.input_gates.in_features}x{layer.dim}x{layer.projection_dim}")
    return kernelchoice.MEASURED.trial(entry, DIRECTIONS)


def run_packed_pair(pair: list[LstmWithProjection], inputs: torch.Tensor, packed: PackedRows,
                    h: torch.Tensor, c: torch.Tensor, products: Products, workspace: Workspace | None = None) -> torch.Tensor:
    """The packed strategy's time loop: the layers of one level (both directions, or one) together over
    packed ``inputs (D, n_packed, in)``, with the layers' own :meth:`~LstmWithProjection.cell` and
    :meth:`~LstmWithProjection.clip_projection`.

    ``h (D, B, P)`` and ``c (D, B, H)`` (sorted row order) are updated in place and end as
    each row's final state. Returns the packed outputs ``(D, n_packed, P)``. The gate
    nonlinearities and the projection's clip run once over the directions; the input-to-gate
    products for a block of steps at a time, per direction; each step's recurrent and projection
    products of the directions as one batched product on stacked weights (kept by the
    products) when they are small (per-call overhead dominates them: batch 1), else per direction.
    The gate pre-activations of each block of steps go to one buffer (``workspace``'s if given).
    """
    layer = pair[0]
    biases = [lay.gate_bias() for lay in pair]
    input_w = [lay.input_gates.weight for lay in pair]
    recurrent = products.each([lay.state_gates.weight for lay in pair])
    projection = products.each([lay.projection.weight for lay in pair])
    outputs = inputs.new_empty(len(pair), packed.n_packed, layer.projection_dim)
    offsets, sizes = packed.offsets, packed.batch_sizes
    h_prev = h  # the previous step's outputs; its first sizes[t] rows are the rows running at step t
    blocks = packed.gate_blocks()
    shape = (len(pair), max((offsets[b] - offsets[a] for a, b in blocks), default=0), 4 * layer.dim)
    gates_buffer = workspace.buffer("gates", shape, inputs) if workspace is not None else inputs.new_empty(shape)
    step_outputs = outputs.split(sizes, dim=1)  # (D, sizes[t], P) views, one per step
    for t0, t1 in blocks:
        base = offsets[t0]
        gates_block = gates_buffer[:, : offsets[t1] - base]
        for d in range(len(pair)):
            products.mm(inputs[d, base : offsets[t1]], input_w[d], biases[d], out=gates_block[d])
        for t, gates in enumerate(gates_block.split(sizes[t0:t1], dim=1), start=t0):  # (D, n, 4H) per step
            n = sizes[t]
            if n < h_prev.shape[1]:  # the last rows have ended
                h_prev = h_prev[:, :n]
            hidden, _ = layer.cell(recurrent.addmm_(gates, h_prev), c if n == c.shape[1] else c[:, :n],
                                   inplace=True)  # the directions share dim and clips
            h_prev = step_outputs[t]
            layer.clip_projection(projection.mm_out(hidden, out=h_prev), inplace=True)
    for t, n in enumerate(sizes):  # final states: rows sizes[t + 1] .. n - 1 end at step t
        ending = sizes[t + 1] if t + 1 < len(sizes) else 0
        if ending < n:
            h[:, ending:n] = outputs[:, offsets[t] + ending : offsets[t] + n]
    return outputs
