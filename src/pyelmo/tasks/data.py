"""Task data files and their readers; every error names the file and line.

* classify: UTF-8 TSV, one example per line, ``label<TAB>text``.  The text is raw and
  tokenized with :func:`pyelmo.text.tokenize.tokenize` (``pretokenized=True``: split on
  whitespace).  Blank lines are skipped.
* tag: CoNLL style, one token per line, ``token<TAB>tag`` (more columns are allowed; the
  token is the first and the tag the last; without a tab the line is split on
  whitespace), a blank line between sentences, ``-DOCSTART-`` lines skipped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from pyelmo.errors import InputError


@dataclass(frozen=True)
class Example:
    """One example: its tokens and its label (classify: one string; tag: one per token; None when unlabelled)."""

    tokens: tuple[str, ...]
    label: str | tuple[str, ...] | None
    line: int  # where it starts in its file (1-based)


def _lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """``(line number, text without the newline)``; invalid UTF-8 is an error naming the line."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    with open(p, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(f"{p}:{number}: not valid UTF-8") from None
            yield number, text.rstrip("\r\n")


def _nonempty(path, examples: list[Example]) -> list[Example]:
    if not examples:
        raise InputError(f"{path}: no examples (the file is empty or blank)")
    return examples


def read_classify(path: str | os.PathLike, pretokenized: bool = False, labelled: bool = True) -> list[Example]:
    """Examples of a ``label<TAB>text`` file (``labelled=False``: lines of text; a label column, if any, is ignored)."""
    from pyelmo.text.tokenize import tokenize

    examples = []
    for number, line in _lines(path):
        if not line.strip():
            continue
        if labelled:
            if "\t" not in line:
                raise InputError(f"{path}:{number}: no tab (expected label<TAB>text)")
            label, text = line.split("\t", 1)
            label = label.strip()
            if not label:
                raise InputError(f"{path}:{number}: empty label")
        else:
            label, text = None, line.split("\t", 1)[1] if "\t" in line else line
        tokens = text.split() if pretokenized else tokenize(text)
        if not tokens:
            raise InputError(f"{path}:{number}: empty text")
        examples.append(Example(tuple(tokens), label, number))
    return _nonempty(path, examples)


def read_tagged(path: str | os.PathLike, labelled: bool = True) -> list[Example]:
    """Sentences of a CoNLL-style file (``labelled=False``: the first column is the token, tags optional)."""
    examples: list[Example] = []
    tokens: list[str] = []
    tags: list[str] = []
    start = 0

    def flush() -> None:
        if tokens:
            examples.append(Example(tuple(tokens), tuple(tags) if labelled else None, start))
        tokens.clear()
        tags.clear()

    for number, line in _lines(path):
        if not line.strip():
            flush()
            continue
        columns = line.split("\t") if "\t" in line else line.split()
        columns = [c.strip() for c in columns]
        if columns[0] == "-DOCSTART-":
            flush()
            continue
        if not columns[0]:
            raise InputError(f"{path}:{number}: empty token")
        if labelled:
            if len(columns) < 2:
                raise InputError(f"{path}:{number}: one column (expected token<TAB>tag)")
            if not columns[-1]:
                raise InputError(f"{path}:{number}: empty tag")
            tags.append(columns[-1])
        if not tokens:
            start = number
        tokens.append(columns[0])
    flush()
    return _nonempty(path, examples)


def append_tags(path: str | os.PathLike, examples: Sequence[Example], tags: Sequence[Sequence[str]]) -> str:
    """The CoNLL-style file ``path`` with a tab and a tag appended to each token line: ``tags[i]``
    are the tags of ``examples[i]`` (``read_tagged(path, labelled=False)``), in token order."""
    starts = {e.line: t for e, t in zip(examples, tags)}
    out, pending = [], []
    for number, line in _lines(path):
        if number in starts:
            pending = list(starts[number])
        if line.strip() and not line.split()[0] == "-DOCSTART-" and pending:
            out.append(f"{line}\t{pending.pop(0)}\n")
        else:
            out.append(line + "\n")
    return "".join(out)


def read_examples(kind: str, path: str | os.PathLike, pretokenized: bool = False,
                  labelled: bool = True) -> list[Example]:
    """The reader for ``kind`` (``classify`` or ``tag``)."""
    if kind == "classify":
        return read_classify(path, pretokenized, labelled)
    return read_tagged(path, labelled)


def label_set(kind: str, examples: Sequence[Example]) -> list[str]:
    """The sorted labels (classify) or tags (tag) of ``examples``."""
    if kind == "classify":
        return sorted({e.label for e in examples})  # type: ignore[misc]
    return sorted({t for e in examples for t in e.label})  # type: ignore[union-attr]
