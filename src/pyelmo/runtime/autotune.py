"""Which kernel runs each exact float32 product: measured on this machine, cached per CPU and PyTorch.

:class:`pyelmo.runtime.products.Products` asks :func:`kernel_policy` how to choose, :func:`fixed_kernel`
for the fixed rule, and :data:`MEASURED` (:func:`measure_kernels` at first use of a shape class)
for the measured choice, kept in ``~/.cache/pyelmo/kernels/choices.json`` keyed by
:func:`machine_key`. In the bfloat16 mode the same table holds, per shape class, whether
bfloat16 or exact float32 runs it faster here (:func:`measure_precision`); and, for the packed
strategy's time loop, whether a level's two directions run faster together or apart (:data:`DIRECTIONS`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from pyelmo.errors import ConfigError

if TYPE_CHECKING:
    from pyelmo.runtime.products import Products

#: Products of fewer multiply-adds (rows x weight size) run faster with plain ``torch.mm``:
#: oneDNN's per-call overhead dominates them (e.g. one row through the small model's projection).
ONEDNN_MIN_WORK = 2**18


def onednn_available() -> bool:
    """Whether this PyTorch build has oneDNN's prepacked-weight linear (x86 and arm CPU builds do)."""
    try:
        return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
                and hasattr(torch.ops.mkldnn, "_linear_pointwise"))
    except (AttributeError, RuntimeError):
        return False


# -- the runtime kernel choice --------------------------------------------------------------
#: The exact float32 product implementations: ``torch.mm`` on ``W`` as stored (a transposed
#: operand), ``torch.mm`` on a contiguous copy of ``W^T`` kept once, and oneDNN with ``W``
#: prepacked once into its blocked layout. Which is fastest depends on the CPU, the thread
#: count and the shape: on an AVX2 AMD EPYC oneDNN ran the LSTM's batch-32 products at 2-4x
#: ``torch.mm``, on an AMX Xeon it was no faster, and for one row ``torch.mm`` on ``W^T`` often wins.
KERNELS = ("mm", "mm_t", "onednn")
#: In the bfloat16 mode, each product's shape class runs in bfloat16 or, where that does not pay
#: here, as exact float32 (e.g. one row through a small projection, where the conversions and
#: oneDNN's per-call overhead cost more than the product): measured like the kernels.
PRECISIONS = ("bfloat16", "float32")
#: How the packed strategy's time loop runs a biLM level's two directions: in one loop (the gate
#: nonlinearities once over both, small step products batched) or one after the other (each
#: direction's weights stay in the cores' caches through its loop). The first is the fixed rule;
#: under ``auto`` the order is measured like the kernels (``pyelmo.runtime.options.directions``): on an
#: AMX Xeon one after the other ran the small model's batch-1 calls 1.18x and the original's
#: batch-32 calls 1.15x faster. Measured on the calls themselves (:meth:`MeasuredChoices.trial`).
DIRECTIONS = ("together", "apart")
#: The values each kind of cached entry may hold, by the entry's first word (kernel entries: :data:`KERNELS`).
ENTRY_VALUES = {"precision": PRECISIONS, "directions": DIRECTIONS}
#: How the kernels are chosen: measured here and cached (``auto``), the fixed rule, or one kernel for all.
KERNEL_POLICIES = ("auto", "fixed", *KERNELS)
#: The environment variable that sets the policy when none is passed (default ``auto``).
KERNELS_ENV = "PYELMO_KERNELS"
#: A product of ``rows`` rows belongs to the first class >= rows (the last class for more rows).
ROW_CLASSES = (1, 8, 64, 256)
#: The rows each class is measured at (the largest at 128 rows, to keep measuring cheap).
MEASURE_ROWS = {1: 1, 8: 8, 64: 64, 256: 128}
#: Timed calls per kernel and shape class: at least 2 and at most ``MEASURE_CALLS``; rounds stop
#: once ``MEASURE_SECONDS`` have passed. The fastest call counts (robust to a busy machine).
MEASURE_CALLS, MEASURE_SECONDS = 6, 0.03
#: Another kernel replaces the fixed rule's (:func:`fixed_kernel`) only if measured this much faster.
MEASURE_MARGIN = 0.1
#: Timed calls per option of a choice measured on the work at hand (:meth:`MeasuredChoices.trial`), after one warm-up.
TRIAL_CALLS = 3


