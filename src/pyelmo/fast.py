"""Inference fast paths for the biLM. Same numbers as the plain modules (within float rounding), less work.

The plain code in ``encoder.py``, ``lstm.py`` and ``bilm.py`` is what the paper describes
and what training differentiates through. When gradients are off (``torch.no_grad`` /
``torch.inference_mode``) and no dropout is active, ``BiLM.forward`` calls
:func:`bilm_layers_inference` instead, which computes the same function with these tricks:

- **token encoder once per distinct token** (:func:`encode_tokens`): the character CNN
  runs on the distinct character-id rows of the batch only, optionally through a
  :class:`TokenCache` (LRU, across batches), never on padding;
- **convolutions as one matrix multiply** (:func:`char_cnn_gemm`): all filters are
  zero-padded to the widest one and applied as a single ``(positions, width * emb) @
  (width * emb, n_filters)`` product, then each filter's max runs over its valid
  positions only (the plain ``nn.Conv1d`` per width was slower here); windows holding
  padding characters only all give one response, computed once per filter;
- **prepacked weights** (:class:`Products`): the matrix products run through oneDNN
  with every weight reordered once into its blocked layout, 2-4x the speed of
  ``torch.mm`` (MKL) on this path's shapes on the AMD CPUs measured, in float32;
- **packed sequences** (:class:`PackedBatch`): rows sorted by length, time-major, with
  only the rows still running at each step; the backward direction is the same
  positions in reversed order, so both directions share the step sizes;
- **both directions per step together** (:func:`run_lstm_layer_pair`): the forward and
  backward layer of a level advance in the same time loop; their products run on the
  modules' own weights (stacking them for one ``baddbmm`` copied 290 MB per call for the
  original model and MKL runs a batched product as one product per direction anyway),
  the gate nonlinearities run once over both, in place, into preallocated buffers; the
  forget bias is folded into the input bias; input-to-gate products are computed for a
  block of steps at a time (one product, bounded memory).

``BiLM.inference_dtype = torch.bfloat16`` (``pyelmo embed --bf16``) runs every matrix
product of this path with bfloat16 inputs and weights (bfloat16 copies kept beside the
fp32 parameters); sums, states and nonlinearities stay float32. It is an explicit
reduced-precision mode: outputs differ from the exact path by about 0.5% of their largest
value (measured in ``benchmarks/embed_throughput.py``), in exchange for faster products on
CPUs with bfloat16 instructions (1.0-2.2x the exact path's speed per batch there).
"""

from __future__ import annotations

import functools
import math
import warnings
import weakref
from collections import OrderedDict

import torch

from pyelmo.characters import PAD_CHAR
from pyelmo.encoder import TokenEncoder
from pyelmo.lstm import FORGET_BIAS, LstmWithProjection

PAD_ID = PAD_CHAR + 1  # the padding character's id (ids are shifted by +1)
#: Token rows per chunk in the convolution product: bounds its (n_filters, rows * max_chars) buffer.
CONV_CHUNK_TOKENS = 256
#: Products of fewer multiply-adds (rows x weight size) run faster with plain ``torch.mm``:
#: oneDNN's per-call overhead dominates them (e.g. one row through the small model's projection).
ONEDNN_MIN_WORK = 2**18
#: Packed rows (token positions of one direction) per input-to-gate product in the LSTM.
INPUT_GATE_CHUNK_ROWS = 512


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
    """``x @ W^T`` for this path: exact float32, or with bfloat16 inputs and weights.

    On CPU the products run through oneDNN with each weight prepacked once into its
    blocked layout (``onednn=None``: when the build has it). Here, in float32, that is 2-4x
    faster than ``torch.mm`` (MKL) for the LSTM's shapes at the same precision: only the
    order of the sums differs. Float32 products too small to gain (fewer than
    ``ONEDNN_MIN_WORK`` multiply-adds) stay on ``torch.mm``. ``onednn=False`` forces
    ``torch.mm`` throughout.

    Prepared weights (packed and/or cast to bfloat16) are made once per parameter, kept
    while the parameter lives, and remade when it changes (in-place update, reload, ``.to()``).
    """

    def __init__(self, dtype: torch.dtype | None = None, onednn: bool | None = None) -> None:
        self.dtype = dtype
        self.onednn = onednn_available() if onednn is None else onednn
        self._weights: dict[tuple[int, bool], tuple[weakref.ref, tuple, torch.Tensor]] = {}

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


