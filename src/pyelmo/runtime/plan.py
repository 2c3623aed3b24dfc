"""The execution plan: which kernel and precision each product runs with, and how a level's two
LSTM directions run. One explicit, printable object, passed in the run options.

By default the plan is a fixed rule of the machine's features and the PyTorch version, never
of timing, so the same machine, command and input give the same bits whatever the load or
caches. Measured autotuning (``autotune=True``, like ``torch.backends.cudnn.benchmark``) is
opt-in: it times the candidates here once and keeps the choices on disk
(:mod:`pyelmo.runtime.autotune`); it changes only the order of float32 sums.
"""

from __future__ import annotations

import functools
import platform
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from pyelmo.errors import ConfigError

#: Exact float32 product kernels: ``torch.mm`` on ``W`` as stored, ``torch.mm`` on a contiguous
#: copy of ``W^T``, and oneDNN with ``W`` prepacked into its blocked layout.
KERNELS = ("mm", "mm_t", "onednn")
#: How a plan picks the kernels: the fixed rule, measured here (``autotune``), or one kernel for all.
KERNEL_RULES = ("fixed", "autotune", *KERNELS)
#: How the packed loop runs a level's two directions (the plan's ``level_order``): in one loop (gate
#: nonlinearities once over both, small step products batched) or one after the other (each direction's
#: weights stay in cache).
LEVEL_ORDERS = ("together", "apart")
#: ``float32``: exact; ``bfloat16``: products on bfloat16 inputs and weights, float32 sums; ``int8``: the
#: products with large weights on int8 weights (per output channel) and int8 activations (per row).
PRECISIONS = ("float32", "bfloat16", "int8")
#: The int8 mode quantizes the weights of at least this many elements (the LSTM's and the highways' of the
#: released sizes); smaller products (the convolutions, a small model's projections) stay exact float32,
#: where the dynamic quantization of their inputs costs more than int8 saves.
INT8_MIN_WEIGHT = 2**18
#: A product of ``rows`` rows belongs to the first class >= rows (the last class for more rows).
ROW_CLASSES = (1, 8, 64, 256)
#: The fixed rule: oneDNN (when available) for products of at least this many multiply-adds;
#: below it oneDNN's per-call overhead dominates and ``torch.mm`` is faster.
ONEDNN_MIN_WORK = 2**18


def onednn_available() -> bool:
    """Whether this PyTorch build has oneDNN's prepacked-weight linear (x86 and arm CPU builds do)."""
    try:
        return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
                and hasattr(torch.ops.mkldnn, "_linear_pointwise"))
    except (AttributeError, RuntimeError):
        return False


@functools.lru_cache(maxsize=1)
def bf16_supported() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX512-BF16/AVX512BW, AMX or AVX-NE-CONVERT);
    without it bfloat16 products run far slower than float32."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def usable_bf16(requested: bool) -> bool:
    """``requested``, unless this CPU lacks bfloat16 instructions: then a warning and ``False``."""
    if requested and not bf16_supported():
        warnings.warn("bfloat16 ignored: this CPU has no bfloat16 matrix instructions (AVX512-BF16, AMX or "
                      "AVX-NE-CONVERT), where it would be far slower than float32; computing in exact float32",
                      RuntimeWarning, stacklevel=3)
        return False
    return requested


def int8_engine() -> str | None:
    """The quantized engine PyTorch runs the int8 products with here (``x86``/``fbgemm`` on x86 CPUs,
    ``qnnpack`` on arm), or ``None`` if this build has none. Its dynamic linear quantizes the
    activations per call (per tensor; :func:`pyelmo.runtime.kernels.int8_linear` makes that per row); on x86 to 7 bits (``reduce_range``: AVX2's 16-bit
    intermediate sums of 8-bit products would overflow), as PyTorch's own dynamic quantization does."""
    try:
        engine = torch.backends.quantized.engine
    except (AttributeError, RuntimeError):
        return None
    return engine if engine in torch.backends.quantized.supported_engines and engine != "none" else None


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


def row_class(rows: int) -> int:
    """The row class of a product of ``rows`` rows (see :data:`ROW_CLASSES`)."""
    for size in ROW_CLASSES:
        if rows <= size:
            return size
    return ROW_CLASSES[-1]


def fixed_kernel(rows: int, weight_shape: tuple[int, int], onednn: bool) -> str:
    """The fixed rule: oneDNN (when available) for products of at least ``ONEDNN_MIN_WORK`` multiply-adds."""
    return "onednn" if onednn and rows * weight_shape[0] * weight_shape[1] >= ONEDNN_MIN_WORK else "mm"


