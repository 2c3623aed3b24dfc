"""The one disk cache of computed vectors (evaluations, task features, the server's sample corpus).

One key rule: an entry is named by a digest of the model's fingerprint, the execution plan's
``vectors_key`` (what besides the model and input the vectors depend on: empty for exact float32),
what is cached (a short name and its variant, e.g. ``layers:float16``) and the inputs (JSON: the
sentences, positions, ...). Entries are ``.npz`` files written atomically and read without pickle;
a missing, damaged or foreign entry reads as absent, so it is computed again and rewritten.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

#: Bumped whenever the key rule or the layout of entries changes.
CACHE_VERSION = "pyelmo-vectors-2"


def plan_vectors_key(plan) -> str:
    """An execution plan's ``vectors_key`` (``None``, the default plan, is exact: ``""``)."""
    return "" if plan is None else plan.vectors_key


def cache_key(fingerprint: str, vectors_key: str, what: str, inputs: Any) -> str:
    """The key of the vectors ``what`` of ``inputs`` (JSON-serializable) under a model and a plan."""
    digest = hashlib.sha1(json.dumps([CACHE_VERSION, fingerprint, vectors_key, what]).encode("utf-8"))
    digest.update(json.dumps(inputs, ensure_ascii=False).encode("utf-8"))
    return digest.hexdigest()


class VectorCache:
    """A folder of cached vectors: ``entry`` names one, ``load`` reads it back, ``save`` writes it."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)

    def entry(self, fingerprint: str, vectors_key: str, what: str, inputs: Any) -> Path:
        """The file of an entry: ``what``'s name, then the key (:func:`cache_key`)."""
        name = re.sub(r"[^A-Za-z0-9_-]+", "-", what.split(":")[0])
        return self.directory / f"{name}-{cache_key(fingerprint, vectors_key, what, inputs)[:24]}.npz"

    @staticmethod
    def load(path: Path, names: tuple[str, ...]) -> dict[str, np.ndarray] | None:
        """The arrays ``names`` of the entry ``path``, or None when it is missing or damaged."""
        try:
            with np.load(path, allow_pickle=False) as data:
                return {name: data[name] for name in names}
        except Exception:  # missing, truncated or foreign (OSError, ValueError, KeyError, BadZipFile, EOFError)
            return None

    @staticmethod
    def save(path: Path, **arrays: np.ndarray) -> bool:
        """Write the entry ``path`` atomically; False when it cannot be written (the cache is only a cache)."""
        from pyelmo.fileio import write_bytes_atomic

        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(path, buffer.getvalue())
        except OSError:
            return False
        return True
