"""One embedding run's request: what to read, what to write and how, checked once when it is made."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import BinaryIO

from pyelmo.errors import InputError

#: What ``output_format`` stores per sentence: every layer, the top one, or their mean.
OUTPUT_FORMATS = ("all", "top", "average")


def check_shard(index: int, count: int) -> None:
    """A shard ``index/count`` must have ``0 <= index < count``."""
    if not 0 <= index < count:
        raise InputError(f"shard I/N needs 0 <= I < N, got {index}/{count}")


def is_stream(source) -> bool:
    """Whether an input is a stream (an open file, or ``-`` for stdin) rather than a named file."""
    return not isinstance(source, (str, os.PathLike)) or str(source) == "-"


@dataclasses.dataclass(frozen=True)
class EmbedJob:
    """A file of sentences to embed into an HDF5 file (:meth:`ElmoEmbedder.embed_job`).

    ``input``: a path, ``-`` (stdin) or a binary stream; ``output``: the HDF5 file (absent unless
    ``overwrite``). ``output_format``: one of :data:`OUTPUT_FORMATS`; ``pool="mean"``: one sentence vector per
    line. ``tokenize``: the lines are raw text, split in the language ``lang`` (default ``auto``); else they are
    split on whitespace. ``shard=(i, n)``: only the lines whose index is ``i`` modulo ``n``. ``resume``:
    continue an interrupted run of the same job. ``overlap_writes``: the vectors are written to disk in a
    background thread while the next ones are computed (``False``: in the caller's thread, between
    batches; the same file either way). Making a job checks all of it (``InputError``, one line)
    before any work; ``lang`` reads back as ``auto`` or the language with ``tokenize``, else None.
    """

    input: str | os.PathLike | BinaryIO
    output: str | os.PathLike
    output_format: str = "all"
    pool: str | None = None
    batch_size: int | None = None
    forget_sentences: bool = False
    use_sentence_keys: bool = False
    skip_blank_lines: bool = False
    tokenize: bool = False
    lang: str | None = None
    shard: tuple[int, int] | None = None
    resume: bool = False
    overwrite: bool = False
    progress: bool = False
    overlap_writes: bool = True

    def __post_init__(self) -> None:
        from pyelmo.embedding.pooling import check_pool
        from pyelmo.fileio import check_output_file
        from pyelmo.text.tokenize import check_lang

        if self.lang is not None and not self.tokenize:
            raise InputError("--lang chooses how --tokenize splits raw text: it needs tokenize=True (--tokenize); "
                             "without it the lines are split on whitespace")
        if self.tokenize:
            object.__setattr__(self, "lang", self.lang or "auto")
            check_lang(self.lang)  # a missing segmenter fails here, before any work
        check_pool(self.pool)
        if self.output_format not in OUTPUT_FORMATS:
            raise InputError(f"output format must be one of {OUTPUT_FORMATS}, got {self.output_format!r}")
        if self.shard is not None:
            object.__setattr__(self, "shard", tuple(self.shard))
            check_shard(*self.shard)
        if self.resume and is_stream(self.input):
            raise InputError("--resume needs an input file, not a stream")
        if self.batch_size is not None and self.batch_size < 1:
            raise InputError(f"batch size must be at least 1, got {self.batch_size}")
        object.__setattr__(self, "output", check_output_file(self.output, self.overwrite))

    def check_run(self, stateful: bool) -> None:
        """What the job asks that an embedder (``stateful`` or not) cannot do."""
        if self.resume and stateful:
            raise InputError("--resume cannot continue a --stateful run (the carried LSTM states are not saved)")

    @property
    def output_path(self) -> Path:
        return Path(self.output)
