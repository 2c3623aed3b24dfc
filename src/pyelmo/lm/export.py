"""The export of a language model to the released bilm-tf layout (``pyelmo export``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pyelmo.fileio import PathLike
from pyelmo.lm.model import LanguageModel
from pyelmo.modelio.archives import SOFTMAX_NAME

EXPORT_OUTPUTS = ("options.json", "weights.hdf5", "softmax.hdf5", "vocab.txt")


def export_bilm_hdf5(model: PathLike | None, outdir: PathLike, overwrite: bool = False) -> Path:
    """Write ``options.json``, ``weights.hdf5``, ``softmax.hdf5`` and ``vocab.txt`` into ``outdir``
    (the released bilm-tf layout; each file atomically). ``model``: see :meth:`LanguageModel.from_pretrained`.

    Refuses (``InputError``) an ``outdir`` that is a file or already holds one of them, unless ``overwrite``.
    """
    import h5py

    from pyelmo.errors import InputError
    from pyelmo.fileio import atomic_writer
    from pyelmo.modelio.lexicon import lexicon_ids
    from pyelmo.modelio.weights import save_bilm_hdf5

    outdir = Path(outdir)
    if outdir.exists() and not outdir.is_dir():
        raise InputError(f"output path is a file, expected a folder: {outdir}")
    existing = [name for name in EXPORT_OUTPUTS if (outdir / name).exists()]
    if existing and not overwrite:
        raise InputError(f"{outdir} already holds {', '.join(existing)} (use --overwrite to replace)")
    lm = LanguageModel.from_pretrained(model)
    vocab = lm.vocab
    if lexicon_ids(lm.bilm) is not None:
        raise InputError(f"{model} is an ELMoForManyLangs model (continued): its token encoder (their character "
                         "lexicon and a word embedding) has no place in the bilm-tf layout; use the folder itself")
    outdir.mkdir(parents=True, exist_ok=True)
    save_bilm_hdf5(lm.bilm, outdir / "options.json", outdir / "weights.hdf5")
    with atomic_writer(outdir / SOFTMAX_NAME) as tmp, h5py.File(tmp, "w") as f:
        f.create_dataset("softmax/W", data=lm.softmax_weight.detach().numpy().astype(np.float32))
        f.create_dataset("softmax/b", data=lm.softmax_bias.detach().numpy().astype(np.float32))
    vocab.save(outdir / "vocab.txt")
    return outdir
