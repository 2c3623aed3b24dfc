"""Word-level n-gram baselines for the biLM's perplexity: unigram and interpolated bigram.

Same predictions as the forward LM (every word of a sentence, then ``</S>``), same
vocabulary (words outside it are ``<UNK>``), so the perplexities compare directly.

    python -m pyelmo.evaluation.ngram --vocab MODEL/vocab.txt --train data/corpus/train --valid data/corpus/valid
"""

from __future__ import annotations

import argparse
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from pyelmo.lm.vocab import BOS_ID, EOS_ID, Vocabulary, read_lines, text_files


@dataclass
class NgramPerplexity:
    unigram: float
    bigram: float
    predictions: int


def ngram_perplexity(vocab: Vocabulary, train: Sequence[Path], valid: Sequence[Path],
                     discount: float = 0.75) -> NgramPerplexity:
    """Add-one unigram and absolute-discounting bigram (interpolated with the unigram) perplexity."""
    unigrams: Counter = Counter()
    bigrams: Counter = Counter()
    for tokens in read_lines(train):
        ids = [BOS_ID, *vocab.encode(tokens), EOS_ID]
        unigrams.update(ids[1:])
        bigrams.update(zip(ids[:-1], ids[1:]))
    total = sum(unigrams.values())
    context_count: Counter = Counter()
    followers: Counter = Counter()
    for (a, _), n in bigrams.items():
        context_count[a] += n
        followers[a] += 1
    size = len(vocab)

    def p_unigram(w: int) -> float:
        return (unigrams[w] + 1) / (total + size)

    log_uni = log_bi = 0.0
    n = 0
    for tokens in read_lines(valid):
        ids = [BOS_ID, *vocab.encode(tokens), EOS_ID]
        for a, w in zip(ids[:-1], ids[1:]):
            pu = p_unigram(w)
            c = context_count[a]
            if c:
                pb = max(bigrams[(a, w)] - discount, 0) / c + discount * followers[a] / c * pu
            else:
                pb = pu
            log_uni -= math.log(pu)
            log_bi -= math.log(pb)
            n += 1
    return NgramPerplexity(math.exp(log_uni / max(n, 1)), math.exp(log_bi / max(n, 1)), n)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", required=True, help="the model's vocab.txt")
    parser.add_argument("--train", required=True, help="training text (file or folder)")
    parser.add_argument("--valid", required=True, help="validation text (file or folder)")
    args = parser.parse_args(argv)
    result = ngram_perplexity(Vocabulary.load(args.vocab), text_files(args.train, "train"),
                              text_files(args.valid, "valid"))
    print(f"predictions {result.predictions}  unigram ppl {result.unigram:.1f}  bigram ppl {result.bigram:.1f}")


if __name__ == "__main__":
    main()
