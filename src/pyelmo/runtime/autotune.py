"""Measured autotuning (opt-in: ``ExecutionPlan(kernels="autotune")``): which kernel runs each exact
float32 product, whether bfloat16 pays for each shape class, and how a level's two directions run,
timed on this machine at first use and kept in ``~/.cache/pyelmo/kernels/choices.json``, keyed by
the CPU and the PyTorch version. Every option computes the same function; only the order of float32
sums differs. The default plan never reads this cache.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import statistics
import time
from pathlib import Path
from typing import Callable, Protocol

import torch

from pyelmo.fileio import write_json_atomic
from pyelmo.paths import user_cache_dir
from pyelmo.runtime.kernels import Kernel
from pyelmo.runtime.plan import (DIRECTIONS, KERNELS, ExecutionPlan, cpu_flags, fixed_kernel, onednn_available,
                                 row_class)
from pyelmo.runtime.precision import DEFAULT, REGISTRY

#: The precisions autotune may measure: a reduced one (bfloat16) against exact float32 per shape class
#: (int8 is a rule of the plan, never measured).
PRECISIONS = tuple(p.name for p in REGISTRY.values() if p.autotune)
#: The values each kind of cached entry may hold, by the entry's first word (kernel entries: :data:`KERNELS`).
ENTRY_VALUES = {"precision": PRECISIONS, "directions": DIRECTIONS}
#: The rows each row class is measured at (the largest at 128 rows, to keep measuring cheap).
MEASURE_ROWS = {1: 1, 8: 8, 64: 64, 256: 128}
#: Timed calls per kernel and shape class: at least 2 and at most ``MEASURE_CALLS``; rounds stop
#: once ``MEASURE_SECONDS`` have passed. The fastest call counts (robust to a busy machine).
MEASURE_CALLS, MEASURE_SECONDS = 6, 0.03
#: Another option replaces the fixed rule's only if measured this much faster (near-ties are noise).
MEASURE_MARGIN = 0.1
#: Timed calls per option of a choice measured on the work at hand (:meth:`MeasuredChoices.trial`), after one warm-up.
TRIAL_CALLS = 3


def machine_key() -> dict[str, str]:
    """What a measured choice holds for: this CPU (model and a hash of its flags) and this PyTorch."""
    name, flags = cpu_flags()
    digest = hashlib.sha1(" ".join(sorted(flags)).encode()).hexdigest()[:12]
    return {"cpu": f"{name} [{digest}]", "torch": torch.__version__}


def kernel_cache_path() -> Path:
    """The measured choices: ``$PYELMO_KERNEL_CACHE/choices.json`` or ``~/.cache/pyelmo/kernels/choices.json``."""
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
        path = kernel_cache_path()
        merged = {**read_choices(path, self._key), **self._choices}  # keep what other processes measured
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, {**self._key, "choices": dict(sorted(merged.items()))})
        except OSError:
            pass


class MeasuredProducts(Protocol):
    """What measuring uses of the products it measures for (:class:`pyelmo.runtime.products.Products`, a
    module above this one): their kernels by name, the kernel each product runs with, their exact twin."""

    kernels: dict[str, Kernel]
    plan: ExecutionPlan

    @property
    def exact(self) -> MeasuredProducts: ...

    def kernel(self, x: torch.Tensor, w: torch.Tensor) -> str: ...


#: This process's measured choices.
MEASURED = MeasuredChoices()


def time_kernels(products: MeasuredProducts, rows: int, w: torch.Tensor) -> dict[str, float]:
    """Seconds of each available float32 kernel for ``rows`` rows times ``w.T`` on this machine, now.

    Each kernel runs on ``w`` itself (prepared for it, then dropped) and random inputs, in
    interleaved rounds after one warm-up round; each kernel's fastest call counts.
    """
    candidates = [k for k in KERNELS if k != "onednn" or onednn_available()]
    with torch.no_grad():
        x = torch.randn(rows, w.shape[1])
        prepared = {k: products.kernels[k].prepare(w) for k in candidates}
        return fastest_calls({k: functools.partial(products.kernels[k].run, x, prepared[k]) for k in candidates})


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


def measure_kernels(products: MeasuredProducts, rows: int, w: torch.Tensor) -> str:
    """The fastest float32 kernel for ``rows`` rows times ``w.T`` here (:func:`time_kernels`); the fixed
    rule's kernel unless another is at least ``MEASURE_MARGIN`` faster (near-ties are measuring noise)."""
    return choose_kernel(time_kernels(products, rows, w), rows, w)


