"""Grouping sentences into batches: the embedder's defaults and the one token-budget batcher.

Pure Python (no torch), so that ``pyelmo embed --help`` can show the defaults quickly.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence, TypeVar

#: Sentences per batch (stateful mode, or without a token budget).
DEFAULT_BATCH_SIZE = 64
#: Stateless mode sorts this many batches' worth of sentences by length.
SORT_WINDOW = 16
#: Stateless mode: token positions (rows x longest row, with <S> and </S>) per batch.
DEFAULT_MAX_TOKENS = 4096
#: Token-encoder outputs kept across batches (LRU); memory: this many projection_dim vectors.
DEFAULT_TOKEN_CACHE_SIZE = 32_768

Order = TypeVar("Order")  # a list or a numpy array of sentence indexes


def token_budget_batches(order: Order, lengths: Sequence[int], batch_size: int, max_tokens: int | None,
                         min_rows: int = 1) -> list[Order]:
    """Cut ``order`` (sentence indexes sorted by length) into consecutive batches (slices of ``order``).

    With ``max_tokens``: each batch holds as many sentences as fit in ``max_tokens`` token
    positions counted as rows x (longest + 2) (the biLM adds ``<S>`` and ``</S>``), but at
    least ``min_rows`` (a too small last batch takes rows from the one before, or joins it).
    Without: ``batch_size`` sentences per batch.
    """
    n = len(order)
    if max_tokens is None:
        return [order[i : i + batch_size] for i in range(0, n, batch_size)]
    bounds: list[list[int]] = []
    start = 0
    while start < n:
        end, longest = start + 1, lengths[order[start]]
        while end < n:
            longest_next = max(longest, lengths[order[end]])
            if end - start >= min_rows and (end - start + 1) * (longest_next + 2) > max_tokens:
                break
            longest, end = longest_next, end + 1
        bounds.append([start, end])
        start = end
    if len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] < min_rows:
        need = min_rows - (bounds[-1][1] - bounds[-1][0])
        if bounds[-2][1] - bounds[-2][0] - need >= min_rows:  # move the previous batch's longest rows over
            bounds[-2][1] -= need
            bounds[-1][0] -= need
        else:
            last = bounds.pop()
            bounds[-1][1] = last[1]
    return [order[a:b] for a, b in bounds]


def chunks(items: Iterable, size: int) -> Iterator[list]:
    """Consecutive lists of ``size`` items (the last one shorter)."""
    chunk: list = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
