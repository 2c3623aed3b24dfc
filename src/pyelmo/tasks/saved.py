"""The folder of a trained task model: writing it whole, reading its ``config.json`` back with every field the
loader uses checked (a hand-edited config is one line naming the field), and loading it (:func:`load_task`).

``config.json`` holds the kind, features, model shape, labels, the training options and history,
and the identity of the biLM and static vectors; ``model.safetensors`` the task model's weights;
``vocab.txt`` the static vocabulary.  The folder is written under a temporary name and renamed
when complete, so an interrupted training leaves no half-written folder.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

from pyelmo.runtime.options import RunOptions
from pyelmo.runtime.planning import plan_model
from pyelmo.runtime.precision import Quantization
from pyelmo.errors import InputError
from pyelmo.fileio import read_json
from pyelmo.tasks import CONTEXTS
from pyelmo.tasks.kind import kind_names
from pyelmo.tasks.model import ModelConfig

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
VOCAB_NAME = "vocab.txt"
FORMAT = "pyelmo-task-1"

_Check = tuple[Callable[[Any], bool], "str | Callable[[], str]"]  # a test, and what passes it


def _number(low: int, high: int = 2**20) -> _Check:
    return (lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high,
            f"a whole number from {low} to {high}")


_BOOL: _Check = (lambda v: isinstance(v, bool), "true or false")
_TEXT: _Check = (lambda v: isinstance(v, str) and v != "", "a non-empty string")
_PATH: _Check = (lambda v: v is None or (isinstance(v, str) and v != ""), "a path or null")
_KIND: _Check = (lambda v: v in kind_names(), lambda: ", ".join(kind_names()[:-1]) + " or " + kind_names()[-1])
_RATE: _Check = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1,
                 "a number in [0, 1)")
_MODEL_FIELDS: dict[str, _Check] = {"kind": _KIND, "n_labels": _number(1), "static_dim": _number(0),
                                    "static_size": _number(0, 2**31), "elmo_layers": _number(0), "elmo_dim": _number(0),
                                    "elmo_output": _BOOL, "top_only": _BOOL, "hidden": _number(1),
                                    "dropout": _RATE, "elmo_dropout": _RATE, "match": _BOOL}
assert set(_MODEL_FIELDS) == {f.name for f in dataclasses.fields(ModelConfig)}


class _Fields:
    """Reads dotted fields of a parsed config, each checked, with errors naming the file and the field."""

    def __init__(self, path: Path, saved: dict) -> None:
        self.path, self.saved = path, saved

    def fail(self, message: str) -> InputError:
        return InputError(f"{self.path}: {message}")

    def get(self, name: str, check: _Check, default: Any = ...) -> Any:
        """The field ``name`` ("a.b": field b of section a); a missing one is ``default`` or an error."""
        value = self.saved
        for part in name.split("."):
            if not isinstance(value, dict) or part not in value:
                if default is not ...:
                    return default
                raise self.fail(f"field {name!r} is missing")
            value = value[part]
        if not check[0](value):
            shown = json.dumps(value)
            what = check[1]() if callable(check[1]) else check[1]
            raise self.fail(f"field {name!r} must be {what}, got {shown[:60]}{'...' if len(shown) > 60 else ''}")
        return value

    def section(self, name: str, optional: bool = False) -> dict | None:
        check: _Check = ((lambda v: v is None or isinstance(v, dict), "an object or null") if optional
                         else (lambda v: isinstance(v, dict), "an object"))
        return self.get(name, check, None if optional else ...)


def read_saved(directory: str | os.PathLike) -> tuple[dict, ModelConfig]:
    """``(config.json, its model section)`` of a trained task model, every field the loader reads checked:
    types and ranges, that the sections agree (kind, labels, static vectors and biLM present), and that
    the weight file holds the tensors they describe (:func:`check_weights_fit`)."""
    saved, config = _read_config(Path(directory))
    check_weights_fit(directory, config)
    return saved, config


def _read_config(d: Path) -> tuple[dict, ModelConfig]:
    path = d / CONFIG_NAME
    if not path.is_file() or not (d / WEIGHTS_NAME).is_file():
        raise _not_a_task_model(d)
    saved = read_json(path, dict, "a task model config (expected a JSON object)")
    if saved.get("format") != FORMAT:
        raise _not_a_task_model(d, saved.get("format"))
    f = _Fields(path, saved)
    kind = f.get("kind", _KIND)
    model = f.section("model")
    unknown = sorted(set(model) - set(_MODEL_FIELDS))
    if unknown:
        raise f.fail(f"field 'model.{unknown[0]}' is not a field of a task model")
    config = ModelConfig(**{k: f.get(f"model.{k}", check) for k, check in _MODEL_FIELDS.items()
                            if k in model or k in ("kind", "n_labels")})
    if config.kind != kind:
        raise f.fail(f"field 'kind' is {kind!r} but 'model.kind' is {config.kind!r}")
    labels = f.get("labels", (lambda v: isinstance(v, list) and all(isinstance(x, str) and x for x in v)
                              and len(set(v)) == len(v), "a list of distinct non-empty strings"))
    if len(labels) != config.n_labels:
        raise f.fail(f"field 'labels' has {len(labels)} labels but 'model.n_labels' is {config.n_labels}")
    f.section("options")
    f.get("options.pretokenized", _BOOL, False)
    f.get("options.max_answer_tokens", _number(1), 30)
    f.get("options.bilm_context", (lambda v: v is None or v in CONTEXTS, f"{' or '.join(CONTEXTS)} or null"), None)
    static, bilm = f.section("static", optional=True), f.section("bilm", optional=True)
    if (static is not None) != bool(config.static_dim):
        raise f.fail(f"field 'static' is {'set' if static else 'null'} but 'model.static_dim' is {config.static_dim}")
    if (bilm is not None) != bool(config.elmo_layers):
        raise f.fail(f"field 'bilm' is {'set' if bilm else 'null'} but 'model.elmo_layers' is {config.elmo_layers}")
    if static is None and bilm is None:
        raise f.fail("fields 'static' and 'bilm' are both null: a task model has static vectors, ELMo or both")
    if static is not None:
        f.get("static.source", _TEXT)
        f.get("static.fingerprint", _TEXT)
    if bilm is not None:
        f.get("bilm.model", _PATH, None)
        f.get("bilm.weight_file", _PATH, None)
        f.get("bilm.fingerprint", _TEXT)
        f.get("bilm.max_tokens", _number(1), 100)
    return saved, config


#: What each kind of biLM the resolver names (:data:`pyelmo.modelio.resolve.KINDS`) is called when it is
#: given where a task model is expected (``native`` and ``elmoformanylangs``: a complete pyelmo folder only).
_BILM_FORMS = {
    "shipped": "the name of a biLM", "released": "the name of a biLM",
    "run": "a biLM training run ('pyelmo train')",
    "native": "a biLM model (made by 'pyelmo train' or 'convert', or shipped)",
    "elmoformanylangs": "a biLM model (made by 'pyelmo train' or 'convert', or shipped)",
    "exported": "a biLM exported by 'pyelmo export'",
    "onnx": "a biLM exported to ONNX by 'pyelmo export --format onnx'",
    "nlpl": "a biLM in the released bilm-tf format (options JSON + HDF5 weights)",
}


def _bilm_kind(d: Path, native_format: Any) -> tuple[str, str] | None:
    """``(what d is, the flags that name it as a biLM)`` when ``d`` is a biLM in one of its forms, as
    :func:`pyelmo.modelio.resolve.resolve_model` (and, for a file, ``file_kind``) tells them apart."""
    from pyelmo.errors import PyelmoError
    from pyelmo.modelio.resolve import file_kind, resolve_model

    if d.is_file():
        kind = file_kind(d)
        if kind == "weights":
            return "a biLM weight file (released bilm-tf format)", f"--options-file OPTIONS --weight-file {d}"
        if kind == "options":
            return "a biLM options file (released bilm-tf format)", f"--options-file {d} --weight-file WEIGHTS"
        return None
    try:
        record = resolve_model(str(d))
    except PyelmoError:  # not a biLM either
        return None
    if record.kind in ("native", "elmoformanylangs") and native_format != "pyelmo":
        return None  # a folder without a complete config.json and model.safetensors
    what = _BILM_FORMS.get(record.kind)
    return None if what is None else (what, f"--model {d}")


def _not_a_task_model(d: Path, native_format: Any = None) -> InputError:
    """One line saying what ``d`` is instead of a task model, and how to train one from it."""
    bilm = _bilm_kind(d, native_format)
    if bilm is not None:
        return InputError(f"{d} is {bilm[0]}, not a task model: train one with 'pyelmo task train {'|'.join(kind_names())} "
                          f"--train FILE --dev FILE --out DIR {bilm[1]}', then give DIR here")
    if not d.exists():
        return InputError(f"task model not found: {d}")
    if native_format is not None:
        return InputError(f"{d / CONFIG_NAME}: unknown format {native_format!r} (expected {FORMAT})")
    what = "a file" if d.is_file() else f"not a trained task model (no {CONFIG_NAME} / {WEIGHTS_NAME})"
    return InputError(f"{d} is {what}: a task model is the folder 'pyelmo task train --out' wrote")


def check_weights_fit(directory: str | os.PathLike, config: ModelConfig) -> None:
    """The weight file holds the tensors ``config`` describes, in their shapes (read from its header, nothing
    allocated): else one line naming the tensor, both shapes, and the config.json fields they depend on."""
    import torch
    from safetensors import safe_open

    from pyelmo.tasks.kind import build_model

    weights = Path(directory) / WEIGHTS_NAME
    try:
        with torch.device("meta"):
            expected = {k: tuple(v.shape) for k, v in build_model(config).state_dict().items()}
    except (RuntimeError, ValueError) as exc:
        raise InputError(f"{Path(directory) / CONFIG_NAME}: its 'model' section describes no model that can be "
                         f"built ({str(exc).splitlines()[0]})") from None
    try:
        with safe_open(str(weights), "pt") as fh:
            found = {k: tuple(fh.get_slice(k).get_shape()) for k in fh.keys()}
    except Exception as exc:  # safetensors raises its own error types
        raise InputError(f"{weights}: cannot read the task model: {str(exc).splitlines()[0]}") from None
    for key in sorted(set(expected) | set(found)):
        if expected.get(key) != found.get(key):
            raise InputError(f"{weights}: tensor {key!r} is {found.get(key, 'missing')} but config.json's 'model' "
                             f"section implies {expected.get(key, 'none')} (was config.json edited?)")


def write_model_dir(out: Path, saved: dict, state: dict, vocab: list[str]) -> None:
    """Write ``out`` (config.json, model.safetensors, vocab.txt) under a temporary name, then rename it."""
    from safetensors.torch import save_file

    from pyelmo.fileio import write_json_atomic, write_text_atomic

    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp / WEIGHTS_NAME))
        write_text_atomic(tmp / VOCAB_NAME, "".join(w + "\n" for w in vocab))
        write_json_atomic(tmp / CONFIG_NAME, saved)
        if out.exists():
            raise InputError(f"{out} already exists (choose a new --out folder)")
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_task(directory: str | os.PathLike, bilm: "BiLMSource | None" = None, progress: bool = True,
              cache_dir: str | os.PathLike | None = None, precision: str | None = None,
              quantization: Quantization | None = None):
    """A trained task model from ``directory``; ``bilm`` overrides the biLM it names (it must be the same);
    ``precision`` and ``quantization`` (:class:`~pyelmo.runtime.precision.Quantization`) how the biLM computes
    the layers (default: as in training, whose rule ``config.json`` records as ``int8_min_weight``)."""
    import torch
    from safetensors.torch import load_file

    from pyelmo.tasks.features import LayerCache
    from pyelmo.tasks.kind import build_model, task_kind
    from pyelmo.tasks.options import BiLMSource, bilm_fingerprint, features_plan
    from pyelmo.tasks.static import load_static

    d = Path(directory)
    saved, config = read_saved(d)
    if precision is None:  # as in training
        precision = saved["options"].get("precision")  # None: exact
        if quantization is None:
            quantization = Quantization.of(saved["options"].get("int8_min_weight"))
    plan = features_plan(precision, quantization)
    static = None
    if saved.get("static") is not None:
        static = load_static(saved["static"]["source"])
        if static.fingerprint() != saved["static"]["fingerprint"]:
            raise InputError(f"{d} was trained with other static vectors than those now at "
                             f"{saved['static']['source']} (fingerprints differ)")
        if (static.dim, len(static.words)) != (config.static_dim, config.static_size):
            raise InputError(f"{d}: config.json's 'model.static_dim' and 'model.static_size' ({config.static_dim}, "
                             f"{config.static_size}) do not match its static vectors ({static.dim}, "
                             f"{len(static.words)})")
    cache = None
    if saved.get("bilm") is not None:
        recorded = BiLMSource(saved["bilm"].get("model"), saved["bilm"].get("weight_file"))
        source = bilm if bilm is not None and (bilm.model or bilm.weight_file) else recorded
        bilm_model = source.load()
        found = bilm_fingerprint(bilm_model)
        if found != saved["bilm"]["fingerprint"]:
            raise InputError(f"{d} was trained with a different biLM ({recorded.describe()}, fingerprint "
                             f"{saved['bilm']['fingerprint'][:12]}); {source.describe()} has fingerprint {found[:12]}")
        shape = (bilm_model.config.num_layers, bilm_model.config.output_dim)
        if (config.elmo_layers, config.elmo_dim) != shape:
            raise InputError(f"{d}: config.json's 'model.elmo_layers' and 'model.elmo_dim' ({config.elmo_layers}, "
                             f"{config.elmo_dim}) do not match its biLM {shape}")
        planned = plan_model(bilm_model, RunOptions.inference(plan))  # loaded here for its layers alone
        cache = LayerCache(planned, progress=progress, cache_dir=cache_dir, fingerprint=found,
                           context=saved["options"].get("bilm_context") or "line",
                           max_tokens=saved["bilm"].get("max_tokens", 100), plan=plan)
    model = build_model(config, torch.from_numpy(static.vectors) if static else None)
    try:
        model.load_state_dict(load_file(str(d / WEIGHTS_NAME)))
    except Exception as exc:  # safetensors' own errors on a damaged file
        raise InputError(f"{d / WEIGHTS_NAME}: cannot load the task model: {str(exc).splitlines()[0]}") from None
    model.eval()
    return task_kind(config.kind).runner(model, list(saved["labels"]), static, cache, saved)
