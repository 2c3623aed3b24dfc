"""ONNX Runtime as an execution backend: a folder ``pyelmo export --format onnx`` wrote, run as the biLM.

:data:`RUNTIMES` names the backends ``ElmoEmbedder(..., runtime=)`` and ``pyelmo embed --runtime`` take.
:func:`onnx_bilm` gives the :class:`OnnxBiLM` of a model: an export folder as it is, any other model exported
once into the cache (``~/.cache/pyelmo/onnx/FINGERPRINT``, or ``$PYELMO_ONNX_CACHE``). An
:class:`OnnxBiLM` is called like a stateless :class:`~pyelmo.modeling.bilm.BiLM` (``char_ids`` ->
``BiLMOutput(layers, mask)``). Nothing here imports ``onnxruntime`` until a model is run.
"""

from __future__ import annotations

from pathlib import Path

from pyelmo.modelio.onnx_folder import read_export_config

#: The execution backends, by name (the first is the default), with a help line.
RUNTIMES = {
    "torch": "PyTorch, with the execution plan (the default)",
    "onnxruntime": "ONNX Runtime on the CPU, running the model exported to ONNX ('pyelmo export --format onnx'; "
                   "exported once into ~/.cache/pyelmo/onnx/ when --model is not an export folder); float32, "
                   "stateless; needs pip install 'pyelmo[onnx]'",
}
DEFAULT_RUNTIME = next(iter(RUNTIMES))
ONNX_CACHE_ENV = "PYELMO_ONNX_CACHE"


def check_runtime(runtime: str) -> str:
    """``runtime`` checked: one of :data:`RUNTIMES`, and for ``onnxruntime`` the package importable."""
    from pyelmo.errors import InputError

    if runtime not in RUNTIMES:
        raise InputError(f"unknown runtime {runtime!r}: one of {', '.join(RUNTIMES)}")
    if runtime == "onnxruntime":
        _onnxruntime()
    return runtime


def _onnxruntime():
    from pyelmo.errors import InputError

    try:
        import onnxruntime
    except ImportError:
        raise InputError("--runtime onnxruntime needs the onnxruntime package: pip install 'pyelmo[onnx]'") from None
    return onnxruntime


def cache_root() -> Path:
    from pyelmo.paths import user_cache_dir

    return user_cache_dir("onnx", ONNX_CACHE_ENV)


class OnnxBiLM:
    """An export folder run by ONNX Runtime, called like a stateless biLM: ``model(char_ids)`` ->
    ``BiLMOutput(layers, mask)`` (torch tensors). ``threads``: ONNX Runtime's intra-op threads (None: torch's
    number of threads)."""

    def __init__(self, folder, threads: int | None = None) -> None:
        import torch

        from pyelmo.config import ElmoConfig
        from pyelmo.errors import WeightFileError
        from pyelmo.modelio.onnx_folder import INPUT_NAME, ONNX_NAME, OUTPUT_NAMES

        ort = _onnxruntime()
        self.folder = Path(folder)
        self.export_config = read_export_config(self.folder)
        try:
            self.config = ElmoConfig.from_options(self.export_config["options"])
        except Exception as exc:
            raise WeightFileError(f"{self.folder / 'config.json'}: its options are not a model's: {exc}") from None
        self.fingerprint: str = str(self.export_config.get("fingerprint", ""))
        path = self.folder / ONNX_NAME
        if not path.is_file():
            raise WeightFileError(f"{self.folder} has no {ONNX_NAME}: export it again (pyelmo export --format onnx)")
        settings = ort.SessionOptions()
        settings.intra_op_num_threads = threads or torch.get_num_threads()
        settings.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(str(path), settings, providers=["CPUExecutionProvider"])
        except Exception as exc:
            why = " ".join(str(exc).split()) or type(exc).__name__
            why = why[:237] + "..." if len(why) > 240 else why
            raise WeightFileError(f"{path} is not a model ONNX Runtime can load ({why}): export it again "
                                  "(pyelmo export --format onnx)") from None
        inputs = [i.name for i in self.session.get_inputs()]
        outputs = [o.name for o in self.session.get_outputs()]
        recorded = self.session.get_modelmeta().custom_metadata_map.get("fingerprint")
        if inputs != [INPUT_NAME] or outputs != list(OUTPUT_NAMES) or recorded != self.fingerprint:
            raise WeightFileError(f"{path} is not the graph of this export's config.json (inputs {inputs}, outputs "
                                  f"{outputs}, fingerprint {'matching' if recorded == self.fingerprint else 'other'}): "
                                  "export it again (pyelmo export --format onnx)")
        self._input, self._outputs = INPUT_NAME, list(OUTPUT_NAMES)

    def __call__(self, char_ids, options=None, final_state: bool = False):
        """The export's layers and mask (``BiLM.forward`` stateless; no final states, whatever ``final_state``)."""
        import numpy as np
        import torch

        from pyelmo.modeling.bilm import BiLMOutput

        ids = np.ascontiguousarray(char_ids.detach().cpu().numpy().astype(np.int64, copy=False))
        layers, mask = self.session.run(self._outputs, {self._input: ids})
        return BiLMOutput(torch.from_numpy(layers), torch.from_numpy(mask))

    def describe(self) -> str:
        return f"ONNX Runtime, {self.folder}"


