"""``pyelmo export``: write a trained model in the released bilm-tf layout.

``--format bilm-hdf5`` writes ``options.json`` + ``weights.hdf5`` (readable by AllenNLP
and ``pyelmo.modelio.weights.load_bilm_hdf5``), ``softmax.hdf5`` (datasets ``softmax/W`` (vocab, P)
and ``softmax/b`` (vocab,)) and ``vocab.txt`` into OUTDIR:

  pyelmo export --model runs/x/model runs/x/bilm-tf

Without --model the shipped English model is exported. The former form with the model
first, ``pyelmo export MODEL OUTDIR``, still works (two paths: the model, then OUTDIR).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pyelmo.cli.common import add_model_arguments, positionals_anywhere

FORMATS = ("bilm-hdf5",)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="export a trained model (bilm-tf HDF5 layout)", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    positionals_anywhere(p)
    p.add_argument("outdir", metavar="OUTDIR", help="output directory")
    p.add_argument("former_outdir", nargs="?", help=argparse.SUPPRESS)  # the former form MODEL OUTDIR
    p.add_argument("--overwrite", action="store_true", help="replace outputs already in OUTDIR")
    p.add_argument("--format", choices=FORMATS, default="bilm-hdf5", help="output layout (default bilm-hdf5)")
    add_model_arguments(p, released=False)
    p.set_defaults(func=run)


def model_and_outdir(args: argparse.Namespace) -> tuple[str | None, str]:
    """``(--model, OUTDIR)``, reading the former ``MODEL OUTDIR`` form too."""
    from pyelmo.errors import InputError

    if args.former_outdir is None:
        if args.model is None and (Path(args.outdir) / "config.json").is_file():
            raise InputError(f"{args.outdir} is a model directory, not an output folder: "
                             f"pyelmo export --model {args.outdir} OUTDIR")
        return args.model, args.outdir
    if args.model is not None:
        raise InputError(f"give the model once: --model {args.model} OUTDIR, or the former form MODEL OUTDIR "
                         f"(got --model and two paths: {args.outdir} {args.former_outdir})")
    return args.outdir, args.former_outdir


def run(args: argparse.Namespace) -> int:
    from pyelmo.lm.model import export_bilm_hdf5

    model, outdir = model_and_outdir(args)
    out = export_bilm_hdf5(model, outdir, overwrite=args.overwrite)
    print(f"wrote {out}/options.json, weights.hdf5, softmax.hdf5, vocab.txt")
    return 0
