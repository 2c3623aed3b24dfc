"""``pyelmo export``: write a trained model in the released bilm-tf layout.

``--format bilm-hdf5`` writes ``options.json`` + ``weights.hdf5`` (readable by AllenNLP
and ``pyelmo.weights.load_bilm_hdf5``), ``softmax.hdf5`` (datasets ``softmax/W`` (vocab, P)
and ``softmax/b`` (vocab,)) and ``vocab.txt``.
"""

from __future__ import annotations

import argparse

FORMATS = ("bilm-hdf5",)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="export a trained model (bilm-tf HDF5 layout)", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="model directory written by `pyelmo train` (OUT/model)")
    p.add_argument("outdir", help="output directory")
    p.add_argument("--overwrite", action="store_true", help="replace outputs already in OUTDIR")
    p.add_argument("--format", choices=FORMATS, default="bilm-hdf5", help="output layout (default bilm-hdf5)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pyelmo.lm import export_bilm_hdf5

    out = export_bilm_hdf5(args.model, args.outdir, overwrite=args.overwrite)
    print(f"wrote {out}/options.json, weights.hdf5, softmax.hdf5, vocab.txt")
    return 0