def onnx_bilm(source, bilm=None, threads: int | None = None) -> OnnxBiLM:
    """The :class:`OnnxBiLM` of a resolved model: an export folder as it is; any other model (``bilm``: loaded
    already, unplanned) exported once into the cache, keyed by its fingerprint, and reused."""
    from pyelmo.modelio.onnx_export import export_onnx, onnx_modules
    from pyelmo.modelio.onnx_folder import ONNX_NAME
    from pyelmo.modelio.weights import model_fingerprint

    _onnxruntime()
    if source is not None and source.format == "onnx":
        return OnnxBiLM(source.folder, threads)
    bilm = source.load_bilm() if bilm is None else bilm
    fingerprint = model_fingerprint(bilm)
    folder = cache_root() / fingerprint
    if (folder / ONNX_NAME).is_file():
        try:
            model = OnnxBiLM(folder, threads)
            if model.fingerprint == fingerprint:
                return model
        except Exception:
            pass  # a damaged cache entry: exported again
    onnx_modules()  # the export needs onnx: one line when it is missing
    try:
        export_onnx(source, folder, overwrite=True, bilm=bilm)
    except OSError:
        if not (folder / ONNX_NAME).is_file():  # another process wrote it at the same time: theirs is used
            raise
    return OnnxBiLM(folder, threads)


def embedder_model(model, weight_file, *, stateful: bool, device, kernels, plan, precision, quantization):
    """``(OnnxBiLM, resolved model or None)`` for ``ElmoEmbedder(model, weight_file, runtime="onnxruntime")``
    (``model``: anything the resolver takes, or a biLM); the torch runtime's settings refused in one line."""
    from pyelmo.errors import InputError
    from pyelmo.modeling.bilm import BiLM
    from pyelmo.modelio.onnx_graph import check_exportable
    from pyelmo.modelio.resolve import resolve_model

    refused = [what for what, given in (("stateful", stateful), (f"device {device}", str(device) != "cpu"),
                                        ("kernels", kernels), ("an execution plan", plan),
                                        (f"precision {precision}", precision not in (None, "float32")),
                                        ("an int8 rule", quantization is not None)) if given]
    if refused:
        raise InputError(f"runtime onnxruntime runs the exported graph stateless, in float32, on the CPU: "
                         f"{refused[0]} is for runtime torch")
    if isinstance(model, BiLM):
        check_exportable(model)
        return onnx_bilm(None, bilm=model), None
    source = resolve_model(model, weight_file)
    return onnx_bilm(source), source


__all__ = ["DEFAULT_RUNTIME", "RUNTIMES", "OnnxBiLM", "check_runtime", "embedder_model", "onnx_bilm", "read_export_config"]
