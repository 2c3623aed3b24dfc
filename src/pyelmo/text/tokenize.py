"""Moses-style tokenization of raw text, the same as the pretraining corpus uses."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u2060\ufeff\ufffd]")
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})
_DASH = re.compile(r"(?<=\S)--(?=\S)")


@lru_cache(maxsize=4)
def _moses(lang: str):
    from sacremoses import MosesTokenizer

    return MosesTokenizer(lang=lang)


def normalize_text(text: str) -> str:
    """NFC, ASCII quotes, control characters to spaces, ``a--b`` -> ``a -- b``, collapsed whitespace."""
    text = unicodedata.normalize("NFC", text)
    text = _CTRL.sub(" ", text).translate(_QUOTES)
    text = _DASH.sub(" -- ", text)
    return " ".join(text.split())


def tokenize(text: str, lang: str = "en") -> list[str]:
    """Normalise and split raw text into tokens (``"the bank."`` -> ``["the", "bank", "."]``), no HTML escaping."""
    return " ".join(_moses(lang).tokenize(normalize_text(text), escape=False)).split()
