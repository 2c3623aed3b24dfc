"""The static baseline: word2vec (gensim) trained on the pretraining corpus's train split.

Stored beside the model as ``word2vec.bin`` in the binary word2vec format
(``save_word2vec_format(binary=True)``), never with gensim's pickling ``save``, and read
back with ``load_word2vec_format`` (no pickle is ever loaded).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from pyelmo.evaluation.common import EvaluationError
from pyelmo.fileio import atomic_writer
from pyelmo.lm.vocab import read_lines

WORD2VEC_NAME = "word2vec.bin"


@dataclass(frozen=True)
class Word2VecOptions:
    """Training settings (gensim names). Skip-gram, as in Mikolov et al. 2013."""

    vector_size: int = 300
    window: int = 5
    min_count: int = 5
    epochs: int = 5
    sg: int = 1
    negative: int = 5
    workers: int = 2
    seed: int = 1


def _import_gensim():
    try:
        from gensim.models import KeyedVectors, Word2Vec
    except ImportError:  # pragma: no cover - depends on the installation
        raise EvaluationError("the word2vec baseline needs gensim: pip install 'pyelmo[eval]'") from None
    return KeyedVectors, Word2Vec


def corpus_train_files(corpus_dir: str | os.PathLike) -> list[Path]:
    """The pretraining corpus's ``train/*.txt`` files (sorted); an error if there are none."""
    d = Path(corpus_dir)
    files = sorted((d / "train").glob("*.txt")) if (d / "train").is_dir() else []
    if not files:
        raise EvaluationError(f"no pretraining text at {d}/train/*.txt (the corpus's train split)")
    return files


class _Sentences:
    """A restartable iterable of whitespace-tokenized lines (gensim reads it once per epoch)."""

    def __init__(self, files: Sequence[Path]) -> None:
        self.files = list(files)

    def __iter__(self) -> Iterator[list[str]]:
        yield from read_lines(self.files)


def train_word2vec(corpus_dir: str | os.PathLike, output: str | os.PathLike,
                   options: Word2VecOptions = Word2VecOptions(), progress: bool = True) -> Path:
    """Train word2vec on ``corpus_dir/train/*.txt`` and write it (binary format) atomically."""
    _, Word2Vec = _import_gensim()
    files = corpus_train_files(corpus_dir)
    if progress:
        print(f"training word2vec on {len(files)} file(s) under {corpus_dir}/train ...", file=sys.stderr)
    model = Word2Vec(sentences=_Sentences(files), vector_size=options.vector_size, window=options.window,
                     min_count=options.min_count, epochs=options.epochs, sg=options.sg, negative=options.negative,
                     workers=options.workers, seed=options.seed)
    if len(model.wv) == 0:
        raise EvaluationError(f"word2vec learned no words from {corpus_dir} (min_count {options.min_count})")
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(output) as tmp:
        model.wv.save_word2vec_format(str(tmp), binary=True)
    return output


class StaticVectors:
    """Read-only word vectors: ``vector(token)`` tries the exact form, then lower case."""

    def __init__(self, keyed_vectors, path: Path | None = None) -> None:
        self.kv = keyed_vectors
        self.path = path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "StaticVectors":
        KeyedVectors, _ = _import_gensim()
        path = Path(path)
        if not path.is_file():
            raise EvaluationError(f"word2vec file not found: {path}")
        try:
            kv = KeyedVectors.load_word2vec_format(str(path), binary=True)
        except (ValueError, UnicodeDecodeError, EOFError, OSError) as exc:
            raise EvaluationError(f"cannot read word2vec file {path}: {exc}") from None
        return cls(kv, path)

    @property
    def dim(self) -> int:
        return int(self.kv.vector_size)

    def key(self, token: str) -> str | None:
        """The vocabulary entry used for ``token`` (exact, else lower case), or None."""
        if token in self.kv.key_to_index:
            return token
        low = token.lower()
        return low if low in self.kv.key_to_index else None

    def vector(self, token: str) -> np.ndarray | None:
        k = self.key(token)
        return None if k is None else np.asarray(self.kv[k], dtype=np.float32)

    def matrix(self, tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(N, dim)`` vectors (zeros where unknown) and an ``(N,)`` known-mask."""
        out = np.zeros((len(tokens), self.dim), dtype=np.float32)
        known = np.zeros(len(tokens), dtype=bool)
        for i, t in enumerate(tokens):
            v = self.vector(t)
            if v is not None:
                out[i] = v
                known[i] = True
        return out, known

    def most_similar(self, word: str, topn: int = 10) -> list[tuple[str, float]]:
        k = self.key(word)
        if k is None:
            return []
        return [(w, float(s)) for w, s in self.kv.most_similar(k, topn=topn)]


def resolve_word2vec(path: str | os.PathLike | None, model_dir: Path | None, corpus: str | os.PathLike | None,
                     options: Word2VecOptions = Word2VecOptions(), progress: bool = True) -> StaticVectors:
    """The word2vec baseline: ``path``, else ``model_dir/word2vec.bin``; trained there from
    ``corpus`` when missing and a corpus is given."""
    target = Path(path) if path is not None else (model_dir / WORD2VEC_NAME if model_dir is not None else None)
    if target is None:
        raise EvaluationError("no place for the word2vec baseline: pass --word2vec FILE (or --no-word2vec)")
    if not target.exists():
        if corpus is None:
            raise EvaluationError(f"no word2vec baseline at {target}; pass --corpus DIR (the pretraining corpus "
                                  "with train/*.txt) to train it there, or --no-word2vec")
        train_word2vec(corpus, target, options, progress)
    return StaticVectors.load(target)
