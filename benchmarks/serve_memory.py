"""Resident memory of ``pyelmo serve`` after one ``/v1/embed`` and one ``/v1/predict`` request.

For each round, precision and source tree in turn (alternating), starts ``python -m pyelmo serve --model
MODEL --port PORT --precision P`` with ``PYTHONPATH=TREE/src`` on 127.0.0.1, waits for ``/health``, sends
one embed and one predict request, then reads ``VmRSS`` and ``VmHWM`` (the peak) from
``/proc/PID/status`` (and ``VmRSS`` once healthy, before the requests: ``loaded_VmRSS``) and stops the server. Prints the medians per tree and precision (MB = 2**20 bytes).

    python benchmarks/serve_memory.py --tree before=/work/base98 --tree after=. --rounds 3 --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

EMBED = {"sentences": ["We sat on the bank of the river ."]}
PREDICT = {"sentence": "We sat on the ___ of the river .", "k": 5}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, path: str, body: dict, timeout: float) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        answer.read()
        return answer.status


def wait_healthy(port: int, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"no healthy server on port {port} within {timeout} s")


def memory_mb(pid: int) -> dict[str, float]:
    """``VmRSS`` and ``VmHWM`` of process ``pid`` in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024  # kB -> MB
    return fields


KEYS = ("VmRSS", "VmHWM", "loaded_VmRSS")


def measure(tree: Path, model: str, precision: str, python: str, timeout: float) -> dict[str, float]:
    """One server of ``tree`` at ``precision``: its memory after an embed and a predict request."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(tree.resolve() / "src")}
    command = [python, "-m", "pyelmo", "serve", "--model", model, "--port", str(port), "--precision", precision,
               "--log-level", "warning"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_healthy(port, process, timeout)
        loaded = memory_mb(process.pid)["VmRSS"]  # before any request
        for path, body in (("/v1/embed", EMBED), ("/v1/predict", PREDICT)):
            if post(port, path, body, timeout) != 200:
                raise RuntimeError(f"{path} failed")
        return {**memory_mb(process.pid), "loaded_VmRSS": loaded}
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", metavar="LABEL=DIR",
                        help="a source tree to measure (DIR/src on PYTHONPATH); repeat (default: this=.)")
    parser.add_argument("--model", default="english", help="model to serve (default english)")
    parser.add_argument("--precision", default="float32,int8", help="comma-separated (default float32,int8)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs the servers")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per server start and request")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    trees = {}
    for item in args.tree or ["this=."]:
        label, sep, folder = item.partition("=")
        if not sep or not (Path(folder) / "src" / "pyelmo").is_dir():
            parser.error(f"--tree takes LABEL=DIR with DIR/src/pyelmo, got {item!r}")
        trees[label] = Path(folder)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    precisions = args.precision.split(",")
    runs: dict[str, dict[str, list[dict[str, float]]]] = {p: {label: [] for label in trees} for p in precisions}
    for _ in range(args.rounds):
        for precision in precisions:
            for label, tree in trees.items():
                runs[precision][label].append(measure(tree, args.model, precision, args.python, args.timeout))
    medians = {p: {label: {key: round(statistics.median(r[key] for r in rs), 1) for key in KEYS}
                   for label, rs in by_tree.items()} for p, by_tree in runs.items()}
    report = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": cpu_model(),
              "command": " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
              "model": args.model, "rounds": args.rounds, "trees": {k: str(v) for k, v in trees.items()},
              "median_mb": medians, "runs_mb": runs}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for precision, by_tree in medians.items():
            for label, m in by_tree.items():
                print(f"{precision:8} {label:10} VmRSS {m['VmRSS']:8.1f} MB  VmHWM {m['VmHWM']:8.1f} MB  "
                      f"(loaded, before the requests: VmRSS {m['loaded_VmRSS']:8.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
