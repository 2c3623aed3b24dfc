"""Pairwise sense AUC per layer: for each word, how often a pair of its contexts of the same sense is more similar
than a pair of different senses (0.5 chance, 1.0 perfect), on a sense file and on the demo's contexts.

    python scripts/senses_auc.py --model chinese --senses tests/data/senses-zh.tsv --demo zh [--json]

``--senses``: ``word<TAB>sense<TAB>tokenized sentence`` lines (held-out contexts); ``--demo zh|en``: also the sense
demo's contexts of that language (segmented as the demo does).
"""

from __future__ import annotations

import argparse
import json
import unicodedata
from pathlib import Path

import numpy as np

from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.evaluation.senses import SenseExample, read_sense_examples, sense_auc_per_layer


def demo_examples(lang: str) -> list[SenseExample]:
    from pyelmo.evaluation.demo import demo_data
    from pyelmo.text.tokenize import tokenize

    _, contexts, _ = demo_data(lang)
    return [SenseExample(word, sense, tuple(tokenize(s, lang))) for word, senses in contexts.items()
            for sense, sentences in senses.items() for s in sentences]


def _pad(word: str, width: int = 8) -> str:
    """``word`` padded to ``width`` terminal columns (a Chinese character takes two)."""
    return word + " " * max(width - sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in word), 1)


def report(name: str, table: dict[str, dict[str, float]]) -> dict:
    words = list(next(iter(table.values())))
    means = {layer: float(np.mean(list(per_word.values()))) for layer, per_word in table.items()}
    best = max((layer for layer in table if layer != "layer 0"), key=means.get)
    above = sum(table[best][w] > 0.5 for w in words)
    return {"set": name, "words": words, "auc": table, "mean_auc": means, "best_contextual_layer": best,
            "words_above_chance_at_best": above}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="english", help="anything --model takes (default: english)")
    p.add_argument("--senses", type=Path, help="a sense file (held-out contexts)")
    p.add_argument("--demo", choices=("en", "zh"), help="also the sense demo's contexts in this language")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    args = p.parse_args()
    embedder = ElmoEmbedder(args.model)
    sets = ([("demo", demo_examples(args.demo))] if args.demo else []) + \
        ([(str(args.senses), read_sense_examples(args.senses))] if args.senses else [])
    results = [report(name, sense_auc_per_layer(embedder, examples)) for name, examples in sets]
    if args.json:
        print(json.dumps({"model": args.model, "results": results}, ensure_ascii=False, indent=1))
        return
    for r in results:
        layers = list(r["auc"])
        print(f"{r['set']}: pairwise sense AUC (0.5 = chance); best contextual layer {r['best_contextual_layer']}, "
              f"{r['words_above_chance_at_best']} of {len(r['words'])} words above 0.5 there")
        print(_pad("word") + "".join(f"{name:>10}" for name in layers))
        for w in r["words"]:
            print(_pad(w) + "".join(f"{r['auc'][name][w]:10.3f}" for name in layers))
        print(_pad("mean") + "".join(f"{r['mean_auc'][name]:10.3f}" for name in layers))


if __name__ == "__main__":
    main()
