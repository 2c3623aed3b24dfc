"""The precisions the inference products run in: one registry, one spelling each.

A :class:`Precision` says what its products compute in (``dtype``), what it quantizes (the products with
large weights on quantized copies, through the kernel ``quantized_kernel``), its part of the keys of stored
vectors (:meth:`Precision.cache_part`), where it runs, and a line of help. Its ``name`` is its only
spelling: the ``--precision`` choices, HDF5 attributes, ``/v1/models``, task configs and the execution plan
all use it; what earlier versions wrote (``"torch.float32"``) still reads (:func:`get`). A new precision
is one :func:`register` call here (and, if it quantizes, its kernel in ``kernels.py`` and ``products.py``).

Which products a quantizing precision quantizes is one rule object, :class:`Quantization` (the smallest
weight quantized), held by the execution plan (``ExecutionPlan.quantization``).
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from pyelmo.errors import ConfigError

if TYPE_CHECKING:
    import torch

#: The int8 mode quantizes the weights of at least this many elements (the LSTM's and the highways' of the
#: released sizes); smaller products (the convolutions, a small model's projections) stay exact float32,
#: where the dynamic quantization of their inputs costs more than int8 saves.
INT8_MIN_WEIGHT = 2**18


@functools.lru_cache(maxsize=1)
def bf16_supported() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX512-BF16/AVX512BW, AMX or AVX-NE-CONVERT);
    without it bfloat16 products run far slower than float32."""
    import torch

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
    activations per call (per tensor; :func:`pyelmo.runtime.kernels.int8_linear` makes that per row); on x86
    to 7 bits (``reduce_range``: AVX2's 16-bit intermediate sums of 8-bit products would overflow), as
    PyTorch's own dynamic quantization does."""
    import torch

    try:
        engine = torch.backends.quantized.engine
    except (AttributeError, RuntimeError):
        return None
    return engine if engine in torch.backends.quantized.supported_engines and engine != "none" else None


@dataclass(frozen=True)
class Precision:
    """One precision of the inference products (see the module docstring).

    ``dtype``: the ``torch`` dtype, by name, of the products' inputs and weights (``None``: float32; sums and
    outputs stay float32; by name, so that the command line reads the registry without importing torch);
    ``quantized_kernel``: the kernel that runs the products whose weights it quantizes (``None``: none);
    ``usable_on_cpu``: whether this CPU runs it fast (else it warns, and a CPU plan runs exact float32);
    ``onednn``: whether oneDNN runs its reduced-``dtype`` products here (else ``torch.mm`` does);
    ``engine``: the engine that runs it here, ``None`` where this build has none; ``cpu_only``,
    ``tasks`` (task models accept it);
    ``spellings``: what earlier files say for it.
    """

    name: str
    help: str
    dtype: str | None = None
    quantized_kernel: str | None = None
    usable_on_cpu: Callable[[], bool] | None = None
    onednn: Callable[[], bool] | None = None
    engine: Callable[[], str | None] | None = None
    cpu_only: bool = False
    tasks: bool = True
    spellings: tuple[str, ...] = ()

    @property
    def torch_dtype(self) -> torch.dtype | None:
        """:attr:`dtype` as a ``torch.dtype``."""
        import torch

        return None if self.dtype is None else getattr(torch, self.dtype)

    @property
    def exact(self) -> bool:
        return self.dtype is None and self.quantized_kernel is None

    @property
    def quantizes(self) -> bool:
        return self.quantized_kernel is not None

    def cache_part(self, quantization: Quantization | None = None) -> str:
        """This precision's part of a key of stored vectors (``quantization``: the rule of a quantizing one,
        default :class:`Quantization`'s): empty for the exact one, as before precisions existed."""
        if self.exact:
            return ""
        return f"{self.name}:{(quantization or Quantization()).cache_part()}" if self.quantizes else self.name


def quantization_error() -> ConfigError:
    """The one-line error of a quantization rule that is out of range or goes with no quantizing precision."""
    quantizing = " or ".join(f"--precision {p.name}" for p in REGISTRY.values() if p.quantizes)
    return ConfigError("int8_min_weight (--int8-min-weight) is a number of weight elements >= 0 and goes with "
                       f"a quantizing precision ({quantizing})")


@dataclass(frozen=True)
class Quantization:
    """Which products a quantizing precision (int8) runs quantized: those whose weight has at least
    ``min_weight`` elements (0: all of them); the others run exact float32. Output files and task configs
    record it as ``int8_min_weight``. A negative ``min_weight`` is a one-line :class:`ConfigError`."""

    min_weight: int = INT8_MIN_WEIGHT

    def __post_init__(self) -> None:
        if self.min_weight < 0:
            raise quantization_error()

    @classmethod
    def of(cls, min_weight: int | None) -> Quantization | None:
        """The rule of a recorded or given ``int8_min_weight`` (``None``: none given, the plan's default)."""
        return None if min_weight is None else cls(min_weight)

    def quantizes(self, weight_shape: tuple[int, int]) -> bool:
        """Whether a quantizing precision runs the products with a weight of ``weight_shape`` quantized."""
        return weight_shape[0] * weight_shape[1] >= self.min_weight

    def cache_part(self) -> str:
        """The rule's part of a key of stored vectors (after the precision's name)."""
        return str(self.min_weight)


#: Every precision by name, in the order the choices list them (the first is the exact default).
REGISTRY: dict[str, Precision] = {}


def register(precision: Precision) -> Precision:
    """Add ``precision`` to :data:`REGISTRY` (its name and old spellings must be new)."""
    taken = [s for s in (precision.name, *precision.spellings) if s in REGISTRY or _by_spelling(s)]
    if taken:
        raise ValueError(f"precision {taken[0]!r} is registered already")
    REGISTRY[precision.name] = precision
    return precision


def _by_spelling(spelling: str) -> Precision | None:
    return next((p for p in REGISTRY.values() if spelling in p.spellings), None)


def names(tasks: bool = False) -> tuple[str, ...]:
    """The precisions' names (``tasks``: those task models accept)."""
    return tuple(name for name, p in REGISTRY.items() if p.tasks or not tasks)


def get(name: str | Precision | None, tasks: bool = False) -> Precision:
    """The precision called ``name`` (``None``: the exact default), also as files written before spell it
    (``"torch.float32"``); any other name is a one-line :class:`ConfigError` naming the choices."""
    if isinstance(name, Precision):
        return name
    found = DEFAULT if name is None else REGISTRY.get(name) or _by_spelling(name)
    if found is None or (tasks and not found.tasks):
        raise ConfigError(f"precision must be one of {', '.join(names(tasks))}, got {name!r}")
    return found


def spelled(name: str | None) -> str | None:
    """``name`` in its one spelling (an old one from a file written before mapped; unknown names kept)."""
    found = None if name is None else (REGISTRY.get(name) or _by_spelling(name))
    return found.name if found else name


def help_text(tasks: bool = False) -> str:
    """Each precision's help line, for ``--precision``."""
    return " ".join(f"{p.name}: {p.help}." for p in REGISTRY.values() if p.tasks or not tasks)


DEFAULT = FLOAT32 = register(Precision(
    "float32", "exact (the default)", spellings=("torch.float32",)))
BFLOAT16 = register(Precision(
    "bfloat16", "matrix products on bfloat16 inputs and weights, float32 sums, states and outputs (slightly "
    "different vectors); needs a GPU or a CPU with bfloat16 instructions, elsewhere warns and runs float32",
    dtype="bfloat16", usable_on_cpu=functools.partial(usable_bf16, True), onednn=bf16_supported,
    tasks=False, spellings=("torch.bfloat16",)))
INT8 = register(Precision(
    "int8", "on the CPU, the products with large weights (the LSTM's and the highways' of the released sizes) on int8 "
    "weights, quantized per output channel at load, and int8 inputs (slightly different vectors)",
    quantized_kernel="int8", engine=int8_engine, cpu_only=True))
