"""Which direction of each layer carries the senses of tests/data/senses.tsv, and does a warm forward
state change it (docs/EVALUATION.md)?

    python scripts/senses_halves.py [--model DIR] [--prefix "A neutral sentence ." ...]

Prints the leave-one-out nearest-sense accuracy (``pyelmo.evaluation.senses.nearest_sense_accuracy``) of each
contextual layer, of its forward half (what the forward LSTM read up to the word) and of its backward
half (what the backward LSTM read from the end). With ``--prefix`` every sentence is embedded again
with that text before it (the word's vector taken at its shifted index): the forward LSTM then
reaches the word from a state that has read a sentence already rather than from zero, which is what
carried states would give; the backward half does not see the prefix.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.evaluation.senses import find_word, nearest_sense_accuracy, read_sense_examples

SENSES = Path(__file__).resolve().parents[1] / "tests" / "data" / "senses.tsv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="model folder (default: the shipped one)")
    parser.add_argument("--prefix", action="append", default=[], metavar="TEXT",
                        help="whitespace-tokenized text put before every sentence (repeatable: one row each)")
    parser.add_argument("--senses", default=str(SENSES))
    args = parser.parse_args()
    examples = read_sense_examples(args.senses)
    words, senses = [e.word for e in examples], [f"{e.word}/{e.sense}" for e in examples]
    embedder = ElmoEmbedder(args.model) if args.model else ElmoEmbedder()
    print("| prefix | " + " | ".join(f"layer {k}: whole / forward / backward" for k in (1, 2)) + " |")
    print("|---|---|---|")
    for prefix in ["", *args.prefix]:
        before = prefix.split()
        outputs = embedder.embed_batch([before + list(e.tokens) for e in examples])
        vectors = np.stack([out[:, len(before) + find_word(e.tokens, e.word)] for e, out in zip(examples, outputs)])
        half = vectors.shape[-1] // 2
        cells = []
        for layer in (1, 2):
            parts = (vectors[:, layer], vectors[:, layer, :half], vectors[:, layer, half:])
            cells.append(" / ".join(f"{100 * nearest_sense_accuracy(v, words, senses):.1f}" for v in parts))
        print(f"| {prefix or '(none)'} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
