"""Finding and loading a model: the shipped English model, a native directory, or released files."""

from __future__ import annotations

import os
from pathlib import Path

from pyelmo.modeling.bilm import BiLM
from pyelmo.errors import WeightFileError

#: Where the package ships its default English model (package data).
DEFAULT_MODEL_DIR = Path(__file__).parents[1] / "pretrained" / "english"


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
    - ``load(OPTIONS_JSON, WEIGHTS_HDF5)``: the released bilm-tf format;
    - ``load("original")`` (``small``, ``medium``, ``original-5.5b``, ``pubmed``; ``english`` is
      the shipped model), a URL, or a ``.zip``/``.tar.gz`` archive or folder holding an options
      JSON and a bilm-tf HDF5 file (the NLPL layout): downloaded once into the cache
      (``pyelmo.modelio.hub``) and verified.
    """
    import pyelmo.modelio.hub as hub
    from pyelmo.modelio.weights import CONFIG_NAME, from_pretrained, load_bilm_hdf5

    if weight_file is not None:
        if model is None:
            raise WeightFileError("a weight file needs its options file")
        return load_bilm_hdf5(model, weight_file)
    if model is None or model == "english":
        return from_pretrained(default_model_dir())
    path = Path(model)
    name = str(model)
    if not path.exists() and (hub.is_url(name) or os.sep not in name) or path.is_file() and hub.is_archive(name):
        files = hub.resolve(name)
        return load_bilm_hdf5(files.options, files.weights)
    if path.is_dir() and not (path / CONFIG_NAME).exists() and any(path.glob("*.hdf5")):
        files = hub.find_model_files(path)  # an unpacked released model (e.g. NLPL's options.json + model.hdf5)
        return load_bilm_hdf5(files.options, files.weights)
    if path.is_dir() and (path / CONFIG_NAME).is_file():
        from pyelmo.modelio import elmoformanylangs
        from pyelmo.modelio.weights import read_native_config

        if elmoformanylangs.is_converted(read_native_config(path)):  # converted by 'pyelmo convert'
            return elmoformanylangs.load_converted(path)
    if path.is_file():
        raise WeightFileError(
            f"{path} is a file; give a model directory, or the options file together with its weight file"
        )
    return from_pretrained(path)


def model_language(model: str | os.PathLike | None = None, weight_file: str | os.PathLike | None = None) -> str | None:
    """The language of the text a model was trained on (``"en"``), for the same arguments as :func:`load`:
    a released model's (by name), or a model directory's ``"language"`` in its ``config.json`` (the
    shipped model's is ``"en"``). None when not known (released-format files, URLs, archives)."""
    import json

    import pyelmo.modelio.hub as hub
    from pyelmo.modelio.weights import CONFIG_NAME

    if weight_file is not None:
        return None
    if model is None or str(model) == "english":
        directory = DEFAULT_MODEL_DIR
    elif not Path(model).exists():
        release = hub.RELEASES.get(str(model))
        return release.language if release is not None else None
    else:
        directory = Path(model)
    try:
        config = json.loads((directory / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    language = config.get("language") if isinstance(config, dict) else None
    return language if isinstance(language, str) and language else None