#: Plain float32 ``torch.mm`` products, no prepared weights (the default of the functions below).
EXACT = Products(None, onednn=False)


# -- token encoder ------------------------------------------------------------------------
_CONV_WEIGHTS: "weakref.WeakKeyDictionary[TokenEncoder, tuple]" = weakref.WeakKeyDictionary()


def _padded_conv_weights(encoder: TokenEncoder) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int, int]]]:
    """All convolution filters zero-padded to the widest: ``W (n_filters, widest * emb)`` in
    ``[offset, emb]`` order, the biases, and ``(first column, end column, width)`` of each filter
    group. Made once per encoder and remade when its convolutions' weights change."""
    fingerprint = tuple((p.data_ptr(), p._version, p.device) for p in encoder.convolutions.parameters())
    cached = _CONV_WEIGHTS.get(encoder)
    if cached is not None and cached[0] == fingerprint:
        return cached[1]
    widest = max(conv.kernel_size[0] for conv in encoder.convolutions)
    blocks, groups, start = [], [], 0
    with torch.inference_mode(False), torch.no_grad():  # normal tensors: Products tracks their versions
        for conv in encoder.convolutions:
            n, _, w = conv.weight.shape  # (n, emb, w)
            blocks.append(torch.nn.functional.pad(conv.weight, (0, widest - w)))
            groups.append((start, start + n, w))
            start += n
        weight = torch.cat(blocks).transpose(1, 2).reshape(start, -1).contiguous()
        bias = torch.cat([conv.bias for conv in encoder.convolutions])
    _CONV_WEIGHTS[encoder] = (fingerprint, (weight, bias, groups))
    return weight, bias, groups


def char_cnn_gemm(encoder: TokenEncoder, char_ids: torch.Tensor, products: Products = EXACT) -> torch.Tensor:
    """The character CNN (embedding, convolutions, max over positions, activation): ``(N, C) -> (N, n_filters)``.

    One product ``windows (N * positions, widest * emb) @ W^T`` gives every filter's
    response at every window start; each filter group's max runs over its valid starts
    ``0 .. C - width`` (the zero-padded tail is left out), and the bias and activation come
    after the max (both commute with it). Windows that start after the rows' last
    non-padding character hold padding characters only: they all give one response per
    filter, computed once instead of at each of those starts.
    """
    weight, bias, groups = _padded_conv_weights(encoder)
    n_tokens, n_chars = char_ids.shape
    emb = encoder.config.embedding_dim
    widest = weight.shape[1] // emb
    # window starts computed one by one: 0 .. (the last non-padding character of any row)
    positions = torch.arange(1, n_chars + 1, device=char_ids.device)
    starts = max(int((char_ids.ne(PAD_ID) * positions).amax()) if n_tokens else 0, 1)
    kept = min(n_chars, starts + widest - 1)  # the characters those windows read; zeros after the row's end
    chars = torch.nn.functional.pad(encoder.char_embedding(char_ids[:, :kept]), (0, 0, 0, starts + widest - 1 - kept))
    windows = chars.unfold(1, widest, 1).transpose(2, 3).reshape(n_tokens * starts, widest * emb)
    responses = products.mm(windows, weight).view(n_tokens, starts, -1)
    padding_window = encoder.char_embedding.weight[PAD_ID].repeat(widest)[None]  # (1, widest * emb)
    padding_response = products.mm(padding_window, weight)[0]
    pooled = []
    for a, b, w in groups:
        group = responses[:, : min(starts, n_chars - w + 1), a:b].amax(dim=1)
        if starts <= n_chars - w:  # some valid windows hold padding only
            group = torch.maximum(group, padding_response[a:b])
        pooled.append(group)
    return encoder.activation(torch.cat(pooled, dim=1) + bias)


