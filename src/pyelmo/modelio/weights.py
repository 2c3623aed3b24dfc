"""Weight formats: the released bilm-tf layout (options JSON + HDF5) and pyelmo's native directory
(``config.json`` + ``model.safetensors``). Every problem is reported as a ``WeightFileError``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import nn

from pyelmo.modeling.bilm import BACKWARD, FORWARD, BiLM
from pyelmo.config import ElmoConfig
from pyelmo.errors import ConfigError, WeightFileError
from pyelmo.fileio import PathLike, atomic_writer, write_text_atomic
from pyelmo.runtime.linear import owned

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


def _readable_file(path: PathLike, what: str) -> Path:
    path = Path(path)
    if not path.exists():
        raise WeightFileError(f"{what} not found: {path}")
    if path.is_dir():
        raise WeightFileError(f"{what} is a directory, expected a file: {path}")
    if not os.access(path, os.R_OK):
        raise WeightFileError(f"{what} is not readable: {path}")
    return path


# -- options JSON -------------------------------------------------------------------------
def load_options(path: PathLike) -> ElmoConfig:
    """Read a released options JSON file into an ``ElmoConfig``."""
    path = _readable_file(path, "options file")
    try:
        options = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WeightFileError(f"options file {path} is not valid JSON: {exc}") from None
    if not isinstance(options, dict):
        raise WeightFileError(f"options file {path} must hold a JSON object")
    return config_from_options(options, path)


# -- the bilm-tf HDF5 layout --------------------------------------------------------------
def _cell(direction: int, layer: int) -> str:
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


def _hdf5_layout(model: BiLM) -> Iterator[tuple[str, torch.Tensor, str]]:
    """(dataset name, model tensor, how to convert) for every dataset of the released layout.

    Conversions: ``copy``; ``T`` (transpose); ``char`` (drop/add the padding row 0);
    ``conv`` (TF HWIO ``(1, w, in, out)`` <-> torch ``(out, in, w)``); ``W0in`` / ``W0h``
    (the input rows / the recurrent rows of ``W_0``, transposed).
    """
    enc = model.token_encoder
    yield "char_embed", enc.char_embedding.weight, "char"
    for i, conv in enumerate(enc.convolutions):
        yield f"CNN/W_cnn_{i}", conv.weight, "conv"
        yield f"CNN/b_cnn_{i}", conv.bias, "copy"
    for k, highway in enumerate(enc.highways):
        yield f"CNN_high_{k}/W_carry", highway.carry.weight, "T"
        yield f"CNN_high_{k}/b_carry", highway.carry.bias, "copy"
        yield f"CNN_high_{k}/W_transform", highway.transform.weight, "T"
        yield f"CNN_high_{k}/b_transform", highway.transform.bias, "copy"
    yield "CNN_proj/W_proj", enc.projection.weight, "T"
    yield "CNN_proj/b_proj", enc.projection.bias, "copy"
    for d in (FORWARD, BACKWARD):
        for l, layer in enumerate(model.directions[d]):
            yield f"{_cell(d, l)}/W_0", (layer.input_gates.weight, layer.state_gates.weight), "W0"
            yield f"{_cell(d, l)}/B", layer.input_gates.bias, "copy"
            yield f"{_cell(d, l)}/W_P_0", layer.projection.weight, "T"


def _full_layout(model: BiLM) -> list[tuple[str, torch.Tensor, str]]:
    """:func:`_hdf5_layout`, checked to place every parameter of ``model``: one the released layout has no
    dataset for (a new part of the cell, say) would be silently lost by writing or left unread by reading."""
    layout = list(_hdf5_layout(model))
    placed = {id(t) for _, target, _ in layout for t in (target if isinstance(target, tuple) else (target,))}
    if unplaced := [name for name, p in model.named_parameters() if id(p) not in placed]:
        raise WeightFileError(f"the bilm-tf weight layout has no dataset for {', '.join(unplaced[:3])}"
                              f"{' ...' if len(unplaced) > 3 else ''}: keep this model in pyelmo's own format")
    return layout


def _to_file_layout(tensor, how: str) -> np.ndarray:
    if how == "W0":
        return torch.cat([tensor[0], tensor[1]], dim=1).t().detach().cpu().numpy()
    array = tensor.detach().cpu().numpy()
    if how == "T":
        return array.T
    if how == "char":
        return array[1:]
    if how == "conv":
        return array.transpose(2, 1, 0)[None]
    return array


def file_shape(tensor, how: str) -> tuple[int, ...]:
    """The HDF5 dataset shape of a model tensor (:func:`_to_file_layout`, on shapes: meta tensors do)."""
    if how == "W0":
        return (tensor[0].shape[1] + tensor[1].shape[1], tensor[0].shape[0])
    shape = tuple(tensor.shape)
    if how == "T":
        return shape[::-1]
    if how == "char":
        return (shape[0] - 1, *shape[1:])
    if how == "conv":
        return (1, shape[2], shape[1], shape[0])
    return shape


def _materialized(model: nn.Module) -> nn.Module:
    """``model`` (built on the meta device) with uninitialised CPU parameters of the same shapes, in place
    (``Module.to_empty`` does the same, but its first call imports sympy, half a second)."""
    for module in model.modules():
        for name, p in module._parameters.items():
            if p is not None:
                module._parameters[name] = nn.Parameter(torch.empty(p.shape, dtype=p.dtype), p.requires_grad)
    return model


def load_bilm_hdf5(options_file: PathLike, weight_file: PathLike) -> BiLM:
    """Build a ``BiLM`` from a released options JSON and bilm-tf weight HDF5 file."""
    import h5py

    config = load_options(options_file)
    weight_file = _readable_file(weight_file, "weight file")
    with torch.device("meta"):  # shapes only: every parameter is read from the file (no initialisation)
        model = BiLM(config)
    layout = _full_layout(_materialized(model))
    try:
        handle = h5py.File(weight_file, "r")
    except OSError as exc:
        raise WeightFileError(f"weight file {weight_file} is not a readable HDF5 file ({exc})") from None
    with handle, torch.no_grad():
        for name, target, how in layout:
            try:  # a corrupt file fails here, inside h5py's structure reads, with RuntimeError or OSError
                dataset = handle[name] if name in handle else None
            except (OSError, RuntimeError, KeyError, ValueError) as exc:
                raise WeightFileError(f"weight file {weight_file} is corrupt: cannot read {name!r} ({exc})") from None
            if not isinstance(dataset, h5py.Dataset):
                raise WeightFileError(f"weight file {weight_file} has no dataset {name!r}")
            expected = file_shape(target, how)
            if dataset.shape != expected:
                raise WeightFileError(
                    f"weight file {weight_file}: dataset {name!r} has shape {dataset.shape}, "
                    f"the options imply {expected}"
                )
            try:
                array = np.asarray(dataset[...], dtype=np.float32)
            except (OSError, RuntimeError, ValueError) as exc:
                raise WeightFileError(f"weight file {weight_file}: dataset {name!r} is unreadable ({exc})") from None
            if not np.isfinite(array).all():
                raise WeightFileError(f"weight file {weight_file}: dataset {name!r} holds NaN or infinite values")
            _assign(target, how, torch.from_numpy(array))
    return model.eval()


def _assign(target, how: str, array: torch.Tensor) -> None:
    if how == "W0":
        n_in = target[0].shape[1]
        target[0].copy_(array[:n_in].t())
        target[1].copy_(array[n_in:].t())
    elif how == "T":
        target.copy_(array.t())
    elif how == "char":
        target[0].zero_()
        target[1:].copy_(array)
    elif how == "conv":
        target.copy_(array[0].permute(2, 1, 0))
    else:
        target.copy_(array)


def save_bilm_hdf5(model: BiLM, options_file: PathLike, weight_file: PathLike) -> None:
    """Write ``model`` as a released options JSON and bilm-tf weight HDF5 file (atomically)."""
    import h5py

    weight_file, layout = Path(weight_file), _full_layout(model)
    with atomic_writer(weight_file) as tmp:
        with h5py.File(tmp, "w") as out:
            for name, tensor, how in layout:
                out.create_dataset(name, data=_to_file_layout(tensor, how).astype(np.float32))
        write_text_atomic(options_file, model.config.to_json() + "\n")


# -- native format ------------------------------------------------------------------------
def save_pretrained(model: BiLM, directory: PathLike, extra_tensors: dict[str, torch.Tensor] | None = None,
                    metadata: dict | None = None) -> Path:
    """Save ``model`` as ``DIR/config.json`` + ``DIR/model.safetensors`` (atomically per file).

    ``extra_tensors`` (e.g. the softmax) are stored beside the biLM's weights.
    """
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    tensors.update({k: v.detach().contiguous().cpu() for k, v in (extra_tensors or {}).items()})
    weights = directory / WEIGHTS_NAME
    with atomic_writer(weights) as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pyelmo"})
        config = {"format": "pyelmo", "options": model.config.to_options(), **(metadata or {})}
        write_text_atomic(directory / CONFIG_NAME, json.dumps(config, indent=2) + "\n")
    return directory


def read_native_config(directory: PathLike) -> dict:
    """The parsed ``config.json`` of a native model directory."""
    directory = Path(directory)
    if not directory.is_dir():
        raise WeightFileError(f"model directory not found: {directory}")
    path = _readable_file(directory / CONFIG_NAME, "model config")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WeightFileError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(config, dict) or not isinstance(config.get("options"), dict):
        raise WeightFileError(f"{path} has no 'options' object")
    return config


def load_native_tensors(directory: PathLike) -> dict[str, torch.Tensor]:
    """All tensors of ``DIR/model.safetensors`` (safetensors only: nothing is unpickled)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = _readable_file(Path(directory) / WEIGHTS_NAME, "model weights")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise WeightFileError(f"{path} is not a valid safetensors file ({exc})") from None


