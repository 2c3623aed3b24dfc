"""int8 weights kept on disk: a model's weights quantized once per model and int8 settings, not at every load.

An entry is one safetensors file in ``$PYELMO_INT8_CACHE`` (default ``~/.cache/pyelmo/int8``), named by a digest
of its key (:func:`int8_key`: the model's weights' fingerprint and every setting that changes the int8 numbers).
It holds, per quantized weight (by parameter name), :func:`pyelmo.runtime.kernels.int8_weights`' int8 numbers and
float64 scales, and in its metadata the key and a SHA-256 of that content. An entry that cannot be read, holds
another key, or whose digest or shapes do not match is rebuilt, never used. Written atomically.

What it saves is the quantization (per-row scales and rounding). Packing for the engine
(:func:`pyelmo.runtime.kernels.pack_int8`, ``linear_prepack``) still runs at every load: PyTorch's packed
weights live in memory only (saving one stores its unpacked int8 numbers, as here).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import torch

from pyelmo.fileio import atomic_writer
from pyelmo.paths import user_cache_dir
from pyelmo.runtime.kernels import int8_weights, pack_int8
from pyelmo.runtime.plan import ExecutionPlan, int8_engine

#: The layout of an entry; another one is a miss.
FORMAT = "1"
Numbers = tuple[torch.Tensor, torch.Tensor]


def int8_cache_folder() -> Path:
    """``$PYELMO_INT8_CACHE``, else ``~/.cache/pyelmo/int8``."""
    return user_cache_dir("int8", "PYELMO_INT8_CACHE")


def int8_key(model: str, plan: ExecutionPlan, reduce_range: bool) -> dict[str, str]:
    """What an entry's numbers hold for: the model's fingerprint (``model``), the plan's int8 rule, the engine,
    its input range and this PyTorch (whose rounding makes the numbers)."""
    return {"format": FORMAT, "model": model, "int8_min_weight": str(plan.int8_min_weight),
            "engine": str(int8_engine()), "reduce_range": str(bool(reduce_range)), "torch": torch.__version__}


def content_digest(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 of the tensors' names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode("utf-8"))
        h.update(t.view(torch.uint8).reshape(-1).numpy())
    return h.hexdigest()


class Int8WeightCache:
    """The int8 numbers of one model under one key (:func:`int8_key`), read from ``folder`` (default
    :func:`int8_cache_folder`). :meth:`packed` gives a weight packed from the stored numbers, or quantizes it
    (a miss); :meth:`save` then writes the entry whole if any weight missed. ``hits``/``misses``: the counts."""

    def __init__(self, key: dict[str, str], folder: Path | None = None) -> None:
        self.key = key
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()[:32]
        self.path = Path(folder or int8_cache_folder()) / f"{digest}.safetensors"
        self.stored = self._read()
        self.kept: dict[str, Numbers] = {}
        self.hits = self.misses = 0

    def _read(self) -> dict[str, Numbers]:
        """The entry's numbers by weight name; none if it is missing, damaged or of another key."""
        from safetensors import safe_open

        try:
            with safe_open(str(self.path), framework="pt") as f:
                meta = f.metadata() or {}
                tensors = {name: f.get_tensor(name) for name in f.keys()}
        except Exception:  # missing, truncated, not safetensors: a miss
            return {}
        if meta.get("key") != json.dumps(self.key, sort_keys=True) or meta.get("sha256") != content_digest(tensors):
            return {}
        names = {name.rpartition(".")[0] for name in tensors}
        numbers = {name: (tensors.get(f"{name}.int8"), tensors.get(f"{name}.scales")) for name in names}
        if not all(_well_formed(*pair) for pair in numbers.values()):
            return {}
        return numbers

    def packed(self, name: str, w: torch.Tensor) -> object:
        """The weight ``w`` (parameter ``name``) packed for the int8 products, from the stored numbers when they
        have its shape, else quantized now."""
        numbers = self.stored.get(name)
        if numbers is not None and tuple(numbers[0].shape) == (w.shape[0], w.shape[1] + 2):
            self.hits += 1
        else:
            numbers = int8_weights(w)
            self.misses += 1
        self.kept[name] = numbers
        return pack_int8(*numbers)

    def save(self) -> None:
        """Write the entry (atomically) if any weight was quantized here; a cache that cannot be written warns."""
        from safetensors.torch import save_file

        kept, self.kept, self.stored = self.kept, {}, {}
        if not self.misses:
            return
        tensors = {}
        for name, (q, scales) in kept.items():
            tensors[f"{name}.int8"], tensors[f"{name}.scales"] = q.contiguous(), scales.contiguous()
        meta = {"key": json.dumps(self.key, sort_keys=True), "sha256": content_digest(tensors)}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_writer(self.path) as tmp:
                save_file(tensors, str(tmp), metadata=meta)
        except OSError as exc:
            warnings.warn(f"int8 weights not kept in {self.path.parent}: {exc}", RuntimeWarning, stacklevel=2)


def _well_formed(q: torch.Tensor | None, scales: torch.Tensor | None) -> bool:
    return (q is not None and scales is not None and q.dtype == torch.int8 and q.dim() == 2
            and scales.dtype == torch.float64 and tuple(scales.shape) == (q.shape[0],))
