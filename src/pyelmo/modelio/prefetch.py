"""A bilm-tf model's weights read beside the process (:func:`prefetch`): a command starts the read before it imports
PyTorch, and the file is read, arranged and hashed (:func:`pyelmo.modelio.layouts.read_weights`) meanwhile; in a
forked process where one forks safely, else in a thread. No PyTorch here."""

from __future__ import annotations

import json
import mmap
import os
import sys
import threading
from concurrent.futures import Future

import numpy as np

from pyelmo.fileio import PathLike
from pyelmo.modelio.layouts import ReadWeights, load_options, read_weights

#: The interpreter's switch interval (seconds) while :func:`prefetch` reads (Python's default is 0.005).
PREFETCH_SWITCH_INTERVAL = 0.0005


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
                self._read = self._mapped(json.loads(text)) if text else None
            except ValueError:  # a report cut short: the reader was stopped
                self._read = None
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