def kernel_policy(name: str | None = None) -> str:
    """``name``, else ``$PYELMO_KERNELS``, else ``"auto"``; checked (:class:`ConfigError` if unknown)."""
    name = name or os.environ.get(KERNELS_ENV) or "auto"
    if name not in KERNEL_POLICIES:
        raise ConfigError(f"kernel policy must be one of {', '.join(KERNEL_POLICIES)} (${KERNELS_ENV}), got {name!r}")
    if name == "onednn" and not onednn_available():
        raise ConfigError("oneDNN kernels were asked for, but this PyTorch build has no oneDNN")
    return name


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """This CPU's model name and a short hash of its feature flags (e.g. ``AMD EPYC [3f2a...]``)."""
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
    name = name or platform.processor() or platform.machine() or "unknown CPU"
    return f"{name} [{hashlib.sha1(flags.encode()).hexdigest()[:12]}]" if flags else name


def machine_key() -> dict[str, str]:
    """What a measured choice holds for: this CPU and this PyTorch."""
    return {"cpu": cpu_model(), "torch": torch.__version__}


def kernel_cache_path() -> Path:
    """The measured choices: ``$PYELMO_KERNEL_CACHE/choices.json`` or ``~/.cache/pyelmo/kernels/choices.json``."""
    from pyelmo.paths import user_cache_dir

    return user_cache_dir("kernels", "PYELMO_KERNEL_CACHE") / "choices.json"


def read_choices(path: Path, key: dict[str, str]) -> dict[str, str]:
    """The choices stored at ``path`` for ``key``; none if the file is missing, unreadable,
    corrupt, or measured on another CPU or PyTorch."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or any(data.get(k) != v for k, v in key.items()):
        return {}
    choices = data.get("choices")
    if not isinstance(choices, dict):
        return {}
    return {k: v for k, v in choices.items() if v in ENTRY_VALUES.get(str(k).split(" ", 1)[0], KERNELS)}


class MeasuredChoices:
    """The measured kernel per shape class on this machine: once per process, kept on disk.

    Entries are keyed by thread count, row class and weight shape; the file also holds the
    :func:`machine_key`, and a file measured on another CPU or PyTorch is ignored and
    replaced. It is written atomically; if it cannot be written the choices hold for this
    process only.
    """

    def __init__(self) -> None:
        self._key: dict[str, str] | None = None
        self._choices: dict[str, str] = {}
        self._trials: dict[str, dict[str, list[float]]] = {}

    def lookup(self, entry: str) -> str | None:
        """The stored choice for ``entry``, if any."""
        key = machine_key()
        if key != self._key:
            self._key, self._choices = key, read_choices(kernel_cache_path(), key)
        return self._choices.get(entry)

    def get(self, entry: str, measure: Callable[[], str]) -> str:
        """The stored choice for ``entry``, else ``measure()``'s, stored."""
        chosen = self.lookup(entry)
        if chosen is None:
            chosen = self._choices[entry] = measure()
            self._save()
        return chosen

    def trial(self, entry: str, options: tuple[str, ...]) -> tuple[str, Callable[[float], None] | None]:
        """A choice measured on the work at hand: the stored choice for ``entry`` and ``None``, or,
        until there is one, the option this call should run and a function that takes its cost
        (seconds per unit of work). Calls take turns between ``options``; once each has
        ``TRIAL_CALLS + 1`` costs (the first is a warm-up), the one of least median cost is stored,
        the first option unless another is ``MEASURE_MARGIN`` cheaper. Every option must compute
        the same results: only their speed may differ."""
        chosen = self.lookup(entry)
        if chosen is not None:
            return chosen, None
        costs = self._trials.setdefault(entry, {option: [] for option in options})
        option = min(options, key=lambda o: len(costs[o]))

        def record(seconds: float) -> None:
            costs[option].append(seconds)
            if all(len(c) > TRIAL_CALLS for c in costs.values()) and self._trials.pop(entry, None) is not None:
                medians = {o: statistics.median(c[1:]) for o, c in costs.items()}
                fastest = min(medians, key=medians.__getitem__)
                self.get(entry, lambda: fastest if medians[fastest] < (1 - MEASURE_MARGIN) * medians[options[0]]
                         else options[0])
        return option, record

    def _save(self) -> None:
        from pyelmo.fileio import write_json_atomic

        path = kernel_cache_path()
        merged = {**read_choices(path, self._key), **self._choices}  # keep what other processes measured
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, {**self._key, "choices": dict(sorted(merged.items()))})
        except OSError:
            pass


#: This process's measured choices.
MEASURED = MeasuredChoices()


