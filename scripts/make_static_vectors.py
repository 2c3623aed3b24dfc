"""Make the static word vectors shipped beside the default model (``static.safetensors`` + ``static-vocab.txt``).

word2vec (gensim skip-gram, :func:`pyelmo.evaluation.static.train_word2vec`) on the first
``--max-tokens`` tokens of the pretraining corpus's train split (its shards in sorted order),
then the ``--top`` most frequent words stored as float16.  The command and settings used for
the shipped files are recorded in docs/TASKS.md.

    python scripts/make_static_vectors.py /work/data/corpus-v2 --max-tokens 15000000 --dim 200 --epochs 3
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from pyelmo.evaluation.static import StaticVectors, Word2VecOptions, corpus_train_files, train_word2vec
from pyelmo.modelio.hub import shipped_folder
from pyelmo.tasks.static import StaticVectors as TaskVectors
from pyelmo.tasks.static import write_shipped_form


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

    started = time.time()
    files, tokens = [], 0
    for f in corpus_train_files(args.corpus):
        if tokens >= args.max_tokens:
            break
        files.append(f)
        with open(f, encoding="utf-8") as fh:
            tokens += sum(len(line.split()) for line in fh)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "train").mkdir()
        for f in files:
            os.symlink(f.resolve(), Path(tmp) / "train" / f.name)
        options = Word2VecOptions(vector_size=args.dim, epochs=args.epochs, min_count=args.min_count)
        binary = train_word2vec(tmp, Path(tmp) / "word2vec.bin", options)
        kv = StaticVectors.load(binary).kv
    words = list(kv.index_to_key)  # most frequent first
    write_shipped_form(TaskVectors(words, kv.vectors, "word2vec"), args.out, args.top)
    print(json.dumps({"corpus": str(args.corpus), "shards": [f.name for f in files], "tokens": tokens,
                      "dim": args.dim, "epochs": args.epochs, "min_count": args.min_count,
                      "vocabulary": len(words), "shipped_words": min(args.top, len(words)),
                      "seconds": round(time.time() - started)}))


if __name__ == "__main__":
    main()
