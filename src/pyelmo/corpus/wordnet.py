"""WordNet's data files (``data.noun`` ...): synsets with their lemmas, definitions and example sentences.
Which of them are evaluation data is :mod:`pyelmo.corpus.splits`' rule."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pyelmo.errors import InputError

_QUOTED = re.compile(r'"([^"]*)"')


def split_gloss(gloss: str) -> tuple[list[str], list[str]]:
    """Split a WordNet gloss into (definitions, examples).

    Examples are the double-quoted parts; definitions are the rest, split at ``;``.
    """
    examples = [e.strip() for e in _QUOTED.findall(gloss) if e.strip()]
    rest = _QUOTED.sub(" ", gloss)
    defs = []
    for part in rest.split(";"):
        part = " ".join(part.split()).strip(" ,:;")
        if part:
            defs.append(part)
    return defs, examples


@dataclass(frozen=True)
class Synset:
    """One WordNet synset line: offset, POS letter, lemmas, definitions, examples."""

    offset: str
    pos: str
    lemmas: tuple[str, ...]
    definitions: tuple[str, ...]
    examples: tuple[str, ...]


def wordnet_dir(directory: str | Path) -> Path:
    """The folder holding ``data.noun`` etc. (``directory`` or below it)."""
    d = Path(directory)
    if (d / "data.noun").exists():
        return d
    hits = sorted(p.parent for p in d.rglob("data.noun"))
    if not hits:
        raise InputError(f"no WordNet data files (data.noun ...) in {d}")
    return hits[0]


def read_wordnet(directory: str | Path) -> Iterator[Synset]:
    """Yield every synset of ``data.{noun,verb,adj,adv}`` (licence header skipped)."""
    d = wordnet_dir(directory)
    for name in ("noun", "verb", "adj", "adv"):
        path = d / f"data.{name}"
        if not path.exists():
            continue
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("  ") or " | " not in line:
                    continue
                head, _, gloss = line.partition(" | ")
                f = head.split()
                try:
                    n = int(f[3], 16)
                except (IndexError, ValueError):
                    continue
                lemmas = tuple(f[4 + 2 * i] for i in range(n) if 4 + 2 * i < len(f))
                defs, exs = split_gloss(gloss.strip())
                yield Synset(f[0], f[2], lemmas, tuple(defs), tuple(exs))