def load_native_state(model: BiLM, tensors: dict[str, torch.Tensor], directory: PathLike, assign: bool = False) -> None:
    """Load ``model``'s weights from a native file's ``tensors``, checking names, shapes and values
    (``assign``: the tensors become the parameters, for a model built on the ``meta`` device)."""
    expected = model.state_dict()
    for name, target in expected.items():
        if name not in tensors:
            raise WeightFileError(f"{directory}: weights lack tensor {name!r}")
        if tuple(tensors[name].shape) != tuple(target.shape):
            raise WeightFileError(
                f"{directory}: tensor {name!r} has shape {tuple(tensors[name].shape)}, "
                f"the config implies {tuple(target.shape)}"
            )
        if not torch.isfinite(tensors[name]).all():
            raise WeightFileError(f"{directory}: tensor {name!r} holds NaN or infinite values")
    # aligned copies where the file's layout left a tensor unaligned: the same parameters wherever they came from
    model.load_state_dict({k: owned(tensors[k].float()) for k in expected}, strict=True, assign=assign)


def config_from_options(options: dict, source: PathLike) -> ElmoConfig:
    """``ElmoConfig.from_options``, with ``source`` (the file it came from) named in a ``ConfigError``."""
    try:
        return ElmoConfig.from_options(options)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def native_model_config(directory: PathLike) -> ElmoConfig:
    """The ``ElmoConfig`` of a native model directory (its ``config.json``)."""
    return config_from_options(read_native_config(directory)["options"], Path(directory) / CONFIG_NAME)


def from_pretrained(directory: PathLike) -> BiLM:
    """Load a ``BiLM`` saved by ``save_pretrained``."""
    config = native_model_config(directory)
    tensors = load_native_tensors(directory)
    with torch.device("meta"):  # no random initialisation: every parameter is loaded
        model = BiLM(config)
    load_native_state(model, tensors, directory, assign=True)
    return model.eval()


def model_fingerprint(model: BiLM) -> str:
    """SHA-1 of a biLM's configuration and every weight tensor (names, shapes, bytes): the one
    identity of a model's weights (evaluation caches, resumable embedding runs)."""
    import hashlib

    h = hashlib.sha1()
    h.update(model.config.to_json().encode("utf-8"))
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode("utf-8"))
        h.update(t.numpy().reshape(-1).view(np.uint8))  # the bytes, not a copy of them
    return h.hexdigest()
