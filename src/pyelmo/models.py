"""Finding and loading a model: the shipped English model, a native directory, or released files."""

from __future__ import annotations

import os
from pathlib import Path

from pyelmo.bilm import BiLM
from pyelmo.errors import WeightFileError

#: Where the package ships its default English model (package data).
DEFAULT_MODEL_DIR = Path(__file__).parent / "pretrained" / "english"


def default_model_dir() -> Path:
    """The shipped model's directory; a clear error if this installation lacks it."""
    if not (DEFAULT_MODEL_DIR / "model.safetensors").exists():
        raise WeightFileError(
            "this installation has no shipped model; pass --model DIR or --options-file/--weight-file"
        )
    return DEFAULT_MODEL_DIR


def load(model: str | os.PathLike | None = None, weight_file: str | os.PathLike | None = None) -> BiLM:
    """Load a biLM in evaluation mode.

    - ``load()``: the shipped English model;
    - ``load(DIR)``: a native model directory (``config.json`` + ``model.safetensors``);
    - ``load(OPTIONS_JSON, WEIGHTS_HDF5)``: the released bilm-tf format.
    """
    from pyelmo.weights import from_pretrained, load_bilm_hdf5

    if weight_file is not None:
        if model is None:
            raise WeightFileError("a weight file needs its options file")
        return load_bilm_hdf5(model, weight_file)
    if model is None:
        return from_pretrained(default_model_dir())
    path = Path(model)
    if path.is_file():
        raise WeightFileError(
            f"{path} is a file; give a model directory, or the options file together with its weight file"
        )
    return from_pretrained(path)
