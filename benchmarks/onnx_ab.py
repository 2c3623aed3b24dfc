"""ONNX Runtime against PyTorch, side by side in one process: CPU time per round, rounds alternating.

    python benchmarks/onnx_ab.py --config small --workload b1 --threads 1
    python benchmarks/onnx_ab.py --config original --workload b32 --threads 1

The same random-weight model (``--config``, seed 0) runs through ``ElmoEmbedder`` with ``runtime="torch"``
(the default plan) and ``runtime="onnxruntime"`` (exported once into a temporary folder), on the same
sentences (``embed_throughput.py``'s): ``b1`` one sentence of 20 tokens per call, ``bN`` batches of N. After
``--warmup`` rounds each backend takes its turn, one round each, for ``--rounds`` rounds; prints each
backend's median CPU time (``time.process_time``) and the largest difference of their vectors.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from embed_throughput import latency_sentences, make_sentences  # noqa: E402

from pyelmo.config import preset
from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.modeling.bilm import BiLM
from pyelmo.modelio.onnx_export import export_onnx
from pyelmo.modelio.weights import save_pretrained


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="small", choices=("small", "medium", "original"))
    parser.add_argument("--workload", default="b1", help="b1 or bN (batches of N)")
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = BiLM(preset(args.config)).eval()
    if args.workload == "b1":
        batches = [[s] for s in latency_sentences(args.sentences, 20, seed=11)]
    else:
        size = int(args.workload[1:])
        text = make_sentences(args.sentences, seed=1000 + size)
        batches = [text[i : i + size] for i in range(0, len(text), size)]
    with tempfile.TemporaryDirectory() as tmp:
        save_pretrained(model, Path(tmp) / "model")
        started = time.perf_counter()
        export_onnx(Path(tmp) / "model", Path(tmp) / "onnx")
        export_s = time.perf_counter() - started
        embedders = {"torch": ElmoEmbedder(str(Path(tmp) / "model"), batch_size=10**6, max_tokens=None),
                     "onnxruntime": ElmoEmbedder(str(Path(tmp) / "onnx"), batch_size=10**6, max_tokens=None,
                                                 runtime="onnxruntime")}
        times: dict[str, list[float]] = {name: [] for name in embedders}
        outputs: dict[str, list[np.ndarray]] = {}
        for r in range(args.warmup + args.rounds):
            for name, embedder in (embedders.items() if r % 2 == 0 else reversed(embedders.items())):
                start = time.process_time()
                out = [v for batch in batches for v in embedder.embed_batch(batch)]
                if r >= args.warmup:
                    times[name].append(time.process_time() - start)
                outputs[name] = out
    diff = max(float(np.abs(a - b).max()) for a, b in zip(outputs["torch"], outputs["onnxruntime"]))
    base = statistics.median(times["torch"])
    print(f"{args.config} {args.workload}, {args.sentences} sentences, {args.threads} thread(s), "
          f"{args.warmup} warm-up + {args.rounds} rounds; export {export_s:.1f} s")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name}: CPU {median:.3f} s (min {min(values):.3f}), {base / median:.3f}x torch")
    print(f"  max abs diff onnxruntime vs torch: {diff:.2e}")


if __name__ == "__main__":
    main()
