"""Token-encoder outputs kept across calls (inference only), keyed by a token's character ids."""

from __future__ import annotations

from collections import OrderedDict

import torch


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

    def check_weights(self, encoder: torch.nn.Module, precision: torch.dtype | None = None) -> None:
        # its parameters, a planned model's buffers and planned linears' generations (int8: reloaded weights)
        fingerprint = (id(encoder), precision,
                       *((p.data_ptr(), p._version, p.dtype, p.device) for p in (*encoder.parameters(),
                                                                                  *encoder.buffers())),
                       *(getattr(m, "generation", 0) for m in encoder.modules()))
        if fingerprint != self._fingerprint:
            self.clear()
            self._fingerprint = fingerprint

    def encode(self, encoder: torch.nn.Module, distinct: torch.Tensor, compute, precision: torch.dtype | None = None
               ) -> torch.Tensor:
        """Vectors of the ``distinct (N, C)`` rows: cached ones looked up, the others ``compute(rows)`` and stored."""
        self.check_weights(encoder, precision)
        keys = [row.tobytes() for row in distinct.to(torch.int16).cpu().numpy()]
        rows = self.lookup(keys)
        missing = [k for k, row in enumerate(rows) if row < 0]
        index = torch.tensor(missing, device=distinct.device)
        computed = compute(distinct[index]) if missing else None
        like = self._vectors if computed is None else computed
        vectors = like.new_empty(len(keys), like.shape[1])
        present = [k for k, row in enumerate(rows) if row >= 0]
        if present:
            vectors[torch.tensor(present, device=distinct.device)] = self.gather([rows[k] for k in present])
        if missing:
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
