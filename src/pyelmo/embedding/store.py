"""The embedding file store: HDF5 files of contextual vectors, written resumably.

The HDF5 file is the one AllenNLP's ``elmo`` command writes: one float32 dataset per input line keyed by
its index (``"0"``, ``"1"``, ...) holding ``(L, n, D)`` (``all``) or ``(n, D)`` (``top``, ``average``),
or with sentence vectors (``pool="mean"``) ``(L, D)`` or ``(D,)``, plus ``sentence_to_index`` (JSON
``{sentence: "i"}``; a variable-length string, or above ``SENTENCE_INDEX_VLEN_LIMIT`` bytes a
fixed-length one, so that memory stays flat for any number of lines; both read back as
``json.loads(f["sentence_to_index"][0])``). Work goes into parts (one file per ``SEGMENT_LINES`` input
lines) that a resumed run reuses; shards merge into one file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import warnings
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator

import numpy as np

from pyelmo.text.batching import chunks
from pyelmo.modeling.bilm import BiLM
from pyelmo.errors import InputError, PyelmoError
from pyelmo.fileio import check_output_file, write_text_atomic
from pyelmo.embedding.pooling import check_pool, mean_pool
from pyelmo.embedding.sentence_index import SentenceIndexOnDisk
from pyelmo.text.lines import text_lines
from pyelmo.modelio.weights import model_fingerprint
from pyelmo.runtime.precision import spelled

OUTPUT_FORMATS = ("all", "top", "average")


class UnsegmentedTextWarning(UserWarning):
    """Lines split on whitespace that look like Chinese, Japanese or Thai text without spaces between words."""


def _whitespace_split_checked() -> Callable[[int, str], list[str]]:
    """``str.split`` of a numbered line that warns once (per call of this function) at the first line
    that looks unsegmented (:func:`pyelmo.text.tokenize.unsegmented_language`)."""
    from pyelmo.text.tokenize import LANGUAGE_NAMES, unsegmented_language

    warned = False

    def split(index: int, text: str) -> list[str]:
        nonlocal warned
        lang = None if warned else unsegmented_language(text)
        if lang:
            warned = True
            warnings.warn(f"line {index + 1} looks like {LANGUAGE_NAMES[lang]} text without spaces between words, "
                          f"and is split on whitespace only: add --tokenize --lang {lang} (tokenize=True, "
                          f"lang=\"{lang}\") to split it into words", UnsegmentedTextWarning, stacklevel=2)
        return text.split()

    return split


def write_embeddings(embedder, input_file: str | os.PathLike | BinaryIO, output_file: str | os.PathLike,
                     output_format: str = "all", batch_size: int | None = None, forget_sentences: bool = False,
                     use_sentence_keys: bool = False, skip_blank_lines: bool = False, overwrite: bool = False,
                     progress: bool = False, shard: tuple[int, int] | None = None, resume: bool = False,
                     tokenize: bool = False, lang: str | None = None, pool: str | None = None) -> int:
    """``ElmoEmbedder.embed_file``: embed a file of sentences with ``embedder`` (see there).

    The output's root attributes record how it was made: ``pyelmo_version``, ``output_format``, ``pooling``
    (``mean`` or ``none``), ``precision``, ``stateful``, ``tokenize`` (with it, ``lang``), ``model_sha1`` (the
    weights' fingerprint), ``execution_plan`` (the plan's summary) and ``kernels_used`` (JSON: the kernel each
    product shape ran with).
    """
    from pyelmo.text.tokenize import check_lang

    if lang is not None and not tokenize:
        raise InputError("lang chooses how raw text is split: it needs tokenize=True (--tokenize)")
    lang = (lang or "auto") if tokenize else None
    if lang is not None:
        check_lang(lang)  # a missing segmenter fails here, before any work
    check_pool(pool)
    if output_format not in OUTPUT_FORMATS:
        raise InputError(f"output format must be one of {OUTPUT_FORMATS}, got {output_format!r}")
    output = check_output_file(output_file, overwrite)
    if shard is not None:
        check_shard(*shard)
    if resume and embedder.stateful:
        raise InputError("--resume cannot continue a --stateful run (the carried LSTM states are not saved)")
    if resume and (not isinstance(input_file, (str, os.PathLike)) or str(input_file) == "-"):
        raise InputError("--resume needs an input file, not a stream")
    settings = {"output_format": output_format, "pooling": pool or "none", "forget_sentences": forget_sentences,
                "shard": shard, "precision": embedder.options.precision, **_plan_settings(embedder.options),
                "use_sentence_keys": use_sentence_keys, "skip_blank_lines": skip_blank_lines, "tokenize": tokenize,
                "lang": lang,
                "segment_lines": SEGMENT_LINES}  # the parts of an earlier version may be of another size
    fingerprint = _fingerprint(input_file, embedder.fingerprint, settings)
    parts = _Parts(output, fingerprint, resume)
    split = (lambda index, text: embedder.tokenize(text, lang)) if tokenize else _whitespace_split_checked()
    lines = read_sentences(input_file, skip_blank_lines=skip_blank_lines)
    if shard is not None:
        lines = _shard_lines(lines, *shard)
    sentence_to_index = None if forget_sentences else SentenceIndexOnDisk(parts.dir / "index.tmp")
    sentence_keys: set[str] = set()  # only with use_sentence_keys (to keep the first of repeated sentences)
    count = 0
    bar = None  # made once the first lines are read: an unreadable input gives its error line only
    try:
        for segment, numbered in enumerate(chunks(lines, SEGMENT_LINES)):
            if bar is None:
                bar = _progress_bar(progress)
            kept = []  # (key, index, text) of the lines that get a dataset
            for index, text in numbered:
                key = text if use_sentence_keys else str(index)
                if use_sentence_keys:
                    if "/" in key or key == ".":
                        raise InputError(f"line {index + 1}: a sentence with '/' cannot be an HDF5 key; "
                                         "drop --use-sentence-keys")
                    if key in sentence_keys:
                        continue  # a repeated sentence: the first one is kept
                    sentence_keys.add(key)
                kept.append((key, index, text))
                if sentence_to_index is not None:
                    sentence_to_index.add(text, index)
            if parts.done(segment):
                bar.update(len(kept))
            else:
                vectors = embedder.embed_sentences([split(index, text) for _, index, text in kept], batch_size)
                parts.write(segment, ((key, _select(emb, output_format, pool)) for (key, _, _), emb in
                                      zip(kept, _counted(vectors, bar))))
            count += len(kept)
        tmp = parts.dir / "output.tmp"
        tmp.unlink(missing_ok=True)
        parts.copy_into(tmp)
        if sentence_to_index is not None:
            sentence_to_index.write_to(tmp)
        _record_provenance(tmp, {"output_format": output_format, "pooling": settings["pooling"],
                                 "precision": settings["precision"],
                                 "stateful": embedder.stateful, "tokenize": tokenize,
                                 **({"lang": lang} if tokenize else {}),
                                 "model_sha1": fingerprint["model"], **plan_attributes(embedder.options)})
        os.replace(tmp, output)
        parts.remove()
    except PyelmoError:
        parts.remove()  # bad input: a resumed run would stop at the same place
        raise
    except KeyboardInterrupt:
        if isinstance(input_file, (str, os.PathLike)) and str(input_file) != "-":
            raise KeyboardInterrupt(parts.what_is_kept()) from None
        raise
    finally:
        if bar is not None:
            bar.close()
        if sentence_to_index is not None:
            sentence_to_index.close()
    return count


def plan_attributes(options) -> dict[str, str]:
    """The execution plan of ``options`` and the kernels its products ran with, as HDF5 attributes."""
    if options.plan is None:
        return {}
    used = {f"rows<={rows} weight={w[0]}x{w[1]}": kernel for (rows, w), kernel in sorted(options.products.decisions.items())}
    return {"execution_plan": options.plan.summary(), "kernels_used": json.dumps(used)}


def _plan_settings(options) -> dict:
    """The execution plan's every field (precision and its settings: the int8 rule, the kernels, ...), which a
    resumed run must repeat: the output records one plan for all its lines."""
    return {} if options.plan is None else {f"plan.{k}": v for k, v in dataclasses.asdict(options.plan).items()}


def _record_provenance(filename: Path, attributes: dict) -> None:
    import importlib.metadata

    import h5py

    try:
        version = importlib.metadata.version("pyelmo")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
        version = "unknown"
    with h5py.File(filename, "a") as f:
        f.attrs.update({"pyelmo_version": version, **attributes})


def _progress_bar(enabled: bool):
    """A bar counting sentences (and tokens, in its postfix) as their vectors are computed."""
    from tqdm import tqdm

    return tqdm(desc="embedding", unit=" sentences", disable=not enabled, file=sys.stderr, dynamic_ncols=True)


def _counted(vectors: Iterable[np.ndarray], bar) -> Iterator[np.ndarray]:
    tokens = 0
    for emb in vectors:
        tokens += emb.shape[-2]
        bar.update(1)
        bar.set_postfix_str(f"{tokens} tokens", refresh=False)
        yield emb


#: ``embed_file`` stores its work in pieces of this many input lines (the unit of --resume): small, so
#: that an interrupted run on a slow machine keeps most of its work (parts of 128 lines cost no
#: measurable time over one part of 2048: 3.2 vs 4.0 CPU s for 2048 lines, the shipped model).
SEGMENT_LINES = 1024


def _select(emb: np.ndarray, output_format: str, pool: str | None = None) -> np.ndarray:
    """The stored array for one sentence: all layers, the top one, or their mean, as float32; with ``pool``
    the sentence vector of that (:func:`~pyelmo.embedding.embedder.mean_pool`)."""
    if output_format == "top":
        emb = emb[-1]
    elif output_format == "average":
        emb = emb.mean(axis=0)
    return mean_pool(emb) if pool else emb.astype(np.float32, copy=False)


def _fingerprint(input_file, model: str, settings: dict) -> dict:
    """What must match for a resumed run to continue an earlier one."""
    source: dict = {"stream": True}
    if isinstance(input_file, (str, os.PathLike)) and str(input_file) != "-" and Path(input_file).is_file():
        stat = Path(input_file).stat()
        source = {"path": str(Path(input_file).resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    return {"input": source, "settings": settings, "model": model}


def check_shard(index: int, count: int) -> None:
    """A shard ``index/count`` must have ``0 <= index < count``."""
    if not 0 <= index < count:
        raise InputError(f"shard I/N needs 0 <= I < N, got {index}/{count}")


def _shard_lines(lines: Iterator[tuple[int, str]], index: int, count: int) -> Iterator[tuple[int, str]]:
    return ((i, text) for i, text in lines if i % count == index)


def _difference(earlier, now: dict) -> str:
    """What differs between an interrupted run's fingerprint and this run's, in words."""
    if not isinstance(earlier, dict):
        return "its manifest is unreadable"
    if earlier.get("input") != now["input"]:
        return "the interrupted run read another input (the file changed since, or is another one)"
    if earlier.get("model") != now["model"]:
        return "the interrupted run used another model"
    settings = earlier.get("settings") if isinstance(earlier.get("settings"), dict) else {}
    changed = [f"{key} was {settings.get(key)!r}, now {value!r}" for key, value in now["settings"].items()
               if settings.get(key) != value]
    return "the interrupted run used other settings: " + "; ".join(changed) if changed else "the runs differ"


class _Parts:
    """The finished segments of one ``embed_file`` run, kept in ``.OUTPUT.parts/`` for --resume."""

    def __init__(self, output: Path, fingerprint: dict, resume: bool) -> None:
        self.dir = output.with_name(f".{output.name}.parts")
        manifest = self.dir / "run.json"
        fingerprint = json.loads(json.dumps(fingerprint))  # as it reads back from the manifest
        if resume:
            if not manifest.is_file():
                raise InputError(f"nothing to resume: no interrupted run of {output} ({self.dir.name}/ is missing)")
            try:
                earlier = json.loads(manifest.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                earlier = None
            if isinstance(earlier, dict) and isinstance(earlier.get("settings"), dict):  # an older "torch.float32"
                earlier["settings"]["precision"] = spelled(earlier["settings"].get("precision"))
            if earlier != fingerprint:
                raise InputError(f"cannot resume {output}: {_difference(earlier, fingerprint)} "
                                 "(run without --resume to start over)")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir.mkdir()
            write_text_atomic(manifest, json.dumps(fingerprint))
        self.completed = {int(p.stem.split("-")[1]) for p in self.dir.glob("part-*.h5")}

    def _path(self, segment: int) -> Path:
        return self.dir / f"part-{segment:08d}.h5"

    def done(self, segment: int) -> bool:
        return segment in self.completed

    def write(self, segment: int, items: Iterable[tuple[str, np.ndarray]]) -> None:
        import h5py

        tmp = self.dir / f"part-{segment:08d}.tmp"
        with h5py.File(tmp, "w") as part:
            for key, array in items:
                part.create_dataset(key, data=array)
        os.replace(tmp, self._path(segment))
        self.completed.add(segment)

    def copy_into(self, filename: Path) -> None:
        """Copy every segment's datasets into the HDF5 file ``filename`` (created if needed).

        The file is reopened for each segment: an open file's metadata cache grows with its
        number of datasets, a reopened one starts empty (flat memory, and faster here)."""
        import h5py

        h5py.File(filename, "a").close()
        for segment in sorted(self.completed):
            with h5py.File(filename, "a") as out, h5py.File(self._path(segment), "r") as part:
                for key in part:
                    part.copy(key, out)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def what_is_kept(self) -> str:
        """What an interrupted run leaves for --resume, counted."""
        import h5py

        if not self.completed:
            return (f"no part of {SEGMENT_LINES} lines was finished, so nothing is kept (the same command with "
                    f"--resume starts from the first line)")
        lines = 0
        for segment in self.completed:
            with h5py.File(self._path(segment), "r") as part:
                lines += len(part)
        return (f"{len(self.completed)} finished part(s), the vectors of {lines} lines, are kept in {self.dir}; "
                f"the same command with --resume continues from them")


def read_sentences(source: str | os.PathLike | BinaryIO, skip_blank_lines: bool = False) -> Iterator[tuple[int, str]]:
    """Yield ``(line index from 0, stripped text)`` of a file of one sentence per line (``-`` = stdin).

    Read by :func:`pyelmo.text.lines.text_lines` (UTF-8, BOM and CRLF accepted). Invalid
    UTF-8 and (unless ``skip_blank_lines``) blank lines raise ``InputError`` naming the line.
    """
    lines = text_lines(source, blank="keep" if skip_blank_lines else "error", what="input file",
                       blank_hint="; every line must hold a sentence "
                                  "(use --skip-blank-lines to keep it as an empty entry)")
    for number, text in lines:
        yield number - 1, text
