"""Text-cleaning helpers shared by the pretraining source readers of :mod:`pyelmo.corpus.sources`."""

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



def is_prose(par: str, share: float = 0.7) -> bool:
    """At least 4 words, mostly letters (see :func:`mostly_letters`)."""
    return len(par.split()) >= 4 and mostly_letters(par, share)


def mostly_letters(text: str, share: float = 0.7) -> bool:
    """True when at least ``share`` of the non-space characters are letters."""
    chars = [c for c in text if not c.isspace()]
    return bool(chars) and sum(c.isalpha() for c in chars) >= share * len(chars)



#: an HTML or XML tag
TAG = re.compile(r"<[^>]*>")
#: a web address
URL = re.compile(r"https?://\S+|www\.\S+")
