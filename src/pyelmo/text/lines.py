"""Reading text files of one item a line: the one line reader of pyelmo.

Every user text read line by line (sentences to embed, training and evaluation text,
sense examples) goes through :func:`text_lines`, so all of them accept the same
files and fail the same way: UTF-8 only (a byte-order mark is dropped), ``\\n``,
``\\r\\n`` and a lone ``\\r`` all end a line (as Python's text mode does), and every
error is an ``InputError`` (or the subclass the caller names) with the file and the
line number in its message.
"""

from __future__ import annotations

import os
import sys
from typing import BinaryIO, Iterator

from pyelmo.errors import InputError
from pyelmo.fileio import check_input_file

#: What :func:`text_lines` does with a blank (empty or whitespace-only) line.
BLANK_CHOICES = ("keep", "skip", "error")


def text_lines(source: str | os.PathLike | BinaryIO, *, blank: str = "keep", strip: bool = True,
               what: str = "input file", error: type[InputError] = InputError,
               blank_hint: str = "") -> Iterator[tuple[int, str]]:
    """Yield ``(line number from 1, text)`` of a UTF-8 text file, ``-`` (stdin) or a binary handle.

    ``strip`` removes surrounding whitespace (otherwise only the line ending goes);
    ``blank`` keeps, skips or refuses blank lines (``blank_hint`` ends the refusal's
    message). ``what`` names the file in messages ("input file not found: PATH");
    ``error`` is the exception class raised (an ``InputError``).
    """
    if blank not in BLANK_CHOICES:
        raise ValueError(f"blank must be one of {BLANK_CHOICES}, got {blank!r}")
    if not isinstance(source, (str, os.PathLike)):
        yield from _lines(source, getattr(source, "name", None) or "<input>", blank, strip, error, blank_hint)
        return
    if str(source) == "-":
        yield from _lines(sys.stdin.buffer, "<stdin>", blank, strip, error, blank_hint)
        return
    path = check_input_file(source, what, error, "a text file")
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    with handle:
        try:
            yield from _lines(handle, str(path), blank, strip, error, blank_hint)
        except OSError as exc:  # e.g. EIO part-way through
            raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def _lines(handle: BinaryIO, name: str, blank: str, strip: bool, error: type[InputError],
           blank_hint: str) -> Iterator[tuple[int, str]]:
    number = 0
    for raw in handle:
        if number == 0 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{name}: line {number + 1} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        text = text[:-1] if text.endswith("\n") else text
        text = text[:-1] if text.endswith("\r") else text
        for part in text.split("\r"):  # a lone CR ends a line too
            number += 1
            if strip:
                part = part.strip()
            if not part.strip():
                if blank == "skip":
                    continue
                if blank == "error":
                    raise error(f"{name}: line {number} is blank{blank_hint}")
            yield number, part
