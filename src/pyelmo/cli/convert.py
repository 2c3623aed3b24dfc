"""``pyelmo convert``: other implementations' model folders -> pyelmo model folders."""

from __future__ import annotations

import argparse

DESCRIPTION = """\
Convert a model folder of another ELMo implementation into a pyelmo model folder, which
every command loads with --model OUT_DIR and the Python API with pyelmo.load(OUT_DIR).

  elmoformanylangs  a HIT-SCIR ELMoForManyLangs folder (config.json, char.dic, word.dic,
                    token_embedder.pkl, encoder.pkl). Tensors are read with
                    torch.load(weights_only=True): nothing but tensors is unpickled.
                    The converted model maps tokens through their character and word
                    lexicons and gives their vectors (to float rounding). Their folders do
                    not say their language: --lang records it (e.g. --lang zh for their
                    Chinese model), so that text of another language warns."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("convert", help="convert another implementation's model folder (ELMoForManyLangs)",
                            description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("format", choices=["elmoformanylangs"], help="the source format")
    parser.add_argument("source", metavar="SRC_DIR", help="their model folder")
    parser.add_argument("output", metavar="OUT_DIR", help="the pyelmo model folder to write (must not exist)")
    parser.add_argument("--lang", metavar="CODE", default=None,
                        help="the language of the model's training text (zh, en, fr, ...), recorded as "
                             "\"language\" in OUT_DIR/config.json (default: not recorded)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pyelmo.modelio.elmoformanylangs import convert

    out = convert(args.source, args.output, language=args.lang)
    print(f"wrote {out} (use it with --model {out})")
    return 0
