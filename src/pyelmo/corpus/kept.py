"""Which tokenized sentences a corpus build keeps, and in which split: excluded sentences and exact repeats
are dropped, capped sources sampled by hash (the rules of :mod:`pyelmo.corpus.build`)."""

from __future__ import annotations

import hashlib

from pyelmo.corpus import splits


class KeptSentences:
    """The sentences kept so far, by split folder, and each source's counts: excluded sentences and repeats
    are dropped, a capped source's sentences wait for ``apply_caps``.

    ``caps``: source -> its cap in tokens (sources without a cap left out); ``in_subset``: the sources whose
    valid and test sentences are also kept in ``valid-<subset>/`` and ``test-<subset>/`` (``subset`` None:
    no such folders)."""

    def __init__(self, caps: dict[str, int], in_subset: set[str], excluded: set[str], subset: str | None) -> None:
        self.excluded = excluded
        self.in_subset = in_subset
        self.subset = subset
        self.subset_dirs = {sp: f"{sp}-{subset}" for sp in ("valid", "test")} if subset else {}
        self.caps = caps
        self.stats: dict[str, dict] = {}
        self.seen: set[bytes] = set()
        self.rows: dict[str, list[tuple[bytes, str]]] = {s: [] for s in (*splits.SPLITS, *self.subset_dirs.values())}
        self.capped: dict[str, list[tuple[bytes, bytes, str]]] = {n: [] for n in caps}

    def take(self, name: str, kept: list[str], short: int, long: int, nunits: int) -> None:
        """One tokenized batch of source ``name``."""
        st = self.stats.setdefault(
            name,
            {"units": 0, "too_short": 0, "too_long": 0, "duplicates": 0, "excluded": 0,
             "capped": 0, "capped_tokens": 0,
             **{sp: {"sentences": 0, "tokens": 0} for sp in splits.SPLITS}},
        )
        st["units"] += nunits
        st["too_short"] += short
        st["too_long"] += long
        for sent in kept:
            if sent in self.excluded:
                st["excluded"] += 1
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
        if sp in self.subset_dirs and name in self.in_subset:
            self.rows[self.subset_dirs[sp]].append((digest, sent))
        st[sp]["sentences"] += 1
        st[sp]["tokens"] += sent.count(" ") + 1

    def apply_caps(self) -> None:
        """Each capped source's sentences in hash order, up to its cap in tokens."""
        self.seen = set()  # deduplication is done
        for name, items in self.capped.items():
            items.sort()
            budget = self.caps[name]
            for k, (_, digest, sent) in enumerate(items):
                n = sent.count(" ") + 1
                if n > budget:
                    self.stats[name]["capped"] = len(items) - k
                    self.stats[name]["capped_tokens"] = sum(x[2].count(" ") + 1 for x in items[k:])
                    break
                budget -= n
                self.add(name, digest, sent)
            items.clear()
