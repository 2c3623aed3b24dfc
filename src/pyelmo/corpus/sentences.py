"""Sentence splitting (of raw text for the corpus build, of tokens for the task models' biLM
context), tokenization (Moses-style, or a language's word segmenter) and the length filter (run in
the build's worker processes)."""

from __future__ import annotations

import re
from typing import Sequence

from pyelmo.text.tokenize import HAN, normalize_text, tokenize

MIN_TOKENS = 3
MAX_TOKENS = 200

_SEG = None


def init_worker() -> None:
    """Load the sentence segmenter in this process (the corpus build's worker initializer)."""
    global _SEG
    import pysbd

    _SEG = pysbd.Segmenter(language="en", clean=False)


_ABBREV = frozenset(
    "mr mrs ms dr st jr sr prof gen col capt lt sgt rev hon gov sen rep pres messrs mme mlle "
    "vs etc e.g i.e cf viz al no nos vol vols ch chap p pp fig figs art sec inc co corp ltd bros "
    "mt ft jan feb mar apr jun jul aug sep sept oct nov dec esq ed eds repr trans approx dept univ".split()
)


def _is_abbreviation(word: str) -> bool:
    """A word whose final period does not end a sentence: a known abbreviation or an initial."""
    w = word.lstrip("\"'(\u201c\u2018[").lower()
    return w in _ABBREV or (len(w) == 1 and w.isalpha())


_CAND = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """Rule-based sentence split: cut after ``.``, ``!`` or ``?`` (plus closing quotes or
    brackets) when whitespace and a capital letter or digit follow, unless the period
    ends a known abbreviation (``Mr.``, ``e.g.``) or a single-letter initial.  This also
    splits inside quoted dialogue, which pysbd keeps whole.  Pieces still longer than
    60 words are handed to pysbd."""
    out: list[str] = []
    start = 0
    for m in _CAND.finditer(text):
        if text[m.start()] == ".":
            word = text[start : m.start()].rsplit(None, 1)[-1] if text[start : m.start()].strip() else ""
            if _is_abbreviation(word):
                continue
        out.append(text[start : m.end()].strip())
        start = m.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    final: list[str] = []
    for piece in out:
        if piece.count(" ") >= 60:
            final.extend(s.strip() for s in _SEG.segment(piece) if s.strip())
        else:
            final.append(piece)
    return final


#: A Chinese sentence end: full-width or ASCII ``。！？!?`` (with the closing quotes and brackets that follow),
#: or an ASCII period between two Chinese characters (as informal text writes it).
_ZH_END = re.compile(f"[\u3002\uff01\uff1f!?]+[\"'\u201d\u2019\u300d\u300f\uff09)\u3011\u300b]*|(?<=[{HAN}])\\.(?=[{HAN}])")


def split_chinese_sentences(text: str) -> list[str]:
    """Cut Chinese text after each sentence end (``。！？!?`` and the closing quotes or brackets after them,
    or an ASCII ``.`` between Chinese characters); the pieces are stripped and empty ones dropped."""
    out, start = [], 0
    for m in _ZH_END.finditer(text):
        out.append(text[start:m.end()].strip())
        start = m.end()
    out.append(text[start:].strip())
    return [s for s in out if s]


_ENDS = frozenset(".!?")
_CLOSERS = frozenset({")", "]", "}", "\u201d", "\u2019", "\u00bb"})
_OPENERS = frozenset("\"'\u201c\u2018([")


def sentence_spans(tokens: Sequence[str], max_tokens: int) -> list[tuple[int, int]]:
    """``(start, end)`` token spans of the sentences of a tokenized line.

    The rules of :func:`split_sentences`, applied to tokens: a sentence ends after a token made of ``.``, ``!`` or ``?`` only (with the
    closing brackets, and a ``"`` that closes a quote opened in the sentence, that follow it)
    when the next token starts with a capital letter, a digit or an opening quote or bracket,
    unless the ``.`` follows a known abbreviation or a single letter.  A sentence longer than
    ``max_tokens`` (the biLM's training length) is cut into equal chunks of at most that many.
    """
    spans: list[tuple[int, int]] = []
    start, i, n = 0, 0, len(tokens)
    while i < n:
        token = tokens[i]
        if not token or not set(token) <= _ENDS:
            i += 1
            continue
        quotes = sum(t == '"' for t in tokens[start:i])
        j = i + 1
        while j < n and (tokens[j] in _CLOSERS or (tokens[j] == '"' and quotes % 2 == 1)):
            quotes += tokens[j] == '"'
            j += 1
        follows = tokens[j] if j < n else ""
        opens = follows[:1].isupper() or follows[:1].isdigit() or follows[:1] in _OPENERS
        if follows and opens and not (token == "." and i > start and _is_abbreviation(tokens[i - 1])):
            spans.append((start, j))
            start = j
        i = j
    if start < n:
        spans.append((start, n))
    chunked = []
    for a, b in spans:
        pieces = -(-(b - a) // max_tokens)
        size, extra = divmod(b - a, pieces)
        for k in range(pieces):
            end = a + size + (k < extra)
            chunked.append((a, end))
            a = end
    return chunked


def splits_like_english(lang: str) -> bool:
    """Whether text of ``lang`` is cut into sentences by :func:`split_sentences` (and pysbd), not at
    ``。！？`` (:func:`split_chinese_sentences`: Chinese and Japanese)."""
    return lang not in ("zh", "ja")


def tokenize_units(units: list[str], presplit: bool, lang: str = "en") -> tuple[list[str], int, int]:
    """Sentence-split (unless ``presplit``), tokenize and length-filter ``units``.

    ``lang``: ``en`` or another Moses language (English sentence rules, Moses tokens), or ``zh`` or ``ja``
    (sentences end at ``。！？``; the language's word segmenter: ``tokenize(s, lang)``).
    Returns (kept sentences as space-joined tokens, number too short, number too long).
    """
    if _SEG is None and not presplit and splits_like_english(lang):
        init_worker()
    kept: list[str] = []
    short = long = 0
    for unit in units:
        unit = normalize_text(unit)
        if not unit:
            continue
        if presplit:
            sents = [unit]
        else:
            sents = split_sentences(unit) if splits_like_english(lang) else split_chinese_sentences(unit)
        for sent in sents:
            toks = tokenize(sent, lang)
            if len(toks) < MIN_TOKENS:
                short += 1
            elif len(toks) > MAX_TOKENS:
                long += 1
            else:
                kept.append(" ".join(toks))
    return kept, short, long


def tokenize_batch(task: tuple[str, bool, str, list[str]]) -> tuple[str, list[str], int, int, int]:
    """One batch of the corpus build, ``(source, presplit, lang, units)`` -> ``(source, kept, too short,
    too long, number of units)``: ``tokenize_units`` for a worker process."""
    name, presplit, lang, units = task
    kept, short, long = tokenize_units(units, presplit, lang)
    return name, kept, short, long, len(units)
