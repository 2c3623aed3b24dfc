"""``pyelmo export``: write a trained model in the released bilm-tf layout.

``--format bilm-hdf5`` writes ``options.json`` + ``weights.hdf5`` (readable by AllenNLP
and ``pyelmo.weights.load_bilm_hdf5``), ``softmax.hdf5`` (datasets ``softmax/W`` (vocab, P)
and ``softmax/b`` (vocab,)) and ``vocab.txt``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

FORMATS = ("bilm-hdf5",)
OUTPUTS = ("options.json", "weights.hdf5", "softmax.hdf5", "vocab.txt")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="export a trained model (bilm-tf HDF5 layout)", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="model directory written by `pyelmo train` (OUT/model)")
    p.add_argument("outdir", help="output directory")
    p.add_argument("--overwrite", action="store_true", help="replace outputs already in OUTDIR")
    p.add_argument("--format", choices=FORMATS, default="bilm-hdf5", help="output layout (default bilm-hdf5)")
    p.set_defaults(func=run)


def export_bilm_hdf5(model_dir: str | os.PathLike, outdir: str | os.PathLike, overwrite: bool = False) -> Path:
    """Write ``options.json``, ``weights.hdf5``, ``softmax.hdf5`` and ``vocab.txt`` into ``outdir``.

    Refuses (``InputError``) an ``outdir`` that is a file or already holds one of them, unless ``overwrite``.
    """
    import h5py
    import numpy as np

    from pyelmo.errors import InputError
    from pyelmo.training.trainer import load_language_model
    from pyelmo.weights import atomic_path, save_bilm_hdf5

    outdir = Path(outdir)
    if outdir.exists() and not outdir.is_dir():
        raise InputError(f"output path is a file, expected a folder: {outdir}")
    existing = [name for name in OUTPUTS if (outdir / name).exists()]
    if existing and not overwrite:
        raise InputError(f"{outdir} already holds {', '.join(existing)} (use --overwrite to replace)")
    lm, vocab = load_language_model(model_dir)
    outdir.mkdir(parents=True, exist_ok=True)
    save_bilm_hdf5(lm.bilm, outdir / "options.json", outdir / "weights.hdf5")
    softmax = outdir / "softmax.hdf5"
    tmp = atomic_path(softmax)
    try:
        with h5py.File(tmp, "w") as f:
            f.create_dataset("softmax/W", data=lm.softmax_weight.detach().numpy().astype(np.float32))
            f.create_dataset("softmax/b", data=lm.softmax_bias.detach().numpy().astype(np.float32))
        os.replace(tmp, softmax)
    finally:
        tmp.unlink(missing_ok=True)
    vocab.save(outdir / "vocab.txt")
    return outdir


def run(args: argparse.Namespace) -> int:
    out = export_bilm_hdf5(args.model, args.outdir, overwrite=args.overwrite)
    print(f"wrote {out}/options.json, weights.hdf5, softmax.hdf5, vocab.txt")
    return 0
