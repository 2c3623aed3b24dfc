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
from pyelmo.runtime.precision import Precision
from pyelmo.runtime.rules import KERNEL_RULES, KERNELS, LEVEL_ORDERS

#: The int8 mode quantizes the weights of at least this many elements (the LSTM's and the highways' of the
#: released sizes); smaller products (the convolutions, a small model's projections) stay exact float32,
#: where the dynamic quantization of their inputs costs more than int8 saves.
INT8_MIN_WEIGHT = 2**18
#: A product of ``rows`` rows belongs to the first class >= rows (the last class for more rows).
ROW_CLASSES = (1, 8, 64, 256)
#: Under the fixed rule with oneDNN, a time step's products of at most this many rows per direction (batch 1,
#: the last sentences of a batch) run as one batched ``torch`` product over both directions' weights: a
#: oneDNN call's fixed cost dominates such products.
STEP_BATCHED_ROWS = 2
#: Without oneDNN, a time step's products of at most this many multiply-adds per direction run batched.
BATCHED_MAX_WORK = 2**22


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


def fixed_kernel(onednn: bool) -> str:
    """The fixed rule's kernel of an exact product, whatever its rows and weight: oneDNN on prepacked weights
    where this PyTorch has it, else ``torch.mm`` (a time step's smallest products excepted:
    :meth:`ExecutionPlan.batched_rows`)."""
    return "onednn" if onednn else "mm"


@dataclass(frozen=True)
class ExecutionPlan:
    """How the inference products run on this machine (see the module docstring).

    ``precision``: the name of a registered :class:`~pyelmo.runtime.precision.Precision` (``"float32"``
    exact, the default; an old spelling such as ``"torch.float32"`` is read as its name);
    ``kernels``: one of :data:`KERNEL_RULES`; ``level_order``: one of :data:`LEVEL_ORDERS`. ``cpu``, ``torch``, ``onednn``: what the rule was
    decided from. ``int8_min_weight``: in a quantizing precision (int8), the products with weights of at
    least this many elements run quantized (0: all of them), the others exact float32.
    """

    precision: str = precisions.DEFAULT.name
    kernels: str = "fixed"
    level_order: str = "together"
    cpu: str = field(default_factory=lambda: cpu_flags()[0])
    torch: str = torch.__version__
    onednn: bool = field(default_factory=onednn_available)
    int8_min_weight: int = INT8_MIN_WEIGHT

    def __post_init__(self) -> None:
        spec = precisions.get(self.precision)
        object.__setattr__(self, "precision", spec.name)  # the one spelling
        for name, allowed in (("kernels", KERNEL_RULES), ("level_order", LEVEL_ORDERS)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"plan {name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        if self.kernels == "onednn" and not self.onednn:
            raise ConfigError("oneDNN kernels were asked for, but this PyTorch build has no oneDNN")
        if spec.engine is not None and spec.engine() is None:
            raise ConfigError(f"{spec.name} was asked for, but this PyTorch build has no kernels for it")

    @classmethod
    def for_machine(cls, *, kernels: str | None = None, device: str | torch.device = "cpu",
                    precision: str | Precision | None = None, int8_min_weight: int | None = None) -> ExecutionPlan:
        """The plan for this machine: ``precision`` (a name of :mod:`pyelmo.runtime.precision`, default float32),
        where this machine runs it (bfloat16 only where the hardware multiplies it, else exact float32; int8 on
        the CPU only, on the weights of at least ``int8_min_weight`` elements, default :data:`INT8_MIN_WEIGHT`);
        the fixed rule (or ``kernels``). The directions run one after the
        other on CPUs with AMX tiles, where each direction's weights staying in cache pays, else together."""
        on_cpu = torch.device(device).type == "cpu"
        spec = precisions.get(precision)
        if on_cpu and spec.usable_on_cpu is not None and not spec.usable_on_cpu():  # warns
            spec = precisions.DEFAULT
        if spec.cpu_only and not on_cpu:
            raise ConfigError(f"{spec.name} runs on the CPU only (its kernels are PyTorch's CPU ones), not on {device}")
        rule = kernels or "fixed"
        level_order = "apart" if "amx_tile" in cpu_flags()[1] else "together"
        if int8_min_weight is not None and (not spec.quantizes or int8_min_weight < 0):
            quantizing = " or ".join(f"--precision {p.name}" for p in precisions.REGISTRY.values() if p.quantizes)
            raise ConfigError("int8_min_weight (--int8-min-weight) is a number of weight elements >= 0 and goes with "
                              f"a quantizing precision ({quantizing})")
        return cls(spec.name, rule, level_order, onednn=onednn_available() and on_cpu,
                   int8_min_weight=INT8_MIN_WEIGHT if int8_min_weight is None else int8_min_weight)

    @property
    def spec(self) -> Precision:
        """The :class:`~pyelmo.runtime.precision.Precision` called :attr:`precision`."""
        return precisions.get(self.precision)

    @property
    def dtype(self) -> torch.dtype | None:
        """The products' input precision (``None``: float32)."""
        return self.spec.torch_dtype

    def kernel(self, rows: int, weight_shape: tuple[int, int]) -> str:
        """The float32 kernel of a product of ``rows`` rows times ``W^T``: the plan's one kernel (``rows`` and
        the weight's shape choose nothing)."""
        if self.kernels in KERNELS:
            return self.kernels
        return fixed_kernel(self.onednn)

    def batched_rows(self, weight_shape: tuple[int, int]) -> int:
        """Up to how many rows a time step's product of a level's two directions runs as one batched ``torch``
        product (``bmm`` on both directions' weights; 0: never): under the fixed rule, up to
        :data:`STEP_BATCHED_ROWS` rows where the rule's kernel is oneDNN, else up to :data:`BATCHED_MAX_WORK`
        multiply-adds per direction. A forced kernel runs every product itself, and so does a quantizing
        precision (int8 rounds its inputs: a product's last bits, which depend on its kernel, would then move a
        sentence's vectors with the rows that share its steps)."""
        if self.kernels != "fixed" or self.spec.quantizes:
            return 0
        if fixed_kernel(self.onednn) == "onednn":
            return STEP_BATCHED_ROWS
        return BATCHED_MAX_WORK // (weight_shape[0] * weight_shape[1])

    def quantized(self, weight_shape: tuple[int, int]) -> bool:
        """Whether the products with a weight of ``weight_shape`` run quantized (int8 mode, large weights)."""
        return self.spec.quantizes and weight_shape[0] * weight_shape[1] >= self.int8_min_weight

    @property
    def vectors_key(self) -> str:
        """What, beyond the model and the input, the vectors depend on more than float rounding: empty for
        the exact mode, else the precision (and int8's rule), for the keys of stored vectors."""
        return self.spec.cache_part(self.int8_min_weight)

    def summary(self) -> str:
        """One line: what the plan is and what it was decided from (recorded in output files)."""
        spec = self.spec
        engine = f" {spec.name}_engine={spec.engine()}" if spec.engine is not None else ""
        int8 = f" int8_min_weight={self.int8_min_weight}{engine}" if spec.quantizes else ""
        return (f"precision={self.precision} kernels={self.kernels} level_order={self.level_order} "
                f"cpu={self.cpu!r} torch={self.torch} onednn={self.onednn}{int8} threads={torch.get_num_threads()}")
