"""int8 weights kept on disk: a model's weights quantized once per model and int8 settings, not at every load.

An entry is one safetensors file in ``$PYELMO_INT8_CACHE`` (default ``~/.cache/pyelmo/int8``), named by a digest
of its key (:func:`int8_key`: the model's weights' fingerprint and every setting that changes the int8 numbers).
It holds, per quantized weight (by parameter name), :func:`pyelmo.runtime.kernels.int8_weights`' int8 numbers and
float64 scales, and in its metadata the key and a SHA-256 of each tensor. An entry that cannot be read or holds
another key, or a weight whose digest or shape does not match, is rebuilt, never used. Written atomically.

What it saves is the quantization (per-row scales and rounding). Packing for the engine
(:func:`pyelmo.runtime.kernels.pack_int8`, ``linear_prepack``) still runs at every load: PyTorch's packed
weights live in memory only (saving one stores its unpacked int8 numbers, as here).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from pyelmo.fileio import atomic_writer
from pyelmo.paths import user_cache_dir
from pyelmo.runtime.kernels import int8_weights, pack_int8
from pyelmo.runtime.plan import ExecutionPlan
from pyelmo.runtime.precision import int8_engine

#: The layout of an entry; another one is a miss.
FORMAT = "1"
Numbers = tuple[torch.Tensor, torch.Tensor]


def int8_cache_folder() -> Path:
    """``$PYELMO_INT8_CACHE``, else ``~/.cache/pyelmo/int8``."""
    return user_cache_dir("int8", "PYELMO_INT8_CACHE")


def int8_key(model: str, plan: ExecutionPlan, reduce_range: bool) -> dict[str, str]:
    """What an entry's numbers hold for: the model's fingerprint (``model``), the plan's int8 rule, the engine,
    its input range and this PyTorch (whose rounding makes the numbers)."""
    return {"format": FORMAT, "model": model, "int8_min_weight": str(plan.quantization.min_weight),
            "engine": str(int8_engine()), "reduce_range": str(bool(reduce_range)), "torch": torch.__version__}


def tensor_digest(t: torch.Tensor) -> str:
    """SHA-256 of a tensor's dtype, shape and bytes."""
    t = t.contiguous()
    h = hashlib.sha256(f"{t.dtype}:{tuple(t.shape)};".encode("utf-8"))
    h.update(t.view(torch.uint8).reshape(-1).numpy())
    return h.hexdigest()


class Int8WeightCache:
    """The int8 numbers of one model under one key (:func:`int8_key`), in ``folder`` (default
    :func:`int8_cache_folder`). :meth:`packed` gives a weight packed from its stored numbers, or quantizes it (a
    miss); :meth:`save` then writes the entry whole if any weight missed. ``hits``/``misses``: the counts.

    The stored weights are read, checked and packed ahead, in the order the entry lists them (the order they were
    asked for), one per thread on PyTorch's threads (``linear_prepack`` runs on one core); each weight's numbers
    are dropped once packed, never all read at once beside the float weights."""

    def __init__(self, key: dict[str, str], folder: Path | None = None) -> None:
        self.key = json.dumps(key, sort_keys=True)
        name = hashlib.sha256(self.key.encode("utf-8")).hexdigest()[:32]
        self.path = Path(folder or int8_cache_folder()) / f"{name}.safetensors"
        self.digests, self.order = self._index()
        self.kept: dict[str, Numbers] = {}  # quantized here
        self.used: list[str] = []  # packed from the entry
        self.asked: list[str] = []  # every weight, in the order asked for
        self.hits = self.misses = 0
        self._ahead: dict[str, Future] | None = None

    def _index(self) -> tuple[dict[str, str], list[str]]:
        """The entry's tensor digests by tensor name and its weights' names in order; none if it is missing,
        unreadable or of another key."""
        try:
            with safe_open(str(self.path), framework="pt") as f:
                meta, names = f.metadata() or {}, set(f.keys())
            digests, order = json.loads(meta.get("digests", "{}")), json.loads(meta.get("order", "[]"))
        except Exception:  # missing, truncated, not safetensors: a miss
            return {}, []
        if meta.get("key") != self.key or not isinstance(digests, dict) or set(digests) != names:
            return {}, []
        return digests, [name for name in order if isinstance(name, str)] if isinstance(order, list) else []

    def stored(self, name: str) -> Numbers | None:
        """Weight ``name``'s numbers from the entry, if it holds them intact (their digests match)."""
        parts = (f"{name}.int8", f"{name}.scales")
        if not all(part in self.digests for part in parts):
            return None
        try:
            with safe_open(str(self.path), framework="pt") as f:
                numbers = tuple(f.get_tensor(part) for part in parts)
        except Exception:
            return None
        intact = all(tensor_digest(t) == self.digests[part] for t, part in zip(numbers, parts))
        return numbers if intact and _well_formed(*numbers) else None

    def _pack_stored(self, name: str) -> tuple[tuple[int, ...], object] | None:
        numbers = self.stored(name)
        return None if numbers is None else (tuple(numbers[0].shape), pack_int8(*numbers))

    def _stored_packed(self, name: str) -> tuple[tuple[int, ...], object] | None:
        """Weight ``name`` packed from the entry (started ahead for every weight it lists, on the first call)."""
        if self._ahead is None:
            threads = max(1, min(torch.get_num_threads(), len(self.order)))
            pool = ThreadPoolExecutor(threads, thread_name_prefix="pyelmo-int8-pack")
            self._ahead = {n: pool.submit(self._pack_stored, n) for n in self.order}
            pool.shutdown(wait=False)  # its threads end once the queued weights are packed
        future = self._ahead.pop(name, None)
        return future.result() if future is not None else self._pack_stored(name)

    def packed(self, name: str, w: torch.Tensor) -> object:
        """The weight ``w`` (parameter ``name``) packed for the int8 products, from the stored numbers when they
        are intact and of its shape, else quantized now."""
        self.asked.append(name)
        ready = self._stored_packed(name)
        if ready is not None and ready[0] == (w.shape[0], w.shape[1] + 2):
            self.hits += 1
            self.used.append(name)
            return ready[1]
        numbers = int8_weights(w)
        self.misses += 1
        self.kept[name] = numbers
        return pack_int8(*numbers)

    def save(self) -> None:
        """Write the entry (atomically) if any weight was quantized here; a cache that cannot be written warns."""
        if not self.misses:
            return
        kept, self.kept = self.kept, {}
        for name in self.used:  # taken from the entry before a miss: read again to write the entry whole
            numbers = self.stored(name)
            if numbers is None:  # changed since: drop it, the next load rebuilds it
                with contextlib.suppress(OSError):
                    self.path.unlink(missing_ok=True)
                return
            kept[name] = numbers
        tensors = {}
        for name, (q, scales) in kept.items():
            tensors[f"{name}.int8"], tensors[f"{name}.scales"] = q.contiguous(), scales.contiguous()
        meta = {"key": self.key, "digests": json.dumps({name: tensor_digest(t) for name, t in tensors.items()}),
                "order": json.dumps(self.asked)}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_writer(self.path) as tmp:
                save_file(tensors, str(tmp), metadata=meta)
        except OSError as exc:
            warnings.warn(f"int8 weights not kept in {self.path.parent}: {exc}", RuntimeWarning, stacklevel=2)


def _well_formed(q: torch.Tensor, scales: torch.Tensor) -> bool:
    return (q.dtype == torch.int8 and q.dim() == 2 and scales.dtype == torch.float64
            and tuple(scales.shape) == (q.shape[0],))
