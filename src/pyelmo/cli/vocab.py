"""``pyelmo vocab build``: the softmax vocabulary of training text, by descending count."""

from __future__ import annotations

import argparse
from pathlib import Path


BUILD_DESCRIPTION = ("Count the words of DATA (whitespace-tokenized text, one sentence per line) and write vocab.txt: "
                     "<S>, </S>, <UNK>, then the words by descending count (ties alphabetical), one per line, "
                     "the format `pyelmo train --vocab` reads.")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("vocab", help="build a vocabulary (vocab.txt)", description=__doc__)
    sub = p.add_subparsers(dest="vocab_command", metavar="ACTION", required=True)
    b = sub.add_parser("build", help="count words and write vocab.txt", description=BUILD_DESCRIPTION)
    b.add_argument("data", metavar="DATA", help="corpus directory (uses DIR/train/*.txt), a text directory or a file")
    b.add_argument("out", metavar="OUT", help="output file, or a directory to hold vocab.txt")
    b.add_argument("--max-size", type=int, default=None, metavar="N", help="keep at most N words (with <S>, </S>, <UNK>)")
    b.add_argument("--min-count", type=int, default=1, metavar="N", help="drop words seen fewer than N times (default 1)")
    b.add_argument("--overwrite", action="store_true", help="replace the output file if it exists")
    b.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pyelmo.errors import InputError
    from pyelmo.lm.vocab import VOCAB_NAME, text_files, vocab_from_files

    out = Path(args.out)
    into_dir = out.is_dir() or args.out.endswith(("/", "\\"))
    target = out / VOCAB_NAME if into_dir else out
    if target.exists() and not args.overwrite:
        raise InputError(f"output file exists: {target} (use --overwrite to replace it)")
    files = text_files(args.data, "train")
    vocab = vocab_from_files(files, max_size=args.max_size, min_count=args.min_count)
    if into_dir:
        out.mkdir(parents=True, exist_ok=True)
        out = target
    path = vocab.save(out)
    print(f"{len(vocab)} words from {len(files)} file(s) -> {path}")
    return 0
