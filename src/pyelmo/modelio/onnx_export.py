"""The biLM as an ONNX graph (``pyelmo export --format onnx``), for ONNX Runtime and other ONNX engines.

:func:`export_onnx` writes ``OUT/model.onnx`` and ``OUT/config.json``. The graph takes character ids
``char_ids (batch, tokens, max_chars)`` int64, ``batch_to_ids``'s output without sentence boundaries, and
gives ``layers (num_layers, batch, tokens, 2 * projection_dim)`` float32 and ``mask (batch, tokens)`` bool,
the values of :meth:`pyelmo.modeling.bilm.BiLM.forward` (stateless, ``keep_sentence_boundaries=False``)
for any batch size and sentence length.

The graph (:mod:`pyelmo.modelio.onnx_graph`) is built from the weights of a plain (unplanned)
:class:`~pyelmo.modeling.bilm.BiLM`; ``onnx`` is imported only when one is built.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from torch import nn

from pyelmo.errors import InputError
from pyelmo.fileio import PathLike, atomic_folder
from pyelmo.modelio.onnx_folder import INPUT_NAME, ONNX_CONFIG_NAME, ONNX_FORMAT, ONNX_NAME, OUTPUT_NAMES
from pyelmo.modelio.onnx_graph import OPSET, build_graph, check_exportable, onnx_modules


def character_vocabulary(max_chars: int) -> dict:
    """How tokens become the graph's character ids (:mod:`pyelmo.modeling.characters`), for a caller outside Python."""
    from pyelmo.modeling import characters as ch

    return {
        "scheme": "utf-8 bytes",
        "rule": (f"a token is its UTF-8 bytes cut to {max_chars - 2}, as [BOW, bytes..., EOW, PAD, ...] of "
                 f"{max_chars} characters; every id is the character + 1 (0: no token); a sentence is a row of "
                 "tokens, shorter rows padded with all-zero tokens; <S> and </S> are added by the model"),
        "max_characters_per_token": max_chars, "id_offset": 1, "padding_id": 0,
        "characters": {"bytes": [0, 255], "begin_sentence": ch.BOS_CHAR, "end_sentence": ch.EOS_CHAR,
                       "begin_word": ch.BOW_CHAR, "end_word": ch.EOW_CHAR, "padding": ch.PAD_CHAR},
        "begin_sentence_ids": list(ch.bos_ids(max_chars)), "end_sentence_ids": list(ch.eos_ids(max_chars)),
    }


def pyelmo_version() -> str:
    """The installed pyelmo's version (as output files record it)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("pyelmo")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


def export_config(bilm: nn.Module, fingerprint: str, source: str, language: str | None) -> dict:
    """``config.json`` of an export folder."""
    config = bilm.config
    return {
        "format": ONNX_FORMAT, "format_version": 1, "pyelmo_version": pyelmo_version(), "model": source,
        "language": language, "fingerprint": fingerprint, "opset": OPSET, "options": config.to_options(),
        "characters": character_vocabulary(config.char_cnn.max_characters_per_token),
        "inputs": {INPUT_NAME: {"shape": ["batch", "tokens", config.char_cnn.max_characters_per_token],
                                "dtype": "int64"}},
        "outputs": {OUTPUT_NAMES[0]: {"shape": [config.num_layers, "batch", "tokens", config.output_dim],
                                      "dtype": "float32"},
                    OUTPUT_NAMES[1]: {"shape": ["batch", "tokens"], "dtype": "bool"}},
    }


def check_output(outdir: PathLike, overwrite: bool) -> Path:
    """Refuse an output path that is a file, or a folder holding anything, unless ``overwrite``."""
    outdir = Path(outdir)
    if outdir.exists() and not outdir.is_dir():
        raise InputError(f"output path is a file, expected a folder: {outdir}")
    if outdir.is_dir() and any(outdir.iterdir()) and not overwrite:
        raise InputError(f"{outdir} is not empty (use --overwrite to replace it)")
    return outdir


def export_onnx(model=None, outdir: PathLike = "", *, weight_file: PathLike | None = None, overwrite: bool = False,
                bilm: nn.Module | None = None) -> dict:
    """Write ``model.onnx`` and ``config.json`` into ``outdir`` (written in a temporary folder beside it, then
    renamed). ``model`` (with ``weight_file``): anything :func:`pyelmo.modelio.resolve.resolve_model` takes;
    ``bilm``: that model already loaded (unplanned). Returns ``{"folder", "seconds", "bytes"}``."""
    from pyelmo.modelio.resolve import resolve_model
    from pyelmo.modelio.weights import model_fingerprint

    outdir = check_output(outdir, overwrite)
    onnx = onnx_modules()[0]
    started = time.perf_counter()
    resolved = None if bilm is not None and model is None else resolve_model(model, weight_file)
    name = resolved.describe() if resolved is not None else "the biLM"
    if resolved is not None and resolved.format == "onnx":
        raise InputError(f"{name} is an ONNX export already")
    bilm = resolved.load_bilm() if bilm is None else bilm
    check_exportable(bilm, name)  # a model converted from ELMoForManyLangs, a planned one
    fingerprint = model_fingerprint(bilm)
    config = export_config(bilm, fingerprint, name, resolved.language if resolved is not None else None)
    with torch.no_grad():
        proto = build_graph(bilm.eval(), pyelmo_version(), {"fingerprint": fingerprint, "format": ONNX_FORMAT})
    with atomic_folder(outdir) as tmp:
        onnx.save(proto, str(tmp / ONNX_NAME))
        (tmp / ONNX_CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return {"folder": outdir, "seconds": time.perf_counter() - started, "bytes": (outdir / ONNX_NAME).stat().st_size}


__all__ = ["ONNX_FORMAT", "ONNX_NAME", "OPSET", "build_graph", "check_exportable", "export_onnx"]
