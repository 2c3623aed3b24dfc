"""Tokenization of raw text: Moses-style (as the pretraining corpus), with word segmenters for
Chinese (jieba), Japanese (SudachiPy) and Thai (PyThaiNLP), which write no spaces between words.

``tokenize(text, lang)``: ``en`` (or another Moses language code) splits on spaces and
punctuation; ``zh``, ``ja``, ``th`` segment the runs of that script with its segmenter (an
optional extra, imported on first use) and tokenize the rest Moses-style; ``auto`` takes the
language from the script of the text (:func:`detect_language`).
"""

from __future__ import annotations

import re
import threading
import unicodedata
import warnings
from functools import lru_cache
from typing import Callable

from pyelmo.errors import InputError

_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u2060\ufeff\ufffd]")
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})
_DASH = re.compile(r"(?<=\S)--(?=\S)")

#: ``lang`` values with a word segmenter, and the language names messages use.
SEGMENTED = ("zh", "ja", "th")
LANGUAGE_NAMES = {"en": "English", "zh": "Chinese", "ja": "Japanese", "th": "Thai"}
#: What ``--lang`` accepts (``auto``: from the script of the text).
LANG_CHOICES = ("auto", "en", *SEGMENTED)

#: Chinese characters (the CJK unified ideographs and their extensions), as a regular-expression class body.
HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
_KANA = "\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff"
_CJK_MARKS = "\u3000-\u303f\uff00-\uffef"  # CJK punctuation and full-width forms (incl. half-width katakana)
_THAI = "\u0e00-\u0e7f"
#: The runs of text that each segmenter splits (the rest is tokenized Moses-style).
_RUNS = {"zh": re.compile(f"[{HAN}{_CJK_MARKS}]+"), "ja": re.compile(f"[{HAN}{_KANA}{_CJK_MARKS}]+"),
         "th": re.compile(f"[{_THAI}]+")}
_HAS_KANA, _HAS_HAN, _HAS_THAI = (re.compile(f"[{chars}]") for chars in (_KANA, HAN, _THAI))


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


def detect_language(text: str) -> str | None:
    """``ja`` for text with kana, else ``zh`` for Chinese characters, else ``th`` for Thai letters; else None
    (a script written with spaces between words). Chinese characters without kana count as Chinese."""
    if _HAS_KANA.search(text):
        return "ja"
    if _HAS_HAN.search(text):
        return "zh"
    if _HAS_THAI.search(text):
        return "th"
    return None


#: A run of this many characters of a script written without spaces (Chinese characters and kana; Thai
#: letters, whose words are longer in code points) inside one whitespace token is taken for unsegmented text.
_UNSEGMENTED = (re.compile(f"[{HAN}{_KANA}]{{8,}}"), re.compile(f"[{_THAI}]{{20,}}"))


def unsegmented_language(line: str) -> str | None:
    """The language (``zh``, ``ja``, ``th``) of ``line`` when it looks like text of a script written without
    spaces that was not split into words (8 Chinese characters or kana, or 20 Thai letters, in a row without a
    space); else None. A segmented line (``我 来到 北京 清华大学``) gives None."""
    for pattern in _UNSEGMENTED:
        run = pattern.search(line)
        if run:
            return detect_language(run.group())
    return None


def text_language(text: str, lang: str = "auto") -> str | None:
    """The language ``text`` is tokenized as: ``lang``, or with ``auto`` :func:`detect_language`'s."""
    check_lang(lang)
    return detect_language(text) if lang == "auto" else lang


def is_language_code(code: str) -> bool:
    """Whether ``code`` is written as a language code (two or three ASCII letters: ``en``, ``zh``, ``yue``)."""
    return code.isascii() and code.isalpha() and 2 <= len(code) <= 3


def check_lang(lang: str) -> None:
    """An ``InputError`` for a malformed ``lang``, or one naming the extra to install when its segmenter is missing."""
    if not isinstance(lang, str) or not lang.isascii() or not lang.isalpha():
        raise InputError(f"lang must be one of {', '.join(LANG_CHOICES)} (or a Moses language code), got {lang!r}")
    if lang in SEGMENTED:
        segmenter(lang)