def choose_kernel(seconds: dict[str, float], rows: int, w: torch.Tensor) -> str:
    """The kernel to keep given each kernel's ``seconds``: see :func:`measure_kernels`."""
    fastest, default = min(seconds, key=seconds.__getitem__), fixed_kernel(rows, tuple(w.shape), onednn_available())
    return fastest if seconds[fastest] < (1 - MEASURE_MARGIN) * seconds[default] else default


def time_precisions(products: MeasuredProducts, rows: int, w: torch.Tensor) -> dict[str, float]:
    """Seconds of ``rows`` rows times ``w.T`` in ``products``' bfloat16 mode and as exact float32 (through
    the float32 kernel :attr:`Products.exact` chooses), on ``w`` itself and random inputs (:func:`fastest_calls`)."""
    exact = products.exact
    with torch.no_grad():
        x = torch.randn(rows, w.shape[1])
        kernels = {products.plan.precision: products.kernels[products.kernel(x, w)],
                   DEFAULT.name: exact.kernels[exact.kernel(x, w)]}
        prepared = {k: kernel.prepare(w) for k, kernel in kernels.items()}
        return fastest_calls({k: functools.partial(kernels[k].run, x, prepared[k]) for k in kernels})


def kernel(products: MeasuredProducts, rows: int, w: torch.Tensor) -> str:
    """The float32 kernel for the row class ``rows`` times ``w.T``, as stored in :data:`MEASURED`, else
    :func:`measure_kernels`' answer, stored."""
    entry = f"threads={torch.get_num_threads()} rows={rows} weight={w.shape[0]}x{w.shape[1]}"
    return MEASURED.get(entry, lambda: measure_kernels(products, MEASURE_ROWS[rows], w))


def precision(products: MeasuredProducts, rows: int, w: torch.Tensor) -> str:
    """In ``products``' bfloat16 mode: ``"bfloat16"`` or ``"float32"`` for the row class ``rows`` times
    ``w.T``, as stored in :data:`MEASURED`, else :func:`measure_precision`'s answer, stored."""
    entry = f"precision threads={torch.get_num_threads()} rows={rows} weight={w.shape[0]}x{w.shape[1]}"
    return MEASURED.get(entry, lambda: measure_precision(products, MEASURE_ROWS[rows], w))


def measure_precision(products: MeasuredProducts, rows: int, w: torch.Tensor) -> str:
    """``"float32"`` if exact float32 runs ``rows`` rows times ``w.T`` at least ``MEASURE_MARGIN`` faster
    than the bfloat16 mode here (:func:`time_precisions`), else ``"bfloat16"``."""
    seconds, reduced = time_precisions(products, rows, w), products.plan.precision
    return DEFAULT.name if seconds[DEFAULT.name] < (1 - MEASURE_MARGIN) * seconds[reduced] else reduced


def directions(rows: int, lstm_shape: tuple[int, int, int], dtype: torch.dtype | None
               ) -> tuple[str, Callable[[float], None] | None]:
    """How the packed loop runs a level's two directions for a batch of ``rows`` rows: the stored
    order for the batch's row class, or (until there is one) the order this call should run and a
    function that takes its cost, timed on the calls themselves (:meth:`MeasuredChoices.trial`)."""
    return MEASURED.trial(directions_entry(rows, lstm_shape, dtype), DIRECTIONS)


def directions_entry(rows: int, lstm_shape: tuple[int, int, int], dtype: torch.dtype | None) -> str:
    """The cache entry of the directions' order for a batch of ``rows`` rows."""
    return (f"directions precision={str(dtype or torch.float32).removeprefix('torch.')} "
            f"threads={torch.get_num_threads()} rows={row_class(rows)} "
            f"lstm={lstm_shape[0]}x{lstm_shape[1]}x{lstm_shape[2]}")
