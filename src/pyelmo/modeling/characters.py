"""Tokens to character ids, exactly as the original ELMo maps them.

A token is its UTF-8 bytes (0-255), cut to ``max_chars - 2`` bytes and wrapped as
``[BOW, bytes..., EOW, PAD, ...]``. The sentence markers ``<S>``/``</S>`` are whole
pseudo-tokens. Every id is shifted by +1 so that 0 means "no token here".
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

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
    token positions (the token mask is ``ids.gt(0).any(-1)``).
    """
    longest = max((len(s) for s in batch), default=0)
    ids = torch.zeros(len(batch), longest, max_chars, dtype=torch.long)
    for row, sentence in enumerate(batch):
        if sentence:
            ids[row, : len(sentence)] = torch.tensor([token_to_ids(t, max_chars) for t in sentence])
    return ids
