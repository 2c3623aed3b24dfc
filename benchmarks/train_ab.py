"""A/B of pyelmo's training speed between source trees, side by side: tokens per CPU-second of training steps.

Each tree (``--src A --src B ...``: ``src/`` folders of revisions, in the package layout or the flat
one before it) runs ``pyelmo.training``'s ``Trainer`` in a worker process of its own (``trees.py``),
on the same config (``--config``: ``train_throughput.py``'s ``small`` by default, the released small
model's sizes with bilm-tf's sampled softmax), the same synthetic corpus and the same seed, so every
tree trains the same batches from the same weights. After one warm-up step the workers take turns,
``--steps`` steps each per round, for ``--rounds`` rounds, timed as ``train_throughput.py`` times a
step; each reports the CPU time (``time.process_time``) and wall time of its round. CPU time is the
figure to compare on a shared, loaded machine. Each tree's losses are compared with the first
tree's (max abs difference over the timed steps): with ``--dropout 0`` the same math up to the order
of float32 sums; with dropout, revisions may draw the masks in another order.

A tree given more than once runs in as many workers, pooled per tree at the end.

    python benchmarks/train_ab.py --src /tmp/old/src --src src --config small --steps 3 --rounds 5
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
from train_throughput import CONFIGS, config_file  # noqa: E402
from trees import TreeWorker, by_tree, pyelmo_names, serve  # noqa: E402

PRODUCTS = ("plain", "fused", "onednn")  # train.products in both layouts


def worker(args: argparse.Namespace, workdir: Path) -> None:
    from train_throughput import Run, config_spec, synthetic_corpus

    spec = dict(config_spec(args.config))
    train = {**spec.get("train", {}), "threads": args.threads}
    for key in ("products", "dropout"):
        if getattr(args, key) is not None:
            train[key] = getattr(args, key)
    spec = {**spec, "train": train}
    if args.batch_tokens:
        spec["data"] = {**spec.get("data", {}), "batch_tokens": args.batch_tokens}
    run = Run("ab", spec, synthetic_corpus(workdir / "corpus"), workdir)
    names = pyelmo_names()

    def handle(cmd: dict) -> dict:
        if cmd["op"] == "describe":
            t = run.trainer.config
            return {"layout": names.layout, "source": names.source, "products": t.train.products,
                    "batch_tokens": t.data.batch_tokens, "threads": t.train.threads, "dropout": t.train.dropout,
                    "negatives": t.softmax.negatives, "vocab": run.trainer.model.vocab_size}
        tokens, cpu, losses = run.tokens, run.seconds, len(run.losses)
        wall = time.perf_counter()
        run.time_steps(cmd["first"], cmd["steps"], time.process_time)
        return {"cpu": run.seconds - cpu, "wall": time.perf_counter() - wall, "tokens": run.tokens - tokens,
                "losses": run.losses[losses:]}

    serve(handle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", action="append", default=[],
                        help="a src/ folder to run (repeat: the sides; the first is the reference)")
    parser.add_argument("--config", default="small",
                        help=f"{' or '.join(CONFIGS)} (train_throughput.py's), a configs/NAME.toml name "
                        "or a config file")
    parser.add_argument("--products", choices=PRODUCTS, help="train.products (default: the config's own)")
    parser.add_argument("--batch-tokens", type=int, help="data.batch_tokens (default: the config's own)")
    parser.add_argument("--dropout", type=float,
                        help="train.dropout (default: the config's own; 0 makes the losses comparable between trees)")
    parser.add_argument("--steps", type=int, default=3, help="timed training steps per tree and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; each tree runs the next --steps steps in each")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker (train.threads)")
    parser.add_argument("--worker", metavar="WORKDIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args, Path(args.worker))
    if not args.src:
        parser.error("give at least one --src")
    for src in args.src:
        if not (Path(src) / "pyelmo" / "__init__.py").is_file():
            parser.error(f"--src {src}: no pyelmo package there")
    if not (CONFIGS.get(args.config) or config_file(args.config).is_file()):
        parser.error(f"--config {args.config}: neither {' nor '.join(CONFIGS)} nor a config file")
    if min(args.steps, args.rounds, args.threads, args.batch_tokens or 1) < 1:
        parser.error("--steps, --rounds, --threads and --batch-tokens must be at least 1")
    if args.dropout is not None and not 0 <= args.dropout < 1:
        parser.error("--dropout must be in [0, 1)")

    flags = ["--config", args.config, "--threads", str(args.threads)]
    flags += ["--products", args.products] if args.products else []
    flags += ["--batch-tokens", str(args.batch_tokens)] if args.batch_tokens else []
    flags += ["--dropout", str(args.dropout)] if args.dropout is not None else []
    with tempfile.TemporaryDirectory(prefix="train-ab-") as tmp:
        workers = []
        try:
            for k, src in enumerate(args.src):
                (Path(tmp) / f"tree{k}" / "work").mkdir(parents=True)
                workers.append(TreeWorker(__file__, src, [str(Path(tmp) / f"tree{k}" / "work"), *flags],
                                          Path(tmp) / f"tree{k}" / "kernels"))
            described = [w.describe() for w in workers]
            samples = [[] for _ in workers]
            for r in range(args.rounds):  # the same steps (batches) for every tree in each round
                for k, w in enumerate(workers):
                    samples[k].append(w.ask(op="steps", first=1 + r * args.steps, steps=args.steps))
        except RuntimeError as exc:
            sys.exit(f"train_ab: {exc}")
        finally:
            for w in workers:
                w.close()
    first = described[0]
    print(f"training {args.config}: products {first['products']}, {first['batch_tokens']} tokens/batch, vocab "
          f"{first['vocab']}, {first['negatives']} negatives, dropout {first['dropout']}, {first['threads']} "
          f"thread(s); {args.rounds} rounds of {args.steps} steps after 1 warm-up step, "
          f"load average {os.getloadavg()[0]:.1f}")

    def rate(rounds: list[dict]) -> float:
        return sum(s["tokens"] for s in rounds) / sum(s["cpu"] for s in rounds)

    base_losses = [x for s in samples[0] for x in s["losses"]]
    for src, about, rounds in zip(args.src, described, samples):
        losses = [x for s in rounds for x in s["losses"]]
        diff = max(abs(a - b) for a, b in zip(base_losses, losses))
        ratios = [(a["tokens"] / a["cpu"]) / (b["tokens"] / b["cpu"]) for a, b in zip(rounds, samples[0])]
        print(f"  {src} ({about['layout']} layout): {rate(rounds):.0f} tokens/CPU-s "
              f"({rate(rounds) / rate(samples[0]):.3f}x the first; median round {statistics.median(ratios):.3f}x), "
              f"CPU {statistics.median(s['cpu'] for s in rounds):.2f} s / wall "
              f"{statistics.median(s['wall'] for s in rounds):.2f} s per round (median); last loss {losses[-1]:.4f}, "
              f"max loss diff vs the first {diff:.2e}")
    pooled = by_tree(args.src, samples)
    if len(pooled) < len(args.src):  # a tree given several times: its workers' rounds together
        print("  pooled per tree:")
        for src, rounds in pooled.items():
            print(f"    {src}: {rate(rounds):.0f} tokens/CPU-s over {len(rounds)} rounds, "
                  f"{rate(rounds) / rate(pooled[args.src[0]]):.3f}x the first")


if __name__ == "__main__":
    main()
