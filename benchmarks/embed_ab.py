"""A/B of pyelmo's inference speed between source trees, side by side: CPU time per round, interleaved.

Each tree (``--src A --src B ...``: ``src/`` folders of revisions, in the package layout or the flat
one before it) runs in a worker process of its own (``trees.py``: a fresh, empty kernel-choice cache
each) on the same random-weight model (``--config``, seed 0) and the same sentences; after
``--warmup`` rounds (the first also writes the outputs) the workers take turns, one round each, for
``--rounds`` rounds, and each reports the CPU time (``time.process_time``) and wall time of its
round. CPU time is the figure to compare on a shared, loaded machine (wall time counts waiting for
a core). Outputs of every tree are compared with the first tree's (max abs difference).

Workloads: ``b1`` (``--sentences`` sentences of 20 tokens, one ``BiLM`` call each, the inference run
options, no token cache), ``embed_sentence`` (the same through ``ElmoEmbedder.embed_sentence`` with
its defaults, a fresh embedder each round) and ``bN`` (``make_sentences`` in batches of N).
``--plan`` sets the package layout's execution plan and ``--precision int8`` its int8 mode; a flat-layout
tree runs its own default.

A tree given more than once runs in as many workers, and a last table pools each tree's rounds (one
worker process's speed varies with its placement: compare trees over several workers each).

    python benchmarks/embed_ab.py --src /tmp/old/src --src src --config small --workload b1 --threads 1
    python benchmarks/embed_ab.py --src /tmp/old/src --src src --src /tmp/old/src --src src --workload b1
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trees import (PLANS, TreeWorker, by_tree, embedder_options, inference_options, interleaved, run_model,  # noqa: E402
                   pyelmo_names, serve)


def worker(config: str, workload: str, sentences: int, threads: int, plan: str, precision: str) -> None:
    import numpy as np
    import torch

    from embed_throughput import latency_sentences, make_sentences

    names = pyelmo_names()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = names.BiLM(names.preset(config)).eval()
    options, described = inference_options(names, plan, **({} if precision == "float32" else {"precision": precision}))
    if workload in ("b1", "embed_sentence"):
        batches = [[s] for s in latency_sentences(sentences, 20, seed=11)]
    else:
        size = int(workload[1:])
        text = make_sentences(sentences, seed=1000 + size)
        batches = [text[i : i + size] for i in range(0, len(text), size)]
    ids = [names.batch_to_ids(b) for b in batches]
    runner = run_model(model, options)

    def run_round() -> list[np.ndarray]:
        if workload == "embed_sentence":
            embed = names.ElmoEmbedder(model, **embedder_options(names, plan)).embed_sentence
            return [embed(b[0]) for b in batches]
        with torch.inference_mode():
            return [runner(x, options=options).layers.numpy() for x in ids]

    def handle(cmd: dict) -> dict:
        if cmd["op"] == "describe":
            return {"layout": names.layout, "source": names.source, "plan": described}
        cpu, wall = time.process_time(), time.perf_counter()
        arrays = run_round()
        answer = {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall}
        if cmd["op"] == "outputs":
            np.savez(cmd["path"], *arrays)
        return answer

    serve(handle)


def workload_name(value: str) -> str:
    if value in ("b1", "embed_sentence") or (value[:1] == "b" and value[1:].isdigit() and int(value[1:]) > 0):
        return value
    raise argparse.ArgumentTypeError(f"expected b1, embed_sentence or bN (N >= 1), got {value!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", action="append", default=[],
                        help="a src/ folder to run (repeat: the sides; the first is the reference)")
    parser.add_argument("--config", default="small", choices=("small", "medium", "original"),
                        help="model size (random weights)")
    parser.add_argument("--workload", default="b1", type=workload_name, help="b1, embed_sentence or bN (batches of N)")
    parser.add_argument("--sentences", type=int, default=32, help="sentences per round")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per tree")
    parser.add_argument("--warmup", type=int, default=2,
                        help="untimed rounds per tree first (autotuning measures in them)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    parser.add_argument("--plan", choices=PLANS, default="default",
                        help="the package layout's execution plan: its default (the fixed rule) or autotune (older trees)")
    parser.add_argument("--precision", choices=("float32", "int8"), default="float32",
                        help="the package layout's precision (int8: each tree's int8 mode; default exact float32)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.config, args.workload, args.sentences, args.threads, args.plan, args.precision)
    if not args.src:
        parser.error("give at least one --src")
    for src in args.src:
        if not (Path(src) / "pyelmo" / "__init__.py").is_file():
            parser.error(f"--src {src}: no pyelmo package there")
    if min(args.sentences, args.rounds, args.warmup, args.threads) < 1:
        parser.error("--sentences, --rounds, --warmup and --threads must be at least 1")
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="embed-ab-") as tmp:
        flags = ["--config", args.config, "--workload", args.workload, "--sentences", str(args.sentences),
                 "--threads", str(args.threads), "--plan", args.plan, "--precision", args.precision]
        workers = [TreeWorker(__file__, src, flags, Path(tmp) / f"tree{k}" / "kernels")
                   for k, src in enumerate(args.src)]
        try:
            described = [w.describe() for w in workers]
            outputs = [str(Path(tmp) / f"tree{k}.npz") for k in range(len(workers))]
            for k, w in enumerate(workers):  # the first warm-up round writes the outputs
                w.ask(op="outputs", path=outputs[k])
            interleaved(workers, args.warmup - 1, op="time")
            samples = interleaved(workers, args.rounds, op="time")
        except RuntimeError as exc:
            sys.exit(f"embed_ab: {exc}")
        finally:
            for w in workers:
                w.close()
        with np.load(outputs[0]) as first:
            base = [first[k] for k in first.files]
        print(f"{args.config} {args.workload}, {args.sentences} sentences, {args.threads} thread(s), plan {args.plan}, "
              f"{args.warmup} warm-up + {args.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
        ref_cpu = statistics.median(s["cpu"] for s in samples[0])
        for src, about, path, rounds in zip(args.src, described, outputs, samples):
            with np.load(path) as other:
                diff = max(float(np.abs(a - other[k]).max()) for a, k in zip(base, other.files))
            cpu = statistics.median(s["cpu"] for s in rounds)
            print(f"  {src} ({about['layout']} layout; {about['plan']}):\n"
                  f"    CPU {cpu:.3f} s (min {min(s['cpu'] for s in rounds):.3f}), wall "
                  f"{statistics.median(s['wall'] for s in rounds):.3f} s, {ref_cpu / cpu:.3f}x the first by CPU; "
                  f"max diff vs the first {diff:.2e}")
        pooled = by_tree(args.src, samples)
        if len(pooled) < len(args.src):
            first_cpu = statistics.median(s["cpu"] for s in pooled[args.src[0]])
            print("  pooled per tree (all its workers' rounds):")
            for src, rounds in pooled.items():
                cpu = statistics.median(s["cpu"] for s in rounds)
                print(f"    {src}: CPU {cpu:.3f} s median of {len(rounds)} rounds, {first_cpu / cpu:.3f}x the first")


if __name__ == "__main__":
    main()
