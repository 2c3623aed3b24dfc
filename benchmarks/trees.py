"""What the benchmarks that compare source trees side by side share (``embed_ab.py``, ``train_ab.py``,
``embed_throughput.py --base-src``).

- :func:`pyelmo_names`: pyelmo's names in the package layout (``pyelmo.modeling``, ``pyelmo.runtime``, ...)
  or, where a tree has none, in the flat layout before it (revision 8516ae2 and earlier);
- :func:`inference_options`: a tree's inference run options for a plan (``--plan``);
- :func:`tree_env`: a tree's worker environment: its ``src/`` alone on ``PYTHONPATH``, a fresh empty
  kernel-choice cache (``$PYELMO_KERNEL_CACHE``), so no tree reads choices that another measured,
  and no ``$PYELMO_KERNELS`` (the flat layout's kernel policy), so each tree runs its own default;
- :class:`TreeWorker` and :func:`serve`: one worker process per tree, one JSON command and one JSON
  answer per line (:class:`JsonWorker`: any such worker).
"""

from __future__ import annotations

import copy

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

#: Each name's module in the package layout, then in the flat layout.
MODULES = {
    "BiLM": ("pyelmo.modeling.bilm", "pyelmo.bilm"),
    "batch_to_ids": ("pyelmo.modeling.characters", "pyelmo.characters"),
    "preset": ("pyelmo.config", "pyelmo.config"),
    "ElmoEmbedder": ("pyelmo.embedding.embedder", "pyelmo.embed"),
    "RunOptions": ("pyelmo.runtime.options", "pyelmo.strategy"),
    "load_bilm_hdf5": ("pyelmo.modelio.weights", "pyelmo.weights"),
}
#: ``--plan``: the package layout's default plan (the fixed rule) or autotuning (trees before autotune was
#: removed). The flat layout has no plan: it runs its default, kernels measured here, whichever is asked.
PLANS = ("default", "autotune")


def pyelmo_names() -> SimpleNamespace:
    """The names of :data:`MODULES` from the pyelmo on ``sys.path``, ``layout`` (``"package"`` or ``"flat"``)
    and ``source``: the folder that pyelmo was imported from."""
    import pyelmo

    names, flat = {}, False
    for name, (current, old) in MODULES.items():
        try:
            module = importlib.import_module(current)
        except ImportError as exc:
            try:
                module, flat = importlib.import_module(old), True
            except ImportError:
                raise exc from None  # neither layout: the package layout's error is the one to read
        names[name] = getattr(module, name)
    source = str(Path(pyelmo.__file__).resolve().parent.parent)
    return SimpleNamespace(layout="flat" if flat else "package", source=source, **names)


def inference_options(names: SimpleNamespace, plan: str, **kwargs) -> tuple[object, str]:
    """``RunOptions.inference(**kwargs)`` under ``plan`` (:data:`PLANS`), and a line saying what runs."""
    if names.layout == "flat":
        return names.RunOptions.inference(**kwargs), "its default plan (kernels measured here)"
    options = names.RunOptions.inference(**embedder_options(names, plan), **kwargs)
    return options, options.plan.summary()


def run_model(model, options):
    """The model that runs ``options`` in this tree: a copy planned for inference options (what trees before
    ``pyelmo.runtime.planning`` made by themselves when run with them), else the model itself."""
    try:
        from pyelmo.runtime.planning import plan_model
    except ImportError:
        return model
    return plan_model(copy.deepcopy(model), options) if options.plan is not None else model


def embedder_options(names: SimpleNamespace, plan: str) -> dict:
    """``ElmoEmbedder`` keyword arguments for ``plan`` (none in the flat layout, which has no plan)."""
    return {"autotune": True} if names.layout == "package" and plan == "autotune" else {}


def tree_env(src: str, cache: Path) -> dict[str, str]:
    """The environment of a worker on the tree ``src`` (see the module docstring); ``cache`` is made, empty."""
    cache.mkdir(parents=True, exist_ok=False)
    env = {k: v for k, v in os.environ.items() if k != "PYELMO_KERNELS"}
    return {**env, "PYTHONPATH": str(Path(src).resolve()), "PYELMO_KERNEL_CACHE": str(cache)}


class JsonWorker:
    """A worker process (``argv``) that answers each JSON command line with one JSON line (:func:`serve`)."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None,
                 name: str = "") -> None:
        self.name = name or argv[-1]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=cwd)

    def ask(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker {self.name} died (exit {self.proc.wait()}); its error is above")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        self.proc.wait()


class TreeWorker(JsonWorker):
    """``script --worker ARGS`` on the tree ``src`` (:func:`tree_env`, kernel cache in ``cache``)."""

    def __init__(self, script: str, src: str, args: list[str], cache: Path) -> None:
        super().__init__([sys.executable, "-W", "ignore", script, "--worker", *args], tree_env(src, cache),
                         name=f"on {src}")
        self.src = str(Path(src).resolve())

    def describe(self) -> dict:
        """The worker's ``describe`` answer, checked: its pyelmo must be its tree's."""
        about = self.ask(op="describe")
        if about["source"] != self.src:
            raise RuntimeError(f"the worker on {self.src} imported pyelmo from {about['source']}")
        return about


def serve(handle: Callable[[dict], dict]) -> None:
    """A worker's loop: ``handle`` each JSON command on stdin until ``quit``, its answer one JSON line on
    stdout (library prints go to stderr, so they cannot corrupt the answers)."""
    out, sys.stdout = sys.stdout, sys.stderr
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        out.write(json.dumps(handle(cmd)) + "\n")
        out.flush()


def by_tree(srcs: list[str], samples: list[list[dict]]) -> dict[str, list[dict]]:
    """Every round of each tree, its workers' pooled (a tree given several times with ``--src`` runs in
    several worker processes: one process's speed varies with its placement, by up to ~12% at batch 1)."""
    pooled: dict[str, list[dict]] = {}
    for src, rounds in zip(srcs, samples):
        pooled.setdefault(src, []).extend(rounds)
    return pooled


def interleaved(workers: list[JsonWorker], rounds: int, **cmd) -> list[list[dict]]:
    """``rounds`` rounds of ``cmd``, the workers taking turns within each; each worker's answers."""
    samples: list[list[dict]] = [[] for _ in workers]
    for _ in range(rounds):
        for k, w in enumerate(workers):
            samples[k].append(w.ask(**cmd))
    return samples
