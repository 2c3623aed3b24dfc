"""Make the static word vectors shipped beside the default model (``static.safetensors`` + ``static-vocab.txt``).

word2vec (gensim skip-gram, :func:`pyelmo.evaluation.static.train_word2vec`) on the first
``--max-tokens`` tokens of the pretraining corpus's train split (its shards in sorted order),
then the ``--top`` most frequent words stored as float16 (:func:`pyelmo.tasks.static.make_static_vectors`;
``pyelmo task data static`` is the same for any corpus).  The command and settings used for
the shipped files are recorded in docs/TASKS.md.

    python scripts/make_static_vectors.py /work/data/corpus-v2 --max-tokens 15000000 --dim 200 --epochs 3
"""

from __future__ import annotations

import argparse
import json

from pyelmo.modelio.hub import shipped_folder
from pyelmo.tasks.static import make_static_vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", help="pretraining corpus folder (with train/*.txt)")
    parser.add_argument("--max-tokens", type=int, default=15_000_000)
    parser.add_argument("--dim", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--min-count", type=int, default=5)
    parser.add_argument("--top", type=int, default=20_000)
    parser.add_argument("--out", default=str(shipped_folder("english")))
    args = parser.parse_args()
    print(json.dumps(make_static_vectors(args.corpus, args.out, max_tokens=args.max_tokens, dim=args.dim,
                                         epochs=args.epochs, min_count=args.min_count, top=args.top)))


if __name__ == "__main__":
    main()
