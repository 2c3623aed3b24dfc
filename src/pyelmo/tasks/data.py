"""Task data files (classify's TSV, tag's CoNLL): readers and writers, every error naming the file and line, and
the evidence a guess at a file's layout needs (each kind guesses, :mod:`pyelmo.tasks.kinds`).

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
from typing import Iterator, Sequence

from pyelmo.errors import InputError
from pyelmo.fileio import check_input_file


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
    p = check_input_file(path, "data file")
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


# How much evidence a guess about a file's layout needs before it refuses the file; with less, or
# with --trust-format, it warns. A short part-of-speech file has nearly as many tags as tokens ("The
# bank raised its rates ." is 6 tags in 6 tokens), so "many different tags" alone proves nothing: a
# swap of columns is refused only when the other column also repeats (a quarter or fewer different
# values), as the label column of a classify file does and a column of words or texts does not, and
# only over MIN_UNITS lines, where the two together no longer happen by chance in a real file.
MIN_UNITS = 10
MIN_CONLL_EXAMPLES = 20  # one-word "texts" between blank lines, 9 in 10 of at least 20: a CoNLL file
WARN_SENTENCE, MIN_SENTENCE = 50, 200  # one "sentence" this long: no blank lines (treebank sentences are shorter)
TRUST_HINT = "if the file is right, go on with --trust-format"


def swap_guess(n: int, labels: int, other: int) -> tuple[bool, bool]:
    """(looks swapped, strongly): more different labels than half of ``n``, and the other column repeating."""
    looks = n >= MIN_UNITS and labels > n / 2
    return looks, looks and other <= n / 4


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
