"""A native model folder with a softmax and vocabulary, for the tests of the LM commands."""

from __future__ import annotations

from pathlib import Path

import torch

from pyelmo.modeling.bilm import BiLM
from pyelmo.modelio.weights import save_pretrained


def lm_folder(bilm: BiLM, path: Path, words: list[str], **metadata) -> Path:
    """A native folder with a (random) softmax and vocabulary beside ``bilm``."""
    torch.manual_seed(0)
    softmax = {"softmax.weight": torch.randn(len(words), bilm.config.projection_dim),
               "softmax.bias": torch.randn(len(words))}
    save_pretrained(bilm, path, extra_tensors=softmax, metadata=metadata)
    (path / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    return path
