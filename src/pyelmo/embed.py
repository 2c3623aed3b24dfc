"""Contextual vectors for sentences and files: the ``ElmoEmbedder`` API and the HDF5 embedding layout.

The HDF5 file is the one AllenNLP's ``elmo`` command writes: one float32 dataset per
input line keyed by its index (``"0"``, ``"1"``, ...) holding ``(L, n, D)`` (``all``) or
``(n, D)`` (``top``, ``average``), plus ``sentence_to_index`` (JSON ``{sentence: "i"}``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, Sequence

import numpy as np
import torch

from pyelmo.bilm import BiLM
from pyelmo.characters import batch_to_ids
from pyelmo.errors import InputError

OUTPUT_FORMATS = ("all", "top", "average")
DEFAULT_BATCH_SIZE = 64
SORT_WINDOW = 16  # stateless mode sorts this many batches' worth of sentences by length


class ElmoEmbedder:
    """Per-token ELMo vectors from a biLM.

    ``ElmoEmbedder()`` uses the shipped English model; ``ElmoEmbedder(DIR)`` a native model;
    ``ElmoEmbedder(OPTIONS, WEIGHTS)`` the released format; or pass a ``BiLM``. Stateless
    unless ``stateful=True`` (then each batch row continues from the states the same row
    reached in the previous batch, as the original implementations do).
    """

    def __init__(self, model: BiLM | str | os.PathLike | None = None, weight_file: str | os.PathLike | None = None,
                 *, batch_size: int = DEFAULT_BATCH_SIZE, stateful: bool = False, device: str = "cpu") -> None:
        from pyelmo.models import load

        if batch_size < 1:
            raise InputError(f"batch size must be at least 1, got {batch_size}")
        self.model = model if isinstance(model, BiLM) else load(model, weight_file)
        self.model.to(device).eval()
        self.model.stateful = stateful
        self.batch_size = batch_size
        self.device = torch.device(device)

    @property
    def stateful(self) -> bool:
        return self.model.stateful

    def reset_states(self) -> None:
        self.model.reset_states()

    @torch.inference_mode()
    def embed_batch(self, batch: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One ``(L, n_tokens, D)`` float32 array per sentence (an empty sentence gives ``(L, 0, D)``)."""
        if not batch:
            return []
        ids = batch_to_ids(batch, self.model.config.char_cnn.max_characters_per_token).to(self.device)
        layers = self.model(ids).layers.float().cpu().numpy()
        return [np.ascontiguousarray(layers[:, row, : len(sentence)]) for row, sentence in enumerate(batch)]

    def embed_sentence(self, tokens: Sequence[str]) -> np.ndarray:
        """``(L, n_tokens, D)`` for one tokenized sentence."""
        return self.embed_batch([tokens])[0]

    def embed_sentences(self, sentences: Iterable[Sequence[str]], batch_size: int | None = None) -> Iterator[np.ndarray]:
        """Yield one array per sentence, in input order, computing in batches.

        Stateful: batches are consecutive sentences. Stateless: sentences are grouped by
        length within a window of ``SORT_WINDOW`` batches, which wastes less padding.
        """
        batch_size = batch_size or self.batch_size
        window = batch_size if self.stateful else batch_size * SORT_WINDOW
        for chunk in _chunks(sentences, window):
            order = range(len(chunk)) if self.stateful else sorted(range(len(chunk)), key=lambda i: len(chunk[i]))
            order = list(order)
            results: list[np.ndarray | None] = [None] * len(chunk)
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                for row, emb in zip(rows, self.embed_batch([chunk[r] for r in rows])):
                    results[row] = emb
            yield from results  # type: ignore[misc]

    def embed_file(self, input_file: str | os.PathLike | BinaryIO, output_file: str | os.PathLike,
                   output_format: str = "all", batch_size: int | None = None, forget_sentences: bool = False,
                   use_sentence_keys: bool = False, skip_blank_lines: bool = False, overwrite: bool = False,
                   progress: bool = False) -> int:
        """Embed a file of whitespace-tokenized sentences (one per line) into an HDF5 file.

        Written to a temporary file and renamed at the end: an error or interruption
        leaves no output behind. Returns the number of sentences written.
        """
        import h5py

        if output_format not in OUTPUT_FORMATS:
            raise InputError(f"output format must be one of {OUTPUT_FORMATS}, got {output_format!r}")
        output = _check_output_path(output_file, overwrite)
        lines = read_sentences(input_file, skip_blank_lines=skip_blank_lines, progress=progress)
        keyed = _KeyedLines(lines)
        tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
        sentence_to_index: dict[str, str] = {}
        count = 0
        try:
            with h5py.File(tmp, "w") as out:
                for emb in self.embed_sentences(keyed.tokens(), batch_size):
                    index, text = keyed.pop()
                    if output_format == "top":
                        emb = emb[-1]
                    elif output_format == "average":
                        emb = emb.mean(axis=0)
                    key = text if use_sentence_keys else str(index)
                    if use_sentence_keys and ("/" in key or key == "."):
                        raise InputError(f"line {index + 1}: a sentence with '/' cannot be an HDF5 key; "
                                         "drop --use-sentence-keys")
                    if key in out:
                        continue  # --use-sentence-keys with a repeated sentence: first one kept
                    out.create_dataset(key, data=emb.astype(np.float32, copy=False))
                    sentence_to_index[text] = str(index)
                    count += 1
                if not forget_sentences:
                    dataset = out.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())
                    dataset[0] = json.dumps(sentence_to_index)
            os.replace(tmp, output)
        finally:
            tmp.unlink(missing_ok=True)
        return count


