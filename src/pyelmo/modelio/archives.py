"""A model's released-format files (options JSON, bilm-tf HDF5, vocabulary) in a folder or an archive.

Archives (``.zip``, ``.tar.gz``, ``.tgz``) are unpacked once, atomically, and every model is
checked structurally (every dataset its options require, with the right shape) before it
is used; files that fail are removed. Used by :mod:`pyelmo.modelio.hub`.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pyelmo.modelio.downloads import DownloadError, Ledger, file_lock
from pyelmo.errors import WeightFileError
from pyelmo.fileio import PathLike

if TYPE_CHECKING:
    import torch

OPTIONS_NAME, WEIGHTS_NAME, SOFTMAX_NAME = "options.json", "weights.hdf5", "softmax.hdf5"


@dataclass(frozen=True)
class ModelFiles:
    """A model's local files, ready for ``pyelmo.modelio.weights.load_bilm_hdf5``."""

    options: Path
    weights: Path
    vocab: Path | None = None


def unpack_archive(archive: Path, directory: Path) -> ModelFiles:
    """Unpack (once, atomically) an archive holding an options JSON and a bilm-tf HDF5 file."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(directory):
        if not directory.is_dir():
            tmp = directory.with_name(f".{directory.name}.{os.getpid()}.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                _extract(archive, tmp)
                find_model_files(tmp, archive)  # refuse an archive without a model before keeping it
                os.replace(tmp, directory)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        model = find_model_files(directory, archive)
        check_structure(model, [directory])
    return model


def _extract(archive: Path, target: Path) -> None:
    target.mkdir(parents=True)
    try:
        if archive.name.lower().endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                _check_members(archive, target, zf.namelist())
                zf.extractall(target)
        else:
            with tarfile.open(archive) as tf:
                _check_members(archive, target, tf.getnames())
                tf.extractall(target, filter="data")  # also refuses links out of the folder and special files
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as exc:
        raise DownloadError(f"archive {archive} cannot be unpacked ({exc})") from None


def _check_members(archive: Path, target: Path, names: list[str]) -> None:
    """Refuse an archive with an absolute entry or one that resolves outside ``target`` (``../``)."""
    root = target.resolve()
    for name in names:
        if Path(name).is_absolute() or not (root / name).resolve().is_relative_to(root):
            raise DownloadError(f"archive {archive} has an entry outside its folder: {name!r}")


def find_model_files(directory: Path, origin: PathLike | None = None) -> ModelFiles:
    """The options JSON, HDF5 weights and optional vocabulary in a folder (searched recursively).

    Prefers the NLPL names (``options.json``, ``model.hdf5``, ``vocab.txt``), then the names of
    ``pyelmo export`` and the cache (``weights.hdf5``); otherwise the only ``*.json`` and ``*.hdf5``
    files. ``softmax.hdf5`` (the LM head ``pyelmo export`` writes beside the biLM) is not a weight file.
    """
    where = origin or directory

    def pick(pattern: str, preferred: tuple[str, ...], what: str) -> Path | None:
        found = sorted(p for p in directory.rglob(pattern)
                       if p.is_file() and not p.name.startswith(".") and p.name != SOFTMAX_NAME)
        for name in preferred:
            named = [p for p in found if p.name == name]
            if named:
                return named[0]
        if len(found) == 1:
            return found[0]
        if found:
            raise WeightFileError(f"{where}: several {what} files ({', '.join(p.name for p in found)}) "
                                  f"and none named {' or '.join(preferred)}")
        return None

    options = pick("*.json", (OPTIONS_NAME,), "options")
    weights = pick("*.hdf5", ("model.hdf5", WEIGHTS_NAME), "weight")
    if options is None or weights is None:
        raise WeightFileError(f"{where} holds no {'options JSON' if options is None else 'HDF5 weight file'} "
                              "(expected options.json and model.hdf5, the NLPL layout)")
    vocab = options.parent / "vocab.txt"
    return ModelFiles(options, weights, vocab if vocab.is_file() else None)


def read_softmax_hdf5(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax/W`` and ``softmax/b`` of an exported ``softmax.hdf5``."""
    import h5py
    import numpy as np
    import torch

    try:
        with h5py.File(path, "r") as f:
            return (torch.from_numpy(np.asarray(f["softmax/W"][...], dtype=np.float32)),
                    torch.from_numpy(np.asarray(f["softmax/b"][...], dtype=np.float32)))
    except (OSError, KeyError, RuntimeError, ValueError) as exc:
        raise WeightFileError(f"{path} is not a readable softmax file (datasets softmax/W, softmax/b: {exc})") from None


def check_structure(model: ModelFiles, remove_on_failure: list[Path]) -> None:
    """Open the HDF5 file and check every dataset the options require (names and shapes)."""
    import h5py

    from pyelmo.modeling.bilm import BiLM
    import torch

    from pyelmo.modelio.weights import _hdf5_layout, file_shape, load_options

    try:
        config = load_options(model.options)
        with torch.device("meta"):  # shapes only: no memory, no initialisation
            expected = {name: file_shape(t, how) for name, t, how in _hdf5_layout(BiLM(config))}
        try:
            handle = h5py.File(model.weights, "r")
        except OSError as exc:
            raise WeightFileError(f"{model.weights} is not a readable HDF5 file ({exc})") from None
        with handle:
            for name, shape in expected.items():
                try:
                    dataset = handle.get(name)
                except (OSError, RuntimeError, KeyError, ValueError) as exc:
                    raise WeightFileError(f"{model.weights} is corrupt: cannot read {name!r} ({exc})") from None
                if not isinstance(dataset, h5py.Dataset) or dataset.shape != shape:
                    got = "missing" if not isinstance(dataset, h5py.Dataset) else f"shape {dataset.shape}"
                    raise WeightFileError(f"{model.weights}: dataset {name!r} is {got}, the options need {shape}")
    except WeightFileError as exc:
        for path in remove_on_failure:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
                Ledger(path.parent).forget(path.name)  # its digest was recorded from a bad file
        raise WeightFileError(f"{exc}; removed the downloaded file(s), run again to download") from None
