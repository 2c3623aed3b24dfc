"""Whole ``pyelmo embed`` commands side by side: arms (a source tree and the command's flags) run in fresh
processes, taking turns, round after round (every other round in the reverse order); the median wall and CPU time (all threads) of each arm, and each
arm's time over the first arm's. On a shared machine CPU time is the steadier figure.

    python benchmarks/command_ab.py --model english --sentences 200 --rounds 5 \\
        --arm "int8 warm cache=src:--precision int8 --int8-cache" --arm "int8 no cache=src:--precision int8"

An arm is ``NAME=SRC:FLAGS``: ``SRC`` the ``src/`` folder put alone on ``PYTHONPATH`` (e.g. a ``git archive``
of another revision), ``FLAGS`` what ``pyelmo embed`` gets besides the input, output, ``--model`` and
``--no-progress``. Two workloads, each a fresh process per run:

- ``embed``: ``python -m pyelmo embed`` of ``--sentences`` sentences (``embed_throughput.make_sentences``),
  the process's whole wall time, start-up and load included;
- ``load``: in a fresh process, the wall time from before ``ElmoEmbedder(model, **settings)`` (the settings
  the flags give through the tree's own command line) to the first vectors of one sentence.

``--model``: a model argument (``english``, a folder) or ``original`` / ``small``: a random biLM of that preset
(seed 0) saved as a pyelmo folder first. ``$PYELMO_INT8_CACHE`` is a fresh folder of this run; before the rounds
every arm runs once (a warm-up that fills whatever cache an arm keeps). The load average is printed before and
after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

LOAD = """
import json, sys, time
from pyelmo.cli import build_parser
from pyelmo.cli.common import plan_settings
from pyelmo.embedding.embedder import ElmoEmbedder
settings = plan_settings(build_parser().parse_args(["embed", "in", "out", *json.loads(sys.argv[2])]))
start, cpu = time.perf_counter(), time.process_time()
ElmoEmbedder(sys.argv[1], **settings).embed_sentences([["The", "bank", "raised", "its", "rates", "."]])
print(json.dumps([time.perf_counter() - start, time.process_time() - cpu]))
"""


def random_model(preset_name: str, folder: Path) -> Path:
    import torch

    from pyelmo.config import preset
    from pyelmo.modeling.bilm import BiLM
    from pyelmo.modelio.weights import save_pretrained

    torch.manual_seed(0)
    save_pretrained(BiLM(preset(preset_name)).eval(), folder)
    return folder


def parse_arm(text: str) -> tuple[str, Path, list[str]]:
    name, _, rest = text.partition("=")
    src, _, flags = rest.partition(":")
    if not name or not src:
        raise SystemExit(f"--arm {text!r}: expected NAME=SRC:FLAGS")
    return name, Path(src).resolve(), flags.split()


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(workload: str, src: Path, flags: list[str], model: str, text: Path, out: Path,
             env: dict) -> tuple[float, float]:
    """Wall and CPU seconds (every thread's) of one run."""
    env = {**env, "PYTHONPATH": str(src)}
    if workload == "load":
        done = subprocess.run([sys.executable, "-c", LOAD, model, json.dumps(flags)], env=env, check=True,
                              capture_output=True, text=True)
        return tuple(json.loads(done.stdout.strip().splitlines()[-1]))
    start, cpu = time.perf_counter(), children_cpu()
    subprocess.run([sys.executable, "-m", "pyelmo", "embed", str(text), str(out), "--model", model, "--no-progress",
                    "--overwrite", *flags], env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start, children_cpu() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="english")
    parser.add_argument("--arm", action="append", required=True, help="NAME=SRC:FLAGS (at least two)")
    parser.add_argument("--workload", choices=("embed", "load"), action="append",
                        help="embed, load or both (the default)")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    arms = [parse_arm(a) for a in args.arm]
    workloads = args.workload or ["load", "embed"]
    sys.path.insert(0, str(HERE))
    from embed_throughput import make_sentences

    result = {"load average before": os.getloadavg(), "model": args.model, "seconds": {}, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        env = {**os.environ, "PYELMO_INT8_CACHE": str(tmp / "int8")}
        model = str(random_model(args.model, tmp / args.model)) if args.model in ("original", "small") else args.model
        text = tmp / "sentences.txt"
        text.write_text("\n".join(" ".join(s) for s in make_sentences(args.sentences, seed=0)) + "\n", encoding="utf-8")
        for workload in workloads:
            runs = {name: [] for name, _, _ in arms}
            for name, src, flags in arms:  # warm-up: fills the arm's cache, if it keeps one
                run_once(workload, src, flags, model, text, tmp / "out.h5", env)
            for round_ in range(args.rounds):  # every other round in the reverse order
                for name, src, flags in (arms if round_ % 2 == 0 else arms[::-1]):
                    runs[name].append(run_once(workload, src, flags, model, text, tmp / "out.h5", env))
                    print(f"{workload} round {round_}: {name}: wall {runs[name][-1][0]:.3f} s, cpu "
                          f"{runs[name][-1][1]:.3f} s", file=sys.stderr, flush=True)
            result["runs"][workload] = runs
            rows = result["seconds"][workload] = {}
            for i, what in enumerate(("wall", "cpu")):
                medians = {name: statistics.median(t[i] for t in times) for name, times in runs.items()}
                for name, m in medians.items():
                    rows.setdefault(name, {})[what] = {"median": m, "over first": m / medians[arms[0][0]]}
    result["load average after"] = os.getloadavg()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"model {args.model}, {args.rounds} rounds, load average before {result['load average before']}, "
          f"after {result['load average after']}")
    for workload, rows in result["seconds"].items():
        what = f"pyelmo embed, {args.sentences} sentences" if workload == "embed" else "load to first vectors"
        for name, row in rows.items():
            for i, kind in enumerate(("wall", "cpu")):
                runs = " ".join(f"{t[i]:.2f}" for t in result["runs"][workload][name])
                print(f"{what:32} {name:24} {kind:4} median {row[kind]['median']:7.3f} s  "
                      f"{row[kind]['over first']:.3f}x  [{runs}]")


if __name__ == "__main__":
    main()
