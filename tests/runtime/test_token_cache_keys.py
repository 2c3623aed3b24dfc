"""The token cache's keys, made for all rows at once, are each row's int16 bytes."""

from __future__ import annotations

import torch

from pyelmo.modeling.characters import batch_to_ids
from pyelmo.runtime.token_cache import row_keys


def test_row_keys_are_each_rows_int16_bytes():
    ids = batch_to_ids([["the", "cat", "漢字", "😀" * 20], ["<S>", "x" * 60]]).reshape(-1, 50)
    assert row_keys(ids) == [row.tobytes() for row in ids.to(torch.int16).numpy()]
    assert row_keys(ids[:, ::2]) == [row.tobytes() for row in ids[:, ::2].to(torch.int16).numpy()]  # not contiguous
    assert row_keys(ids[:0]) == []
