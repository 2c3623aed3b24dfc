"""``pyelmo export``: write a trained model in the released bilm-tf layout.

``--format bilm-hdf5`` writes ``options.json`` + ``weights.hdf5`` (readable by AllenNLP
and ``pyelmo.modelio.weights.load_bilm_hdf5``), ``softmax.hdf5`` (datasets ``softmax/W`` (vocab, P)
and ``softmax/b`` (vocab,)) and ``vocab.txt`` into OUTDIR:

  pyelmo export --model runs/x/model runs/x/bilm-tf

Without --model the shipped English model is exported.
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
    p.add_argument("--overwrite", action="store_true", help="replace outputs already in OUTDIR")
    p.add_argument("--format", choices=FORMATS, default="bilm-hdf5", help="output layout (default bilm-hdf5)")
    add_model_arguments(p, released=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pyelmo.errors import InputError
    from pyelmo.lm.export import export_bilm_hdf5

    if (Path(args.outdir) / "config.json").is_file():
        hint = "" if args.model else f": pyelmo export --model {args.outdir} OUTDIR"
        raise InputError(f"{args.outdir} is a model directory, not an output folder{hint}")
    out = export_bilm_hdf5(args.model, args.outdir, overwrite=args.overwrite)
    print(f"wrote {out}/options.json, weights.hdf5, softmax.hdf5, vocab.txt")
    return 0
