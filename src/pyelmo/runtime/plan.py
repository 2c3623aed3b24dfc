"""The execution plan: which kernel and precision each product runs with, and how a level's two
LSTM directions run. One explicit, printable object, passed in the run options.

By default the plan is a fixed rule of the machine's features and the PyTorch version, never
of timing, so the same machine, command and input give the same bits whatever the load or
caches.
"""

from __future__ import annotations

import functools
import hashlib
import platform
from dataclasses import dataclass, field
from pathlib import Path

import torch

from pyelmo.errors import ConfigError
from pyelmo.runtime import precision as precisions
from pyelmo.runtime.kernels import ONEDNN_EXACT_ROWS
from pyelmo.runtime.precision import Precision, Quantization
from pyelmo.runtime.rules import KERNEL_RULES, KERNELS, LEVEL_ORDERS, STEP_MODES

#: Under the fixed rule, products of more rows than this (the last row class: a block of input-to-gate products,
#: the token encoder's, a large batch's steps) run through ``torch.mm`` (MKL), which writes into the loop's buffers
#: and adds in place; oneDNN's linear allocates every result, which is then copied or added there (at many rows,
#: a fresh mapping's page faults too), and that costs more than its product gains; oneDNN's up to this many rows
#: run unpadded (:data:`~pyelmo.runtime.kernels.ONEDNN_EXACT_ROWS`).
ONEDNN_MAX_ROWS = ONEDNN_EXACT_ROWS
#: A product of ``rows`` rows belongs to the first class >= rows (the last class for more rows).
ROW_CLASSES = (1, 8, ONEDNN_MAX_ROWS, 256)
#: Under the fixed rule, a time step's products of both directions run as one batched ``torch`` product on
#: their stacked weights while each direction's has at most this many multiply-adds, or at most
#: :data:`STEP_BATCHED_ROWS` rows: per-call cost, not arithmetic, dominates them (a oneDNN call's most).
BATCHED_MAX_WORK = 2**22
STEP_BATCHED_ROWS = 2


def onednn_available() -> bool:
    """Whether this PyTorch build has oneDNN's prepacked-weight linear (x86 and arm CPU builds do)."""
    try:
        return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
                and hasattr(torch.ops.mkldnn, "_linear_pointwise"))
    except (AttributeError, RuntimeError):
        return False


@functools.lru_cache(maxsize=1)
def cpu_flags() -> tuple[str, frozenset[str]]:
    """This CPU's model name and feature flags (from ``/proc/cpuinfo`` where there is one)."""
    name, flags = "", ""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = (part.strip() for part in line.partition(":"))
            if key in ("model name", "Hardware") and not name:
                name = value
            elif key in ("flags", "Features") and not flags:
                flags = value
    except OSError:
        pass
    return name or platform.processor() or platform.machine() or "unknown CPU", frozenset(flags.split())


def machine_key() -> dict[str, str]:
    """What a measurement holds for: this CPU (model and a hash of its flags) and this PyTorch."""
    name, flags = cpu_flags()
    digest = hashlib.sha1(" ".join(sorted(flags)).encode()).hexdigest()[:12]
    return {"cpu": f"{name} [{digest}]", "torch": torch.__version__}


def row_class(rows: int) -> int:
    """The row class of a product of ``rows`` rows (see :data:`ROW_CLASSES`)."""
    for size in ROW_CLASSES:
        if rows <= size:
            return size
    return ROW_CLASSES[-1]


def fixed_kernel(onednn: bool, rows: int) -> str:
    """The fixed rule's kernel of an exact product of ``rows`` rows, whatever its weight: oneDNN on prepacked
    weights up to :data:`ONEDNN_MAX_ROWS` rows where this PyTorch has it, else ``torch.mm`` (a time step's
    smallest products excepted: :meth:`ExecutionPlan.batched_rows`)."""
    return "onednn" if onednn and rows <= ONEDNN_MAX_ROWS else "mm"