@dataclass(frozen=True)
class ExecutionPlan:
    """How the inference products run on this machine (see the module docstring).

    ``precision``: one of :data:`PRECISIONS` (``"float32"`` exact; ``"int8"``: see :func:`int8_engine`);
    ``kernels``: one of :data:`KERNEL_RULES`; ``level_order``: one of :data:`LEVEL_ORDERS`, or
    ``"autotune"`` (measured on the first calls). ``cpu``, ``torch``, ``onednn``: what the rule was
    decided from. ``int8_min_weight``: in int8 mode, the products with weights of at least this many
    elements run in int8 (0: all of them), the others exact float32.
    """

    precision: str = "float32"
    kernels: str = "fixed"
    level_order: str = "together"
    cpu: str = field(default_factory=lambda: cpu_flags()[0])
    torch: str = torch.__version__
    onednn: bool = field(default_factory=onednn_available)
    int8_min_weight: int = INT8_MIN_WEIGHT

    def __post_init__(self) -> None:
        for name, allowed in (("precision", PRECISIONS), ("kernels", KERNEL_RULES),
                              ("level_order", (*LEVEL_ORDERS, "autotune"))):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"plan {name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        if self.kernels == "onednn" and not self.onednn:
            raise ConfigError("oneDNN kernels were asked for, but this PyTorch build has no oneDNN")
        if self.precision == "int8" and int8_engine() is None:
            raise ConfigError("int8 was asked for, but this PyTorch build has no quantized int8 CPU kernels")

    @classmethod
    def for_machine(cls, *, bf16: bool = False, autotune: bool = False, kernels: str | None = None,
                    device: str | torch.device = "cpu", precision: str | None = None,
                    int8_min_weight: int | None = None) -> ExecutionPlan:
        """The plan for this machine: ``precision`` (default float32; ``bf16=True`` is ``"bfloat16"``), with
        bfloat16 only where the hardware multiplies it (else exact float32) and int8 on the CPU only (on the
        weights of at least ``int8_min_weight`` elements, default :data:`INT8_MIN_WEIGHT`);
        the fixed rule (or ``kernels``), or measured with ``autotune``. The directions run one after the
        other on CPUs with AMX tiles, where each direction's weights staying in cache pays, else together."""
        on_cpu = torch.device(device).type == "cpu"
        if precision is not None and precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        if bf16 and precision not in (None, "bfloat16"):
            raise ConfigError(f"bf16 (--bf16) is the bfloat16 precision: it cannot be combined with precision "
                              f"{precision!r} (--precision {precision})")
        precision = "bfloat16" if bf16 else (precision or "float32")
        if precision == "bfloat16":
            precision = "bfloat16" if not on_cpu or usable_bf16(True) else "float32"
        if precision == "int8" and not on_cpu:
            raise ConfigError(f"int8 runs on the CPU only (its kernels are PyTorch's quantized CPU ones), not on {device}")
        if precision == "int8" and autotune:
            raise ConfigError("autotune measures the float32 and bfloat16 kernels: it cannot be combined with int8")
        if autotune and kernels not in (None, "autotune"):
            raise ConfigError(f"autotune measures the kernels: it cannot be combined with kernels={kernels!r}")
        rule = "autotune" if autotune else (kernels or "fixed")
        level_order = "autotune" if autotune else ("apart" if "amx_tile" in cpu_flags()[1] else "together")
        if int8_min_weight is not None and (precision != "int8" or int8_min_weight < 0):
            raise ConfigError("int8_min_weight (--int8-min-weight) is a number of weight elements >= 0 and goes with "
                              "the int8 precision (--precision int8)")
        return cls(precision, rule, level_order, onednn=onednn_available() and on_cpu,
                   int8_min_weight=INT8_MIN_WEIGHT if int8_min_weight is None else int8_min_weight)

    @property
    def autotune(self) -> bool:
        return self.kernels == "autotune"

    @property
    def dtype(self) -> torch.dtype | None:
        """The products' input precision (``None``: exact float32)."""
        return torch.bfloat16 if self.precision == "bfloat16" else None

    def kernel(self, rows: int, weight_shape: tuple[int, int]) -> str:
        """The float32 kernel of a product of ``rows`` rows times ``W^T`` under a non-measured rule: a
        function of the row class and the weight's shape only."""
        if self.kernels in KERNELS:
            return self.kernels
        return fixed_kernel(row_class(rows), weight_shape, self.onednn)

    def quantized(self, weight_shape: tuple[int, int]) -> bool:
        """Whether the products with a weight of ``weight_shape`` run in int8 (int8 mode, large weights)."""
        return self.precision == "int8" and weight_shape[0] * weight_shape[1] >= self.int8_min_weight

    @property
    def vectors_key(self) -> str:
        """What, beyond the model and the input, the vectors depend on more than float rounding: empty for
        the exact mode, else the precision (and int8's rule), for the keys of stored vectors."""
        if self.precision == "float32":
            return ""
        return f"{self.precision}:{self.int8_min_weight}" if self.precision == "int8" else self.precision

    def cache_key(self, base: str) -> str:
        """``base`` (a key of stored vectors: the model's fingerprint, ...) with :attr:`vectors_key` added;
        the exact mode's is ``base`` itself, as before precisions existed."""
        return f"{base}:{self.vectors_key}" if self.vectors_key else base

    def summary(self) -> str:
        """One line: what the plan is and what it was decided from (recorded in output files)."""
        int8 = f" int8_min_weight={self.int8_min_weight} int8_engine={int8_engine()}" if self.precision == "int8" else ""
        return (f"precision={self.precision} kernels={self.kernels} level_order={self.level_order} "
                f"cpu={self.cpu!r} torch={self.torch} onednn={self.onednn}{int8} threads={torch.get_num_threads()}")
