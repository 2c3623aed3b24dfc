"""AllenNLP ``Elmo`` state dicts <-> ``pyelmo.Elmo`` state dicts.

AllenNLP's module tree is ``Elmo._elmo_lstm`` (``_ElmoBiLm``) holding ``_token_embedder``
(character CNN: ``_char_embedding_weights``, ``char_conv_{i}``, ``_highways._layers.{k}``,
``_projection``) and ``_elmo_lstm`` (``forward_layer_{l}`` / ``backward_layer_{l}``, each with
``input_linearity``, ``state_linearity`` and ``state_projection``), plus ``scalar_mix_{k}``
(``scalar_parameters.{j}``, ``gamma``). The numbers differ from pyelmo's (TF's) layout in
three places, which AllenNLP's own HDF5 loader introduces:

- highway: one ``Linear(n, 2n)`` whose first half is TF's transform and second half is
  minus TF's carry (AllenNLP's gate multiplies the input, TF's the transform);
- LSTM gates: AllenNLP orders them i, f, j, o (TF: i, j, f, o) and folds TF's forget bias of
  +1 into ``state_linearity.bias``;
- pyelmo's ``input_gates`` holds the bias that AllenNLP keeps on ``state_linearity``.
"""

from __future__ import annotations

import re
from typing import Mapping

import torch

from pyelmo.errors import WeightFileError
from pyelmo.modeling.lstm import FORGET_BIAS

ALLENNLP_PREFIXES = ("_elmo_lstm.", "scalar_mix_")
_ENCODER = "_elmo_lstm._token_embedder."
_LSTM = "_elmo_lstm._elmo_lstm."
#: derived data AllenNLP keeps in its state dict (the token-encoder outputs of ``vocab_to_cache``)
_DERIVED = ("_elmo_lstm._word_embedding.weight", "_elmo_lstm._bos_embedding", "_elmo_lstm._eos_embedding")


def lstm_direction(name: str) -> str:
    """``forward`` / ``backward`` -> pyelmo's ``directions.0`` / ``directions.1``."""
    return f"directions.{0 if name == 'forward' else 1}"


_ANCHOR = _ENCODER + "_char_embedding_weights"


def is_allennlp_state_dict(state_dict: Mapping[str, torch.Tensor]) -> bool:
    """An AllenNLP ``Elmo``'s state dict, or a task model's holding one (e.g. ``..._elmo._elmo_lstm...``)."""
    return any(key.startswith(ALLENNLP_PREFIXES) or key.endswith("." + _ANCHOR) for key in state_dict)