@dataclass(frozen=True)
class ExecutionPlan:
    """How the inference products run on this machine (see the module docstring).

    ``precision``: the name of a registered :class:`~pyelmo.runtime.precision.Precision` (``"float32"``
    exact, the default; an old spelling such as ``"torch.float32"`` is read as its name);
    ``kernels``: one of :data:`KERNEL_RULES`; ``level_order``: one of :data:`LEVEL_ORDERS`. ``cpu``, ``torch``, ``onednn``: what the rule was
    decided from. ``quantization``: in a quantizing precision (int8), which products run quantized
    (:class:`~pyelmo.runtime.precision.Quantization`: those with weights of at least ``min_weight`` elements,
    default :data:`pyelmo.runtime.precision.INT8_MIN_WEIGHT`; 0: all of them), the others exact float32.
    ``steps``: one of :data:`STEP_MODES`, how the loop runs each time step (the same kernels, so the same bits).
    """

    precision: str = precisions.DEFAULT.name
    kernels: str = "fixed"
    level_order: str = "together"
    cpu: str = field(default_factory=lambda: cpu_flags()[0])
    torch: str = torch.__version__
    onednn: bool = field(default_factory=onednn_available)
    quantization: Quantization = Quantization()
    steps: str = "eager"

    def __post_init__(self) -> None:
        spec = precisions.get(self.precision)
        object.__setattr__(self, "precision", spec.name)  # the one spelling
        if not isinstance(self.quantization, Quantization):
            raise TypeError(f"plan quantization must be a Quantization (Quantization(min_weight=N)), "
                            f"got {self.quantization!r}")
        for name, allowed in (("kernels", KERNEL_RULES), ("level_order", LEVEL_ORDERS), ("steps", STEP_MODES)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"plan {name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        if self.kernels == "onednn" and not self.onednn:
            raise ConfigError("oneDNN kernels were asked for, but this PyTorch build has no oneDNN")
        if spec.engine is not None and spec.engine() is None:
            raise ConfigError(f"{spec.name} was asked for, but this PyTorch build has no kernels for it")

    @classmethod
    def for_machine(cls, *, kernels: str | None = None, device: str | torch.device = "cpu",
                    precision: str | Precision | None = None,
                    quantization: Quantization | None = None, steps: str | None = None) -> ExecutionPlan:
        """The plan for this machine: ``precision`` (a name of :mod:`pyelmo.runtime.precision`, default float32),
        where this machine runs it (bfloat16 only where the hardware multiplies it, else exact float32; int8 on
        the CPU only, on the products ``quantization`` names: default :class:`Quantization`'s rule, the weights of
        at least :data:`~pyelmo.runtime.precision.INT8_MIN_WEIGHT` elements; a rule goes with a quantizing
        precision only); the fixed rule (or ``kernels``). The directions run one after the
        other on CPUs with AMX tiles, where each direction's weights staying in cache pays, else together. Each
        time step runs as a CUDA graph on a CUDA device, else eagerly (or as ``steps`` says)."""
        kind = torch.device(device).type
        on_cpu, cuda = kind == "cpu", kind == "cuda"
        spec = precisions.get(precision)
        if on_cpu and spec.usable_on_cpu is not None and not spec.usable_on_cpu():  # warns
            spec = precisions.DEFAULT
        if spec.cpu_only and not on_cpu:
            raise ConfigError(f"{spec.name} runs on the CPU only (its kernels are PyTorch's CPU ones), not on {device}")
        rule = kernels or "fixed"
        level_order = "apart" if "amx_tile" in cpu_flags()[1] else "together"
        if quantization is not None and not spec.quantizes:
            raise precisions.quantization_error()
        if steps == "graphs" and not cuda:
            raise ConfigError(f"CUDA graphs run on a CUDA device, not on {device} (steps: eager or static)")
        return cls(spec.name, rule, level_order, onednn=onednn_available() and on_cpu,
                   quantization=Quantization() if quantization is None else quantization,
                   steps=steps or ("graphs" if cuda else "eager"))

    @property
    def spec(self) -> Precision:
        """The :class:`~pyelmo.runtime.precision.Precision` called :attr:`precision`."""
        return precisions.get(self.precision)

    @property
    def dtype(self) -> torch.dtype | None:
        """The products' input precision (``None``: float32)."""
        return self.spec.torch_dtype

    def kernel(self, rows: int, weight_shape: tuple[int, int]) -> str:
        """The float32 kernel of a product of ``rows`` rows times ``W^T``: a forced kernel, or the fixed rule's
        (:func:`fixed_kernel`: ``rows`` choose, the weight's shape does not)."""
        if self.kernels in KERNELS:
            return self.kernels
        return fixed_kernel(self.onednn, rows)

    def batched_rows(self, weight_shape: tuple[int, int]) -> int:
        """Up to how many rows a time step's product of a level's two directions runs as one batched ``torch``
        product (``bmm`` on both directions' weights; 0: never): under the fixed rule, up to
        :data:`BATCHED_MAX_WORK` multiply-adds per direction and at least :data:`STEP_BATCHED_ROWS` rows. A
        forced kernel runs every product itself, and so does a quantizing precision (int8 rounds its inputs:
        a product's last bits, which depend on its kernel, would then move a sentence's vectors with the rows
        that share its steps)."""
        if self.kernels != "fixed" or self.spec.quantizes:
            return 0
        return max(STEP_BATCHED_ROWS, BATCHED_MAX_WORK // (weight_shape[0] * weight_shape[1]))

    def quantized(self, weight_shape: tuple[int, int]) -> bool:
        """Whether the products with a weight of ``weight_shape`` run quantized (int8 mode, large weights)."""
        return self.spec.quantizes and self.quantization.quantizes(weight_shape)

    @property
    def vectors_key(self) -> str:
        """What, beyond the model and the input, the vectors depend on more than float rounding: empty for
        the exact mode, else the precision (and int8's rule), for the keys of stored vectors."""
        return self.spec.cache_part(self.quantization)

    def summary(self) -> str:
        """One line: what the plan is and what it was decided from (recorded in output files)."""
        spec = self.spec
        engine = f" {spec.name}_engine={spec.engine()}" if spec.engine is not None else ""
        int8 = f" int8_min_weight={self.quantization.min_weight}{engine}" if spec.quantizes else ""
        return (f"precision={self.precision} kernels={self.kernels} level_order={self.level_order} "
                f"cpu={self.cpu!r} torch={self.torch} onednn={self.onednn}{int8} threads={torch.get_num_threads()}"
                f"{'' if self.steps == 'eager' else ' steps=' + self.steps}")
