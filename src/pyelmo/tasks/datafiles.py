"""Helpers of the task data files (:mod:`pyelmo.tasks.build`, :mod:`pyelmo.tasks.chinese`): split names, the
length of a tagged sentence, deterministic caps by SHA-1, and the TSV / CoNLL writers."""

from __future__ import annotations

import hashlib
from typing import Iterable, Sequence

SENTENCE_TOKENS = (3, 60)
SPLIT_NAMES = {"train": "train", "valid": "dev", "test": "test"}


def sha1_hex(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def cap(items: list, key, n: int | None) -> list:
    """The ``n`` items with the smallest SHA-1 of ``key(item)``, in their original order."""
    if n is None or len(items) <= n:
        return items
    keep = set(sorted(range(len(items)), key=lambda i: sha1_hex(key(items[i])))[:n])
    return [x for i, x in enumerate(items) if i in keep]


def distinct(rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """One ``(label, text)`` row per distinct text, at its first place, with its most frequent
    label (ties: the one seen first).  Identical texts share a split (``doc_split`` keys on the
    text), so without this a repeated tweet counts many times in one split's score."""
    from collections import Counter

    labels: dict[str, Counter] = {}
    for label, text in rows:
        labels.setdefault(text, Counter())[label] += 1
    return [(max(c, key=c.__getitem__), text) for text, c in labels.items()]  # max keeps the first of ties


def tsv(rows: Iterable[tuple[str, str]]) -> str:
    return "".join(f"{label}\t{' '.join(text.split())}\n" for label, text in rows)


def conll(sentences: Iterable[Sequence[tuple[str, str]]]) -> str:
    return "".join("".join(f"{w}\t{t}\n" for w, t in s) + "\n" for s in sentences)
