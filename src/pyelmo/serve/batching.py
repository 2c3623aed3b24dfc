"""Grouping concurrent requests' sentences into one biLM call, off the event loop.

One worker thread owns the model. Requests put their sentences on a queue and wait on
a future; the worker takes the first waiting request, keeps collecting others for at
most ``max_wait`` seconds (or until ``max_tokens`` token positions are gathered), embeds
them all with one ``embed_batch`` call and hands every request its own rows. Under
load the model therefore sees large batches (where it is most efficient per token)
instead of one sentence at a time; a lone request waits at most ``max_wait``.

The embedder is stateless, so a sentence's vectors do not depend on which other
sentences shared its batch (float rounding aside). Other model work (LM predictions)
runs on the same thread between batches, so the model is never used by two threads.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

#: Default maximum time the first request of a batch waits for others (seconds).
DEFAULT_MAX_WAIT = 0.005
#: Default token positions (sentences x longest sentence) per biLM call.
DEFAULT_MAX_BATCH_TOKENS = 4096


@dataclass
class _EmbedJob:
    sentences: list[list[str]]
    future: Future = field(default_factory=Future)

    @property
    def n_tokens(self) -> int:
        return sum(len(s) for s in self.sentences)


@dataclass
class _CallJob:
    function: Callable[[], Any]
    future: Future = field(default_factory=Future)


_STOP = object()


@dataclass
class BatchStats:
    """Counters since start: biLM calls, requests and sentences embedded."""

    calls: int = 0
    requests: int = 0
    sentences: int = 0


class Batcher:
    """A queue in front of ``embedder.embed_batch`` with a maximum wait; ``batching=False``
    embeds each request alone, in arrival order (the comparison point of the load test)."""

    def __init__(self, embedder, *, max_wait: float = DEFAULT_MAX_WAIT,
                 max_tokens: int = DEFAULT_MAX_BATCH_TOKENS, batching: bool = True) -> None:
        self.embedder = embedder
        self.max_wait = max_wait
        self.max_tokens = max_tokens
        self.batching = batching
        self.stats = BatchStats()
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="pyelmo-batcher", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ submitting

    def submit(self, sentences: Sequence[Sequence[str]]) -> Future:
        """A future of one ``(L, n_tokens, D)`` float32 array per sentence."""
        if not self._thread.is_alive():
            raise RuntimeError("the batcher is stopped")
        job = _EmbedJob([list(s) for s in sentences])
        self._queue.put(job)
        return job.future

    def call(self, function: Callable[[], Any]) -> Future:
        """Run ``function()`` on the model thread, between batches."""
        if not self._thread.is_alive():
            raise RuntimeError("the batcher is stopped")
        job = _CallJob(function)
        self._queue.put(job)
        return job.future

    async def embed(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """``submit`` for async code: awaits the vectors without blocking the event loop."""
        return await asyncio.wrap_future(self.submit(sentences))

    async def run(self, function: Callable[[], Any]) -> Any:
        """``call`` for async code."""
        return await asyncio.wrap_future(self.call(function))

    def embed_batch(self, batch: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Blocking, ``ElmoEmbedder``-like: lets synchronous helpers use the batcher."""
        return self.submit(batch).result()

    def close(self) -> None:
        """Finish the queued work, then stop the thread."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    # ------------------------------------------------------------------ the worker

    def _run(self) -> None:
        pending = None
        while True:
            job = pending if pending is not None else self._queue.get()
            pending = None
            if job is _STOP:
                return
            if isinstance(job, _CallJob):
                _settle(job.future, job.function)
                continue
            jobs = [job]
            if self.batching:
                pending = self._collect(jobs)
            self._embed(jobs)

    def _collect(self, jobs: list[_EmbedJob]):
        """Add waiting embed jobs to ``jobs`` until the wait or token budget runs out;
        returns a job taken from the queue that does not fit (or None)."""
        deadline = time.monotonic() + self.max_wait
        tokens = jobs[0].n_tokens
        while tokens < self.max_tokens:
            timeout = deadline - time.monotonic()
            try:
                job = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
            except queue.Empty:
                return None
            if not isinstance(job, _EmbedJob) or tokens + job.n_tokens > self.max_tokens:
                return job
            jobs.append(job)
            tokens += job.n_tokens
        return None

    def _embed(self, jobs: list[_EmbedJob]) -> None:
        live = [j for j in jobs if j.future.set_running_or_notify_cancel()]
        if not live:
            return
        sentences = [s for j in live for s in j.sentences]
        # Sorted by length so that padding is small when sentence lengths differ.
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        try:
            vectors = self.embedder.embed_batch([sentences[i] for i in order])
        except BaseException as exc:  # handed to every waiting request; the thread keeps serving
            for j in live:
                j.future.set_exception(exc)
            return
        by_input = [None] * len(sentences)
        for position, i in enumerate(order):
            by_input[i] = vectors[position]
        start = 0
        for j in live:
            j.future.set_result(by_input[start : start + len(j.sentences)])
            start += len(j.sentences)
        self.stats.calls += 1
        self.stats.requests += len(live)
        self.stats.sentences += len(sentences)


def _settle(future: Future, function: Callable[[], Any]) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(function())
    except BaseException as exc:
        future.set_exception(exc)
