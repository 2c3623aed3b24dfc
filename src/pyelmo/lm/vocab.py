"""The softmax vocabulary: words sorted by descending count, ``<S>``, ``</S>``, ``<UNK>`` first.

Saved as ``vocab.txt``, one word per line (the bilm-tf layout). The order matters: the
log-uniform sampler of the sampled softmax assumes that lower ids are more frequent.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from pyelmo.errors import InputError
from pyelmo.fileio import PathLike
from pyelmo.text.lines import text_lines

BOS, EOS, UNK = "<S>", "</S>", "<UNK>"
SPECIALS = (BOS, EOS, UNK)
BOS_ID, EOS_ID, UNK_ID = 0, 1, 2
VOCAB_NAME = "vocab.txt"


class DataError(InputError):
    """Training or evaluation text that is missing, unreadable or empty."""


class Vocabulary:
    """An ordered word list with its index; unknown words map to ``<UNK>``."""

    def __init__(self, words: Sequence[str]) -> None:
        words = list(words)
        if tuple(words[:3]) != SPECIALS:
            raise DataError(f"a vocabulary must start with {', '.join(SPECIALS)}; got {words[:3]}")
        self.words = words
        self.index = {w: i for i, w in enumerate(words)}
        if len(self.index) != len(words):
            dup = next(w for w, n in Counter(words).items() if n > 1)
            raise DataError(f"vocabulary lists {dup!r} twice")

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.index

    def id(self, word: str) -> int:
        """The id of ``word``; ``<UNK>``'s id for words outside the vocabulary."""
        return self.index.get(word, UNK_ID)

    def encode(self, tokens: Iterable[str]) -> list[int]:
        return [self.index.get(t, UNK_ID) for t in tokens]

    def save(self, path: PathLike) -> Path:
        """Write one word per line (atomically); a directory gets ``DIR/vocab.txt``."""
        from pyelmo.fileio import write_text_atomic

        path = Path(path)
        if path.is_dir():
            path = path / VOCAB_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, "".join(w + "\n" for w in self.words))
        return path

    @classmethod
    def load(cls, path: PathLike) -> "Vocabulary":
        """Read a ``vocab.txt`` (or ``DIR/vocab.txt``)."""
        path = Path(path)
        if path.is_dir():
            path = path / VOCAB_NAME
        words = [w for _, w in text_lines(path, what="vocabulary file", error=DataError)]
        if any(not w for w in words):
            raise DataError(f"vocabulary {path} has an empty line")
        return cls(words)


def build_vocab(counts: Counter, max_size: int | None = None, min_count: int = 1) -> Vocabulary:
    """Specials first, then words by descending count (ties: alphabetical), cut by size and count.

    ``max_size`` counts the three special tokens.
    """
    if max_size is not None and max_size < len(SPECIALS):
        raise InputError(f"vocabulary max size must be at least {len(SPECIALS)}, got {max_size}")
    if min_count < 1:
        raise InputError(f"vocabulary min count must be at least 1, got {min_count}")
    ranked = sorted(((w, n) for w, n in counts.items() if n >= min_count and w not in SPECIALS),
                    key=lambda wn: (-wn[1], wn[0]))
    words = list(SPECIALS) + [w for w, _ in ranked]
    if max_size is not None:
        words = words[:max_size]
    return Vocabulary(words)


# -- reading text ---------------------------------------------------------------------------
def text_files(path: PathLike, split: str = "train") -> list[Path]:
    """The text files of ``path``: a file itself, ``DIR/<split>/*.txt`` of a corpus, or ``DIR/*.txt``."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.exists():
        raise DataError(f"data not found: {path}")
    if path.is_dir():
        for folder in (path / split, path):
            files = sorted(p for p in folder.glob("*.txt") if p.is_file()) if folder.is_dir() else []
            if files:
                return files
        raise DataError(f"no .txt files in {path} or {path / split}")
    raise DataError(f"data path is neither a file nor a directory: {path}")


def read_lines(files: Sequence[PathLike]) -> Iterator[list[str]]:
    """Whitespace-tokenized, non-empty lines of ``files`` in order (``DataError`` if unreadable).

    Read by :func:`pyelmo.text.lines.text_lines`: blank lines are skipped; CRLF, CR and a
    UTF-8 BOM are accepted; invalid UTF-8 raises ``DataError`` naming the file and line.
    """
    for f in files:
        for _, line in text_lines(f, blank="skip", what="data file", error=DataError):
            yield line.split()


def count_words(files: Sequence[PathLike]) -> Counter:
    """Word counts over ``files``."""
    counts: Counter = Counter()
    for tokens in read_lines(files):
        counts.update(tokens)
    if not counts:
        raise DataError(f"no words in {', '.join(str(f) for f in files)}")
    return counts


def vocab_from_files(files: Sequence[PathLike], max_size: int | None = None, min_count: int = 1) -> Vocabulary:
    """Count ``files`` and build their vocabulary."""
    return build_vocab(count_words(files), max_size=max_size, min_count=min_count)
