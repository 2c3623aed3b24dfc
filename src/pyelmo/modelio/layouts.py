"""The weight files' names and layouts, without PyTorch: pyelmo's native folder's file names, and the released
bilm-tf weight file (options JSON + HDF5) read as the model's parameters, in their layout (aligned numpy arrays),
with the weights' fingerprint.

:func:`read_weights` is what :func:`pyelmo.modelio.weights.load_bilm_hdf5` builds a model from;
:func:`pyelmo.modelio.prefetch.prefetch` runs it beside the process, so that a command reads and arranges the
weights (and hashes them) while PyTorch is imported.
:func:`hdf5_layout` is the one description of the bilm-tf file's layout, by the model's parameter names.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from pyelmo.config import ElmoConfig
from pyelmo.errors import ConfigError, WeightFileError
from pyelmo.fileio import PathLike

#: pyelmo's native model folder: its configuration and its weights.
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
#: The side of the square tiles a transposed copy moves at a time (a tile of each array stays in cache).
TILE = 32


def readable_file(path: PathLike, what: str) -> Path:
    """``path`` if it is a readable file, else a ``WeightFileError`` naming ``what`` it should be."""
    path = Path(path)
    if not path.exists():
        raise WeightFileError(f"{what} not found: {path}")
    if path.is_dir():
        raise WeightFileError(f"{what} is a directory, expected a file: {path}")
    if not os.access(path, os.R_OK):
        raise WeightFileError(f"{what} is not readable: {path}")
    return path


def config_from_options(options: dict, source: PathLike) -> ElmoConfig:
    """``ElmoConfig.from_options``, with ``source`` (the file it came from) named in a ``ConfigError``."""
    try:
        return ElmoConfig.from_options(options)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def load_options(path: PathLike) -> ElmoConfig:
    """Read a released options JSON file into an ``ElmoConfig``."""
    path = readable_file(path, "options file")
    try:
        options = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WeightFileError(f"options file {path} is not valid JSON: {exc}") from None
    if not isinstance(options, dict):
        raise WeightFileError(f"options file {path} must hold a JSON object")
    return config_from_options(options, path)


def _cell(direction: int, layer: int) -> str:
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


def hdf5_layout(config: ElmoConfig) -> list[tuple[str, tuple[str, ...], str]]:
    """(dataset name, the names of the model parameters it holds, how to convert) for every dataset of the
    released layout.

    Conversions: ``copy``; ``T`` (transpose); ``char`` (drop/add the padding row 0); ``conv`` (TF HWIO
    ``(1, w, in, out)`` <-> torch ``(out, in, w)``); ``W0`` (``W_0``: its input rows and its recurrent rows,
    each transposed, are two parameters).
    """
    enc = "token_encoder"
    layout = [("char_embed", (f"{enc}.char_embedding.weight",), "char")]
    for i in range(len(config.char_cnn.filters)):
        layout.append((f"CNN/W_cnn_{i}", (f"{enc}.convolutions.{i}.weight",), "conv"))
        layout.append((f"CNN/b_cnn_{i}", (f"{enc}.convolutions.{i}.bias",), "copy"))
    for k in range(config.char_cnn.n_highway):
        for part in ("carry", "transform"):
            layout.append((f"CNN_high_{k}/W_{part}", (f"{enc}.highways.{k}.{part}.weight",), "T"))
            layout.append((f"CNN_high_{k}/b_{part}", (f"{enc}.highways.{k}.{part}.bias",), "copy"))
    layout.append(("CNN_proj/W_proj", (f"{enc}.projection.weight",), "T"))
    layout.append(("CNN_proj/b_proj", (f"{enc}.projection.bias",), "copy"))
    for d in (0, 1):  # forward, backward
        for l in range(config.lstm.n_layers):
            lstm = f"directions.{d}.{l}"
            layout.append((f"{_cell(d, l)}/W_0", (f"{lstm}.input_gates.weight", f"{lstm}.state_gates.weight"), "W0"))
            layout.append((f"{_cell(d, l)}/B", (f"{lstm}.input_gates.bias",), "copy"))
            layout.append((f"{_cell(d, l)}/W_P_0", (f"{lstm}.projection.weight",), "T"))
    return layout


def aligned_empty(shape: tuple[int, ...]) -> np.ndarray:
    """An uninitialised float32 array on memory of its own, mapped anonymously: page-aligned (so at
    :data:`pyelmo.runtime.rules.WEIGHT_ALIGNMENT`, which the planned linears keep as it is:
    :func:`pyelmo.runtime.linear.owned`), and without the huge-page advice numpy gives its large arrays (where the
    kernel compacts memory for such a page at its first touch, filling a fresh array can take many times as long)."""
    size = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(mmap.mmap(-1, max(4 * size, 1)), dtype=np.float32, count=size).reshape(shape)


#: Where :func:`read_weights` puts the arrays it makes: :func:`aligned_empty`, or another allocator of the same
#: arrays (:class:`pyelmo.modelio.prefetch.SharedArrays`).
Empty = Callable[[tuple[int, ...]], np.ndarray]


def transposed(array: np.ndarray, empty: Empty = aligned_empty) -> np.ndarray:
    """``array.T`` as a new aligned contiguous array, moved in square tiles (numpy's own transposed copy of a large
    array misses the cache on every element), in one numpy call: a thread doing it lets others run meanwhile."""
    rows, cols = array.shape
    out = empty((cols, rows))
    if rows % TILE or cols % TILE:  # not a whole number of tiles (small models): numpy's own
        out[...] = array.T
    else:
        out.reshape(cols // TILE, TILE, rows // TILE, TILE)[...] = \
            array.reshape(rows // TILE, TILE, cols // TILE, TILE).transpose(2, 3, 0, 1)
    return out


def _aligned_copy(array: np.ndarray, empty: Empty) -> np.ndarray:
    out = empty(array.shape)
    out[...] = array
    return out


def to_model_layout(array: np.ndarray, how: str, split: int, empty: Empty = aligned_empty) -> tuple[np.ndarray, ...]:
    """A dataset (float32, its file shape) as the parameters it holds (:func:`hdf5_layout`), new arrays from
    ``empty``; ``split``: the input rows of a ``W0``."""
    if how == "W0":
        return transposed(array[:split], empty), transposed(array[split:], empty)
    if how == "T":
        return (transposed(array, empty),)
    if how == "char":
        out = empty((array.shape[0] + 1, *array.shape[1:]))
        out[0] = 0.0
        out[1:] = array
        return (out,)
    if how == "conv":
        return (_aligned_copy(array[0].transpose(2, 1, 0), empty),)
    return (_aligned_copy(array, empty),)


def fingerprint(config_json: str, tensors: Iterable[tuple[str, tuple[int, ...], str, np.ndarray]]) -> str:
    """SHA-1 of a model's configuration and its tensors ``(name, shape, dtype name, contiguous array)``, by name:
    :func:`pyelmo.modelio.weights.model_fingerprint`'s digest."""
    h = hashlib.sha1()
    h.update(config_json.encode("utf-8"))
    for name, shape, dtype, array in sorted(tensors, key=lambda item: item[0]):
        h.update(f"{name}:{shape}:{dtype}".encode("utf-8"))
        h.update(array.reshape(-1).view(np.uint8))  # the bytes, not a copy of them
    return h.hexdigest()