def row_class(rows: int) -> int:
    """The row class of a product of ``rows`` rows (see :data:`ROW_CLASSES`)."""
    for size in ROW_CLASSES:
        if rows <= size:
            return size
    return ROW_CLASSES[-1]


def time_kernels(products: Products, rows: int, w: torch.Tensor) -> dict[str, float]:
    """Seconds of each available float32 kernel for ``rows`` rows times ``w.T`` on this machine, now.

    Each kernel runs on ``w`` itself (prepared for it, then dropped) and random inputs, in
    interleaved rounds after one warm-up round; each kernel's fastest call counts.
    """
    candidates = [k for k in KERNELS if k != "onednn" or onednn_available()]
    with torch.no_grad():
        x = torch.randn(rows, w.shape[1])
        prepared = {k: products.prepare(w, k) for k in candidates}
        return fastest_calls({k: functools.partial(products.run, k, x, prepared[k]) for k in candidates})


def fastest_calls(calls: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Each call's fastest time in seconds: interleaved rounds after one warm-up round, at least 2 and
    at most ``MEASURE_CALLS`` timed, stopping once ``MEASURE_SECONDS`` have passed."""
    best = dict.fromkeys(calls, math.inf)
    start = time.perf_counter()
    for round_ in range(MEASURE_CALLS + 1):
        for name, call in calls.items():
            began = time.perf_counter()
            call()
            if round_:
                best[name] = min(best[name], time.perf_counter() - began)
        if round_ >= 2 and time.perf_counter() - start > MEASURE_SECONDS:
            break
    return best


def fixed_kernel(rows: int, w: torch.Tensor) -> str:
    """The fixed rule: oneDNN (when available) for products of at least ``ONEDNN_MIN_WORK`` multiply-adds."""
    return "onednn" if onednn_available() and rows * w.numel() >= ONEDNN_MIN_WORK else "mm"


def measure_kernels(products: Products, rows: int, w: torch.Tensor) -> str:
    """The fastest float32 kernel for ``rows`` rows times ``w.T`` here (:func:`time_kernels`); the fixed
    rule's kernel unless another is at least ``MEASURE_MARGIN`` faster (near-ties are measuring noise)."""
    return choose_kernel(time_kernels(products, rows, w), rows, w)


def choose_kernel(seconds: dict[str, float], rows: int, w: torch.Tensor) -> str:
    """The kernel to keep given each kernel's ``seconds``: see :func:`measure_kernels`."""
    fastest, default = min(seconds, key=seconds.__getitem__), fixed_kernel(rows, w)
    return fastest if seconds[fastest] < (1 - MEASURE_MARGIN) * seconds[default] else default


def time_precisions(products: Products, rows: int, w: torch.Tensor) -> dict[str, float]:
    """Seconds of ``rows`` rows times ``w.T`` in ``products``' bfloat16 mode and as exact float32 (through
    the float32 kernel :attr:`Products.exact` chooses), on ``w`` itself and random inputs (:func:`fastest_calls`)."""
    exact = products.exact
    with torch.no_grad():
        x = torch.randn(rows, w.shape[1])
        kernels = {"bfloat16": products.kernel(x, w), "float32": exact.kernel(x, w)}
        sides = {"bfloat16": products, "float32": exact}
        prepared = {k: sides[k].prepare(w, kernels[k]) for k in PRECISIONS}
        return fastest_calls({k: functools.partial(sides[k].run, kernels[k], x, prepared[k]) for k in PRECISIONS})


def precision(products: Products, rows: int, w: torch.Tensor) -> str:
    """In ``products``' bfloat16 mode: ``"bfloat16"`` or ``"float32"`` for the row class ``rows`` times
    ``w.T``, as stored in :data:`MEASURED`, else :func:`measure_precision`'s answer, stored."""
    entry = f"precision threads={torch.get_num_threads()} rows={rows} weight={w.shape[0]}x{w.shape[1]}"
    return MEASURED.get(entry, lambda: measure_precision(products, MEASURE_ROWS[rows], w))


def measure_precision(products: Products, rows: int, w: torch.Tensor) -> str:
    """``"float32"`` if exact float32 runs ``rows`` rows times ``w.T`` at least ``MEASURE_MARGIN`` faster
    than the bfloat16 mode here (:func:`time_precisions`), else ``"bfloat16"``."""
    seconds = time_precisions(products, rows, w)
    return "float32" if seconds["float32"] < (1 - MEASURE_MARGIN) * seconds["bfloat16"] else "bfloat16"
