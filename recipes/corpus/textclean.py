"""Text-cleaning helpers of the source readers (:mod:`recipes.corpus.sources`): prose tests, tags and web
addresses (``squash`` and ``find_file`` are the library's)."""

from __future__ import annotations

import re

from pyelmo.corpus.textclean import find_file, squash

__all__ = ["TAG", "URL", "find_file", "is_prose", "mostly_letters", "squash"]


def is_prose(par: str, share: float = 0.7) -> bool:
    """At least 4 words, mostly letters (see :func:`mostly_letters`)."""
    return len(par.split()) >= 4 and mostly_letters(par, share)


def mostly_letters(text: str, share: float = 0.7) -> bool:
    """True when at least ``share`` of the non-space characters are letters."""
    chars = [c for c in text if not c.isspace()]
    return bool(chars) and sum(c.isalpha() for c in chars) >= share * len(chars)


#: an HTML or XML tag
TAG = re.compile(r"<[^>]*>")
#: a web address
URL = re.compile(r"https?://\S+|www\.\S+")
