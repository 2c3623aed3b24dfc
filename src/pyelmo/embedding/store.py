"""The embedding file store: HDF5 files of contextual vectors, written resumably.

The HDF5 file is the one AllenNLP's ``elmo`` command writes: one float32 dataset per input line keyed by
its index (``"0"``, ``"1"``, ...) holding ``(L, n, D)`` (``all``) or ``(n, D)`` (``top``, ``average``),
or with sentence vectors (``pool="mean"``) ``(L, D)`` or ``(D,)``, plus ``sentence_to_index`` (JSON
``{sentence: "i"}``; a variable-length string, or above ``SENTENCE_INDEX_VLEN_LIMIT`` bytes a
fixed-length one, so that memory stays flat for any number of lines; both read back as
``json.loads(f["sentence_to_index"][0])``). Work goes into parts (one file per ``SEGMENT_LINES`` input
lines) that a resumed run reuses, written by a background thread while the next vectors are computed
(:class:`~pyelmo.embedding.part_writer.PartWriter`); shards merge into one file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from pyelmo.embedding.job import EmbedJob, is_stream
from pyelmo.embedding.part_writer import PartWriter
from pyelmo.embedding.parts import Parts, run_fingerprint
from pyelmo.embedding.pooling import mean_pool
from pyelmo.embedding.sentence_index import SentenceIndexOnDisk
from pyelmo.errors import InputError, PyelmoError
from pyelmo.text.batching import SORT_WINDOW, chunks
from pyelmo.text.lines import text_lines


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


def write_embeddings(embedder, job: EmbedJob) -> int:
    """Run ``job`` with ``embedder`` (:meth:`ElmoEmbedder.embed_job`): the number of sentences written.

    The output's root attributes record how it was made: ``pyelmo_version``, ``output_format``, ``pooling``
    (``mean`` or ``none``), ``precision``, ``stateful``, ``tokenize`` (with it, ``lang``), ``model_sha1`` (the
    weights' fingerprint), ``execution_plan`` (the plan's summary) and ``kernels_used`` (JSON: the kernel each
    product shape ran with).
    """
    job.check_run(embedder.stateful)
    fingerprint = run_fingerprint(job.input, embedder.fingerprint, _run_settings(embedder, job))
    parts = Parts(job.output_path, fingerprint, job.resume, SEGMENT_LINES)
    sentence_to_index = None if job.forget_sentences else SentenceIndexOnDisk(parts.dir / "index.tmp")
    bar = _LazyBar(job.progress)
    try:
        count = _embed_segments(embedder, job, parts, sentence_to_index, bar)
        _finish(parts, sentence_to_index, job.output_path, _provenance(embedder, job, fingerprint["model"]))
    except PyelmoError:
        parts.remove()  # bad input: a resumed run would stop at the same place
        raise
    except KeyboardInterrupt:
        if not is_stream(job.input):
            raise KeyboardInterrupt(parts.what_is_kept()) from None
        raise
    finally:
        bar.close()
        if sentence_to_index is not None:
            sentence_to_index.close()
    return count


def _run_settings(embedder, job: EmbedJob) -> dict:
    """The settings a resumed run must repeat."""
    return {"output_format": job.output_format, "pooling": job.pool or "none",
            "forget_sentences": job.forget_sentences, "shard": job.shard,
            "precision": embedder.options.precision, **_plan_settings(embedder.options),
            "use_sentence_keys": job.use_sentence_keys, "skip_blank_lines": job.skip_blank_lines,
            "tokenize": job.tokenize, "lang": job.lang,
            **_runtime(embedder),
            "segment_lines": SEGMENT_LINES}  # the parts of an earlier version may be of another size


def _embed_segments(embedder, job: EmbedJob, parts: Parts, sentence_to_index, bar: "_LazyBar") -> int:
    """Embed the input segment by segment into ``parts`` (skipping the finished ones): the sentences kept."""
    split = (lambda index, text: embedder.tokenize(text, job.lang)) if job.tokenize else _whitespace_split_checked()
    lines = read_sentences(job.input, skip_blank_lines=job.skip_blank_lines)
    if job.shard is not None:
        lines = _shard_lines(lines, *job.shard)
    sentence_keys: set[str] = set()  # only with use_sentence_keys (to keep the first of repeated sentences)
    count = 0
    # up to one sorting window of sentences waits for the writer while the next window is computed
    writer = PartWriter(parts, lambda emb: _select(emb, job.output_format, job.pool),
                        SORT_WINDOW * (job.batch_size or embedder.batch_size), background=job.overlap_writes)
    with writer:
        for segment, numbered in enumerate(chunks(lines, SEGMENT_LINES)):
            progress = bar.get()  # made once the first lines are read: an unreadable input gives its error line only
            kept = _kept_lines(numbered, job.use_sentence_keys, sentence_keys, sentence_to_index)
            if parts.done(segment):
                progress.update(len(kept))
            else:
                vectors = embedder.embed_sentences([split(index, text) for _, index, text in kept], job.batch_size)
                writer.write(segment, zip((key for key, _, _ in kept), _counted(vectors, progress)))
            count += len(kept)
    return count


def _kept_lines(numbered, use_sentence_keys: bool, sentence_keys: set[str],
                sentence_to_index) -> list[tuple[str, int, str]]:
    """``(key, index, text)`` of the lines of a segment that get a dataset (added to ``sentence_to_index``)."""
    kept = []
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
    return kept


def _finish(parts: Parts, sentence_to_index, output: Path, provenance: dict) -> None:
    """Join the parts (and the sentence index) into ``output``, which appears complete or not at all."""
    tmp = parts.dir / "output.tmp"
    tmp.unlink(missing_ok=True)
    parts.join_into(tmp)
    if sentence_to_index is not None:
        sentence_to_index.write_to(tmp)
    _record_provenance(tmp, provenance)
    os.replace(tmp, output)
    parts.remove()


def _provenance(embedder, job: EmbedJob, model: str) -> dict:
    """The output's attributes saying how it was made (besides ``pyelmo_version``)."""
    return {"output_format": job.output_format, "pooling": job.pool or "none",
            "precision": embedder.options.precision,
            "stateful": embedder.stateful, "tokenize": job.tokenize,
            **({"lang": job.lang} if job.tokenize else {}),
            "model_sha1": model, **_runtime(embedder), **plan_attributes(embedder.options)}


