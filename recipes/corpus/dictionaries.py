"""Dictionary sources: the GCIDE (Webster 1913), FOLDOC and the Jargon File, as prose definitions."""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Iterator

from recipes.corpus.textclean import find_file, is_prose, squash

# --------------------------------------------------------------------------- GCIDE

_GCIDE_HEAD = re.compile(r"^\S[^\\\n]*\\[^\\\n]*\\")
_GCIDE_TAG = re.compile(r"^\s*\[[^\[\]]*\]\s*$")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_BRACES = re.compile(r"\{([^{}]*)\}")
_CITATION = re.compile(r"--\s?[A-Z][^\"]*")
_LABEL = re.compile(r"\((?:[A-Z][A-Za-z]*\.?,?\s*(?:&\s*)?)+\)")
_SUBLABEL = re.compile(r"\([a-z]\)")
_LEAD_POS = re.compile(r"^[\s,;]*(?:(?:[a-z]{1,6}\.|&)[\s,;]*)+")
_SENSE = re.compile(r"^\s*\d+\.\s+(?:\d+\s+)?")
_QMARK = re.compile(r"(?<=\s)\?(?=[\s,;.:])")


def _gcide_clean(par: str, first: bool, wordnet: bool) -> str:
    s = squash(par)
    if first:
        s = _GCIDE_HEAD.sub("", s, count=1)
        prev = None
        while prev != s:  # alternative headwords: ", Swat team \\Swat" team`\\(...)"
            prev = s
            s = re.sub(r"^\s*(?:,|or|;)?\s*[^\\,.;]{0,60}\\[^\\]*\\", "", s)
            s = re.sub(r"^\s*\([^()]*\)", "", s)
    if s.startswith(("Syn:", "Syn.", "Syn ")):
        return ""
    if s.startswith("Note:"):
        s = s[5:]
    prev = None
    while prev != s:  # innermost brackets first: etymologies, source tags, [R.], [Obs.]
        prev, s = s, _BRACKETS.sub(" ", s)
    s = s.replace("[", " ").replace("]", " ")
    s = _BRACES.sub(lambda m: re.sub(r"[*\"`']", "", m.group(1)), s)
    s = s.replace("{", " ").replace("}", " ")
    if wordnet:  # WordNet-derived senses quote WordNet examples: evaluation data
        s = re.sub(r'"[^"]*"', " ", s)
    s = _CITATION.sub(" ", s)
    s = re.sub(r"<[^>]*>?", " ", s)
    s = _LABEL.sub(" ", s)
    s = _SUBLABEL.sub(" ", s)
    if first:
        s = _LEAD_POS.sub("", s)
    s = _SENSE.sub("", s)
    s = _LABEL.sub(" ", s)
    s = _QMARK.sub(" ", s)
    s = squash(s).strip(" ,;:")
    s = re.sub(r"\s+([,;:.])", r"\1", s)
    return s


def _gcide_entry(lines: list[str]) -> Iterator[str]:
    pars: list[tuple[str, bool]] = []  # (text, from WordNet)
    cur: list[str] = []
    for line in lines + [""]:
        if _GCIDE_TAG.match(line):
            if cur:
                pars.append((" ".join(cur), "WordNet" in line))
            cur = []
        elif not line.strip():
            if cur:
                pars.append((" ".join(cur), False))
            cur = []
        else:
            cur.append(line.strip())
    wn_entry = any("[WordNet" in ln for ln in lines)
    for i, (par, wn) in enumerate(pars):
        text = _gcide_clean(par, i == 0, wn or wn_entry)
        if len(text.split()) >= 3:
            yield text