def encode_tokens_gemm(encoder: TokenEncoder, char_ids: torch.Tensor, products: Products = EXACT) -> torch.Tensor:
    """``TokenEncoder.forward`` for ``(N, C)`` rows with the convolutions as one product, in chunks."""
    chunks = []
    for start in range(0, char_ids.shape[0], CONV_CHUNK_TOKENS):
        x = char_cnn_gemm(encoder, char_ids[start : start + CONV_CHUNK_TOKENS], products)
        for highway in encoder.highways:
            gate = torch.sigmoid(products.linear(x, highway.carry))
            x = torch.addcmul(x, gate, torch.relu(products.linear(x, highway.transform)) - x)  # t*relu(.) + (1-t)*x
        chunks.append(products.linear(x, encoder.projection))
    return torch.cat(chunks) if len(chunks) > 1 else chunks[0]


class TokenCache:
    """LRU cache of token-encoder outputs keyed by a token's character ids (inference only).

    Holds at most ``max_size`` vectors in one preallocated-as-needed tensor, so its memory
    is bounded (``max_size * projection_dim`` floats) whatever the input size. Cleared
    automatically when the encoder's weights change (in-place update, reload, ``.to()``).
    """

    def __init__(self, max_size: int = 32_768) -> None:
        self.max_size = max_size
        self._slots: OrderedDict[bytes, int] = OrderedDict()  # key -> row of _vectors, LRU first
        self._vectors: torch.Tensor | None = None
        self._fingerprint: tuple | None = None
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._slots)

    def clear(self) -> None:
        self._slots.clear()
        self._vectors = None
        self.hits = self.misses = 0

    def check_weights(self, encoder: TokenEncoder, precision: torch.dtype | None = None) -> None:
        fingerprint = (precision, *((p.data_ptr(), p._version, p.dtype, p.device) for p in encoder.parameters()))
        if fingerprint != self._fingerprint:
            self.clear()
            self._fingerprint = fingerprint

    def lookup(self, keys: list[bytes]) -> list[int]:
        """The cache row of each key, or -1."""
        rows = []
        for key in keys:
            row = self._slots.get(key)
            if row is None:
                rows.append(-1)
                self.misses += 1
            else:
                self._slots.move_to_end(key)
                rows.append(row)
                self.hits += 1
        return rows

    def gather(self, rows: list[int]) -> torch.Tensor:
        return self._vectors[torch.tensor(rows, device=self._vectors.device)]

    def store(self, keys: list[bytes], vectors: torch.Tensor) -> None:
        if self.max_size <= 0:
            return
        keys, vectors = keys[-self.max_size :], vectors[-self.max_size :]
        if self._vectors is None or self._vectors.dtype != vectors.dtype or self._vectors.device != vectors.device:
            self._slots.clear()
            self._vectors = vectors.new_empty(0, vectors.shape[1])
        rows = []
        for key in keys:
            if len(self._slots) < self._vectors.shape[0]:
                row = len(self._slots)
            elif self._vectors.shape[0] < self.max_size:  # grow geometrically up to max_size
                grown = min(self.max_size, max(1024, 2 * self._vectors.shape[0]))
                self._vectors = torch.cat([self._vectors, self._vectors.new_empty(grown - self._vectors.shape[0],
                                                                                   self._vectors.shape[1])])
                row = len(self._slots)
            else:
                _, row = self._slots.popitem(last=False)  # evict the least recently used
            self._slots[key] = row
            rows.append(row)
        self._vectors[torch.tensor(rows, device=vectors.device)] = vectors


