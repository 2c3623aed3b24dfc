"""Which tokenized sentences a corpus build keeps, and in which split: evaluation data and exact repeats
are dropped, capped sources sampled by hash (the rules of :mod:`pyelmo.corpus.build`)."""

from __future__ import annotations

import hashlib

from pyelmo.corpus import splits
from pyelmo.corpus.sources import SOURCES

MODERN_DIRS = {"valid": "valid-modern", "test": "test-modern"}


class KeptSentences:
    """The sentences kept so far, by split folder, and each source's counts: evaluation data and repeats
    are dropped, a capped source's sentences wait for ``apply_caps``."""

    def __init__(self, names: list[str], excluded: set[str]) -> None:
        self.excluded = excluded
        self.stats: dict[str, dict] = {}
        self.seen: set[bytes] = set()
        self.rows: dict[str, list[tuple[bytes, str]]] = {s: [] for s in (*splits.SPLITS, *MODERN_DIRS.values())}
        self.capped: dict[str, list[tuple[bytes, bytes, str]]] = {
            n: [] for n in names if SOURCES[n].cap is not None}

    def take(self, name: str, kept: list[str], short: int, long: int, nunits: int) -> None:
        """One tokenized batch of source ``name``."""
        st = self.stats.setdefault(
            name,
            {"units": 0, "too_short": 0, "too_long": 0, "duplicates": 0, "evaluation_data": 0,
             "capped": 0, "capped_tokens": 0,
             **{sp: {"sentences": 0, "tokens": 0} for sp in splits.SPLITS}},
        )
        st["units"] += nunits
        st["too_short"] += short
        st["too_long"] += long
        for sent in kept:
            if sent in self.excluded:
                st["evaluation_data"] += 1
                continue
            digest = hashlib.sha1(sent.encode("utf-8")).digest()
            if digest in self.seen:
                st["duplicates"] += 1
                continue
            self.seen.add(digest)
            if name in self.capped:
                self.capped[name].append((hashlib.sha1(b"cap:" + sent.encode("utf-8")).digest(), digest, sent))
            else:
                self.add(name, digest, sent)

    def add(self, name: str, digest: bytes, sent: str) -> None:
        st = self.stats[name]
        sp = splits.corpus_split(sent)
        self.rows[sp].append((digest, sent))
        if sp in MODERN_DIRS and SOURCES[name].era != "archaic":
            self.rows[MODERN_DIRS[sp]].append((digest, sent))
        st[sp]["sentences"] += 1
        st[sp]["tokens"] += sent.count(" ") + 1

    def apply_caps(self) -> None:
        """Each capped source's sentences in hash order, up to its cap in tokens."""
        self.seen = set()  # deduplication is done
        for name, items in self.capped.items():
            items.sort()
            budget = SOURCES[name].cap
            for k, (_, digest, sent) in enumerate(items):
                n = sent.count(" ") + 1
                if n > budget:
                    self.stats[name]["capped"] = len(items) - k
                    self.stats[name]["capped_tokens"] = sum(x[2].count(" ") + 1 for x in items[k:])
                    break
                budget -= n
                self.add(name, digest, sent)
            items.clear()