def read_gcide(root: Path) -> Iterator[str]:
    """GCIDE definitions and quotations, one paragraph per sense or quotation.

    Strips headwords and pronunciations (``\\Head*word\\``), part-of-speech abbreviations,
    bracketed etymologies and source lines (``[1913 Webster]``), ``--Author.`` citations,
    domain labels such as ``(Bot.)``, sense numbers, ``Syn:`` lists and markup; quoted
    examples in WordNet-derived entries are dropped (they are WordNet evaluation data).
    """
    path = find_file(root, "gcide.dict.dz", "gcide.dict")
    opener = gzip.open if path.suffix == ".dz" else open
    entry: list[str] | None = None
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if line and not line[0].isspace():
                if _GCIDE_HEAD.match(line):
                    if entry:
                        yield from _gcide_entry(entry)
                    entry = [line]
                    continue
                if entry is None:
                    continue
            if entry is not None:
                entry.append(line)
    if entry:
        yield from _gcide_entry(entry)


# --------------------------------------------------------------------------- FOLDOC, Jargon File

_BRACED = re.compile(r"\{([^{}]*)\}")
_DOMAIN = re.compile(r"^<[^<>]*>\s*")
_DATE = re.compile(r"^\(\d{4}-\d\d-\d\d\)$")
_PAREN_URL = re.compile(r"\(\s*(?:https?|ftp)://[^)]*\)|(?:https?|ftp)://\S+|\S+@\S+\.\S+")


def _blank_line_blocks(path: Path) -> list[str]:
    """The blank-line separated blocks of a text file, gzip-compressed (``.gz``, ``.dz``) or not."""
    opener = gzip.open if path.suffix in (".gz", ".dz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        return re.split(r"\n\s*\n", fh.read())


def _dict_prose(par: str) -> str:
    """Cross-references ``{word}`` become plain words; URLs and e-mail addresses go."""
    par = _PAREN_URL.sub(" ", par)
    par = _BRACED.sub(lambda m: m.group(1), par)
    return squash(par.replace("{", " ").replace("}", " "))


def read_foldoc(root: Path) -> Iterator[str]:
    """FOLDOC definitions (dictd ``foldoc.dict[.dz]``): the indented body paragraphs of
    every entry, the database's own ``00-database-*`` entries, ``<domain>`` labels and
    ``(YYYY-MM-DD)`` date lines dropped, cross-references kept as words."""
    in_db = True
    for block in _blank_line_blocks(find_file(root, "foldoc.dict.dz", "foldoc.dict")):
        lines = block.split("\n")
        if lines and lines[0] and not lines[0][0].isspace():  # a headword line starts an entry
            in_db = lines[0].startswith("00-database")
            lines = [ln for ln in lines[1:] if ln[:1].isspace()]
        if in_db:
            continue
        par = squash(" ".join(lines))
        par = _DOMAIN.sub("", par)
        if not par or _DATE.match(par):
            continue
        par = _dict_prose(par)
        if is_prose(par):
            yield par


_JARGON_HEAD = re.compile(r"^:[^:]+:\s*(?:[^,]*,)?\s*")
_JARGON_SENSE = re.compile(r"^\d+\.\s+")
_JARGON_POS = re.compile(r"^(?:(?:n|v|vi|vt|adj|adv|interj|prov|pl|obs|abbrev|excl|pref|suff|conj|prep|techspeak|var)\.,?\s*)+")


def read_jargon(root: Path) -> Iterator[str]:
    """Jargon File entries (``jargon.txt[.gz]``): the paragraphs after the first
    ``:headword:`` line; headword lines with their pronunciation and part of speech,
    sense numbers and leading bracketed etymologies dropped."""
    started = False
    for block in _blank_line_blocks(find_file(root, "jargon.txt.gz", "jargon.txt")):
        par = squash(block)
        if par.startswith(":") and _JARGON_HEAD.match(par):
            started = True
            if len(par) < 120:  # the entry's head line alone
                continue
            par = _JARGON_HEAD.sub("", par, count=1)
        if not started:
            continue
        par = _JARGON_POS.sub("", par)
        par = re.sub(r"^\[[^\[\]]*\]\s*", "", par)
        par = _JARGON_SENSE.sub("", par)
        par = _dict_prose(par)
        if is_prose(par):
            yield par
