"""Training throughput: tokens/s and model-FLOPs utilisation (MFU) of `pyelmo train` steps.

MFU = useful training FLOPs per second / this machine's fp32 matmul rate, measured in the
same run: ``torch.mm`` (MKL) and oneDNN with a prepacked weight, each at a
2048^3 product and at the training step's own product shapes, best of each. Useful FLOPs
count the token encoder and the LSTMs on every real position (words + <S> + </S>, not
padding) and the sampled softmax on every prediction, times 3 for forward + backward.

Time is the process's CPU time (``--clock cpu``, the default): on a shared machine it counts
only the cycles this benchmark got, so ``tokens/s`` reads as tokens per CPU-second of
``--threads`` threads (1 by default; ``--clock wall`` for wall-clock time). Every variant
(``--products``) runs the same batches; rounds alternate the variants.

    python benchmarks/train_throughput.py [--data CORPUS_DIR] [--steps 5] [--configs small cpu-1h]
        [--products plain fused onednn] [--rounds 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from pyelmo.config import ElmoConfig

CONFIGS = {
    # the released "small" model's sizes, bilm-tf's softmax (8192 negatives)
    "small": {"preset": "small", "vocab": {"max_size": 50000}, "softmax": {"negatives": 8192},
              "data": {"batch_tokens": 4096}},
    # the configs/cpu-1h.toml model: trainable in about an hour on 2 CPU cores
    "cpu-1h": None,
}


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def matmul_rate(n: int = 2048, reps: int = 5, dtype: torch.dtype = torch.float32, m: int | None = None,
                k: int | None = None, library: str = "mkl", clock=time.perf_counter) -> float:
    """FLOP/s of ``(m x k) @ (k x n)`` (default ``n x n x n``) of ``dtype`` (best of ``reps``):
    ``torch.mm`` (``library="mkl"``) or oneDNN with the weight prepacked (``"onednn"``)."""
    m, k = m or n, k or n
    a, w = torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype)
    if library == "onednn":
        packed = torch.ops.mkldnn._reorder_linear_weight(w, 32)

        def product() -> torch.Tensor:
            return torch.ops.mkldnn._linear_pointwise(a, packed, None, "none", [], "")
    else:
        def product() -> torch.Tensor:
            return torch.mm(a, w.t())
    product()
    best = float("inf")
    for _ in range(reps):
        t = clock()
        product()
        best = min(best, clock() - t)
    return 2 * m * k * n / max(best, 1e-9)


def training_shapes(config: ElmoConfig, rows: int = 100, positions: int = 3000) -> list[tuple[int, int, int]]:
    """``(m, k, n)`` of a training step's main products: the LSTM's input-to-gate (all positions),
    recurrent, projection and their backward products (``rows`` per step), the highway layer."""
    c, l = config.char_cnn, config.lstm
    return [(positions, l.projection_dim, 4 * l.dim), (rows, l.projection_dim, 4 * l.dim),
            (rows, l.dim, l.projection_dim), (rows, 4 * l.dim, l.projection_dim), (4 * l.dim, rows, l.projection_dim),
            (positions // 2, c.n_filters, c.n_filters)]


def measured_rates(shapes: list[tuple[int, int, int]], clock) -> dict[str, dict[str, float]]:
    """FLOP/s of each library at 2048^3 and at each shape; ``best``: the highest of each library."""
    rates: dict[str, dict[str, float]] = {}
    for library in ("mkl", "onednn"):
        r = {"2048^3": matmul_rate(library=library, clock=clock)}
        for m, k, n in shapes:
            r[f"{m}x{k}x{n}"] = matmul_rate(n, reps=20, m=m, k=k, library=library, clock=clock)
        r["best"] = max(r.values())
        rates[library] = r
    return rates


def flops_per_position(config: ElmoConfig) -> float:
    """Forward FLOPs of the token encoder + both LSTM stacks for one sequence position."""
    c, l = config.char_cnn, config.lstm
    cnn = sum((c.max_characters_per_token - w + 1) * w * c.embedding_dim * n * 2 for w, n in c.filters)
    highway = c.n_highway * 2 * 2 * c.n_filters**2
    proj = 2 * c.n_filters * l.projection_dim
    lstm = 2 * l.n_layers * (2 * l.projection_dim * 4 * l.dim * 2 + 2 * l.dim * l.projection_dim)
    return cnn + highway + proj + lstm


def synthetic_corpus(root: Path, sentences: int = 4000, seed: int = 0) -> Path:
    """Zipf-distributed words in sentences of 5-45 tokens (mean ~ 23, like news text)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(60000)]
    weights = [1 / (i + 1) for i in range(len(words))]
    (root / "train").mkdir(parents=True, exist_ok=True)
    lines = [" ".join(rng.choices(words, weights, k=rng.randint(5, 45))) for _ in range(sentences)]
    (root / "train" / "synthetic.txt").write_text("\n".join(lines) + "\n")
    return root