def encode_tokens(encoder: TokenEncoder, char_ids: torch.Tensor, cache: TokenCache | None = None,
                  products: Products = EXACT) -> torch.Tensor:
    """Token vectors for ``(N, C)`` character-id rows, computing each distinct row once (inference only)."""
    if char_ids.shape[0] == 0:
        return encoder(char_ids)
    unique, inverse = torch.unique(char_ids, dim=0, return_inverse=True)
    if cache is None:
        return encode_tokens_gemm(encoder, unique, products)[inverse]
    cache.check_weights(encoder, products.dtype)
    keys = [row.tobytes() for row in unique.to(torch.int16).cpu().numpy()]
    rows = cache.lookup(keys)
    vectors = torch.empty(len(keys), encoder.projection.out_features, dtype=encoder.projection.weight.dtype,
                          device=char_ids.device)
    present = [k for k, row in enumerate(rows) if row >= 0]
    if present:
        vectors[torch.tensor(present, device=char_ids.device)] = cache.gather([rows[k] for k in present])
    missing = [k for k, row in enumerate(rows) if row < 0]
    if missing:
        index = torch.tensor(missing, device=char_ids.device)
        computed = encode_tokens_gemm(encoder, unique[index], products)
        vectors[index] = computed
        cache.store([keys[k] for k in missing], computed)
    return vectors[inverse]


# -- packed sequences ---------------------------------------------------------------------
class PackedBatch:
    """Index bookkeeping for running rows of different lengths without padding.

    Rows are sorted by descending length; step ``t`` runs the first ``batch_sizes[t]``
    sorted rows, stored at packed rows ``offsets[t] : offsets[t] + batch_sizes[t]``.
    ``forward_src[k]`` / ``backward_src[k]`` is the flat ``row * T + position`` index (in
    the caller's row order) that packed row ``k`` reads in the forward / backward direction.
    """

    def __init__(self, lengths: torch.Tensor, steps: int) -> None:
        device = lengths.device
        self.order = torch.argsort(lengths, descending=True, stable=True)
        self.restore = torch.argsort(self.order)
        sorted_lengths = lengths[self.order]
        longest = int(sorted_lengths[0])
        sizes = (sorted_lengths[None, :] > torch.arange(longest, device=device)[:, None]).sum(-1)
        self.batch_sizes: list[int] = sizes.tolist()
        self.offsets: list[int] = [0] + torch.cumsum(sizes, 0).tolist()
        step = torch.repeat_interleave(torch.arange(longest, device=device), sizes)
        sorted_row = torch.arange(len(step), device=device) - torch.tensor(self.offsets[:-1], device=device)[step]
        row = self.order[sorted_row]
        self.forward_src = row * steps + step
        self.backward_src = row * steps + sorted_lengths[sorted_row] - 1 - step

    @property
    def n_packed(self) -> int:
        return self.offsets[-1]


# -- LSTM ---------------------------------------------------------------------------------
def lstm_cell_update(gates: torch.Tensor, c: torch.Tensor, dim: int, cell_clip: float | None) -> torch.Tensor:
    """Gate nonlinearities and the cell update, in place: ``c`` becomes the new cell, returns
    ``sigmoid(o) * tanh(c)`` (before the projection). ``gates`` holds ``[i, j, f + 1, o]`` pre-activations."""
    cell_input = torch.tanh(gates[..., dim : 2 * dim])
    torch.sigmoid(gates, out=gates)  # i, f, o (j's sigmoid is unused)
    c.mul_(gates[..., 2 * dim : 3 * dim]).addcmul_(gates[..., :dim], cell_input)
    if cell_clip is not None:
        c.clamp_(-cell_clip, cell_clip)
    return torch.tanh(c).mul_(gates[..., 3 * dim :])


def _input_gate_bias(layer: LstmWithProjection) -> torch.Tensor:
    bias = layer.input_gates.bias.clone()
    bias[2 * layer.dim : 3 * layer.dim] += FORGET_BIAS  # folded in once instead of every step
    return bias


