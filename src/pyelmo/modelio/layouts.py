"""The weight files' names and layouts, without PyTorch: pyelmo's native folder's file names, and the released
bilm-tf weight file (options JSON + HDF5) read as the model's parameters, in their layout (aligned numpy arrays),
with the weights' fingerprint.

:func:`read_weights` is what :func:`pyelmo.modelio.weights.load_bilm_hdf5` builds a model from; :func:`prefetch`
runs it in a process (or a thread) of its own, so that a command reads and arranges the weights (and hashes them)
while PyTorch is imported.
:func:`hdf5_layout` is the one description of the bilm-tf file's layout, by the model's parameter names.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import sys
import threading
from concurrent.futures import Future
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
#: The interpreter's switch interval (seconds) while :func:`prefetch` reads (Python's default is 0.005).
PREFETCH_SWITCH_INTERVAL = 0.0005
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


#: Where :func:`read_weights` puts the arrays it makes: :func:`aligned_empty`, or :meth:`SharedArrays.empty`.
Empty = Callable[[tuple[int, ...]], np.ndarray]


class SharedArrays:
    """Arrays on one memory file (``os.memfd_create``), each at an offset of its own aligned to the page: what a
    forked reader fills and its parent then maps whole (:func:`prefetch`). ``offsets``: each array's, by address."""

    def __init__(self, fd: int) -> None:
        self.fd, self.size = fd, 0
        self.offsets: dict[int, int] = {}

    def empty(self, shape: tuple[int, ...]) -> np.ndarray:
        count = int(np.prod(shape, dtype=np.int64))
        length, offset = max(4 * count, 1), self.size
        self.size += -(-length // mmap.ALLOCATIONGRANULARITY) * mmap.ALLOCATIONGRANULARITY
        os.ftruncate(self.fd, self.size)
        array = np.frombuffer(mmap.mmap(self.fd, length, offset=offset), dtype=np.float32, count=count).reshape(shape)
        self.offsets[array.ctypes.data] = offset
        return array


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


def prefetch(options_file: PathLike, weight_file: PathLike) -> Future | ForkedRead:
    """:func:`read_weights` (with the fingerprint) started beside the caller: its :class:`ReadWeights`, or the error it
    raised, when ``result()`` is asked for. In a process of its own (:class:`ForkedRead`) where one can be forked
    safely (Linux, one thread, PyTorch not imported yet: a command's start), else in a thread."""
    if "torch" not in sys.modules and threading.active_count() == 1 and hasattr(os, "memfd_create"):
        try:
            return ForkedRead(options_file, weight_file)
        except OSError:  # no memory file or no fork here: a thread
            pass
    return _prefetch_thread(options_file, weight_file)


class ForkedRead:
    """:func:`read_weights` in a forked process, on :class:`SharedArrays` this process maps when it asks for the
    :meth:`result`: the reading and hashing take nothing from this process's interpreter (a thread takes turns
    with an import). Where the reader fails, :meth:`result` reads here, so the error is the one a read without
    prefetch gives."""

    def __init__(self, options_file: PathLike, weight_file: PathLike) -> None:
        self.files = (options_file, weight_file)
        self._read: ReadWeights | None = None
        self.fd = os.memfd_create("pyelmo-weights", os.MFD_CLOEXEC)
        receive, send = os.pipe()
        try:
            self.pid = os.fork()
        except OSError:
            for fd in (self.fd, receive, send):
                os.close(fd)
            raise
        if self.pid == 0:  # the reader: reports on the pipe and exits, running none of this process's exit handlers
            status = 1
            try:
                os.close(receive)
                arrays = SharedArrays(self.fd)
                read = read_weights(options_file, weight_file, with_fingerprint=True, empty=arrays.empty)
                report = {"size": arrays.size, "fingerprint": read.fingerprint, "file_shapes": read.file_shapes,
                          "parameters": [[name, arrays.offsets[array.ctypes.data], array.shape]
                                         for name, array in read.parameters.items()]}
                with os.fdopen(send, "w") as pipe:
                    json.dump(report, pipe)
                status = 0
            finally:
                os._exit(status)
        os.close(send)
        self.receive = receive

    def result(self) -> ReadWeights:
        if self._read is None:
            with os.fdopen(self.receive) as pipe:
                text = pipe.read()
            os.waitpid(self.pid, 0)
            try:
                report = json.loads(text) if text else None
                self._read = None if report is None else self._mapped(report)
            finally:
                os.close(self.fd)
            if self._read is None:  # the reader failed: read here, for its error
                self._read = read_weights(*self.files, with_fingerprint=True)
        return self._read

    def _mapped(self, report: dict) -> ReadWeights:
        whole = mmap.mmap(self.fd, report["size"])
        read = ReadWeights(load_options(self.files[0]), fingerprint=report["fingerprint"],
                           file_shapes={name: tuple(shape) for name, shape in report["file_shapes"].items()})
        for name, offset, shape in report["parameters"]:
            count = int(np.prod(shape, dtype=np.int64))
            read.parameters[name] = np.frombuffer(whole, np.float32, count, offset).reshape(shape)
        return read


def _prefetch_thread(options_file: PathLike, weight_file: PathLike) -> Future:
    future: Future = Future()
    interval = sys.getswitchinterval()

    def run() -> None:
        try:
            read, error = read_weights(options_file, weight_file, with_fingerprint=True), None
        except BaseException as exc:  # handed to whoever asks for the result
            read, error = None, exc
        sys.setswitchinterval(interval)
        if error is None:
            future.set_result(read)
        else:
            future.set_exception(error)

    # the thread takes the interpreter back soon after each numpy call, not after an import's full interval
    sys.setswitchinterval(min(interval, PREFETCH_SWITCH_INTERVAL))
    threading.Thread(target=run, name="pyelmo-prefetch", daemon=True).start()
    return future
