"""``pyelmo perplexity``: forward, backward and average perplexity of a trained biLM (full softmax)."""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("perplexity", help="perplexity of a trained biLM on text", description=__doc__)
    p.add_argument("model", help="model directory written by `pyelmo train` (OUT/model)")
    p.add_argument("files", nargs="+", metavar="FILE", help="text, one whitespace-tokenized sentence per line")
    p.add_argument("--batch-tokens", type=int, default=8192, help="padded token positions per batch")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pyelmo.errors import InputError
    from pyelmo.lm import perplexity

    if args.batch_tokens < 3:
        raise InputError(f"--batch-tokens must be at least 3, got {args.batch_tokens}")
    result = perplexity(args.model, args.files, batch_tokens=args.batch_tokens)
    if args.json:
        print(json.dumps({"forward": result.forward, "backward": result.backward, "average": result.average,
                          "predictions": result.tokens}))
    else:
        print(f"forward {result.forward:.3f}  backward {result.backward:.3f}  average {result.average:.3f}"
              f"  ({result.tokens} predictions per direction)")
    return 0