def run_lstm_layer_pair(pair: list[LstmWithProjection], inputs: torch.Tensor, packed: PackedBatch,
                        h: torch.Tensor, c: torch.Tensor, products: Products = EXACT) -> torch.Tensor:
    """Run the forward and backward layer of one level together over packed ``inputs (2, n_packed, in)``.

    ``h (2, B, P)`` and ``c (2, B, H)`` (sorted row order) are updated in place and end as
    each row's final state. Returns the packed outputs ``(2, n_packed, P)``. The matrix
    products run per direction (on the modules' own weights, no copies); the gate
    nonlinearities run once over both directions.
    """
    layer = pair[0]
    dim, cell_clip, proj_clip = layer.dim, layer.cell_clip, layer.proj_clip
    biases = [_input_gate_bias(lay) for lay in pair]
    input_w = [lay.input_gates.weight for lay in pair]
    state_w = [lay.state_gates.weight for lay in pair]
    projection_w = [lay.projection.weight for lay in pair]
    outputs = inputs.new_empty(2, packed.n_packed, layer.projection_dim)
    offsets, sizes = packed.offsets, packed.batch_sizes
    h_prev = h  # the previous step's outputs; its first sizes[t] rows are the rows running at step t
    t0 = 0
    while t0 < len(sizes):
        t1 = t0 + 1  # a block of steps whose input-to-gate products are computed in one product
        while t1 < len(sizes) and offsets[t1 + 1] - offsets[t0] <= INPUT_GATE_CHUNK_ROWS:
            t1 += 1
        base = offsets[t0]
        gates_block = inputs.new_empty(2, offsets[t1] - base, 4 * dim)
        for d in (0, 1):
            products.addmm(biases[d], inputs[d, base : offsets[t1]], input_w[d], out=gates_block[d])
        for t in range(t0, t1):
            n, start = sizes[t], offsets[t] - base
            gates = gates_block[:, start : start + n]  # (2, n, 4H)
            for d in (0, 1):
                products.addmm_(gates[d], h_prev[d, :n], state_w[d])
            hidden = lstm_cell_update(gates, c[:, :n], dim, cell_clip)
            h_prev = outputs[:, offsets[t] : offsets[t] + n]
            for d in (0, 1):
                products.mm_out(hidden[d], projection_w[d], out=h_prev[d])
            if proj_clip is not None:
                h_prev.clamp_(-proj_clip, proj_clip)
        t0 = t1
    for t, n in enumerate(sizes):  # final states: rows sizes[t + 1] .. n - 1 end at step t
        ending = sizes[t + 1] if t + 1 < len(sizes) else 0
        if ending < n:
            h[:, ending:n] = outputs[:, offsets[t] + ending : offsets[t] + n]
    return outputs


# -- the whole biLM -----------------------------------------------------------------------
def bilm_layers_inference(model, char_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``BiLM`` layers ``(num_layers, B, T, 2P)`` for boundary-wrapped ``char_ids (B, T, C)`` (no autograd).

    Equal to the plain path of ``BiLM.forward`` within float rounding; handles the
    stateful mode through the model's ``_initial_states`` / ``_store_states``.
    """
    batch, steps, n_chars = char_ids.shape
    config = model.config.lstm
    proj = config.projection_dim
    packed = PackedBatch(lengths, steps)
    flat_ids = char_ids.reshape(batch * steps, n_chars)

    products = model.inference_products
    tokens = encode_tokens(model.token_encoder, flat_ids[packed.forward_src], model.token_cache,
                           products)  # (n_packed, P)
    position = torch.empty(batch * steps, dtype=torch.long, device=char_ids.device)
    position[packed.forward_src] = torch.arange(packed.n_packed, device=char_ids.device)
    x = torch.stack([tokens, tokens[position[packed.backward_src]]])  # (2, n_packed, P)

    layers = tokens.new_zeros(config.n_layers + 1, batch * steps, 2 * proj)
    layers[0, packed.forward_src, :proj] = tokens
    layers[0, packed.forward_src, proj:] = tokens

    h0, c0 = model._initial_states(batch, tokens)
    h_final, c_final = torch.zeros_like(h0), torch.zeros_like(c0)
    for l in range(config.n_layers):
        pair = [model.directions[0][l], model.directions[1][l]]
        h, c = h0[:, l][:, packed.order].contiguous(), c0[:, l][:, packed.order].contiguous()
        out = run_lstm_layer_pair(pair, x, packed, h, c, products)
        h_final[:, l], c_final[:, l] = h[:, packed.restore], c[:, packed.restore]
        if l > 0 and config.use_skip_connections:
            out += x
        layers[l + 1, packed.forward_src, :proj] = out[0]
        layers[l + 1, packed.backward_src, proj:] = out[1]
        x = out
    if model.stateful:
        model._store_states(h_final, c_final)
    return layers.view(config.n_layers + 1, batch, steps, 2 * proj)
