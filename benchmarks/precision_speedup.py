"""A reduced-precision mode (``--precision``: ``bfloat16``, as ``--bf16``, or ``int8``) against the exact mode,
in one process, rounds interleaved; and where each spends its time.

Both modes run the inference backend (the default plan) on the same random-weight model
(``--config``, seed 0) and the same sentences (``embed_throughput.make_sentences``, batches of
``--batch``), alternating round by round, so the machine's drift hits both alike. With
``--profile``, one more pass of each under ``torch.profiler`` splits its CPU time into the matrix
products (oneDNN's ``_linear_pointwise``, ``torch`` mm/addmm/bmm and the int8 engine's
``linear_dynamic``) and everything else: the speed-up of the whole is bounded by that of the
products, and approaches it only as the rest shrinks. (In the int8 mode the rest includes the
per-row scaling of the int8 products' inputs and results.)

    python benchmarks/precision_speedup.py --config original --batch 32 --rounds 5 --profile
    python benchmarks/precision_speedup.py --precision int8 --config small --batch 32 --rounds 7 --profile
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

PRODUCT_OPS = ("mkldnn::_linear_pointwise", "aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm",
               "aten::baddbmm_", "quantized::linear_dynamic")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", choices=["bfloat16", "int8"], default="bfloat16",
                        help="the mode set against the exact one (default bfloat16)")
    parser.add_argument("--config", default="original", help="model size: original, medium or small (random weights)")
    parser.add_argument("--batch", type=int, default=32, help="sentences per call")
    parser.add_argument("--sentences", type=int, default=64, help="sentences per round")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds of each mode, interleaved")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--profile", action="store_true", help="also split each mode's CPU time into products and the rest")
    args = parser.parse_args()

    import torch

    from embed_throughput import machine_line, make_sentences
    from pyelmo.modeling.bilm import BiLM
    from pyelmo.modeling.characters import batch_to_ids
    from pyelmo.config import preset
    from pyelmo.runtime.precision import bf16_supported
    from pyelmo.runtime.options import RunOptions

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.precision == "bfloat16" and not bf16_supported():
        sys.exit("this CPU has no bfloat16 instructions: the --bf16 mode computes exact float32 here")
    model = BiLM(preset(args.config)).eval()  # int8: its products pack int8 copies of the weights they quantize
    low = "bf16" if args.precision == "bfloat16" else "int8"
    modes = {"exact": RunOptions.inference(), low: RunOptions.inference(precision=args.precision)}
    text = make_sentences(args.sentences, seed=1000 + args.batch)
    ids = [batch_to_ids(text[i : i + args.batch]) for i in range(0, len(text), args.batch)]
    tokens = sum(len(s) for s in text)

    def run(options) -> list[torch.Tensor]:
        return [model(x, options=options).layers for x in ids]

    seconds: dict[str, list[float]] = {k: [] for k in modes}
    with torch.inference_mode():
        outputs = {k: run(o) for k, o in modes.items()}  # warm-up: prepared weights, oneDNN kernels
        for _ in range(args.rounds):
            for k, o in (modes.items() if len(seconds["exact"]) % 2 == 0 else reversed(modes.items())):
                start = time.perf_counter()
                run(o)
                seconds[k].append(time.perf_counter() - start)
    diff = max(float((a - b).abs().max()) for a, b in zip(outputs["exact"], outputs[low]))
    largest = max(float(a.abs().max()) for a in outputs["exact"])

    print(machine_line(args.threads))
    print(f"config {args.config}, batch {args.batch}, {args.sentences} sentences ({tokens} tokens), "
          f"{args.rounds} interleaved rounds, median wall time")
    print("| mode | s per round | tokens/s | rounds |")
    print("|---|---|---|---|")
    for k, v in seconds.items():
        print(f"| {k} | {statistics.median(v):.3f} | {tokens / statistics.median(v):.1f} | "
              + " ".join(f"{t:.3f}" for t in v) + " |")
    print(f"{low} / exact: {statistics.median(seconds['exact']) / statistics.median(seconds[low]):.2f}x; "
          f"largest difference {diff:.2e} (outputs up to {largest:.2f})")

    if args.profile:
        split = {k: [0.0, 0.0] for k in modes}
        with torch.inference_mode():
            for _ in range(args.rounds):  # interleaved again, summed over the rounds
                for k, o in modes.items():
                    with torch.profiler.profile() as prof:
                        run(o)
                    events = prof.key_averages()
                    total = sum(e.self_cpu_time_total for e in events) / 1e6
                    products = sum(e.self_cpu_time_total for e in events if e.key in PRODUCT_OPS) / 1e6
                    split[k][0] += products / args.rounds
                    split[k][1] += (total - products) / args.rounds
        print("| mode (profiled, mean of the rounds) | products CPU s | the rest CPU s |")
        print("|---|---|---|")
        for k, (p, r) in split.items():
            print(f"| {k} | {p:.3f} | {r:.3f} |")
        (pe, re), (pb, rb) = split["exact"], split[low]
        print(f"products {low} / exact: {pe / pb:.2f}x; the rest: {re / rb:.2f}x; whole (profiled): "
              f"{(pe + re) / (pb + rb):.2f}x")


if __name__ == "__main__":
    main()
