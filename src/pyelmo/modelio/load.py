"""Finding and loading a model: the shipped English model, a native directory, or released files."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pyelmo.errors import WeightFileError
from pyelmo.modeling.bilm import BiLM
from pyelmo.modelio.weights import CONFIG_NAME


def load(model: str | os.PathLike | None = None, weight_file: str | os.PathLike | None = None) -> BiLM:
    """Load a biLM in evaluation mode.

    - ``load()``: the shipped English model;
    - ``load(DIR)``: a native model directory (``config.json`` + ``model.safetensors``), the run
      folder of ``pyelmo train`` (its ``model/``), or a folder ``pyelmo export`` wrote;
    - ``load(OPTIONS_JSON, WEIGHTS_HDF5)``: the released bilm-tf format;
    - ``load("original")`` (``small``, ``medium``, ``original-5.5b``, ``pubmed``; ``english`` is
      the shipped model), a URL, or a ``.zip``/``.tar.gz`` archive or folder holding an options
      JSON and a bilm-tf HDF5 file (the NLPL layout): downloaded once into the cache
      (``pyelmo.modelio.hub``) and verified.
    """
    import pyelmo.modelio.hub as hub
    from pyelmo.modelio.archives import find_model_files
    from pyelmo.modelio.weights import from_pretrained, load_bilm_hdf5

    if weight_file is not None:
        if model is None:
            raise WeightFileError("a weight file needs its options file")
        return load_bilm_hdf5(model, weight_file)
    if model is None or model == "english":
        return from_pretrained(hub.default_model_dir())
    path = Path(model)
    name = str(model)
    if not path.exists() and (hub.is_url(name) or os.sep not in name) or path.is_file() and hub.is_archive(name):
        files = hub.resolve(name)
        return load_bilm_hdf5(files.options, files.weights)
    path = run_model_dir(path)
    if path.is_dir() and not (path / CONFIG_NAME).exists() and any(path.glob("*.hdf5")):
        files = find_model_files(path)  # an unpacked released model (e.g. NLPL's options.json + model.hdf5)
        return load_bilm_hdf5(files.options, files.weights)
    if path.is_dir() and (path / CONFIG_NAME).is_file():
        from pyelmo.modelio import elmoformanylangs
        from pyelmo.modelio.weights import read_native_config

        task_model_check(path)
        if elmoformanylangs.is_converted(read_native_config(path)):  # converted by 'pyelmo convert'
            return elmoformanylangs.load_converted(path)
    if path.is_file():
        raise WeightFileError(
            f"{path} is a file; give a model directory, or the options file together with its weight file"
        )
    return from_pretrained(path)


def run_model_dir(path: Path) -> Path:
    """The model folder ``path`` names: a ``pyelmo train`` run folder (``run.json``) -> its ``model/``;
    any other path as it is. A run stopped before writing ``model/`` is refused, naming what works."""
    if not (path.is_dir() and (path / "run.json").is_file() and not (path / CONFIG_NAME).is_file()):
        return path
    model = path / "model"
    if (model / CONFIG_NAME).is_file():
        return model
    best = path / "best"
    hint = f"--model {best} (its best validated model so far), or " if (best / CONFIG_NAME).is_file() else ""
    raise WeightFileError(f"{path} is a training run without its final model ({model} is missing): use {hint}"
                          f"finish it with 'pyelmo train --resume --out {path}'")


def task_model_check(path: Path) -> None:
    """Refuse a task model folder (``pyelmo task train``) as a biLM, naming the biLM it uses."""
    try:
        config = json.loads((path / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return
    if not isinstance(config, dict) or not str(config.get("format", "")).startswith("pyelmo-task"):
        return
    bilm = config.get("bilm") if isinstance(config.get("bilm"), dict) else {}
    if bilm.get("weight_file"):
        flag = f"--options-file {bilm.get('model')} --weight-file {bilm['weight_file']}"
    else:
        flag = f"--model {bilm['model']}" if bilm.get("model") else "no --model (the shipped English model)"
    raise WeightFileError(f"{path} is a task model ('pyelmo task train'), not a biLM: use it with 'pyelmo task "
                          f"evaluate' or 'pyelmo task predict'; for its biLM use {flag}")


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
        directory = hub.DEFAULT_MODEL_DIR
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