class _KeyedLines:
    """Feeds tokens to the embedder and hands back (line index, text) in the same order."""

    def __init__(self, lines: Iterator[tuple[int, str]]) -> None:
        self._lines = lines
        self._pending: list[tuple[int, str]] = []
        self._next = 0

    def tokens(self) -> Iterator[list[str]]:
        for index, text in self._lines:
            self._pending.append((index, text))
            yield text.split()

    def pop(self) -> tuple[int, str]:
        item = self._pending[self._next]
        self._next += 1
        if self._next > 4096:
            del self._pending[: self._next]
            self._next = 0
        return item


def read_sentences(source: str | os.PathLike | BinaryIO, skip_blank_lines: bool = False,
                   progress: bool = False) -> Iterator[tuple[int, str]]:
    """Yield ``(line index, stripped text)`` from a UTF-8 file of one sentence per line (``-`` = stdin).

    A UTF-8 BOM and CRLF endings are accepted. Invalid UTF-8 and (unless
    ``skip_blank_lines``) blank lines raise ``InputError`` naming the line number.
    """
    if isinstance(source, (str, os.PathLike)) and str(source) == "-":
        yield from _read_lines(sys.stdin.buffer, "<stdin>", None, skip_blank_lines, progress)
        return
    if not isinstance(source, (str, os.PathLike)):
        yield from _read_lines(source, "<input>", None, skip_blank_lines, progress)
        return
    path = Path(source)
    if not path.exists():
        raise InputError(f"input file not found: {path}")
    if path.is_dir():
        raise InputError(f"input is a directory, expected a text file: {path}")
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    with handle:
        yield from _read_lines(handle, str(path), path.stat().st_size, skip_blank_lines, progress)


def _read_lines(handle: BinaryIO, name: str, size: int | None, skip_blank: bool, progress: bool) -> Iterator[tuple[int, str]]:
    from tqdm import tqdm

    bar = tqdm(total=size, unit="B", unit_scale=True, desc="embedding", disable=not progress, file=sys.stderr)
    with bar:
        for index, raw in enumerate(handle):
            bar.update(len(raw))
            if index == 0 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{name}: line {index + 1}: invalid UTF-8 at byte {exc.start}") from None
            text = text.strip()
            if not text and not skip_blank:
                raise InputError(f"{name}: line {index + 1} is blank; every line must hold a sentence "
                                 "(use --skip-blank-lines to keep it as an empty entry)")
            yield index, text


def _check_output_path(output_file: str | os.PathLike, overwrite: bool) -> Path:
    output = Path(output_file)
    if output.is_dir():
        raise InputError(f"output path is a directory: {output}")
    if not output.parent.is_dir():
        raise InputError(f"output folder does not exist: {output.parent}")
    if output.exists() and not overwrite:
        raise InputError(f"output file exists: {output} (use --overwrite to replace it)")
    return output


def _chunks(items: Iterable, size: int) -> Iterator[list]:
    chunk: list = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
