"""``pyelmo predict``: the biLM as a language model, filling a blank."""

from __future__ import annotations

import argparse

from pyelmo.cli.common import add_lang_argument, add_model_arguments, resolved_model

DESCRIPTION = """\
Print the top-k words for the blank (___) in SENTENCE: from the forward LM (reading
the words before it), the backward LM (reading the words after it), and combined: the
candidate words (the best --candidates of each direction and of their product) ranked by
the probability of the whole sentence with the word in place, under both LMs (so the
words after the blank must also follow it, and those before it precede it), renormalised
over the candidates. Needs a model trained by `pyelmo train` (with its softmax and
vocabulary), such as the shipped one: its run folder, model/, or the folder `pyelmo export`
wrote from it."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("predict", help="top-k words for a blank (___) in a sentence", description=DESCRIPTION,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sentence", metavar="SENTENCE", help='e.g. "The boat stopped near the river ___ ."')
    parser.add_argument("-k", "--top", type=int, default=10, metavar="K", help="how many words (default 10)")
    parser.add_argument("--candidates", type=int, metavar="N",
                        help="words of each ranking rescored by the whole sentence (default: "
                             "pyelmo.lm.predict.CANDIDATES, 100; 0: combined is the product of the two "
                             "directions' distributions at the blank)")
    add_lang_argument(parser)
    add_model_arguments(parser, released=False)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pyelmo.errors import InputError
    from pyelmo.lm.predict import WordPredictor, blank_tokens

    if args.top < 1:
        raise InputError("-k must be at least 1")
    if args.candidates is not None and args.candidates < 0:
        raise InputError("--candidates must be 0 or more")
    tokens = blank_tokens(args.sentence, args.lang)
    predictions = WordPredictor.from_pretrained(resolved_model(args), candidates=args.candidates).predict(tokens, k=args.top)
    columns = [("forward", predictions.forward), ("backward", predictions.backward),
               ("combined", predictions.combined)]
    print("  ".join(f"{name:<24}" for name, _ in columns))
    for i in range(len(predictions.combined)):
        print("  ".join(f"{col[i][0][:15]:<15} {col[i][1]:7.4f}" for _, col in columns))
    return 0