@dataclass
class ReadWeights:
    """A bilm-tf weight file as read: its ``config``, each parameter by name (model layout, aligned float32),
    the shape of each dataset in the file (checked by the loader against the model), and the ``fingerprint``
    of those parameters (``None`` unless asked for)."""

    config: ElmoConfig
    parameters: dict[str, np.ndarray] = field(default_factory=dict)
    file_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    fingerprint: str | None = None


def read_weights(options_file: PathLike, weight_file: PathLike, expected: dict[str, tuple[int, ...]] | None = None,
                 with_fingerprint: bool = False, empty: Empty = aligned_empty) -> ReadWeights:
    """Read every dataset of :func:`hdf5_layout` from ``weight_file`` (checked: present, readable, finite; with
    ``expected``, each dataset's shape before it is read) into the model's layout, on arrays from ``empty``.
    ``with_fingerprint``: the parameters' fingerprint too (see :class:`ReadWeights`)."""
    import h5py

    config = load_options(options_file)
    weight_file = readable_file(weight_file, "weight file")
    read = ReadWeights(config)
    try:
        handle = h5py.File(weight_file, "r")
    except OSError as exc:
        raise WeightFileError(f"weight file {weight_file} is not a readable HDF5 file ({exc})") from None
    with handle:
        for name, params, how in hdf5_layout(config):
            try:  # a corrupt file fails here, inside h5py's structure reads, with RuntimeError or OSError
                dataset = handle[name] if name in handle else None
            except (OSError, RuntimeError, KeyError, ValueError) as exc:
                raise WeightFileError(f"weight file {weight_file} is corrupt: cannot read {name!r} ({exc})") from None
            if not isinstance(dataset, h5py.Dataset):
                raise WeightFileError(f"weight file {weight_file} has no dataset {name!r}")
            read.file_shapes[name] = dataset.shape
            if expected is not None:
                check_shape(weight_file, name, dataset.shape, expected[name])
            try:
                array = np.asarray(dataset[...], dtype=np.float32)
            except (OSError, RuntimeError, ValueError) as exc:
                raise WeightFileError(f"weight file {weight_file}: dataset {name!r} is unreadable ({exc})") from None
            if not np.isfinite(array).all():
                raise WeightFileError(f"weight file {weight_file}: dataset {name!r} holds NaN or infinite values")
            try:
                read.parameters.update(zip(params, to_model_layout(array, how, config.lstm.projection_dim, empty)))
            except (ValueError, IndexError):  # another shape: the loader, which knows the shape it needs, says so
                continue
    if with_fingerprint:
        read.fingerprint = fingerprint(config.to_json(), ((k, tuple(a.shape), "torch.float32", a)
                                                          for k, a in read.parameters.items()))
    return read


def check_shape(weight_file: PathLike, name: str, shape: tuple, expected: tuple) -> None:
    """A ``WeightFileError`` unless dataset ``name`` has the ``expected`` shape (the options imply it)."""
    if tuple(shape) != tuple(expected):
        raise WeightFileError(f"weight file {weight_file}: dataset {name!r} has shape {tuple(shape)}, "
                              f"the options imply {tuple(expected)}")
