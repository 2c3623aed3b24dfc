"""``pyelmo corpus build OUTDIR INPUT...``: a pretraining corpus from your own text files."""

from __future__ import annotations

import argparse

DESCRIPTION = """\
Build a pretraining corpus (the input of `pyelmo vocab build` and `pyelmo train --data`)
from your own UTF-8 text files: each INPUT is a text file, or a folder whose *.txt files
are read (recursively, in sorted order).

The text is cleaned (Unicode NFC, ASCII quotes, control and zero-width characters
removed, whitespace collapsed), cut into sentences (English rules with pysbd for long
pieces, the `train` extra; Chinese and Japanese at 。！？), tokenized as `pyelmo embed
--tokenize --lang L` tokenizes (Moses, or jieba / Sudachi / PyThaiNLP for --lang zh / ja /
th: the zh, ja and th extras), kept when 3..200 tokens long, and deduplicated (the first
occurrence, inputs in the order given, is kept).

Output: OUTDIR/{train,valid,test}/shard-NNNNN.txt (one tokenized sentence per line, words
separated by spaces, UTF-8; a 98/1/1 split by a hash of the sentence, sentences in hash
order) and OUTDIR/stats.json (per-input counts; written last: a completed build is not
redone).

The corpora of the shipped models are built from registry packages by the recipe in the
repository, `python -m recipes.corpus build` (docs/CORPUS.md).
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``corpus`` and its ``build`` action."""
    from pyelmo.corpus.textfiles import UNITS

    p = subparsers.add_parser(
        "corpus", help="build a pretraining corpus from your text files",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="corpus_command", metavar="ACTION")
    b = sub.add_parser(
        "build", help="clean, split, tokenize, deduplicate and shard text files",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    b.add_argument("outdir", metavar="OUTDIR", help="output folder (created if missing)")
    b.add_argument("inputs", metavar="INPUT", nargs="+", help="a UTF-8 text file, or a folder of *.txt files")
    b.add_argument("--lang", default="en",
                   help="the language of the text: en (default), zh, ja, th or another Moses language code")
    b.add_argument("--units", choices=UNITS, default="paragraphs",
                   help="paragraphs: blank lines separate paragraphs (default); lines: a paragraph a line; "
                        "sentences: a sentence a line (not split again)")
    b.add_argument("--exclude", metavar="FILE", default=None,
                   help="sentences that must not enter the corpus, one a line (e.g. your evaluation data); "
                        "tokenized as the corpus is")
    b.add_argument("--shard-lines", metavar="N", type=int, default=100_000,
                   help="sentences per shard file (default: 100000)")
    b.add_argument("--workers", metavar="N", type=int, default=2,
                   help="tokenizer worker processes (default: 2; 1 = no subprocesses)")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.set_defaults(func=_run_build)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _run_build(args: argparse.Namespace) -> int:
    from pyelmo.corpus.build import build_corpus
    from pyelmo.corpus.textfiles import read_units, text_sources

    exclude = list(read_units(args.exclude, "sentences")) if args.exclude else []
    stats = build_corpus(args.outdir, text_sources(args.inputs, args.units), lang=args.lang, exclude=exclude,
                         workers=args.workers, shard_lines=args.shard_lines, progress=not args.quiet)
    print_totals(stats)
    return 0


def print_totals(stats: dict) -> None:
    """The one-line summary of a build (nothing for a build that was already done)."""
    if not stats.get("noop"):
        t = stats["totals"]
        print(f"train {t['train']['tokens']:,} tokens / {t['train']['sentences']:,} sentences; "
              f"valid {t['valid']['tokens']:,}; test {t['test']['tokens']:,}")
