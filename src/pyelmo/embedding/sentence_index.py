"""``sentence_to_index`` of an embedding file, built and written in flat memory for any number of lines."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

import numpy as np

from pyelmo.errors import InputError

#: ``sentence_to_index`` texts up to this size are stored as the layout's variable-length
#: string; larger ones as a fixed-length byte string written straight to the file (see below).
SENTENCE_INDEX_VLEN_LIMIT = 4 * 2**20
#: The largest ``sentence_to_index`` text (a NumPy string of at most 2**31 - 1 bytes reads it back).
SENTENCE_INDEX_MAX_BYTES = 2**31 - 1


class SentenceIndexOnDisk:
    """``sentence_to_index`` (``{sentence: "line index"}``, the last index of a repeated sentence)
    built and written without holding the sentences in memory.

    Sentences go to a temporary file as they come, with a 16-byte record (text hash, index)
    in memory. ``write_to`` streams that file twice (to measure, then to write) and stores
    the same JSON text as ``json.dumps`` of the dictionary (keys in first-seen order).
    Up to ``SENTENCE_INDEX_VLEN_LIMIT`` bytes it is the variable-length string of the
    layout; HDF5 must be handed such a string whole, so a larger text is stored as a
    fixed-length byte string instead, whose bytes are written into the file directly in
    pieces. Both read back the same way: ``json.loads(f["sentence_to_index"][0])``.
    """

    def __init__(self, path: Path) -> None:
        from array import array

        self._path = path
        self._file = path.open("w", encoding="utf-8")
        self._hashes = array("Q")
        self._indexes = array("q")
        self._size = 2  # an upper bound of the JSON text's length (repeats included)

    @staticmethod
    def _hash(text: str) -> int:
        import hashlib

        return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")

    def add(self, text: str, index: int) -> None:
        key = json.dumps(text)
        self._size += len(key) + len(str(index)) + 6
        if self._size > SENTENCE_INDEX_MAX_BYTES:
            raise InputError(f"line {index + 1}: sentence_to_index would exceed {SENTENCE_INDEX_MAX_BYTES} bytes; "
                             "use --forget-sentences or split the input with --shard")
        self._file.write(key)
        self._file.write("\n")
        self._hashes.append(self._hash(text))
        self._indexes.append(index)

    def _entries(self) -> tuple[np.ndarray, dict[int, int]]:
        """Which records open a distinct sentence (a bool per record), and the last index of
        each repeated sentence keyed by its first record; about 9 bytes per record at most."""
        hashes = np.frombuffer(self._hashes, dtype=np.uint64)
        ordered = np.sort(hashes)
        repeated = np.unique(ordered[1:][ordered[1:] == ordered[:-1]])
        del ordered
        first = np.ones(len(hashes), dtype=bool)
        last: dict[int, int] = {}
        if len(repeated) == 0:
            return first, last
        opened: dict[int, int] = {}  # hash of a repeated sentence -> its first record
        for begin in range(0, len(hashes), 65_536):
            chunk = hashes[begin : begin + 65_536]
            hit = repeated[np.minimum(np.searchsorted(repeated, chunk), len(repeated) - 1)] == chunk
            for k in (np.flatnonzero(hit) + begin).tolist():
                key = int(hashes[k])
                if key in opened:
                    first[k] = False
                else:
                    opened[key] = k
                last[opened[key]] = self._indexes[k]
        return first, last

    def _pieces(self, first: np.ndarray, last: dict[int, int]) -> Iterator[bytes]:
        """The JSON text in pieces (ASCII: ``json.dumps`` escapes the rest)."""
        yield b"{"
        separator = ""
        with self._path.open("r", encoding="utf-8") as records:
            for k, line in enumerate(records):
                if first[k]:
                    yield f'{separator}{line[:-1]}: "{last.get(k, self._indexes[k])}"'.encode("ascii")
                    separator = ", "
        yield b"}"

    def write_to(self, filename: Path, name: str = "sentence_to_index") -> None:
        """Add the dataset ``name`` to the closed HDF5 file ``filename``."""
        import h5py

        self._file.close()
        first, last = self._entries()
        size = sum(len(piece) for piece in self._pieces(first, last))
        if size <= SENTENCE_INDEX_VLEN_LIMIT:
            with h5py.File(filename, "a") as out:
                out.create_dataset(name, (1,), dtype=h5py.string_dtype())[0] = b"".join(self._pieces(first, last))
            return
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.CONTIGUOUS)
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)  # the file space exists (and has an address) now
        dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
        with h5py.File(filename, "a") as out:
            offset = out.create_dataset(name, (1,), dtype=np.dtype(f"S{size}"), dcpl=dcpl).id.get_offset()
        with open(filename, "r+b") as raw:
            raw.seek(offset)
            for piece in self._pieces(first, last):
                raw.write(piece)
            raw.flush()
            os.fsync(raw.fileno())

    def close(self) -> None:
        self._file.close()
