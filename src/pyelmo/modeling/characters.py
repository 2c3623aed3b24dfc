"""Tokens to character ids, exactly as the original ELMo maps them.

A token is its UTF-8 bytes (0-255), cut to ``max_chars - 2`` bytes and wrapped as
``[BOW, bytes..., EOW, PAD, ...]``. The sentence markers ``<S>``/``</S>`` are whole
pseudo-tokens. Every id is shifted by +1 so that 0 means "no token here".
"""

from __future__ import annotations

from functools import lru_cache
from itertools import chain
from typing import Sequence

import numpy as np
import torch

MAX_CHARS = 50
BOS_CHAR = 256  # beginning of sentence
EOS_CHAR = 257  # end of sentence
BOW_CHAR = 258  # beginning of word
EOW_CHAR = 259  # end of word
PAD_CHAR = 260  # padding inside a word

BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"


def _marker(char: int, max_chars: int) -> tuple[int, ...]:
    ids = [PAD_CHAR + 1] * max_chars
    ids[0], ids[1], ids[2] = BOW_CHAR + 1, char + 1, EOW_CHAR + 1
    return tuple(ids)


@lru_cache(maxsize=16_384)  # ~0.5 kB an entry; the frequent tokens of any text fit
def token_to_ids(token: str, max_chars: int = MAX_CHARS) -> tuple[int, ...]:
    """The ``max_chars`` character ids (already shifted by +1) of one token."""
    if token == BOS_TOKEN:
        return _marker(BOS_CHAR, max_chars)
    if token == EOS_TOKEN:
        return _marker(EOS_CHAR, max_chars)
    data = token.encode("utf-8", errors="surrogatepass")[: max_chars - 2]
    ids = [PAD_CHAR + 1] * max_chars
    ids[0] = BOW_CHAR + 1
    ids[1 : len(data) + 1] = [b + 1 for b in data]
    ids[len(data) + 1] = EOW_CHAR + 1
    return tuple(ids)


def bos_ids(max_chars: int = MAX_CHARS) -> tuple[int, ...]:
    return token_to_ids(BOS_TOKEN, max_chars)


def eos_ids(max_chars: int = MAX_CHARS) -> tuple[int, ...]:
    return token_to_ids(EOS_TOKEN, max_chars)


def batch_to_ids(batch: Sequence[Sequence[str]], max_chars: int = MAX_CHARS) -> torch.Tensor:
    """Character ids of a batch of tokenized sentences: LongTensor ``(B, T, max_chars)``.

    ``T`` is the longest sentence's length; shorter sentences are padded with all-zero
    token positions (the token mask is ``ids.gt(0).any(-1)``). Each distinct token is
    encoded once; the rows are built with array operations (the ids of :func:`token_to_ids`).
    """
    lengths = np.fromiter(map(len, batch), dtype=np.int64, count=len(batch))
    longest = int(lengths.max()) if len(batch) else 0
    ids = np.zeros((len(batch) * longest, max_chars), dtype=np.int64)
    tokens = list(chain.from_iterable(batch))
    if tokens:
        distinct = list(dict.fromkeys(tokens))
        code = {token: k for k, token in enumerate(distinct)}
        rows = _distinct_rows(distinct, max_chars)[np.fromiter(map(code.__getitem__, tokens), dtype=np.int64,
                                                               count=len(tokens))]
        # position of each token in the (B * T) grid: its sentence's first position + its place in the sentence
        first = np.repeat(np.arange(len(batch), dtype=np.int64) * longest - (np.cumsum(lengths) - lengths), lengths)
        ids[first + np.arange(len(tokens), dtype=np.int64)] = rows
    return torch.from_numpy(ids.reshape(len(batch), longest, max_chars))


def _distinct_rows(distinct: list[str], max_chars: int) -> np.ndarray:
    """The ``(N, max_chars)`` ids of ``N`` distinct tokens, as :func:`token_to_ids` gives them."""
    if max_chars < 3:  # no room for a character: the token-by-token rule
        return np.array([token_to_ids(t, max_chars) for t in distinct], dtype=np.int64).reshape(-1, max_chars)
    encoded = [t.encode("utf-8", errors="surrogatepass")[: max_chars - 2] for t in distinct]
    n = len(encoded)
    sizes = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
    data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    rows = np.full((n, max_chars), PAD_CHAR + 1, dtype=np.int64)
    rows[:, 0] = BOW_CHAR + 1
    owner = np.repeat(np.arange(n), sizes)
    column = np.arange(1, len(data) + 1) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    rows[owner, column] = data.astype(np.int64) + 1
    rows[np.arange(n), sizes + 1] = EOW_CHAR + 1
    for marker in (BOS_TOKEN, EOS_TOKEN):  # whole pseudo-tokens, not their letters
        if marker in distinct:
            rows[distinct.index(marker)] = token_to_ids(marker, max_chars)
    return rows
