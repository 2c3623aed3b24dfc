"""A/B of pyelmo's inference speed between source trees, side by side: CPU time per call, interleaved.

Each tree (``--src A --src B ...``: ``src/`` folders of revisions) runs in a worker process of
its own on the same random-weight model (``--config``, seed 0) and the same sentences; the
workers take turns, one round each, for ``--rounds`` rounds, and each reports the CPU time
(``time.process_time``) and wall time of its round. CPU time is the figure to compare on a
shared, loaded machine (wall time counts waiting for a core). Outputs of every tree are
compared with the first tree's (max abs difference).

Workloads: ``b1`` (``--sentences`` sentences of 20 tokens, one ``BiLM`` call each, the packed
strategy, no token cache), ``embed_sentence`` (the same through ``ElmoEmbedder.embed_sentence``
with its defaults, a fresh embedder each round) and ``bN`` (``make_sentences`` in batches of N).

    python benchmarks/embed_ab.py --src /tmp/base/src --src src --config small --workload b1 --threads 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def worker(config: str, workload: str, sentences: int, threads: int) -> None:
    import numpy as np
    import torch

    from embed_throughput import latency_sentences, make_sentences
    from pyelmo.modeling.bilm import BiLM
    from pyelmo.modeling.characters import batch_to_ids
    from pyelmo.config import preset
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.runtime.options import RunOptions

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = BiLM(preset(config)).eval()
    options = RunOptions.inference()
    if workload in ("b1", "embed_sentence"):
        batches = [[s] for s in latency_sentences(sentences, 20, seed=11)]
    else:
        size = int(workload[1:])
        text = make_sentences(sentences, seed=1000 + size)
        batches = [text[i : i + size] for i in range(0, len(text), size)]
    ids = [batch_to_ids(b) for b in batches]

    def run_round() -> list[np.ndarray]:
        if workload == "embed_sentence":
            embed = ElmoEmbedder(model).embed_sentence
            return [embed(b[0]) for b in batches]
        with torch.inference_mode():
            return [model(x, options=options).layers.numpy() for x in ids]

    out = sys.stdout
    sys.stdout = sys.stderr
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        cpu, wall = time.process_time(), time.perf_counter()
        arrays = run_round()
        answer = {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall}
        if cmd["op"] == "outputs":
            np.savez(cmd["path"], *arrays)
        out.write(json.dumps(answer) + "\n")
        out.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", action="append", required=True, help="a src/ folder (repeat: the sides)")
    parser.add_argument("--config", default="small")
    parser.add_argument("--workload", default="b1", help="b1, embed_sentence or bN (batches of N)")
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.config, args.workload, args.sentences, args.threads)
    import os

    import numpy as np

    procs = []
    for src in args.src:
        env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
        procs.append(subprocess.Popen([sys.executable, "-W", "ignore", __file__, "--worker", "--config", args.config,
                                       "--workload", args.workload, "--sentences", str(args.sentences),
                                       "--threads", str(args.threads), "--src", src],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env))

    def ask(p, **cmd) -> dict:
        p.stdin.write(json.dumps(cmd) + "\n")
        p.stdin.flush()
        return json.loads(p.stdout.readline())

    outputs = []
    for k, p in enumerate(procs):  # warm-up round, and the outputs
        path = f"/tmp/embed_ab_{os.getpid()}_{k}.npz"
        ask(p, op="outputs", path=path)
        outputs.append(path)
    samples = [[] for _ in procs]
    for _ in range(args.rounds):
        for k, p in enumerate(procs):
            samples[k].append(ask(p, op="time"))
    for p in procs:
        p.stdin.write(json.dumps({"op": "quit"}) + "\n")
        p.stdin.flush()
        p.wait()
    with np.load(outputs[0]) as first:
        base = [first[k] for k in first.files]
    print(f"{args.config} {args.workload}, {args.sentences} sentences, {args.threads} thread(s), {args.rounds} rounds, "
          f"load average {os.getloadavg()[0]:.1f}")
    ref_cpu = statistics.median(s["cpu"] for s in samples[0])
    for src, path, rounds in zip(args.src, outputs, samples):
        with np.load(path) as other:
            diff = max(float(np.abs(a - other[k]).max()) for a, k in zip(base, other.files))
        cpu = statistics.median(s["cpu"] for s in rounds)
        print(f"  {src}: CPU {cpu:.3f} s (min {min(s['cpu'] for s in rounds):.3f}), wall {statistics.median(s['wall'] for s in rounds):.3f} s, "
              f"{ref_cpu / cpu:.3f}x the first by CPU; max diff vs the first {diff:.2e}")
        Path(path).unlink()


if __name__ == "__main__":
    main()
