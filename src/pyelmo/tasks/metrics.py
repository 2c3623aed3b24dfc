"""Task metrics with maintained scorers: accuracy, macro-F1 (scikit-learn), span F1 (seqeval)."""

from __future__ import annotations

from typing import Sequence

_SCHEME_PREFIXES = ("B-", "I-", "E-", "S-", "L-", "U-")


def is_span_scheme(tags: Sequence[str]) -> bool:
    """True when every tag is ``O`` or starts with a BIO/BIOES prefix (and some are not ``O``)."""
    return any(t != "O" for t in tags) and all(t == "O" or t.startswith(_SCHEME_PREFIXES) for t in tags)


def classify_metrics(gold: Sequence[str], pred: Sequence[str]) -> dict:
    """``{"accuracy", "macro_f1", "n"}``; macro-F1 over every label seen in gold or predictions."""
    from sklearn.metrics import f1_score

    labels = sorted(set(gold) | set(pred))
    correct = sum(g == p for g, p in zip(gold, pred))
    return {"accuracy": correct / len(gold),
            "macro_f1": float(f1_score(list(gold), list(pred), labels=labels, average="macro", zero_division=0)),
            "n": len(gold)}


def tag_metrics(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict:
    """``{"accuracy", "span_f1", "n", "tokens"}``: token accuracy; span F1 (seqeval, conlleval rules)
    when the tags are BIO/BIOES, else ``span_f1`` is None.  ``n`` counts sentences."""
    flat_gold = [t for s in gold for t in s]
    flat_pred = [t for s in pred for t in s]
    correct = sum(g == p for g, p in zip(flat_gold, flat_pred))
    span_f1 = None
    if is_span_scheme(flat_gold):
        from seqeval.metrics import f1_score

        span_f1 = float(f1_score([list(s) for s in gold], [list(s) for s in pred]))
    return {"accuracy": correct / len(flat_gold), "span_f1": span_f1, "n": len(gold), "tokens": len(flat_gold)}
