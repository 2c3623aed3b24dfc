"""The token encoder (paper section 3.1 / bilm-tf ``CNN``): characters to a token vector.

char embedding -> 1-D convolutions of several widths, max over positions, activation
-> highway layers -> linear projection. Its output is the biLM's layer 0.

The matrix products run through a :class:`pyelmo.runtime.products.Products` (``PLAIN``: ``torch``,
differentiable); ``fused_conv=True`` computes the convolutions of all widths as one
product (:func:`pyelmo.runtime.products.conv_max_gemm`, the inference strategy's kernel).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from pyelmo.config import CharCNNConfig
from pyelmo.runtime.products import PLAIN, Products, conv_max_gemm

N_CHAR_IDS = 262  # 261 character ids + the padding id 0
#: Token rows per chunk of the fused convolution product: bounds its (rows * max_chars, n_filters) buffer.
CONV_CHUNK_TOKENS = 256


class Highway(nn.Module):
    """``y = t * relu(x W_transform + b_transform) + (1 - t) * x`` with ``t = sigmoid(x W_carry + b_carry)``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.carry = nn.Linear(dim, dim)  # TF name "carry" is the transform gate t
        self.transform = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, products: Products = PLAIN) -> torch.Tensor:
        gate = torch.sigmoid(products.linear(x, self.carry))
        return gate * torch.relu(products.linear(x, self.transform)) + (1 - gate) * x


class TokenEncoder(nn.Module):
    """Maps character ids ``(..., max_chars)`` to context-independent token vectors ``(..., projection_dim)``."""

    def __init__(self, config: CharCNNConfig, projection_dim: int) -> None:
        super().__init__()
        self.config = config
        self.char_embedding = nn.Embedding(N_CHAR_IDS, config.embedding_dim, padding_idx=0)
        self.convolutions = nn.ModuleList(
            nn.Conv1d(config.embedding_dim, n_maps, kernel_size=width) for width, n_maps in config.filters
        )
        self.activation = torch.relu if config.activation == "relu" else torch.tanh
        self.highways = nn.ModuleList(Highway(config.n_filters) for _ in range(config.n_highway))
        self.projection = nn.Linear(config.n_filters, projection_dim)

    def forward(self, char_ids: torch.Tensor, products: Products = PLAIN, fused_conv: bool = False) -> torch.Tensor:
        shape = char_ids.shape[:-1]
        rows = char_ids.reshape(-1, char_ids.shape[-1])
        if fused_conv:
            pooled = conv_max_gemm(self.char_embedding, self.convolutions, rows, products)
        else:
            # (max rather than amax: the same values, and a backward pass that scatters to the argmax)
            chars = self.char_embedding(rows).transpose(1, 2)
            pooled = torch.cat([conv(chars).max(dim=-1).values for conv in self.convolutions], dim=-1)
        # max over positions then activation (equal to activation then max for monotone activations)
        x = self.activation(pooled)
        for highway in self.highways:
            x = highway(x, products)
        return products.linear(x, self.projection).reshape(*shape, -1)


def encode_distinct(encoder: TokenEncoder, char_ids: torch.Tensor, products: Products = PLAIN,
                    cache: TokenCache | None = None, fused_conv: bool = False) -> torch.Tensor:
    """``encoder(char_ids)`` computed once per distinct token (row of character ids).

    Text repeats its words, so a batch has far fewer distinct tokens than positions; the
    gradient of a repeated token is the sum over its positions, as without the sharing.
    With a ``cache`` (inference only), tokens seen in earlier calls are not computed again.
    """
    rows = char_ids.reshape(-1, char_ids.shape[-1])
    if rows.shape[0] == 0:
        return encoder(char_ids)
    distinct, inverse = torch.unique(rows, dim=0, return_inverse=True)

    def encode(ids: torch.Tensor) -> torch.Tensor:
        if not fused_conv:
            return encoder(ids, products)
        chunks = [encoder(ids[k : k + CONV_CHUNK_TOKENS], products, fused_conv=True)
                  for k in range(0, ids.shape[0], CONV_CHUNK_TOKENS)]
        return torch.cat(chunks) if len(chunks) > 1 else chunks[0]

    vectors = encode(distinct) if cache is None else cache.encode(encoder, distinct, encode, products.dtype)
    return vectors[inverse].reshape(*char_ids.shape[:-1], -1)


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
        fingerprint = (id(encoder), precision,
                       *((p.data_ptr(), p._version, p.dtype, p.device) for p in encoder.parameters()))
        if fingerprint != self._fingerprint:
            self.clear()
            self._fingerprint = fingerprint

    def encode(self, encoder: TokenEncoder, distinct: torch.Tensor, compute, precision: torch.dtype | None = None
               ) -> torch.Tensor:
        """Vectors of the ``distinct (N, C)`` rows: cached ones looked up, the others ``compute(rows)`` and stored."""
        self.check_weights(encoder, precision)
        keys = [row.tobytes() for row in distinct.to(torch.int16).cpu().numpy()]
        rows = self.lookup(keys)
        vectors = torch.empty(len(keys), encoder.projection.out_features, dtype=encoder.projection.weight.dtype,
                              device=distinct.device)
        present = [k for k, row in enumerate(rows) if row >= 0]
        if present:
            vectors[torch.tensor(present, device=distinct.device)] = self.gather([rows[k] for k in present])
        missing = [k for k, row in enumerate(rows) if row < 0]
        if missing:
            index = torch.tensor(missing, device=distinct.device)
            computed = compute(distinct[index])
            vectors[index] = computed
            self.store([keys[k] for k in missing], computed)
        return vectors

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
