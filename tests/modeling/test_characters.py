"""Character ids follow the spec: UTF-8 bytes, 48-byte cut, BOW/EOW/PAD, markers, +1 shift."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyelmo.modeling.characters import BOW_CHAR, EOW_CHAR, PAD_CHAR, batch_to_ids, token_to_ids


def test_ascii_token():
    ids = token_to_ids("bank")
    assert ids[:6] == (BOW_CHAR + 1, ord("b") + 1, ord("a") + 1, ord("n") + 1, ord("k") + 1, EOW_CHAR + 1)
    assert set(ids[6:]) == {PAD_CHAR + 1}
    assert len(ids) == 50


def test_markers_and_literal_marker_tokens():
    assert token_to_ids("<S>")[:3] == (259, 257, 260)
    assert token_to_ids("</S>")[:3] == (259, 258, 260)
    assert set(token_to_ids("<S>")[3:]) == {261}


def test_utf8_bytes_and_cut_at_48_bytes():
    ids = token_to_ids("é")  # two bytes
    assert ids[1:4] == (0xC3 + 1, 0xA9 + 1, EOW_CHAR + 1)
    long_ids = token_to_ids("x" * 500)
    assert long_ids[49] == EOW_CHAR + 1 and long_ids[48] == ord("x") + 1
    assert token_to_ids("漢" * 20)[49] == EOW_CHAR + 1  # 60 bytes, cut mid-character is fine


def test_batch_padding_and_mask():
    ids = batch_to_ids([["a", "b", "c"], ["d"], []])
    assert ids.shape == (3, 3, 50)
    mask = ids.gt(0).any(-1)
    assert mask.tolist() == [[True, True, True], [True, False, False], [False, False, False]]
    assert ids[1, 1:].eq(0).all()


def test_empty_batch():
    assert batch_to_ids([]).shape == (0, 0, 50)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.text(min_size=1, max_size=70).filter(lambda t: t.strip() == t and t), max_size=8), max_size=6))
def test_any_strings_round_trip_shapes_and_masks(batch):
    ids = batch_to_ids(batch)
    longest = max((len(s) for s in batch), default=0)
    assert ids.shape == (len(batch), longest, 50)
    mask = ids.gt(0).any(-1)
    assert mask.sum(-1).tolist() == [len(s) for s in batch]
    for row, sentence in enumerate(batch):
        for col, token in enumerate(sentence):
            data = token.encode("utf-8", errors="surrogatepass")[:48]
            if token in ("<S>", "</S>"):
                continue
            assert ids[row, col, 1 : 1 + len(data)].tolist() == [b + 1 for b in data]
            assert ids[row, col, 1 + len(data)] == EOW_CHAR + 1
    assert ids.dtype == torch.long


def _token_by_token(batch, max_chars=50):
    """The ids as ``batch_to_ids`` built them token by token before it was vectorised (the reference)."""
    longest = max((len(s) for s in batch), default=0)
    ids = torch.zeros(len(batch), longest, max_chars, dtype=torch.long)
    for row, sentence in enumerate(batch):
        if sentence:
            ids[row, : len(sentence)] = torch.tensor([token_to_ids(t, max_chars) for t in sentence])
    return ids


TRICKY = [
    [],
    [[]],
    [[], ["a"], []],
    [["Hello", ",", "world", "!", "--", "...", "\"", "'s", "(", ")"]],
    [["😀", "👩‍👩‍👧", "漢字", "日本語のテキスト", "ไทย", "é", "e\u0301", "\u00a0", "\t"]],
    [["\ud800", "x\udfffy", "\udc80\udc81"]],  # lone surrogates (surrogatepass)
    [["a" * 47, "a" * 48, "a" * 49, "a" * 500, "漢" * 17, "😀" * 13, "é" * 25]],  # cut at 48 bytes, mid-character too
    [["<S>", "</S>", "<S>x", "<s>", "the", "<S>"], ["</S>"], [""]],
    [["the", "the", "cat", "the"], ["cat"] * 40, []],
]


def test_vectorised_ids_equal_the_token_by_token_ids_on_tricky_text():
    for batch in TRICKY:
        for max_chars in (50, 10, 3):
            got, expected = batch_to_ids(batch, max_chars), _token_by_token(batch, max_chars)
            assert got.dtype == expected.dtype == torch.long and got.shape == expected.shape
            assert torch.equal(got, expected), (batch, max_chars)
            assert got.is_contiguous()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.text(max_size=60), max_size=8), max_size=6), st.sampled_from([50, 16, 5]))
def test_vectorised_ids_equal_the_token_by_token_ids_on_any_text(batch, max_chars):
    assert torch.equal(batch_to_ids(batch, max_chars), _token_by_token(batch, max_chars))
