"""The prepared GPU check (issue 17, item 5): one command for a session that is lent a GPU.

    PYTHONPATH=src python3 benchmarks/gpu_check.py --out $OUT/gpu_check.json

1. **Exact outputs**: the same random-weight biLM (``--configs``, presets) embeds the same
   sentences on the CPU and on ``--device``, float32 with TF32 off; the largest difference of
   any layer (the tests' bound is 1e-5).
2. **Embed throughput** on ``--device`` at each ``--batch-sizes`` (tokens/s after a warm-up,
   ``ElmoEmbedder.embed_batch``), exact float32 and ``precision="bfloat16"``, with bf16's largest
   difference from exact.
3. **Training**: ``pyelmo train`` for ``--train-steps`` steps on ``--device`` with ``--bf16``
   (autocast) on text made here (``configs/english-v2.toml``'s model); its tokens/s and whether the
   loss is finite and falling.

Prints one line per measurement and writes all of it as JSON (``--out``). ``--device cpu``
runs the same code without a GPU (``tests/project/test_gpu_check.py``). Needs ``h5py``, ``numpy`` and
``safetensors`` (in the device image); run from the repository root.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from embed_throughput import make_sentences, write_model  # noqa: E402


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def machine(device_name: str) -> dict:
    import torch

    info = {"torch": torch.__version__, "device": device_name, "cuda_available": torch.cuda.is_available()}
    if device_name.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device_name))
    return info


def exact_outputs(config: str, device_name: str, workdir: Path, n: int) -> dict:
    """Largest |CPU - device| over all layers of ``n`` sentences, float32, TF32 off."""
    import numpy as np
    import torch

    from pyelmo import ElmoEmbedder

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    options, weights = write_model(config, workdir)
    sentences = make_sentences(n, seed=1)
    cpu = ElmoEmbedder(options, weights, device="cpu").embed_batch(sentences)
    dev = ElmoEmbedder(options, weights, device=device_name).embed_batch(sentences)
    diff = max(float(np.abs(a - b).max(initial=0.0)) for a, b in zip(cpu, dev))
    return {"config": config, "sentences": n, "max_abs_diff": diff, "within_1e-5": diff <= 1e-5}


def throughput(config: str, device_name: str, workdir: Path, batch_size: int, batches: int) -> dict:
    """Tokens/s of ``embed_batch`` on ``batches`` batches (after one warm-up batch), exact and bf16."""
    import numpy as np

    from pyelmo import ElmoEmbedder

    options, weights = write_model(config, workdir)
    sentences = make_sentences(batch_size * (batches + 1), seed=2)
    row: dict = {"config": config, "batch_size": batch_size}
    outputs = {}
    for mode, bf16 in (("exact", False), ("bf16", True)):
        embedder = ElmoEmbedder(options, weights, device=device_name, batch_size=batch_size,
                                precision="bfloat16" if bf16 else None)
        _sync(embedder.device)
        embedder.embed_batch(sentences[:batch_size])  # warm-up (kernel choice, caches)
        _sync(embedder.device)
        start, tokens, out = time.perf_counter(), 0, []
        for i in range(1, batches + 1):
            batch = sentences[i * batch_size:(i + 1) * batch_size]
            out += embedder.embed_batch(batch)
            tokens += sum(len(s) for s in batch)
        _sync(embedder.device)
        row[f"{mode}_tokens_per_s"] = round(tokens / (time.perf_counter() - start), 1)
        outputs[mode] = out
    row["bf16_max_abs_diff"] = max(float(np.abs(a - b).max(initial=0.0))
                                   for a, b in zip(outputs["exact"], outputs["bf16"]))
    row["bf16_speedup"] = round(row["bf16_tokens_per_s"] / row["exact_tokens_per_s"], 2)
    return row


def training(device_name: str, workdir: Path, steps: int, batch_tokens: int, config: str) -> dict:
    """``pyelmo train --device D --bf16`` for ``steps`` steps on made-up text; tokens/s and the losses."""
    text = workdir / "text"
    for split, n in (("train", 4000), ("valid", 50)):
        (text / split).mkdir(parents=True, exist_ok=True)
        lines = (" ".join(s) for s in make_sentences(n, seed=3 if split == "train" else 4, vocab_size=5000))
        (text / split / "part.txt").write_text("\n".join(lines) + "\n")
    out = workdir / "run"
    command = [sys.executable, "-m", "pyelmo", "train", "--config", config, "--data", str(text),
               "--out", str(out), "--overwrite", "--device", device_name.split(":")[0], "--bf16",
               "--max-steps", str(steps), "--batch-tokens", str(batch_tokens), "--no-progress",
               "--set", "train.log_every=1", "--set", f"train.eval_every={steps}",
               "--set", f"train.checkpoint_every={steps}", "--set", f"optim.warmup_steps={max(1, steps // 10)}"]
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    row = {"command": " ".join(command[1:]), "returncode": proc.returncode,
           "wall_s": round(time.perf_counter() - started, 1)}
    if proc.returncode != 0:
        row["error"] = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
        return row
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    losses = [r["loss"] for r in logs]
    row.update(steps=len(logs), first_loss=losses[0], last_loss=losses[-1],
               finite=all(math.isfinite(x) for x in losses), falling=losses[-1] < losses[0],
               tokens_per_s=logs[-1].get("tokens_per_s"))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="torch device to check against the CPU (default cuda)")
    parser.add_argument("--configs", default="small,original", help="presets to check (comma-separated)")
    parser.add_argument("--exact-sentences", type=int, default=64)
    parser.add_argument("--batch-sizes", default="32,256", help="embed throughput batch sizes")
    parser.add_argument("--batches", type=int, default=8, help="timed batches per throughput row")
    parser.add_argument("--train-steps", type=int, default=50, help="0 skips the training check")
    parser.add_argument("--train-batch-tokens", type=int, default=32768)
    parser.add_argument("--train-config", default="configs/english-v2.toml")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    results: dict = {"machine": machine(args.device), "exact": [], "throughput": [], "training": None}
    print(json.dumps(results["machine"]), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for config in args.configs.split(","):
            results["exact"].append(exact_outputs(config, args.device, work, args.exact_sentences))
            print("exact", json.dumps(results["exact"][-1]), flush=True)
            for batch_size in (int(b) for b in args.batch_sizes.split(",")):
                results["throughput"].append(throughput(config, args.device, work, batch_size, args.batches))
                print("throughput", json.dumps(results["throughput"][-1]), flush=True)
        if args.train_steps:
            results["training"] = training(args.device, work, args.train_steps, args.train_batch_tokens,
                                           args.train_config)
            print("training", json.dumps(results["training"]), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    ok = all(r["within_1e-5"] for r in results["exact"]) and (
        results["training"] is None or (results["training"]["returncode"] == 0 and results["training"]["finite"]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
