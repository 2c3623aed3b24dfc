"""A user's own text as corpus sources: UTF-8 text files (a folder: its ``*.txt`` files), one source each."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from pyelmo.errors import InputError

if TYPE_CHECKING:
    from pyelmo.corpus.build import TextSource

#: How a file's text is cut into units: ``paragraphs`` (blank lines between them, a paragraph's lines
#: joined), ``lines`` (a paragraph a line) or ``sentences`` (a sentence a line: not split again).
UNITS = ("paragraphs", "lines", "sentences")


def read_units(path: str | os.PathLike, units: str = "paragraphs") -> Iterator[str]:
    """The units of one text file (see :data:`UNITS`); undecodable bytes become U+FFFD (then spaces)."""
    if units not in UNITS:
        raise InputError(f"units must be one of {', '.join(UNITS)}, got {units!r}")
    paragraph: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if units != "paragraphs":
                if line:
                    yield line
            elif line:
                paragraph.append(line)
            elif paragraph:
                yield " ".join(paragraph)
                paragraph = []
    if paragraph:
        yield " ".join(paragraph)


def text_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The files of ``paths`` in order: a file as given, a folder's ``*.txt`` files (recursively, sorted)."""
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.txt") if p.is_file())
            if not found:
                raise InputError(f"no *.txt files in {path}")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise InputError(f"input not found: {path}")
    return files


def text_sources(paths: Iterable[str | os.PathLike], units: str = "paragraphs") -> list[TextSource]:
    """One :class:`~pyelmo.corpus.build.TextSource` per text file of ``paths`` (named by its path)."""
    from pyelmo.corpus.build import TextSource

    if units not in UNITS:
        raise InputError(f"units must be one of {', '.join(UNITS)}, got {units!r}")
    files = list(dict.fromkeys(text_files(paths)))  # a file given twice is read once
    if not files:
        raise InputError("no input files")
    return [TextSource(str(f), lambda f=f: read_units(f, units), sentences=units == "sentences",
                       info={"path": str(f)}) for f in files]
