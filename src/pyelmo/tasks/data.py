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
from collections import Counter
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

    @property
    def texts(self) -> tuple[tuple[str, ...], ...]:
        """What the biLM reads of the example."""
        return (self.tokens,)


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


def _text_column(line: str) -> str:
    """The text of an unlabelled classify line: after the first tab, if any (a label column is ignored)."""
    return line.split("\t", 1)[1] if "\t" in line else line


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
            label, text = None, _text_column(line)
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


def read_examples(kind: str, path: str | os.PathLike, pretokenized: bool = False,
                  labelled: bool = True, training: bool = False) -> list:
    """The reader for ``kind`` (``classify``, ``tag`` or ``qa``; ``training``: qa questions need an answer)."""
    if kind == "qa":
        from pyelmo.tasks.squad import read_squad

        return read_squad(path, labelled, training)
    if kind == "classify":
        return read_classify(path, pretokenized, labelled)
    return read_tagged(path, labelled)


def label_set(kind: str, examples: Sequence[Example]) -> list[str]:
    """The sorted labels (classify) or tags (tag) of ``examples``."""
    if kind == "classify":
        return sorted({e.label for e in examples})  # type: ignore[misc]
    return sorted({t for e in examples for t in e.label})  # type: ignore[union-attr]


def check_kind(kind: str, examples: Sequence[Example], path, training: bool = True) -> None:
    """Stop on the obvious wrong file before any work: a CoNLL file read as ``label<TAB>text``, a
    classify TSV read as CoNLL, a first column that is no label, or (``training``) a single label."""
    if kind == "qa":
        return  # read_squad checked the answers
    if kind == "classify":
        n, labels = len(examples), Counter(e.label for e in examples)
        blank_gaps = any(b.line > a.line + 1 for a, b in zip(examples, examples[1:]))
        if blank_gaps and sum(len(e.tokens) == 1 for e in examples) >= 0.9 * n:
            raise InputError(f"{path} looks like a CoNLL tag file (one token<TAB>tag per line, blank lines between "
                             f"sentences), not label<TAB>text: train a tagger with 'pyelmo task train tag'")
        if n >= 10 and len(labels) > n / 2:
            raise InputError(f"{path}: {len(labels)} different labels in {n} examples: the first column should be "
                             f"the label (label<TAB>text); is the text first, or is this a tag file?")
        what, units = "example", labels
    else:
        tokens = sum(len(e.tokens) for e in examples)
        units = Counter(t for e in examples for t in e.label)  # type: ignore[union-attr]
        if len(examples) == 1 and tokens >= 20:
            raise InputError(f"{path}: no blank line between sentences, so all {tokens} lines are one sentence: a "
                             f"tag file has token<TAB>tag lines and a blank line after each sentence (is this a "
                             f"classify file? 'pyelmo task train classify' reads label<TAB>text)")
        if tokens >= 10 and len(units) > tokens / 2:
            raise InputError(f"{path}: {len(units)} different tags in {tokens} tokens: the last column should be "
                             f"the tag (token<TAB>tag); is this a classify file?")
        what = "token"
    if training and len(units) == 1:
        raise InputError(f"{path}: every {what} has the {'label' if kind == 'classify' else 'tag'} "
                         f"{next(iter(units))!r}: a model needs at least two to learn anything")


def classify_output(path, examples: Sequence[Example], predictions) -> str:
    """``label<TAB>probability<TAB>text`` per example, the text as in the input (without its label column)."""
    lines = dict(_lines(path))
    return "".join(f"{label}\t{p:.6f}\t{_text_column(lines[e.line])}\n" for e, (label, p) in zip(examples, predictions))


def tagged_output(path, examples: Sequence[Example], predictions) -> str:
    """The input file with each token line's predicted tag appended (tab-separated)."""
    starts = {e.line: tags for e, tags in zip(examples, predictions)}
    out, pending = [], []
    for number, line in _lines(path):
        if number in starts:
            pending = list(starts[number])
        if line.strip() and not line.split()[0] == "-DOCSTART-" and pending:
            out.append(f"{line}\t{pending.pop(0)}\n")
        else:
            out.append(line + "\n")
    return "".join(out)
