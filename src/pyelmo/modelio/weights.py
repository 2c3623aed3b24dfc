"""Weight formats: the released bilm-tf layout (options JSON + HDF5) and pyelmo's native directory
(``config.json`` + ``model.safetensors``). Every problem is reported as a ``WeightFileError``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import nn

from pyelmo.modeling.bilm import BiLM
from pyelmo.config import ElmoConfig
from pyelmo.errors import WeightFileError
from pyelmo.modelio.layouts import (CONFIG_NAME, WEIGHTS_NAME, ReadWeights, check_shape, config_from_options,
                                    fingerprint, hdf5_layout, load_options, read_weights, readable_file)
from pyelmo.fileio import PathLike, atomic_writer, write_text_atomic
from pyelmo.runtime.linear import owned


# -- the bilm-tf HDF5 layout --------------------------------------------------------------
def _hdf5_layout(model: BiLM) -> Iterator[tuple[str, torch.Tensor | tuple[torch.Tensor, ...], str]]:
    """(dataset name, model tensor (a ``W0``: its two), how to convert) for every dataset of the released layout
    (:func:`pyelmo.modelio.layouts.hdf5_layout`, its parameters found by name)."""
    for name, params, how in hdf5_layout(model.config):
        tensors = tuple(model.get_parameter(p) for p in params)
        yield name, tensors if len(tensors) > 1 else tensors[0], how


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


def load_bilm_hdf5(options_file: PathLike, weight_file: PathLike, read: ReadWeights | None = None) -> BiLM:
    """Build a ``BiLM`` from a released options JSON and bilm-tf weight HDF5 file (``read``: those files as
    :func:`pyelmo.modelio.prefetch.prefetch` read them already; its arrays become the parameters)."""
    config = load_options(options_file) if read is None else read.config
    with torch.device("meta"):  # shapes only: every parameter is read from the file (no initialisation)
        model = BiLM(config)
    expected = {name: file_shape(target, how) for name, target, how in _full_layout(model)}
    if read is None:  # each dataset's shape checked before it is read
        read = read_weights(options_file, weight_file, expected)
    else:  # read without the model: checked now
        for name, shape in read.file_shapes.items():
            check_shape(weight_file, name, shape, expected[name])
    for name, array in read.parameters.items():
        module, _, attr = name.rpartition(".")
        model.get_submodule(module)._parameters[attr] = nn.Parameter(torch.from_numpy(array))
    return model.eval()


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
    path = readable_file(directory / CONFIG_NAME, "model config")
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

    path = readable_file(Path(directory) / WEIGHTS_NAME, "model weights")
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


def native_with_softmax(folder: Path, bilm: BiLM | None, dropout: float,
                        converted=None) -> tuple[BiLM, torch.Tensor, torch.Tensor]:
    """A native folder's biLM (``bilm`` when given, else read with ``dropout``; ``converted(native config,
    tensors)`` builds one continued from an ELMoForManyLangs model, with their lexicons) and its softmax."""
    from safetensors import safe_open

    if bilm is not None:  # the softmax alone
        with safe_open(str(folder / WEIGHTS_NAME), framework="pt") as f:
            return bilm, f.get_tensor("softmax.weight").float(), f.get_tensor("softmax.bias").float()
    native = read_native_config(folder)
    tensors = load_native_tensors(folder)
    if converted is not None:
        bilm = converted(native, tensors)
    else:
        bilm = BiLM(config_from_options(native["options"], folder / CONFIG_NAME), dropout=dropout)
        load_native_state(bilm, tensors, folder)
    return bilm, tensors["softmax.weight"].float(), tensors["softmax.bias"].float()


def model_fingerprint(model: BiLM) -> str:
    """SHA-1 of a biLM's configuration and every weight tensor (names, shapes, bytes): the one
    identity of a model's weights (evaluation caches, resumable embedding runs)."""
    return fingerprint(model.config.to_json(), ((name, tuple(t.shape), str(t.dtype), t.detach().cpu().contiguous().numpy())
                                                for name, t in model.state_dict().items()))
