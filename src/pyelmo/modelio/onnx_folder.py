"""An ONNX export folder (``pyelmo export --format onnx``): its file names, its graph's input and output names,
and its ``config.json``, read and checked (what the resolver needs to tell an export folder, without onnx)."""

from __future__ import annotations

import json
from pathlib import Path

#: The file names of an export folder.
ONNX_NAME, ONNX_CONFIG_NAME = "model.onnx", "config.json"
#: ``config.json``'s ``format``: what marks a folder as an ONNX export.
ONNX_FORMAT = "pyelmo-onnx"
#: The graph's input and outputs.
INPUT_NAME, OUTPUT_NAMES = "char_ids", ("layers", "mask")


def is_export_folder(folder: Path) -> bool:
    """Whether ``folder`` holds ``model.onnx`` (an export, complete or not: :func:`read_export_config` says)."""
    return (folder / ONNX_NAME).is_file()


def read_export_config(folder: Path) -> dict:
    """``config.json`` of an export folder, checked (one line when it is missing or not an export's)."""
    from pyelmo.errors import WeightFileError

    path = folder / ONNX_CONFIG_NAME
    if not path.is_file():
        raise WeightFileError(f"{folder} has {ONNX_NAME} but no {ONNX_CONFIG_NAME}: export it again "
                              "(pyelmo export --format onnx OUT --model M)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise WeightFileError(f"{path} cannot be read: {exc}") from None
    if not isinstance(config, dict) or config.get("format") != ONNX_FORMAT or not isinstance(config.get("options"), dict):
        raise WeightFileError(f"{path} is not the config.json of an ONNX export (format {ONNX_FORMAT!r}): export it "
                              "again (pyelmo export --format onnx OUT --model M)")
    return config
