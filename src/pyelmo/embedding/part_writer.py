"""Writing an embedding run's parts in a background thread, while the caller computes the next vectors."""

from __future__ import annotations

import queue
import threading
from typing import Callable, Iterable, Iterator

import numpy as np

from pyelmo.embedding.parts import Parts

_END, _DONE, _ABORT = object(), object(), object()  # a segment's end; the run's; the run stopped


class _Cancelled(Exception):
    """The run stopped in the middle of a segment: its part is left unfinished (not renamed)."""


class PartWriter:
    """Writes each segment's datasets into its part (:meth:`Parts.write`), in a background thread fed by a
    queue of at most ``queue_size`` sentences (``background=False``: in the caller's thread, as it goes).

    The thread makes the same calls in the same order as the caller's thread would, so the files are the same
    bytes. Used as a context manager: on leaving, every queued segment is written; a segment not queued
    whole when the caller raises (a Ctrl-C, an input error) is left unfinished, as it would be without the
    thread. An error of the writer is raised again in the caller's thread, at its next dataset or on leaving.
    ``prepare`` turns a computed array into the stored one (in the writer's thread).
    """

    def __init__(self, parts: Parts, prepare: Callable[[np.ndarray], np.ndarray], queue_size: int,
                 background: bool = True) -> None:
        self.parts, self.prepare = parts, prepare
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._thread = threading.Thread(target=self._run, name="pyelmo-part-writer", daemon=True) \
            if background else None
        self._error: BaseException | None = None
        self._stop = threading.Event()  # a second Ctrl-C while leaving: stop at the next dataset

    def __enter__(self) -> "PartWriter":
        if self._thread is not None:
            self._thread.start()
        return self

    def write(self, segment: int, items: Iterable[tuple[str, np.ndarray]]) -> None:
        """Store ``items`` (``(key, array)``, consumed here) as the part of ``segment``."""
        if self._thread is None:
            self.parts.write(segment, ((key, self.prepare(array)) for key, array in items))
            return
        self._put(segment)
        for item in items:
            self._put(item)
        self._put(_END)

    def __exit__(self, kind, value, traceback) -> None:
        if self._thread is None:
            return
        try:
            self._put(_DONE if kind is None else _ABORT, check=kind is None)
            self._thread.join()
        except BaseException:  # interrupted while the queue drains
            self._stop.set()
            try:
                self._queue.put_nowait(_ABORT)
            except queue.Full:
                pass  # the writer takes the next dataset, sees the stop and ends
            self._thread.join()
            raise
        if kind is None and self._error is not None:
            raise self._error

    def _put(self, message, check: bool = True) -> None:
        """Queue ``message`` while the writer runs; with ``check``, its error first if it stopped on one."""
        while self._thread.is_alive():
            if check and self._error is not None:
                break
            try:
                self._queue.put(message, timeout=0.1)
                return
            except queue.Full:
                pass
        if check and self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            while (message := self._queue.get()) is not _DONE and message is not _ABORT:
                self.parts.write(message, self._items())
        except _Cancelled:
            pass
        except BaseException as error:  # raised again in the caller's thread
            self._error = error

    def _items(self) -> Iterator[tuple[str, np.ndarray]]:
        while (item := self._queue.get()) is not _END:
            if item is _ABORT or self._stop.is_set():
                raise _Cancelled
            yield item[0], self.prepare(item[1])
