"""Shared fixtures: the reference models copied from the original implementations (see fixtures/reference/README.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

REFERENCE = Path(__file__).parent / "fixtures" / "reference"
SENTENCE_FILES = {"bilm-tf": "lm_embeddings_sentences.json", "allennlp": "sentences.json"}


class Reference:
    """One reference model folder: options, weights, the 3 x 10 sentences and expected top-layer outputs."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dir = REFERENCE / name
        self.options = self.dir / "options.json"
        self.weights = self.dir / "lm_weights.hdf5"
        self.sentences: list[list[str]] = json.loads((self.dir / SENTENCE_FILES[name]).read_text())

    def batch(self, i: int) -> list[list[str]]:
        """Batch i as the original produced it: sentence i of each of the 3 lists."""
        return [self.sentences[k][i].split() for k in range(3)]

    def expected(self, k: int, i: int) -> np.ndarray:
        """(n_tokens, 2 * projection): the forward and backward top-layer outputs, concatenated."""
        with h5py.File(self.dir / f"lm_embeddings_{k}.hdf5", "r") as f:
            fwd_bwd = f[str(i)][...]
        return np.concatenate([fwd_bwd[0], fwd_bwd[1]], axis=-1)


@pytest.fixture(params=["bilm-tf", "allennlp"])
def reference(request) -> Reference:
    return Reference(request.param)


@pytest.fixture
def allennlp_reference() -> Reference:
    return Reference("allennlp")


@pytest.fixture
def tiny_model(allennlp_reference):
    from pyelmo.modelio.weights import load_bilm_hdf5

    return load_bilm_hdf5(allennlp_reference.options, allennlp_reference.weights)


@pytest.fixture(autouse=True, scope="session")
def _kernel_cache(tmp_path_factory) -> None:
    """What the tests keep goes to a temporary folder, not the user's cache."""
    os.environ["PYELMO_INT8_CACHE"] = str(tmp_path_factory.mktemp("int8-cache"))  # int8 weights kept