def extract_elmo(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The ``Elmo`` part of an AllenNLP task model's state dict (e.g. its ``weights.th``), prefix removed.

    The model's other tensors are left out; a model with several ``Elmo`` modules is an error
    naming their prefixes.
    """
    prefixes = sorted(key[: -len(_ANCHOR)] for key in state_dict if key.endswith(_ANCHOR))
    if len(prefixes) != 1:
        what = "no" if not prefixes else f"{len(prefixes)} ({', '.join(p or '(top level)' for p in prefixes)})"
        raise WeightFileError(f"state dict holds {what} AllenNLP Elmo modules; expected one")
    prefix = prefixes[0]
    return {key[len(prefix):]: value for key, value in state_dict.items()
            if key.startswith(prefix) and key[len(prefix):].startswith(ALLENNLP_PREFIXES)}


def _swap_j_f(tensor: torch.Tensor) -> torch.Tensor:
    """Exchange the second and third quarters (gate order i, j, f, o <-> i, f, j, o); its own inverse."""
    i, a, b, o = tensor.chunk(4, dim=0)
    return torch.cat([i, b, a, o], dim=0)


def highway_from_allennlp(weight_or_bias: torch.Tensor, base: str, kind: str) -> dict[str, torch.Tensor]:
    """One AllenNLP highway ``Linear(n, 2n)`` tensor -> pyelmo's ``transform`` and ``carry`` (at ``base``)."""
    transform, minus_carry = weight_or_bias.chunk(2, dim=0)
    return {f"{base}.transform.{kind}": transform, f"{base}.carry.{kind}": -minus_carry}


def lstm_from_allennlp(part: str, kind: str, value: torch.Tensor, base: str) -> dict[str, torch.Tensor]:
    """One tensor of an AllenNLP ``LstmCellWithProjection`` -> pyelmo's ``LstmWithProjection`` (at ``base``)."""
    if part == "state_projection" and kind == "weight":
        return {f"{base}.projection.weight": value}
    if part == "input_linearity" and kind == "weight":
        return {f"{base}.input_gates.weight": _swap_j_f(value)}
    if part == "state_linearity" and kind == "weight":
        return {f"{base}.state_gates.weight": _swap_j_f(value)}
    if part == "state_linearity":
        bias = _swap_j_f(value).clone()
        bias[2 * len(bias) // 4: 3 * len(bias) // 4] -= FORGET_BIAS  # pyelmo adds it at run time
        return {f"{base}.input_gates.bias": bias}
    raise WeightFileError(f"unexpected LSTM tensor {part}.{kind}")


def from_allennlp(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An AllenNLP ``Elmo`` state dict (or a task model's holding one) in ``pyelmo.Elmo``'s key names and layout."""
    state_dict = extract_elmo(state_dict)
    out: dict[str, torch.Tensor] = {}
    mixes: dict[int, dict[int, torch.Tensor]] = {}
    for key, value in state_dict.items():
        if key in _DERIVED:
            continue
        if m := re.fullmatch(r"scalar_mix_(\d+)\.scalar_parameters\.(\d+)", key):
            mixes.setdefault(int(m.group(1)), {})[int(m.group(2))] = value
        elif m := re.fullmatch(r"scalar_mix_(\d+)\.gamma", key):
            out[f"scalar_mixes.{m.group(1)}.gamma"] = value
        elif key == _ENCODER + "_char_embedding_weights":
            out["bilm.token_encoder.char_embedding.weight"] = value
        elif m := re.fullmatch(re.escape(_ENCODER) + r"char_conv_(\d+)\.(weight|bias)", key):
            out[f"bilm.token_encoder.convolutions.{m.group(1)}.{m.group(2)}"] = value
        elif m := re.fullmatch(re.escape(_ENCODER) + r"_highways\._layers\.(\d+)\.(weight|bias)", key):
            out.update(highway_from_allennlp(value, f"bilm.token_encoder.highways.{m.group(1)}", m.group(2)))
        elif m := re.fullmatch(re.escape(_ENCODER) + r"_projection\.(weight|bias)", key):
            out[f"bilm.token_encoder.projection.{m.group(1)}"] = value
        elif m := re.fullmatch(re.escape(_LSTM) + r"(forward|backward)_layer_(\d+)\.(\w+)\.(weight|bias)", key):
            direction, layer, part, kind = m.groups()
            out.update(lstm_from_allennlp(part, kind, value, f"bilm.{lstm_direction(direction)}.{layer}"))
        else:
            raise WeightFileError(f"AllenNLP state dict: unexpected key {key!r}")
    for k, params in mixes.items():
        out[f"scalar_mixes.{k}.scalar_parameters"] = torch.cat([params[j].reshape(1) for j in sorted(params)])
    return out


class StateDictError(WeightFileError, RuntimeError):
    """A state dict that does not fit the module (a ``RuntimeError`` too, as torch's own refusal is)."""


def checked_state_dict(own: Mapping[str, torch.Tensor], state_dict: Mapping, strict: bool = True
                       ) -> dict[str, torch.Tensor]:
    """``state_dict`` (pyelmo's, an AllenNLP ``Elmo``'s or a model's holding one) in pyelmo's layout, checked
    whole against ``own`` (the module's state dict) before anything is loaded: every value a tensor of the
    module's shape and, with ``strict``, the same keys. A refusal names the keys and both shapes."""
    if not isinstance(state_dict, Mapping):
        raise StateDictError(f"a state dict maps names to tensors; got a {type(state_dict).__name__}")
    if odd := [key for key in state_dict if not isinstance(key, str)][:1]:
        raise StateDictError(f"state dict key {odd[0]!r} is not a name (a string)")
    if is_allennlp_state_dict(state_dict):
        state_dict = extract_elmo(state_dict)
        # the module's own shapes in AllenNLP's layout, from shape-only (meta) tensors
        theirs = _shapes(to_allennlp({key: torch.empty(value.shape, device="meta") for key, value in own.items()}))
        _check(theirs, state_dict, strict, "AllenNLP state dict", ignore=_DERIVED)
        state_dict = {key: value for key, value in state_dict.items() if key in theirs or key in _DERIVED}
        state_dict = from_allennlp(state_dict)
    _check(_shapes(own), state_dict, strict, "state dict")
    return dict(state_dict)


def _shapes(state_dict: Mapping[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    return {key: tuple(value.shape) for key, value in state_dict.items()}


def _check(expected: Mapping[str, tuple[int, ...]], state_dict: Mapping, strict: bool, what: str,
           ignore: tuple[str, ...] = ()) -> None:
    problems = []
    for key, value in state_dict.items():
        if key in ignore:
            continue
        if not torch.overrides.is_tensor_like(value):
            problems.append(f"{key!r} is a {type(value).__name__}, not a tensor")
        elif key in expected and tuple(value.shape) != expected[key]:
            problems.append(f"{key!r} has shape {tuple(value.shape)}, this module's is {expected[key]}")
        elif key not in expected and strict:
            problems.append(f"unexpected key {key!r}")
    if strict:
        problems += [f"missing key {key!r}" for key in expected if key not in state_dict]
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise StateDictError(f"{what} does not fit this module, nothing was loaded: {'; '.join(problems[:3])}{more}")


def to_allennlp(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A ``pyelmo.Elmo`` state dict in AllenNLP ``Elmo``'s key names and layout (the inverse)."""
    out: dict[str, torch.Tensor] = {}
    highways: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state_dict.items():
        if m := re.fullmatch(r"scalar_mixes\.(\d+)\.scalar_parameters", key):
            for j, w in enumerate(value):
                out[f"scalar_mix_{m.group(1)}.scalar_parameters.{j}"] = w.reshape(1)
        elif m := re.fullmatch(r"scalar_mixes\.(\d+)\.gamma", key):
            out[f"scalar_mix_{m.group(1)}.gamma"] = value
        elif key == "bilm.token_encoder.char_embedding.weight":
            out[_ENCODER + "_char_embedding_weights"] = value
        elif m := re.fullmatch(r"bilm\.token_encoder\.convolutions\.(\d+)\.(weight|bias)", key):
            out[f"{_ENCODER}char_conv_{m.group(1)}.{m.group(2)}"] = value
        elif m := re.fullmatch(r"bilm\.token_encoder\.highways\.(\d+)\.(carry|transform)\.(weight|bias)", key):
            highways.setdefault(f"{_ENCODER}_highways._layers.{m.group(1)}.{m.group(3)}", {})[m.group(2)] = value
        elif m := re.fullmatch(r"bilm\.token_encoder\.projection\.(weight|bias)", key):
            out[f"{_ENCODER}_projection.{m.group(1)}"] = value
        elif m := re.fullmatch(r"bilm\.directions\.([01])\.(\d+)\.(\w+)\.(weight|bias)", key):
            d, layer, part, kind = m.groups()
            base = f"{_LSTM}{'forward' if d == '0' else 'backward'}_layer_{layer}"
            if part == "projection":
                out[f"{base}.state_projection.weight"] = value
            elif part == "state_gates":
                out[f"{base}.state_linearity.weight"] = _swap_j_f(value)
            elif kind == "weight":
                out[f"{base}.input_linearity.weight"] = _swap_j_f(value)
            else:
                bias = value.clone()
                bias[2 * len(bias) // 4: 3 * len(bias) // 4] += FORGET_BIAS
                out[f"{base}.state_linearity.bias"] = _swap_j_f(bias)
    for key, parts in highways.items():
        out[key] = torch.cat([parts["transform"], -parts["carry"]], dim=0)
    return out
