"""Helpers of the readers of registry packages (:mod:`pyelmo.corpus.chinese`, and the corpus recipe's)."""

from __future__ import annotations

import re
from pathlib import Path

from pyelmo.errors import InputError

_WS = re.compile(r"\s+")


def squash(text: str) -> str:
    return _WS.sub(" ", text).strip()


def find_file(root: Path, *names: str) -> Path:
    """The first file called one of ``names`` at or below ``root`` (sorted, so deterministic)."""
    root = Path(root)
    for name in names:
        if (root / name).is_file():
            return root / name
        hits = sorted(p for p in root.rglob(name) if p.is_file())
        if hits:
            return hits[0]
    raise InputError(f"no {' or '.join(names)} under {root}")
