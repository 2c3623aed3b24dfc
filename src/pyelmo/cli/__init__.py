"""The ``pyelmo`` command line: a thin layer over the Python API.

Each subcommand lives in ``pyelmo.cli.<name>`` and provides
``add_parser(subparsers)`` (which sets ``func``) so the core import stays light.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

# Subcommand modules, in the order --help lists them.
COMMANDS = ["demo", "embed", "embed_merge", "corpus", "vocab", "train", "perplexity", "export", "predict", "evaluate",
            "task", "serve", "download", "convert", "env"]


class OneLineErrors(argparse.ArgumentParser):
    """argparse with its usage errors (a bad choice, a missing or unknown argument) on one line, as every
    other error: ``pyelmo CMD: error: ...`` and where --help is; exit status 2 (a usage error)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    from pyelmo import __version__

    parser = OneLineErrors(
        prog="pyelmo",
        description="ELMo contextual word vectors: train a biLM, embed text, evaluate layers.",
    )
    parser.add_argument("--version", action="version", version=f"pyelmo {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"pyelmo.cli.{name}").add_parser(sub)
    for command in sub.choices.values():
        for attr in ("description", "epilog"):  # docstrings quote code ``so``: plain text in --help
            if getattr(command, attr):
                setattr(command, attr, getattr(command, attr).replace("``", ""))
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,  # after the command too
                             help="show full tracebacks for errors")
    return parser


def main(argv: list[str] | None = None) -> int:
    from pyelmo.errors import PyelmoError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    formatwarning = warnings.formatwarning
    if not args.debug:  # warnings on one line, like errors
        warnings.formatwarning = lambda message, *_, **__: f"pyelmo {args.command}: warning: {message}\n"
    try:
        return int(args.func(args) or 0)
    except PyelmoError as exc:
        if args.debug:
            raise
        print(f"pyelmo {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader of stdout stopped (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python exits
        return 1
    except OSError as exc:  # disk full, permission denied, ... on a path the user gave
        if args.debug:
            raise
        where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        print(f"pyelmo {args.command}: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        detail = f": {exc}" if str(exc) else ""
        print(f"pyelmo {args.command}: interrupted{detail}", file=sys.stderr)
        return 130
    finally:
        warnings.formatwarning = formatwarning


if __name__ == "__main__":
    sys.exit(main())
