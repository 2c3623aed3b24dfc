"""Training throughput: tokens/s and model-FLOPs utilisation (MFU) of `pyelmo train` steps.

MFU = useful training FLOPs per second / this machine's fp32 matmul rate, measured in the
same run by timing a large ``torch.mm``. Useful FLOPs count the token encoder and the
LSTMs on every real position (words + <S> + </S>, not padding) and the sampled softmax on
every prediction, times 3 for forward + backward.

    python benchmarks/train_throughput.py [--data CORPUS_DIR] [--steps 5] [--configs small cpu-1h]
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

import torch

from pyelmo.config import ElmoConfig
from pyelmo.training.config import config_from_dict
from pyelmo.training.trainer import Trainer, resolve_data

CONFIGS = {
    # the released "small" model's sizes, bilm-tf's softmax (8192 negatives)
    "small": {"preset": "small", "vocab": {"max_size": 50000}, "softmax": {"negatives": 8192},
              "data": {"batch_tokens": 4096}},
    # the configs/cpu-1h.toml model: trainable in about an hour on 2 CPU cores
    "cpu-1h": None,
}


def matmul_rate(n: int = 2048, reps: int = 5, dtype: torch.dtype = torch.float32) -> float:
    """FLOP/s of ``torch.mm`` on ``n x n`` matrices of ``dtype`` (best of ``reps``)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


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


def measure(name: str, spec: dict, data: Path, steps: int, peak: float, workdir: Path) -> dict:
    spec = json.loads(json.dumps(spec))
    spec.setdefault("train", {}).update({"eval_every": 0, "checkpoint_every": 0, "log_every": 1000})
    trainer = Trainer(config_from_dict(spec), workdir / name, resolve_data(data, None, None), progress=False)
    cfg, lengths = trainer.config, trainer.train_text.lengths
    batches = trainer.order.epoch_batches(0)
    per_position = flops_per_position(trainer.model.bilm.config)
    per_prediction = 2 * trainer.model.bilm.config.projection_dim * ((cfg.softmax.negatives or trainer.model.vocab_size) + 1)
    trainer.train_step(batches[0])  # warm-up
    tokens = flops = 0.0
    start = time.perf_counter()
    for i in range(1, steps + 1):
        rows = batches[i % len(batches)]
        trainer.step = i
        trainer.train_step(rows)
        n = float(lengths[rows].sum())
        tokens += n
        flops += 3 * (per_position * (n + 2 * len(rows)) + 2 * per_prediction * (n + len(rows)))
    seconds = time.perf_counter() - start
    params = sum(p.numel() for p in trainer.model.bilm.parameters())
    return {"config": name, "bilm_params_M": params / 1e6, "vocab": trainer.model.vocab_size,
            "negatives": cfg.softmax.negatives, "batch_tokens": cfg.data.batch_tokens, "steps": steps,
            "tokens_per_s": tokens / seconds, "train_gflop_per_token": flops / tokens / 1e9,
            "mfu": flops / seconds / peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="corpus directory (default: a synthetic Zipfian corpus)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per config (after 1 warm-up)")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), help="small, cpu-1h or .toml/.json files")
    parser.add_argument("--bf16", action="store_true",
                        help="also time each config with bf16 autocast (train.bf16); its MFU is against the bf16 mm rate")
    args = parser.parse_args()
    peak = matmul_rate()
    print(f"# {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"fp32 torch.mm rate: {peak / 1e9:.1f} GFLOP/s")
    peak_bf16 = matmul_rate(dtype=torch.bfloat16) if args.bf16 else 0.0
    if args.bf16:
        print(f"bf16 torch.mm rate: {peak_bf16 / 1e9:.1f} GFLOP/s")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = Path(args.data) if args.data else synthetic_corpus(tmp / "corpus")
        for name in args.configs:
            if name in CONFIGS and CONFIGS[name] is not None:
                spec = CONFIGS[name]
            else:
                from pyelmo.training.config import read_config_file

                path = Path(name) if Path(name).exists() else Path(__file__).parent.parent / "configs" / f"{name}.toml"
                spec = read_config_file(path)
            variants = [("fp32", spec, peak)]
            if args.bf16:
                variants.append(("bf16", {**spec, "train": {**spec.get("train", {}), "bf16": True}}, peak_bf16))
            for precision, variant, rate in variants:
                r = measure(f"{Path(name).stem}-{precision}", variant, data, args.steps, rate, tmp)
                print(f"{r['config']:>8}: {r['bilm_params_M']:.1f}M biLM params, vocab {r['vocab']}, "
                      f"{r['negatives']} negatives, {r['batch_tokens']} tokens/batch: "
                      f"{r['tokens_per_s']:.0f} tokens/s, {r['train_gflop_per_token'] * 1e3:.0f} MFLOP/token, "
                      f"MFU {100 * r['mfu']:.1f}% (of the {precision} mm rate)")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
