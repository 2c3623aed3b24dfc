"""``pyelmo perplexity``: forward, backward and average perplexity of a trained biLM (full softmax)."""

from __future__ import annotations

import argparse

from pyelmo.cli.common import add_model_arguments, positionals_anywhere

DESCRIPTION = """\
Full-softmax perplexity of a model trained with "pyelmo train" (its run folder or model/, or the
folder "pyelmo export" wrote from it; default: the shipped English model) on FILEs of one
whitespace-tokenized sentence per line; blank lines are skipped.

  pyelmo perplexity --model runs/x/model data/corpus/test/*.txt"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("perplexity", help="perplexity of a trained biLM on text", description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    positionals_anywhere(p)
    p.add_argument("files", nargs="+", metavar="FILE", help="text, one whitespace-tokenized sentence per line")
    p.add_argument("--batch-tokens", type=int, default=8192, metavar="N", help="padded token positions per batch (default 8192)")
    p.add_argument("--json", action="store_true",
                   help="print only one JSON object on stdout: forward, backward, average, predictions")
    add_model_arguments(p, released=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pyelmo.cli.common import print_json
    from pyelmo.errors import InputError
    from pyelmo.lm.model import perplexity

    if args.batch_tokens < 3:
        raise InputError(f"--batch-tokens must be at least 3, got {args.batch_tokens}")
    result = perplexity(args.model, args.files, batch_tokens=args.batch_tokens)
    if args.json:
        print_json({"forward": result.forward, "backward": result.backward, "average": result.average,
                    "predictions": result.tokens})
    else:
        print(f"forward {result.forward:.3f}  backward {result.backward:.3f}  average {result.average:.3f}"
              f"  ({result.tokens} predictions per direction)")
    return 0
