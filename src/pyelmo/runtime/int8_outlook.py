"""Whether the int8 precision is expected to pay on this CPU (``pyelmo env --precision int8``): a fixed rule of
the CPU's features, as the plan's is (:func:`pyelmo.runtime.plan.cpu_flags`, :func:`pyelmo.runtime.plan.int8_engine`),
from what was measured where (README's table, benchmarks/RESULTS.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pyelmo.runtime.plan import cpu_flags
from pyelmo.runtime.precision import int8_engine


@dataclass(frozen=True)
class Int8Outlook:
    """``cpu_class``: the row of :data:`RULE` this CPU falls in; ``expected``: whether int8 is expected to run the
    ``original`` size faster than exact float32 here (``None``: not known); ``why``: what that rests on."""

    cpu_class: str
    expected: bool | None
    why: str

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        verdict = {True: "expected to pay", False: "not expected to pay", None: "not known to pay"}[self.expected]
        return f"int8 on this CPU ({self.cpu_class}): {verdict}: {self.why}"


#: (any of these /proc/cpuinfo flags, class, expected, why); the first row with a flag of this CPU applies.
RULE = (
    (("amx_int8",), "AMX-INT8", True, "int8 matrix tiles; not measured with pyelmo yet"),
    (("avx512_vnni", "avx512vnni"), "AVX512-VNNI", True,
     "measured on an AMD EPYC: the original size at batch 32 2.22x float32, small 1.34x; a 200-sentence "
     "'pyelmo embed' of the original size, load included, 1.29x with the int8 weights kept (--int8-cache)"),
    (("avx_vnni",), "AVX-VNNI", True, "8-bit dot products in one instruction; not measured with pyelmo yet"),
    (("avx2",), "AVX2 without VNNI", False,
     "measured on an AMD EPYC: the original's products at batch 32 1.15-1.17x float32, and a 200-sentence "
     "'pyelmo embed' command, load included, 0.99x the exact one (batch 1 does pay: 4.0-5.5x)"),
    (("asimddp",), "arm with dot products", None, "qnnpack's kernels; not measured with pyelmo"),
)


def int8_outlook(flags: frozenset[str] | None = None, engine: str | None | bool = True) -> Int8Outlook:
    """:data:`RULE` applied to ``flags`` (default: this CPU's) and the quantized ``engine`` (default: this build's)."""
    flags = cpu_flags()[1] if flags is None else flags
    engine = int8_engine() if engine is True else engine
    if engine is None:
        return Int8Outlook("no int8 engine", False, "this PyTorch build has no quantized int8 CPU kernels")
    for names, cpu_class, expected, why in RULE:
        if flags.intersection(names):
            return Int8Outlook(cpu_class, expected, why)
    return Int8Outlook("other", None, f"no measurement for a CPU without AVX2 or VNNI (engine {engine})")
