"""pyelmo: ELMo deep contextualized word representations (Peters et al. 2018) in PyTorch.

Light to import: submodules load on first use.

>>> import pyelmo
>>> embedder = pyelmo.ElmoEmbedder()          # the shipped English model ("chinese": the Chinese one)
>>> vectors = embedder.embed_sentence(["I", "deposited", "money", "in", "the", "bank", "."])
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "ElmoConfig": "pyelmo.config",
    "preset": "pyelmo.config",
    "batch_to_ids": "pyelmo.modeling.characters",
    "BiLM": "pyelmo.modeling.bilm",
    "ScalarMix": "pyelmo.modeling.mix",
    "Elmo": "pyelmo.embedding.elmo",
    "ElmoEmbedder": "pyelmo.embedding.embedder",
    "EmbedJob": "pyelmo.embedding.job",
    "load": "pyelmo.modelio.resolve",
    "resolve_model": "pyelmo.modelio.resolve",
    "ResolvedModel": "pyelmo.modelio.resolve",
    "load_bilm_hdf5": "pyelmo.modelio.weights",
    "save_bilm_hdf5": "pyelmo.modelio.weights",
    "from_pretrained": "pyelmo.modelio.weights",
    "save_pretrained": "pyelmo.modelio.weights",
    "PyelmoError": "pyelmo.errors",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from pyelmo.modeling.bilm import BiLM
    from pyelmo.modeling.characters import batch_to_ids
    from pyelmo.config import ElmoConfig, preset
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.embedding.job import EmbedJob
    from pyelmo.errors import PyelmoError
    from pyelmo.embedding.elmo import Elmo
    from pyelmo.modeling.mix import ScalarMix
    from pyelmo.modelio.resolve import ResolvedModel, load, resolve_model
    from pyelmo.modelio.weights import from_pretrained, load_bilm_hdf5, save_bilm_hdf5, save_pretrained


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'pyelmo' has no attribute {name!r}")
