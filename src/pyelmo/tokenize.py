"""Moses-style tokenization of raw text, the same as the pretraining corpus uses."""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=4)
def _moses(lang: str):
    from sacremoses import MosesTokenizer

    return MosesTokenizer(lang=lang)


def tokenize(text: str, lang: str = "en") -> list[str]:
    """Split raw text into tokens (``"the bank."`` -> ``["the", "bank", "."]``), no HTML escaping."""
    return " ".join(_moses(lang).tokenize(text.strip(), escape=False)).split()
