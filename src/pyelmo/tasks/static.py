"""Static word vectors for task models: the shipped word2vec baseline or a word2vec/GloVe text file.

The shipped form (beside the default biLM) is ``static.safetensors`` (one float16 tensor
``vectors``, ``(N, D)``) with ``static-vocab.txt`` (the N words, one a line, in row order).
Text files are word2vec's text format (a ``COUNT DIM`` header line, then ``word v1 ... vD``)
or GloVe's (the same without the header).  Lookup tries the exact form, then lower case.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from pyelmo.errors import InputError
from pyelmo.fileio import check_input_file

VECTORS_NAME = "static.safetensors"
VOCAB_NAME = "static-vocab.txt"
SHIPPED = "shipped"


@dataclass
class StaticVectors:
    """``words[i]`` has the vector ``vectors[i]`` (float32); ``source`` says where they came from."""

    words: list[str]
    vectors: np.ndarray
    source: str

    def __post_init__(self) -> None:
        self.index = {w: i for i, w in enumerate(self.words)}

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def lookup(self, token: str) -> int | None:
        """The row of ``token`` (exact form, else lower case), or None."""
        i = self.index.get(token)
        return self.index.get(token.lower()) if i is None else i

    def fingerprint(self) -> str:
        """SHA-1 of the words and the float32 vectors."""
        h = hashlib.sha1("\n".join(self.words).encode("utf-8"))
        h.update(np.ascontiguousarray(self.vectors, dtype=np.float32).tobytes())
        return h.hexdigest()


def shipped_dir() -> Path:
    from pyelmo.modelio.hub import shipped_folder

    return shipped_folder("english")


def load_static(source: str | os.PathLike | None = None) -> StaticVectors:
    """``None`` or ``"shipped"``: the vectors shipped with the default model; a folder holding
    ``static.safetensors``; else a word2vec/GloVe text file."""
    if source is None or str(source) == SHIPPED:
        return _load_safetensors(shipped_dir(), SHIPPED)
    path = Path(source)
    if path.is_dir():
        return _load_safetensors(path, str(path.resolve()))
    return read_text_vectors(path)


def _load_safetensors(folder: Path, source: str) -> StaticVectors:
    from safetensors.numpy import load_file

    vectors, vocab = folder / VECTORS_NAME, folder / VOCAB_NAME
    if not vectors.is_file() or not vocab.is_file():
        raise InputError(f"no static vectors in {folder} ({VECTORS_NAME} and {VOCAB_NAME}); "
                         "pass --static-vectors FILE")
    try:
        matrix = load_file(str(vectors))["vectors"].astype(np.float32)
    except Exception as exc:  # safetensors raises its own error types
        raise InputError(f"{vectors}: cannot read static vectors: {exc}") from None
    words = vocab.read_text(encoding="utf-8").split("\n")
    if words and words[-1] == "":
        words.pop()
    if len(words) != len(matrix):
        raise InputError(f"{vocab}: {len(words)} words for {len(matrix)} vectors")
    return StaticVectors(words, matrix, source)


def read_text_vectors(path: str | os.PathLike) -> StaticVectors:
    """A word2vec text file (with its ``COUNT DIM`` header) or a GloVe file (without)."""
    path = check_input_file(path, "static vectors file")
    words: list[str] = []
    rows: list[np.ndarray] = []
    seen: set[str] = set()
    dim = None
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            try:
                parts = raw.decode("utf-8").rstrip("\r\n").rstrip().split(" ")
            except UnicodeDecodeError:
                raise InputError(f"{path}:{number}: not valid UTF-8 (a binary word2vec file? "
                                 "save it with binary=False)") from None
            if number == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
                continue  # word2vec header
            if parts == [""]:
                continue
            if len(parts) < 2:
                raise InputError(f"{path}:{number}: expected a word and its vector")
            try:
                vec = np.asarray([float(x) for x in parts[1:]], dtype=np.float32)
            except ValueError:
                raise InputError(f"{path}:{number}: a vector value is not a number") from None
            if dim is None:
                dim = len(vec)
            elif len(vec) != dim:
                raise InputError(f"{path}:{number}: {len(vec)} values, expected {dim}")
            if parts[0] in seen:
                continue
            seen.add(parts[0])
            words.append(parts[0])
            rows.append(vec)
    if not rows:
        raise InputError(f"{path}: no vectors (the file is empty)")
    return StaticVectors(words, np.stack(rows), str(path.resolve()))


def write_shipped_form(vectors: StaticVectors, folder: str | os.PathLike, top: int | None = None) -> None:
    """Write ``vectors`` (the first ``top`` rows) as ``static.safetensors`` (float16) + ``static-vocab.txt``."""
    from safetensors.numpy import save_file

    from pyelmo.fileio import atomic_writer, write_text_atomic

    folder = Path(folder)
    n = len(vectors.words) if top is None else min(top, len(vectors.words))
    with atomic_writer(folder / VECTORS_NAME) as tmp:
        save_file({"vectors": np.ascontiguousarray(vectors.vectors[:n], dtype=np.float16)}, str(tmp))
    write_text_atomic(folder / VOCAB_NAME, "".join(w + "\n" for w in vectors.words[:n]))


def warn_coverage(vectors: StaticVectors, examples, path: str | os.PathLike, least: float = 0.5) -> None:
    """Warn when ``vectors`` know fewer than ``least`` of the tokens of ``examples`` (vectors of another language)."""
    import warnings

    tokens = [t for e in examples for text in e.texts for t in text]
    known = sum(vectors.lookup(t) is not None for t in tokens)
    if tokens and known < least * len(tokens):
        warnings.warn(f"the static vectors ({vectors.source}) know only {known / len(tokens):.0%} of the tokens of "
                      f"{path}: give vectors of its language with --static-vectors (Chinese: 'pyelmo task data "
                      "static', docs/LANGUAGES.md)", stacklevel=2)


def token_rows(vectors: StaticVectors, tokens: Sequence[str]) -> np.ndarray:
    """Embedding-table ids of ``tokens``: row + 2 for known words, 1 for unknown (0 is padding)."""
    out = np.ones(len(tokens), dtype=np.int64)
    for i, t in enumerate(tokens):
        r = vectors.lookup(t)
        if r is not None:
            out[i] = r + 2
    return out


def make_static_vectors(corpus: str | os.PathLike, out: str | os.PathLike, *, max_tokens: int | None = None,
                        dim: int = 200, epochs: int = 3, min_count: int = 5, top: int = 20_000,
                        workers: int = 2) -> dict:
    """word2vec (skip-gram, :func:`pyelmo.evaluation.static.train_word2vec`) on the train split of a pretraining
    corpus (its first ``max_tokens`` tokens, shards in sorted order), its ``top`` most frequent words written to
    ``out`` by :func:`write_shipped_form`; returns what was done.  One worker gives the same files every time."""
    import tempfile
    import time

    from pyelmo.evaluation.static import StaticVectors as Word2VecVectors
    from pyelmo.evaluation.static import Word2VecOptions, corpus_train_files, train_word2vec

    started = time.time()
    files, tokens = [], 0
    for f in corpus_train_files(corpus):
        if max_tokens is not None and tokens >= max_tokens:
            break
        files.append(f)
        with open(f, encoding="utf-8") as fh:
            tokens += sum(len(line.split()) for line in fh)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "train").mkdir()
        for f in files:
            os.symlink(f.resolve(), Path(tmp) / "train" / f.name)
        options = Word2VecOptions(vector_size=dim, epochs=epochs, min_count=min_count, workers=workers)
        kv = Word2VecVectors.load(train_word2vec(tmp, Path(tmp) / "word2vec.bin", options, progress=False)).kv
    words = list(kv.index_to_key)  # most frequent first
    Path(out).mkdir(parents=True, exist_ok=True)
    write_shipped_form(StaticVectors(words, kv.vectors, "word2vec"), out, top)
    return {"corpus": str(corpus), "shards": [f.name for f in files], "tokens": tokens, "dim": dim,
            "epochs": epochs, "min_count": min_count, "workers": workers, "vocabulary": len(words),
            "words": min(top, len(words)), "seconds": round(time.time() - started)}
