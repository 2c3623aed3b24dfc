"""Task metrics with maintained scorers: accuracy, macro-F1 (scikit-learn), span F1 (seqeval), SQuAD's exact
match and F1.  Every metric is in percent (0-100), as ``SCALE`` says in reports; results written before
2026-12-04 held accuracy, macro-F1 and span F1 on 0-1 (:func:`in_percent` reads them)."""

from __future__ import annotations

from typing import Sequence

SCALE = "percent"
#: The metrics that were fractions (0-1) before every metric was in percent (qa's were percent already).
FORMER_FRACTIONS = ("accuracy", "macro_f1", "span_f1")

_SCHEME_PREFIXES = ("B-", "I-", "E-", "S-", "L-", "U-")


def is_span_scheme(tags: Sequence[str]) -> bool:
    """True when every tag is ``O`` or starts with a BIO/BIOES prefix (and some are not ``O``)."""
    return any(t != "O" for t in tags) and all(t == "O" or t.startswith(_SCHEME_PREFIXES) for t in tags)


def classify_metrics(gold: Sequence[str], pred: Sequence[str]) -> dict:
    """``{"accuracy", "macro_f1", "n"}`` (percent); macro-F1 over every label seen in gold or predictions."""
    from sklearn.metrics import f1_score

    labels = sorted(set(gold) | set(pred))
    correct = sum(g == p for g, p in zip(gold, pred))
    return {"accuracy": 100.0 * correct / len(gold),
            "macro_f1": 100.0 * float(f1_score(list(gold), list(pred), labels=labels, average="macro",
                                               zero_division=0)),
            "n": len(gold)}


def tag_metrics(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict:
    """``{"accuracy", "span_f1", "n", "tokens"}`` (percent): token accuracy; span F1 (seqeval, conlleval rules)
    when the tags are BIO/BIOES, else ``span_f1`` is None.  ``n`` counts sentences."""
    flat_gold = [t for s in gold for t in s]
    flat_pred = [t for s in pred for t in s]
    correct = sum(g == p for g, p in zip(flat_gold, flat_pred))
    span_f1 = None
    if is_span_scheme(flat_gold):
        from seqeval.metrics import f1_score

        span_f1 = 100.0 * float(f1_score([list(s) for s in gold], [list(s) for s in pred]))
    return {"accuracy": 100.0 * correct / len(flat_gold), "span_f1": span_f1, "n": len(gold),
            "tokens": len(flat_gold)}


def normalize_answer(text: str) -> str:
    """SQuAD v1.1's answer normalisation: lower case, punctuation and articles removed, whitespace collapsed."""
    import re
    import string

    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def answer_f1(prediction: str, gold: str) -> float:
    """SQuAD v1.1's token F1 of two answers (bag of normalised tokens)."""
    from collections import Counter

    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def squad_metrics(gold: Sequence[Sequence[str]], pred: Sequence[str]) -> dict:
    """``{"exact_match", "f1", "n"}`` as SQuAD v1.1's script (in percent): per question the maximum over
    its gold answers, averaged over the questions."""
    em = sum(max(normalize_answer(p) == normalize_answer(g) for g in golds) for golds, p in zip(gold, pred))
    f1 = sum(max(answer_f1(p, g) for g in golds) for golds, p in zip(gold, pred))
    return {"exact_match": 100.0 * em / len(gold), "f1": 100.0 * f1 / len(gold), "n": len(gold)}


def in_percent(metrics: dict, scale: str | None) -> dict:
    """``metrics`` as written with ``scale`` (``SCALE``, or None: before metrics were all in percent, when
    accuracy, macro-F1 and span F1 were fractions) in percent."""
    if scale == SCALE:
        return metrics
    return {k: 100.0 * v if k in FORMER_FRACTIONS and isinstance(v, (int, float)) else v for k, v in metrics.items()}