class Run:
    """One config with one ``train.products`` setting: a trainer and its accumulated timings and losses."""

    def __init__(self, name: str, spec: dict, data: Path, workdir: Path) -> None:
        from pyelmo.training.config import config_from_dict
        from pyelmo.training.data import resolve_data
        from pyelmo.training.trainer import Trainer

        spec = json.loads(json.dumps(spec))
        spec.setdefault("train", {}).update({"eval_every": 0, "checkpoint_every": 0, "log_every": 1000})
        self.name = name
        self.trainer = Trainer(config_from_dict(spec), workdir / name, resolve_data(data, None, None), progress=False)
        self.batches = self.trainer.order.epoch_batches(0)
        config = self.trainer.model.bilm.config
        self.per_position = flops_per_position(config)
        negatives = self.trainer.config.softmax.negatives or self.trainer.model.vocab_size
        self.per_prediction = 2 * config.projection_dim * (negatives + 1)
        self.trainer.train_step(self.batches[0])  # warm-up
        self.tokens = self.flops = self.seconds = 0.0
        self.losses: list[float] = []  # of the timed steps

    def time_steps(self, first: int, steps: int, clock) -> None:
        """Steps ``first .. first + steps - 1`` (the same batches for every variant), timed by ``clock``."""
        lengths = self.trainer.train_text.lengths
        for i in range(first, first + steps):
            rows = self.batches[i % len(self.batches)]
            self.trainer.step = i
            start = clock()
            stats = self.trainer.train_step(rows)
            self.seconds += clock() - start
            self.losses.append(float(stats[0] + stats[1]) / (2 * float(stats[2])))
            n = float(lengths[rows].sum())
            self.tokens += n
            self.flops += 3 * (self.per_position * (n + 2 * len(rows)) + 2 * self.per_prediction * (n + len(rows)))

    def result(self) -> dict:
        t = self.trainer
        return {"run": self.name, "bilm_params_M": sum(p.numel() for p in t.model.bilm.parameters()) / 1e6,
                "vocab": t.model.vocab_size, "negatives": t.config.softmax.negatives,
                "batch_tokens": t.config.data.batch_tokens, "products": t.config.train.products,
                "tokens_per_s": self.tokens / self.seconds, "train_gflop_per_token": self.flops / self.tokens / 1e9,
                "gflop_per_s": self.flops / self.seconds / 1e9}


def config_file(name: str) -> Path:
    """The file of a config named ``name`` (``configs/NAME.toml``), or ``name`` itself if it is a file."""
    return Path(name) if Path(name).exists() else Path(__file__).parent.parent / "configs" / f"{name}.toml"


def config_spec(name: str) -> dict:
    """A benchmark config by name (``small``, ``cpu-1h``), a ``configs/NAME.toml`` or a config file."""
    if name in CONFIGS and CONFIGS[name] is not None:
        return CONFIGS[name]
    from pyelmo.training.config import read_config_file

    return read_config_file(config_file(name))


def main() -> None:
    from pyelmo.training.config import PRODUCTS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="corpus directory (default: a synthetic Zipfian corpus)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per config and round (after 1 warm-up)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds; each times every variant on the next steps")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), help="small, cpu-1h or .toml/.json files")
    parser.add_argument("--products", nargs="+", default=None, choices=PRODUCTS,
                        help="train.products variants to time side by side (default: each config's own)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--clock", choices=list(CLOCKS), default="cpu",
                        help="cpu: the process's CPU time (default; robust on a shared machine); wall: wall-clock")
    parser.add_argument("--bf16", action="store_true",
                        help="also time each config with bf16 autocast (train.bf16); its MFU is against the bf16 mm rate")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    clock = CLOCKS[args.clock]
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    print(f"# {cpu or platform.machine()}, {args.threads} thread(s), {args.clock} time, torch {torch.__version__}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    specs = {name: config_spec(name) for name in args.configs}
    results: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = Path(args.data) if args.data else synthetic_corpus(tmp / "corpus")
        for name, spec in specs.items():
            variants = []
            for products in args.products or [spec.get("train", {}).get("products", "fused")]:
                variants.append((f"{Path(name).stem}-{products}", {**spec, "train": {**spec.get("train", {}),
                                                                                     "products": products,
                                                                                     "threads": args.threads}}))
            if args.bf16:
                variants += [(f"{label}-bf16", {**v, "train": {**v["train"], "bf16": True}}) for label, v in variants]
            runs = [Run(label, variant, data, tmp) for label, variant in variants]
            rates = measured_rates(training_shapes(runs[0].trainer.model.bilm.config), clock)
            print(f"{name}: fp32 rates (GFLOP/s) " + "; ".join(
                f"{lib}: " + ", ".join(f"{shape} {r / 1e9:.1f}" for shape, r in lib_rates.items())
                for lib, lib_rates in rates.items()))
            bf16_rate = matmul_rate(dtype=torch.bfloat16, clock=clock) if args.bf16 else 0.0
            for round_ in range(args.rounds):
                for run in runs:
                    run.time_steps(1 + round_ * args.steps, args.steps, clock)
            for run in runs:
                r = run.result()
                r.update({"config": name, "rates_gflop_per_s": {lib: v["best"] / 1e9 for lib, v in rates.items()},
                          "steps": args.steps * args.rounds, "threads": args.threads, "clock": args.clock})
                if run.trainer.config.train.bf16:
                    r["mfu_bf16"] = r["gflop_per_s"] * 1e9 / bf16_rate
                for lib in ("mkl", "onednn"):
                    r[f"mfu_{lib}"] = r["gflop_per_s"] * 1e9 / rates[lib]["best"]
                results.append(r)
                bf16 = f", MFU {100 * r['mfu_bf16']:.1f}% of the bf16 mm rate" if "mfu_bf16" in r else ""
                print(f"{r['run']:>28}: {r['bilm_params_M']:.1f}M biLM params, vocab {r['vocab']}, "
                      f"{r['negatives']} negatives, {r['batch_tokens']} tokens/batch: "
                      f"{r['tokens_per_s']:.0f} tokens/s, {r['train_gflop_per_token'] * 1e3:.0f} MFLOP/token, "
                      f"{r['gflop_per_s']:.1f} GFLOP/s: MFU {100 * r['mfu_mkl']:.1f}% of the best torch.mm rate "
                      f"({r['rates_gflop_per_s']['mkl']:.1f}), {100 * r['mfu_onednn']:.1f}% of the best oneDNN rate "
                      f"({r['rates_gflop_per_s']['onednn']:.1f}){bf16}")
                sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
