"""Build a pretraining corpus from raw text: named sources of paragraphs (or sentences) in, shards out.

Pipeline: each source's units (``TextSource.read``) -> sentence split (``sentences.split_sentences``:
abbreviation-aware rules, ``pysbd`` for pieces over 60 words; Chinese and Japanese at ``。！？``; units that
are already sentences are not split) -> tokenization (``pyelmo.text.tokenize.tokenize(s, lang)``: Moses,
``escape=False``, or the language's word segmenter) -> whitespace normalisation -> length filter ->
excluded sentences dropped -> exact-duplicate removal -> caps -> split -> shards.

Rules, all deterministic:

* Unicode NFC; curly quotes become ASCII ``'`` and ``"`` (so ``God’s`` tokenizes like
  ``God's``); control and zero-width characters become spaces; ``word--word`` gets
  spaces around the dash; runs of whitespace collapse to one space.
* Sentences with fewer than 3 or more than 200 tokens are dropped (fragments such as
  headings, and run-ons that would waste a training batch).
* Any sentence equal to an ``exclude`` sentence (tokenized the same way) is dropped, from every
  source: text that must never be trained on, such as evaluation data.
* Duplicates: the first occurrence (sources in the order given) is kept.
* Caps (rebalancing): a source with a ``cap`` keeps its sentences in the order of
  SHA-1(``"cap:" + sentence``) until the next one would take its token count over the
  cap; the rest are dropped (``capped`` in the stats).  A capped-away sentence still counts
  as seen for deduplication.
* Split: ``splits.corpus_split`` of the tokenized sentence (98/1/1 by SHA-1).
* Held-out subset (``subset``, optional): ``valid-<subset>/`` and ``test-<subset>/`` repeat the valid
  and test sentences of the sources marked ``in_subset`` (a subset of ``valid/``, ``test/``).
* Inside each split, sentences are ordered by SHA-1 of their text: a fixed shuffle that
  does not depend on input order, then cut into shards of ``shard_lines`` lines.
* Every file is written to a temporary name and renamed; ``stats.json`` is written
  last and marks completion.  A directory with a valid ``stats.json`` is not rebuilt.

``pyelmo corpus build`` runs this on a user's text files (:mod:`pyelmo.corpus.textfiles`); the shipped
models' corpora are built by the recipe in ``recipes/corpus`` of the repository (docs/CORPUS.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from pyelmo.corpus import splits
from pyelmo.corpus.kept import KeptSentences
from pyelmo.corpus.sentences import (MAX_TOKENS, MIN_TOKENS, init_worker, splits_like_english, tokenize_batch,
                                     tokenize_units)
from pyelmo.corpus.shards import STATS_VERSION, files_hash, load_stats, write_shards
from pyelmo.errors import InputError
from pyelmo.fileio import write_bytes_atomic

__all__ = ["SHARD_LINES", "STATS_VERSION", "TextSource", "build_corpus", "check_request", "completed_build",
           "files_hash", "load_stats"]

SHARD_LINES = 100_000
_BATCH = 256


@dataclass(frozen=True)
class TextSource:
    """One named stream of raw text for :func:`build_corpus`.

    ``read()`` yields its units: paragraphs to split into sentences, or sentences already when
    ``sentences``.  ``cap``: at most this many tokens (all splits together) are kept, chosen by a hash of
    the sentence.  ``in_subset``: its valid and test sentences are also written to the held-out subset
    folders.  ``info`` is recorded in ``stats.json`` beside the source's counts.
    """

    name: str
    read: Callable[[], Iterable[str]]
    sentences: bool = False
    cap: int | None = None
    in_subset: bool = False
    info: Mapping[str, object] = field(default_factory=dict)


def _batches(name: str, presplit: bool, lang: str, units: Iterable[str]) -> Iterator[tuple[str, bool, str, list[str]]]:
    buf: list[str] = []
    for u in units:
        buf.append(u)
        if len(buf) >= _BATCH:
            yield name, presplit, lang, buf
            buf = []
    if buf:
        yield name, presplit, lang, buf


def build_corpus(
    outdir: str | os.PathLike,
    sources: Sequence[TextSource],
    *,
    lang: str = "en",
    exclude: Iterable[str] = (),
    subset: str | None = None,
    workers: int = 2,
    shard_lines: int = SHARD_LINES,
    progress: bool = True,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
) -> dict:
    """Build the corpus of ``sources`` (in this order) into ``outdir`` and return its stats (see the module
    docstring).

    ``lang``: the language of the text (``en``, ``zh``, ``ja``, ``th`` or a Moses language code), which sets
    how it is split and tokenized.  ``exclude``: raw sentences that must not enter the corpus (tokenized
    like it).  ``subset``: the name of the held-out subset folders (``valid-<subset>/``, ``test-<subset>/``)
    of the sources marked ``in_subset``; None: none.  If ``outdir`` already holds a valid build, nothing is
    done and its stats are returned with ``"noop": True``.
    """
    out = Path(outdir)
    check_request(out, lang, workers, shard_lines)
    names = [s.name for s in sources]
    if not names:
        raise InputError("no sources selected")
    if len(set(names)) < len(names):
        raise InputError(f"source {next(n for n in names if names.count(n) > 1)!r} is named twice")
    existing = completed_build(out, log)
    if existing is not None:
        return existing
    t0 = time.time()
    excluded = set(tokenize_units(list(exclude), presplit=True, lang=lang)[0])
    kept = KeptSentences({s.name: s.cap for s in sources if s.cap is not None},
                         {s.name for s in sources if s.in_subset}, excluded, subset)
    _tokenize_sources(sources, lang, workers, progress, kept)
    kept.apply_caps()
    files = write_shards(out, kept.rows, shard_lines)
    stats = _stats(out, sources, lang, kept, files, shard_lines)
    stats["build_seconds"] = round(time.time() - t0, 1)
    write_bytes_atomic(out / "stats.json", (json.dumps(stats, indent=2, sort_keys=False) + "\n").encode("utf-8"))
    log(f"built {out}: {stats['totals']['train']['tokens']:,} training tokens from {len(names)} sources "
        f"in {stats['build_seconds']:.0f}s")
    return stats


def check_request(out: Path, lang: str, workers: int, shard_lines: int) -> None:
    """One line saying what is wrong with a build request, before any work (or download)."""
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} exists and is not a directory")
    if workers < 1:
        raise InputError("--workers must be at least 1")
    if shard_lines < 1:
        raise InputError("shard_lines must be at least 1")
    if lang != "en":
        from pyelmo.text.tokenize import check_lang

        if lang == "auto":
            raise InputError("a corpus is built in one language: name it (--lang)")
        check_lang(lang)  # its word segmenter is installed, or one line naming the extra


def completed_build(out: Path, log: Callable[[str], None]) -> dict | None:
    """The stats of a valid build already in ``out`` (marked ``noop``), else None (a stale marker removed)."""
    existing = load_stats(out)
    if existing is not None:
        log(f"{out} is already built (stats.json is valid); nothing to do")
        existing["noop"] = True
        return existing
    if (out / "stats.json").exists():
        log(f"{out}/stats.json is stale or invalid: rebuilding")
        (out / "stats.json").unlink()  # never leave an old marker over a new partial build
    return None


def _tokenize_sources(sources: Sequence[TextSource], lang: str, workers: int, progress: bool,
                      kept: KeptSentences) -> None:
    """Read, split and tokenize every source (in ``workers`` processes), in order, into ``kept``."""
    from tqdm import tqdm

    def tasks() -> Iterator[tuple[str, bool, str, list[str]]]:
        for s in sources:
            yield from _batches(s.name, s.sentences, lang, s.read())

    with _tokenized(tasks(), lang, workers) as results:
        bar = tqdm(desc="corpus", unit=" units", disable=not progress, file=sys.stderr, mininterval=2)
        try:
            for name, sents, short, long, nunits in results:
                kept.take(name, sents, short, long, nunits)
                bar.update(nunits)
                bar.set_postfix_str(name, refresh=False)
        finally:
            bar.close()


@contextmanager
def _tokenized(tasks: Iterator, lang: str, workers: int):
    """``tokenize_batch`` of each task, in order: in this process, or in a pool of ``workers``."""
    if workers == 1:
        yield map(tokenize_batch, tasks)
        return
    import multiprocessing as mp

    pool = mp.get_context("spawn" if sys.platform == "win32" else "fork").Pool(
        workers, initializer=init_worker if splits_like_english(lang) else None  # the sentence splitter
    )
    try:
        yield pool.imap(tokenize_batch, tasks, chunksize=1)
    except BaseException:
        pool.terminate()
        raise
    else:
        pool.close()
    finally:
        pool.join()


def _stats(out: Path, sources: Sequence[TextSource], lang: str, kept: KeptSentences, files: list[dict],
           shard_lines: int) -> dict:
    """What ``stats.json`` records of a build (all but its time)."""
    by_source = kept.stats
    totals = {sp: {"sentences": sum(s[sp]["sentences"] for s in by_source.values()),
                   "tokens": sum(s[sp]["tokens"] for s in by_source.values())} for sp in splits.SPLITS}
    for sp, folder in kept.subset_dirs.items():
        held = [st for n, st in by_source.items() if n in kept.in_subset]
        totals[folder] = {"sentences": sum(s[sp]["sentences"] for s in held),
                          "tokens": sum(s[sp]["tokens"] for s in held)}
    rules = {"tokenizer": f"pyelmo.text.tokenize, lang {lang}" if lang != "en" else "sacremoses (Moses)",
             "min_tokens": MIN_TOKENS, "max_tokens": MAX_TOKENS, "shard_lines": shard_lines,
             "split": "sha1(sentence) mod 1000: <980 train, <990 valid, else test",
             "cap": "a capped source keeps sentences in sha1('cap:' + sentence) order up to its cap in tokens",
             "order": "within a split, by sha1(sentence)"}
    if kept.subset:
        rules["subset"] = f"valid-{kept.subset}, test-{kept.subset}: the valid/test sentences of the sources in the subset"
    return {
        "version": STATS_VERSION,
        "complete": True,
        "language": lang,
        "sources": {s.name: {**s.info, "cap": s.cap, **by_source.get(s.name, {})} for s in sources},
        "totals": totals,
        "excluded_sentences": len(kept.excluded),
        "rules": rules,
        "files": files,
        "files_hash": files_hash(out, [f["path"] for f in files]),
        "content_hash": hashlib.sha256("".join(f"{f['path']}\t{f['sha256']}\n" for f in files).encode()).hexdigest(),
    }
