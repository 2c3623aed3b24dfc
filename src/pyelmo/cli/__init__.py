"""The ``pyelmo`` command line: a thin layer over the Python API.

Each subcommand lives in ``pyelmo.cli.<name>`` and provides
``add_parser(subparsers)`` (which sets ``func``) so the core import stays light.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import signal
import sys
import threading
import warnings
from typing import NoReturn

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
    """Run one ``pyelmo`` command; its exit code. A Ctrl-C at any point, parsing included, is
    ``pyelmo CMD: interrupted`` and 130."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return _main(argv)
    except KeyboardInterrupt as exc:
        return _interrupted(_command(argv), str(exc))


def run() -> NoReturn:
    """``pyelmo`` as a program (the console script and ``python -m pyelmo``): :func:`main`, then the exit.

    Python's own exit gives SIGINT its default action back before it tears the modules down (a second or
    more with torch loaded), so a Ctrl-C then killed the process by the signal, with no message. Here the
    useful steps of that exit (waiting for threads, atexit callbacks, flushing) run with the signal still
    handled, and the process ends with ``os._exit``: a Ctrl-C until the end is "interrupted" and 130.
    """
    argv = sys.argv[1:]
    code, noted = 1, []
    try:
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: --help, --version, a usage error
            code = _system_exit_code(exc)
        threading._shutdown()  # as Python's exit: wait for threads still at work (an int8 cache write)
        # an atexit callback's KeyboardInterrupt would be printed and ignored: note the signal instead
        signal.signal(signal.SIGINT, lambda *_: noted.append(True))
        atexit._run_exitfuncs()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if noted:
            raise KeyboardInterrupt
        code = _flushed(code)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # reported below: a second Ctrl-C ends the process at once
        code = code if code == 130 else _interrupted(_command(argv))
        code = _flushed(code)
    os._exit(code)


def _flushed(code: int) -> int:
    """``code`` once stdout and stderr are flushed; 1 for 0 if the reader of stdout stopped."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        return code or 1
    return code


def _command(argv: list[str]) -> str:
    """The command named in ``argv`` (its first word not an option), for messages before it is parsed."""
    return next((a for a in argv if not a.startswith("-")), "")


def _interrupted(command: str, detail: str = "") -> int:
    print(f"pyelmo{' ' + command if command else ''}: interrupted{': ' + detail if detail else ''}", file=sys.stderr)
    return 130


def _system_exit_code(exc: SystemExit) -> int:
    """The exit code Python gives ``exc``: None 0, a number itself, anything else printed and 1."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1


def _main(argv: list[str]) -> int:
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
    finally:
        warnings.formatwarning = formatwarning


if __name__ == "__main__":
    run()
