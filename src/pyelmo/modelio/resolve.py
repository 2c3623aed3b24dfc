"""One model resolver: what a user names as a model -> one :class:`ResolvedModel` record.

:func:`resolve_model` is the only place a model argument is interpreted: a shipped name (``english``,
``chinese``: :data:`pyelmo.modelio.hub.SHIPPED`), a released name (``small``, ``original``, ...), a URL,
an archive, an NLPL folder (options JSON + HDF5), a bilm-tf options + weights pair, a folder converted
from ELMoForManyLangs, a training run folder or its ``model/``, or a folder ``pyelmo export`` wrote.
Without a model it is the shipped model of the text's language (``lang``: :func:`pyelmo.modelio.hub.default_model`).
It reads only small files (``config.json``, names of tensors); downloads and weights wait until
they are needed (``files``/``fetch``, ``load_bilm``, ``load_with_softmax``, ``fingerprint``).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from pyelmo.errors import WeightFileError
from pyelmo.fileio import PathLike
from pyelmo.modelio import hub
from pyelmo.modelio.archives import SOFTMAX_NAME, ModelFiles, find_model_files, read_softmax_hdf5
from pyelmo.modelio.layouts import CONFIG_NAME, WEIGHTS_NAME
from pyelmo.modelio.prefetch import prefetch
from pyelmo.modelio.onnx_folder import is_export_folder

if TYPE_CHECKING:  # resolving imports no PyTorch: a command resolves its model before it imports it
    import torch

    from pyelmo.modeling.bilm import BiLM

#: What a model can be (``ResolvedModel.kind``); the remote ones are fetched into the cache on first use.
REMOTE_KINDS = ("released", "url", "archive")
KINDS = ("shipped", *REMOTE_KINDS, "nlpl", "bilm-tf", "elmoformanylangs", "run", "native", "exported", "onnx")


@dataclass(frozen=True)
class ResolvedModel:
    """A model as resolved: ``name`` (what was given; ``english`` for nothing), ``kind`` (:data:`KINDS`),
    ``format`` (``pyelmo``: config.json + model.safetensors; ``bilm-tf``: options JSON + HDF5;
    ``elmoformanylangs``: converted, with their lexicons; ``onnx``: model.onnx + config.json, run by ONNX
    Runtime), ``has_softmax`` (an LM head and vocabulary beside the biLM), ``language`` of its training text (None: not known), ``folder`` (a local model's
    folder), ``max_length`` (the sentence length it was trained with: 100 when not recorded)."""

    name: str
    kind: str
    format: str
    has_softmax: bool = False
    language: str | None = None
    folder: Path | None = None
    max_length: int = 100
    local_files: ModelFiles | None = field(default=None, repr=False)

    @cached_property
    def files(self) -> ModelFiles | None:
        """A bilm-tf-format model's options and weight files (a released name, URL or archive: fetched into
        the cache and verified on first use, :meth:`fetch`); None for the native formats (see ``folder``)."""
        return self.fetch() if self.kind in REMOTE_KINDS else self.local_files

    def fetch(self, root: PathLike | None = None, progress: bool = True) -> ModelFiles:
        """A released name, URL or archive fetched (or unpacked) into the cache under ``root`` (default
        :func:`pyelmo.modelio.hub.cache_root`) and verified: its local files. Another model is refused: it is
        on this machine already."""
        if self.kind == "released":
            return hub.fetch_release(hub.RELEASES[self.name], root, progress)
        if self.kind == "url":
            return hub.fetch_url(self.name, root, progress)
        if self.kind == "archive":
            return hub.fetch_archive(self.name, root)
        where = "in the package" if self.kind == "shipped" else "on this machine"
        raise WeightFileError(f"{self.describe()} is {where} already: there is nothing to download (a released "
                              f"model by name, {', '.join(hub.RELEASES)}, a URL or an archive is)")

    @property
    def vocab_file(self) -> Path | None:
        """The vocabulary of its LM head (``has_softmax``): ``vocab.txt`` in its folder."""
        return self.folder / "vocab.txt" if self.folder is not None else None

    def load_bilm(self) -> BiLM:
        """The biLM in evaluation mode (``BiLM.from_pretrained(model)``)."""
        from pyelmo.modelio import elmoformanylangs
        from pyelmo.modelio.weights import from_pretrained, load_bilm_hdf5

        if self.format == "bilm-tf":
            reading = self.__dict__.pop("_reading", None)  # prefetched arrays serve one model: they become its own
            read = None if reading is None else reading.result()
            if read is not None:
                self.__dict__.setdefault("fingerprint", read.fingerprint)  # computed as they were read
            return load_bilm_hdf5(self.files.options, self.files.weights, read)
        if self.format == "elmoformanylangs":
            return elmoformanylangs.load_converted(self.folder)
        if self.format == "onnx":
            raise WeightFileError(f"{self.describe()} is an ONNX export ('pyelmo export --format onnx'): run it with "
                                  "--runtime onnxruntime (ElmoEmbedder(..., runtime='onnxruntime')), or use the "
                                  "model it was exported from")
        return from_pretrained(self.folder)

    def prefetch(self) -> None:
        """Start reading a bilm-tf model's weights beside this process (:func:`pyelmo.modelio.prefetch.prefetch`): the
        next :meth:`load_bilm` builds the model from them, and :attr:`fingerprint` comes with them. A command calls
        it before it imports PyTorch, which then imports while the weights are read. Other formats: nothing."""
        if self.format == "bilm-tf" and "_reading" not in self.__dict__:
            self.__dict__["_reading"] = prefetch(self.files.options, self.files.weights)

    def load_with_softmax(self, bilm: BiLM | None = None,
                          dropout: float = 0.0) -> tuple[BiLM, torch.Tensor, torch.Tensor]:
        """The biLM and its LM head's softmax (weight ``(vocab, P)``, bias ``(vocab,)``, float32) of a model with
        one (``has_softmax``). ``bilm``: the biLM already loaded from this model (then only the softmax is read);
        ``dropout``: that of a biLM loaded here to be trained on (the native formats). Its vocabulary is
        ``vocab_file``."""
        if not self.has_softmax:
            raise WeightFileError(f"{self.describe()} has no softmax and vocabulary")
        if self.format == "bilm-tf":  # exported: options.json, weights.hdf5, softmax.hdf5
            return (bilm or self.load_bilm(), *read_softmax_hdf5(self.folder / SOFTMAX_NAME))
        from pyelmo.modelio import elmoformanylangs
        from pyelmo.modelio.weights import native_with_softmax

        converted = functools.partial(elmoformanylangs.load_converted, self.folder, dropout) \
            if self.format == "elmoformanylangs" else None
        return native_with_softmax(self.folder, bilm, dropout, converted)

    @cached_property
    def fingerprint(self) -> str:
        """:func:`pyelmo.modelio.weights.model_fingerprint` of its weights (computed on first use: it loads them)."""
        from pyelmo.modelio.weights import model_fingerprint

        if self.format == "onnx":  # recorded at the export
            return str(_read_config(self.folder).get("fingerprint", ""))
        return model_fingerprint(self.load_bilm())

    def known_fingerprint(self) -> str | None:
        """:attr:`fingerprint` where it is known without reading the weights again (asked for before, or computed
        as :meth:`prefetch` read them), else None."""
        return self.__dict__.get("fingerprint")

    def describe(self) -> str:
        """The model as messages and ``/v1/models`` name it."""
        return f"{self.name} (shipped)" if self.kind == "shipped" else self.name


def resolve_model(model: str | os.PathLike | ResolvedModel | None = None, weight_file: str | os.PathLike | None = None,
                  *, lang: str | None = None) -> ResolvedModel:
    """What ``model`` (and, for the released bilm-tf format, its ``weight_file`` beside an options file
    ``model``) names; ``None`` is the shipped model of ``lang``, the language of the text (``chinese`` for
    ``zh``; else, and without ``lang``, ``english``: :func:`pyelmo.modelio.hub.default_model`). Anything else
    is refused in one line naming what works."""
    if isinstance(model, ResolvedModel):
        return model
    if weight_file is not None:
        if model is None:
            raise WeightFileError("a weight file needs its options file")
        return ResolvedModel(str(model), "bilm-tf", "bilm-tf",
                             local_files=ModelFiles(Path(model), Path(weight_file)))
    name = hub.default_model(lang) if model is None else str(model)
    if name in hub.SHIPPED:
        shipped = hub.SHIPPED[name]
        return _native(name, "shipped", hub.shipped_folder(name), shipped.language)
    path = Path(name)
    if not path.exists():
        return _remote(name)
    if path.is_file():
        return _file(name, path)
    return _folder(name, path)


def load(model: str | os.PathLike | ResolvedModel | None = None, weight_file: str | os.PathLike | None = None) -> BiLM:
    """Load a biLM in evaluation mode from anything :func:`resolve_model` takes: ``load()`` the shipped
    English model, ``load("chinese")``, ``load(DIR)``, ``load(OPTIONS_JSON, WEIGHTS_HDF5)``,
    ``load("original")`` (downloaded once into the cache, ``pyelmo.modelio.hub``), a URL or an archive."""
    from pyelmo.modeling.bilm import BiLM

    return BiLM.from_pretrained(resolve_model(model, weight_file))


def _remote(name: str) -> ResolvedModel:
    if name in hub.RELEASES:
        return ResolvedModel(name, "released", "bilm-tf", language=hub.RELEASES[name].language)
    if hub.is_url(name):
        return ResolvedModel(name, "url", "bilm-tf")
    if os.sep in name or (os.altsep and os.altsep in name):
        raise WeightFileError(f"model directory not found: {name}")
    raise WeightFileError(f"unknown model {name!r}: not a directory, a URL, an archive, or one of "
                          f"{', '.join([*(s.name for s in hub.SHIPPED.values() if s.present), *hub.RELEASES])}")


def file_kind(path: Path) -> str | None:
    """What a local file given as a model is: ``archive`` (a released-format model packed), ``options`` (a
    bilm-tf options JSON, one that names its ``lstm``), ``weights`` (a bilm-tf HDF5 weight file), or None."""
    suffix = path.suffix.lower()
    if hub.is_archive(str(path)):
        return "archive"
    if suffix in (".hdf5", ".h5"):
        return "weights"
    if suffix != ".json":
        return None
    try:
        return "options" if '"lstm"' in path.read_text(encoding="utf-8", errors="replace")[:100_000] else None
    except OSError:
        return None


def _file(name: str, path: Path) -> ResolvedModel:
    kind = file_kind(path)
    if kind == "archive":
        return ResolvedModel(name, "archive", "bilm-tf")
    if kind == "options":
        raise WeightFileError(f"{path} is a file, an options file: give its HDF5 weight file with it "
                              "(--options-file with --weight-file; pyelmo train: --init-weight-file)")
    raise WeightFileError(f"{path} is a file; give a model directory, or the options file together with its "
                          "weight file")


def _folder(name: str, path: Path) -> ResolvedModel:
    kind = "native"
    if (path / "run.json").is_file() and not (path / CONFIG_NAME).is_file():
        path, kind = _run_model_dir(path), "run"
    if (path / "char.dic").is_file() and (path / "encoder.pkl").is_file():
        raise WeightFileError(f"{path} is an ELMoForManyLangs model folder: convert it first ('pyelmo convert "
                              f"elmoformanylangs {path} OUT'), then use OUT")
    if is_export_folder(path):  # an ONNX export ('pyelmo export --format onnx')
        from pyelmo.modelio.onnx_folder import read_export_config

        config = read_export_config(path)
        language = config.get("language") if isinstance(config.get("language"), str) else None
        return ResolvedModel(name, "onnx", "onnx", language=language, folder=path)
    if (path / CONFIG_NAME).is_file() or not any(path.glob("*.hdf5")):
        return _native(name, kind, path)  # (a folder without config.json: loading names what is missing)
    if (path / SOFTMAX_NAME).is_file():
        files = ModelFiles(path / "options.json", path / "weights.hdf5", path / "vocab.txt")
        return ResolvedModel(name, "exported", "bilm-tf", (path / "vocab.txt").is_file(), folder=path,
                             local_files=files)
    return ResolvedModel(name, "nlpl", "bilm-tf", folder=path, local_files=find_model_files(path))


def _native(name: str, kind: str, path: Path, language: str | None = None) -> ResolvedModel:
    """A folder in the native layout (``config.json`` + ``model.safetensors``), read leniently: a broken
    file is named when the model loads."""
    from pyelmo.modelio.elmoformanylangs import is_converted

    config = _read_config(path)
    _refuse_task_model(path, config)
    converted = is_converted(config)
    recorded = config.get("language") if isinstance(config.get("language"), str) else None
    try:
        max_length = int((config.get("training") or {}).get("max_length", 100))
    except (AttributeError, TypeError, ValueError):
        max_length = 100
    return ResolvedModel(name, "elmoformanylangs" if converted and kind == "native" else kind,
                         "elmoformanylangs" if converted else "pyelmo", _has_native_softmax(path),
                         language or recorded or None, path, max_length)


def _read_config(path: Path) -> dict:
    try:
        config = json.loads((path / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def _has_native_softmax(path: Path) -> bool:
    """Whether a native folder holds the LM head (``softmax.weight``, ``softmax.bias``; its ``vocab.txt`` is
    read with it). A weight file that cannot be read counts as one: loading it names the problem."""
    from safetensors import safe_open

    try:
        with safe_open(str(path / WEIGHTS_NAME), framework="pt") as f:
            return {"softmax.weight", "softmax.bias"} <= set(f.keys())
    except Exception:
        return (path / CONFIG_NAME).is_file()


def _run_model_dir(path: Path) -> Path:
    """A ``pyelmo train`` run folder's ``model/``; a run stopped before writing it is refused, naming what works."""
    model = path / "model"
    if (model / CONFIG_NAME).is_file():
        return model
    best = path / "best"
    hint = f"--model {best} (its best validated model so far), or " if (best / CONFIG_NAME).is_file() else ""
    raise WeightFileError(f"{path} is a training run without its final model ({model} is missing): use {hint}"
                          f"finish it with 'pyelmo train --resume --out {path}'")


def _refuse_task_model(path: Path, config: dict) -> None:
    """Refuse a task model folder (``pyelmo task train``) as a biLM, naming the biLM it uses."""
    if not str(config.get("format", "")).startswith("pyelmo-task"):
        return
    bilm = config.get("bilm") if isinstance(config.get("bilm"), dict) else {}
    if bilm.get("weight_file"):
        flag = f"--options-file {bilm.get('model')} --weight-file {bilm['weight_file']}"
    else:
        flag = f"--model {bilm['model']}" if bilm.get("model") else "no --model (the shipped English model)"
    raise WeightFileError(f"{path} is a task model ('pyelmo task train'), not a biLM: use it with 'pyelmo task "
                          f"evaluate' or 'pyelmo task predict'; for its biLM use {flag}")


__all__ = ["KINDS", "REMOTE_KINDS", "ResolvedModel", "file_kind", "load", "resolve_model"]