def tokenize(text: str, lang: str = "en") -> list[str]:
    """Normalise and split raw text into tokens (``"the bank."`` -> ``["the", "bank", "."]``), no HTML escaping.

    ``lang``: ``en`` (or another Moses code) Moses-style; ``zh``/``ja``/``th`` segment the text of
    that script into words (``"我来到北京清华大学"`` -> ``我 来到 北京 清华大学``); ``auto`` from the script.
    """
    text = normalize_text(text)
    lang = text_language(text, lang) or "en"
    if lang not in SEGMENTED:
        return _moses_tokens(text, lang)
    segment = segmenter(lang)
    tokens, end = [], 0
    for run in _RUNS[lang].finditer(text):
        tokens += _moses_tokens(text[end:run.start()], "en") + segment(run.group())
        end = run.end()
    return tokens + _moses_tokens(text[end:], "en")


def _moses_tokens(text: str, lang: str) -> list[str]:
    if not text.strip():
        return []
    return " ".join(_moses(lang).tokenize(text, escape=False)).split()


# ---------------------------------------------------------------------------- word segmenters

#: lang -> (language, the package that segments it, the modules its extra installs).
_SEGMENTER_PACKAGES = {"zh": ("Chinese", "jieba", ("jieba",)),
                       "ja": ("Japanese", "SudachiPy", ("sudachipy", "sudachidict_core")),
                       "th": ("Thai", "PyThaiNLP", ("pythainlp",))}


def segmenter(lang: str) -> Callable[[str], list[str]]:
    """The word segmenter of ``lang`` (``zh``, ``ja``, ``th``): a function from text without spaces to its
    words. Loaded on first use; when its extra is missing, an ``InputError`` naming the install command."""
    try:
        return _load_segmenter(lang)
    except ImportError as exc:
        language, package, modules = _SEGMENTER_PACKAGES[lang]
        cause = "" if (exc.name or "").split(".")[0] in modules else f" ({package} failed to import: {exc})"
        raise InputError(f"{language} text needs the {package} word segmenter: "
                         f"pip install 'pyelmo[{lang}]'{cause}") from None


@lru_cache(maxsize=None)
def _load_segmenter(lang: str) -> Callable[[str], list[str]]:
    with warnings.catch_warnings():  # old packages' deprecation and syntax warnings at import
        warnings.simplefilter("ignore")
        return {"zh": _jieba, "ja": _sudachi, "th": _pythainlp}[lang]()


def _jieba() -> Callable[[str], list[str]]:
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)  # not its "Building prefix dict..." lines on stderr
    jieba.initialize()
    return lambda text: [t for t in jieba.lcut(text) if t.strip()]


#: SudachiPy refuses inputs over 49149 bytes: longer runs are segmented in pieces of this many characters.
_SUDACHI_PIECE = 4096


def _sudachi() -> Callable[[str], list[str]]:
    from sudachipy import Dictionary, SplitMode

    try:
        dictionary = Dictionary(dict="core")
    except Exception as exc:  # sudachidict_core missing: SudachiPy raises its own error type
        raise ImportError(str(exc), name="sudachidict_core") from None
    make = getattr(dictionary, "tokenizer", None) or dictionary.create  # .create before SudachiPy 0.6.9
    tokenizer = make(mode=SplitMode.A)  # short units, as UD Japanese and spaCy's Japanese
    lock = threading.Lock()  # a SudachiPy tokenizer is not safe to share between threads

    def segment(text: str) -> list[str]:
        with lock:
            return [m.surface() for i in range(0, len(text), _SUDACHI_PIECE)
                    for m in tokenizer.tokenize(text[i:i + _SUDACHI_PIECE]) if m.surface().strip()]

    return segment


def _pythainlp() -> Callable[[str], list[str]]:
    from pythainlp.tokenize import word_tokenize

    return lambda text: [t for t in word_tokenize(text, engine="newmm", keep_whitespace=False) if t.strip()]