def _runtime(embedder) -> dict:
    """``runtime`` where the vectors did not come from PyTorch (``onnxruntime``)."""
    runtime = getattr(embedder, "runtime", "torch")
    return {} if runtime == "torch" else {"runtime": runtime}


def plan_attributes(options) -> dict[str, str]:
    """The execution plan of ``options`` and the kernels its products ran with, as HDF5 attributes."""
    if options.plan is None:
        return {}
    used = {f"rows<={rows} weight={w[0]}x{w[1]}": kernel for (rows, w), kernel in sorted(options.products.decisions.items())}
    return {"execution_plan": options.plan.summary(), "kernels_used": json.dumps(used)}


def _plan_settings(options) -> dict:
    """The execution plan's every field (precision and its settings: the int8 rule, as ``int8_min_weight``, the
    kernels, ...), which a resumed run must repeat: the output records one plan for all its lines."""
    if options.plan is None:
        return {}
    fields = dataclasses.asdict(options.plan)
    fields["int8_min_weight"] = fields.pop("quantization")["min_weight"]  # as the summary and earlier runs name it
    return {f"plan.{k}": v for k, v in fields.items()}


def _record_provenance(filename: Path, attributes: dict) -> None:
    import importlib.metadata

    import h5py

    try:
        version = importlib.metadata.version("pyelmo")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
        version = "unknown"
    with h5py.File(filename, "a") as f:
        f.attrs.update({"pyelmo_version": version, **attributes})


class _LazyBar:
    """A bar counting sentences (and tokens, in its postfix) as their vectors are computed, made on first use."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar = None

    def get(self):
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(desc="embedding", unit=" sentences", disable=not self.enabled, file=sys.stderr,
                            dynamic_ncols=True)
        return self.bar

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


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


def _shard_lines(lines: Iterator[tuple[int, str]], index: int, count: int) -> Iterator[tuple[int, str]]:
    return ((i, text) for i, text in lines if i % count == index)


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
