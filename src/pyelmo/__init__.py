"""pyelmo: ELMo deep contextualized word representations (Peters et al. 2018) in PyTorch.

Light to import: submodules load on first use.

>>> import pyelmo
>>> embedder = pyelmo.ElmoEmbedder()          # the shipped English model
>>> vectors = embedder.embed_sentence(["I", "deposited", "money", "in", "the", "bank", "."])
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "ElmoConfig": "pyelmo.config",
    "preset": "pyelmo.config",
    "batch_to_ids": "pyelmo.characters",
    "BiLM": "pyelmo.bilm",
    "ScalarMix": "pyelmo.mix",
    "Elmo": "pyelmo.mix",
    "ElmoEmbedder": "pyelmo.embed",
    "load": "pyelmo.models",
    "load_bilm_hdf5": "pyelmo.weights",
    "save_bilm_hdf5": "pyelmo.weights",
    "from_pretrained": "pyelmo.weights",
    "save_pretrained": "pyelmo.weights",
    "PyelmoError": "pyelmo.errors",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from pyelmo.bilm import BiLM
    from pyelmo.characters import batch_to_ids
    from pyelmo.config import ElmoConfig, preset
    from pyelmo.embed import ElmoEmbedder
    from pyelmo.errors import PyelmoError
    from pyelmo.mix import Elmo, ScalarMix
    from pyelmo.models import load
    from pyelmo.weights import from_pretrained, load_bilm_hdf5, save_bilm_hdf5, save_pretrained


#: Submodules reachable as attributes (``pyelmo.hub.download("original")``).
_SUBMODULES = ("hub",)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"pyelmo.{name}")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'pyelmo' has no attribute {name!r}")
