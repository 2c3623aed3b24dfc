"""The prepared GPU check (issues 17 and 49): one command for a session that is lent a GPU.

    PYTHONPATH=src python3 benchmarks/gpu_check.py --out $OUT/gpu_check.json

1. **Exact outputs**: the same random-weight biLM (``--configs``, presets) embeds the same
   sentences on the CPU and on ``--device``, float32 with TF32 off; the largest difference of
   any layer (the tests' bound is 1e-5).
2. **Embed throughput** on ``--device`` at each ``--batch-sizes`` (issue 49): the same batches in every mode
   of :data:`MODES`, in one call: eager steps, the steps as CUDA graphs (``steps="graphs"``; the fixed
   buffers run eagerly on a CPU), graphs with TF32, graphs with ``precision="bfloat16"``, and eager again
   (the baseline rerun). Per mode: tokens/s of a second pass over the batches (the first captures the
   graphs), the first pass's, the largest difference from the CPU's exact vectors (``--diff-sentences``),
   the captures and their time, the device's peak memory; the speed of each graphs mode over eager.
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


#: The throughput modes, each timed in the same call: ``(name, steps, precision, tf32)``; the eager baseline runs
#: first and again last (the device's drift between them shows in the two).
MODES = (("eager", "eager", None, False), ("graphs", "graphs", None, False), ("graphs_tf32", "graphs", None, True),
         ("graphs_bf16", "graphs", "bfloat16", False), ("eager_again", "eager", None, False))


def cpu_reference(config: str, workdir: Path, sentences: list) -> list:
    """The exact CPU vectors of ``sentences`` (what every mode's difference is taken from)."""
    from pyelmo import ElmoEmbedder

    options, weights = write_model(config, workdir)
    return ElmoEmbedder(options, weights, device="cpu").embed_batch(sentences)


def timed(options: Path, weights: Path, device_name: str, batch_size: int, sentences: list, mode: tuple,
          reference: list) -> dict:
    """One mode's tokens/s over the batches of ``sentences``, timed on a second pass (the first captures every
    row count's graphs, timed apart), its largest difference from ``reference`` (the CPU's vectors of the first
    sentences), the captures and the device's peak memory."""
    import numpy as np
    import torch

    from pyelmo import ElmoEmbedder

    name, steps, precision, tf32 = mode
    device = torch.device(device_name)
    steps = steps if steps != "graphs" or device.type == "cuda" else "static"  # the graphs' buffers, on a CPU
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    try:
        embedder = ElmoEmbedder(options, weights, device=device_name, batch_size=batch_size, precision=precision,
                                steps=steps)
        batches = [sentences[i:i + batch_size] for i in range(0, len(sentences), batch_size)]
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        first = time.perf_counter()
        out = [v for batch in batches for v in embedder.embed_batch(batch)]  # warm-up: kernels, captures
        _sync(device)
        first = time.perf_counter() - first
        start = time.perf_counter()
        for batch in batches:
            embedder.embed_batch(batch)
        _sync(device)
        seconds = time.perf_counter() - start
    finally:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    tokens = sum(len(s) for s in sentences)
    level = getattr(embedder.model.level, "steps", None)
    return {"steps": steps, "precision": embedder.options.precision, "tf32": tf32,
            "tokens_per_s": round(tokens / seconds, 1), "first_pass_tokens_per_s": round(tokens / first, 1),
            "max_abs_diff_from_cpu": max(float(np.abs(a - b).max(initial=0.0)) for a, b in zip(reference, out)),
            "captures": getattr(level, "captures", 0), "capture_s": round(getattr(level, "capture_seconds", 0.0), 3),
            "peak_memory_mb": (round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
                               if device.type == "cuda" else None)}


def throughput(config: str, device_name: str, workdir: Path, batch_size: int, batches: int,
               reference: list) -> dict:
    """Every mode of :data:`MODES` on the same ``batches`` batches of ``batch_size`` sentences, side by side."""
    options, weights = write_model(config, workdir)
    sentences = make_sentences(batch_size * batches, seed=2)
    row: dict = {"config": config, "batch_size": batch_size, "tokens": sum(len(s) for s in sentences)}
    for mode in MODES:
        row[mode[0]] = timed(options, weights, device_name, batch_size, sentences, mode, reference)
        print(f"  {config} b{batch_size} {mode[0]}", json.dumps(row[mode[0]]), flush=True)
    eager = (row["eager"]["tokens_per_s"] + row["eager_again"]["tokens_per_s"]) / 2
    row["speedup_over_eager"] = {name: round(row[name]["tokens_per_s"] / eager, 2) for name, *_ in MODES[1:4]}
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
    parser.add_argument("--diff-sentences", type=int, default=64,
                        help="the first N sentences of each throughput row are compared with the CPU's vectors")
    parser.add_argument("--train-steps", type=int, default=30, help="0 skips the training check")
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
            reference = cpu_reference(config, work, make_sentences(args.diff_sentences, seed=2))
            for batch_size in (int(b) for b in args.batch_sizes.split(",")):
                results["throughput"].append(throughput(config, args.device, work, batch_size, args.batches,
                                                        reference))
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
