"""The int8 product candidates PyTorch offers on this CPU, on the biLM's real product shapes (``original``'s).

    python benchmarks/int8_candidates.py [--seconds 0.3] [--threads N] [--candidates a,b] [--json]

Products ``x (rows, in) @ W^T`` with ``W (out, in)``: the time steps (1, 8, 32, 64 rows) against the state and
input gates (16384 x 512) and the LSTM projection (512 x 4096), the input-gate blocks (512 rows x 16384 x 512)
and the highway (2048 x 2048, 512 rows). Each candidate's time includes quantizing its input; weights are
prepared once, outside the timing. Printed per product: ms per product, speed over float32 ``torch.mm`` (the
exact kernel), and the largest error relative to the float32 result's largest magnitude; the CPU's flags first.

Candidates (those this build cannot run are listed as such):
- ``fbgemm per-row``: pyelmo's int8 today (``int8_linear``: fbgemm's dynamic linear, per-row input scales);
- ``fbgemm per-tensor``: ``quantized::linear_dynamic`` as PyTorch's dynamic quantization runs it;
- ``fbgemm per-row, gates apart``: the four gate blocks (4096 rows of W each) as four products, not one;
- ``weight-only int8``: ``aten._weight_int8pack_mm``, int8 weights and float32 compute (also on bfloat16 inputs);
- ``_int_mm per-row`` / ``_int_mm per-tensor``: ``torch._int_mm`` (int8 x int8 -> int32), symmetric inputs;
- ``oneDNN qlinear per-tensor``: ``onednn::qlinear_pointwise`` on ``onednn::qlinear_prepack``'s weight, uint8 inputs;
- ``oneDNN dynamic per-tensor``: ``quantized::linear_dynamic`` with the ``onednn`` quantized engine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

import torch

from pyelmo.runtime.kernels import int8_linear, quantize_int8
from pyelmo.runtime.plan import cpu_flags
from pyelmo.runtime.precision import int8_engine

#: (product, out, in, rows)
SHAPES = ([("step: gates", 16384, 512, r) for r in (1, 8, 32, 64)]
          + [("step: projection", 512, 4096, r) for r in (1, 8, 32, 64)]
          + [("input-gate block", 16384, 512, 512), ("highway", 2048, 2048, 512)])
FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8",
         "amx_bf16", "asimddp", "i8mm")
warnings.filterwarnings("ignore", category=UserWarning)  # PyTorch's quantized tensors are marked deprecated


def per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 ``W`` per output channel (symmetric) and its float32 scales."""
    scales = w.abs().amax(dim=1).clamp_min(1e-30) / 127
    return torch.round(w / scales[:, None]).to(torch.int8), scales


def symmetric(x: torch.Tensor, per_row: bool) -> tuple[torch.Tensor, torch.Tensor]:
    scale = (x.abs().amax(dim=1, keepdim=True) if per_row else x.abs().amax()).clamp_min(1e-30) / 127
    return torch.round(x / scale).to(torch.int8), scale


def fbgemm_per_tensor(w):
    q = torch.quantize_per_channel(w, (w.abs().amax(1).clamp_min(1e-30) / 127).double(),
                                   torch.zeros(w.shape[0], dtype=torch.long), 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(q, None)
    return lambda x: torch.ops.quantized.linear_dynamic(x, packed, True)


def fbgemm_per_row(w):
    packed = quantize_int8(w)
    return lambda x: int8_linear(x, packed, True)


def fbgemm_gates_apart(w):
    if w.shape[0] % 4 or w.shape[0] < 4 * 1024:
        return None  # not a gate weight
    blocks = [quantize_int8(block) for block in w.chunk(4)]

    def run(x):
        out = x.new_empty(x.shape[0], w.shape[0])
        for packed, target in zip(blocks, out.chunk(4, dim=1)):
            target.copy_(int8_linear(x, packed, True))
        return out
    return run


def weight_only(dtype: torch.dtype):
    def prepare(w):
        q, scales = per_channel(w)
        scales = scales.to(dtype)
        return lambda x: torch.ops.aten._weight_int8pack_mm(x.to(dtype), q, scales).float()
    return prepare


def int_mm(per_row: bool):
    def prepare(w):
        q, scales = per_channel(w)
        qt = q.t().contiguous()

        def run(x):
            xq, sx = symmetric(x, per_row)
            return torch._int_mm(xq, qt).float().mul_(sx).mul_(scales)
        return run
    return prepare


def onednn_qlinear(w):
    q, scales = per_channel(w)
    packed = torch.ops.onednn.qlinear_prepack(q, None)
    zeros = torch.zeros(w.shape[0], dtype=torch.long)

    def run(x):
        low, high = x.min().clamp_max(0), x.max().clamp_min(0)
        scale = float((high - low).clamp_min(1e-30) / 255)
        zero = int(torch.round(-low / scale))
        xq = torch.clamp(torch.round(x / scale) + zero, 0, 255).to(torch.uint8)
        return torch.ops.onednn.qlinear_pointwise(xq, scale, zero, packed, scales, zeros, None, 1.0, 0,
                                                  torch.float32, "none", [], "")
    return run


def onednn_dynamic(w):
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = "onednn"
    try:
        run = fbgemm_per_tensor(w)
    finally:
        torch.backends.quantized.engine = previous

    def in_engine(x):
        torch.backends.quantized.engine = "onednn"
        try:
            return run(x)
        finally:
            torch.backends.quantized.engine = previous
    return in_engine


CANDIDATES = {"fbgemm per-row": fbgemm_per_row, "fbgemm per-tensor": fbgemm_per_tensor,
              "fbgemm per-row, gates apart": fbgemm_gates_apart, "weight-only int8": weight_only(torch.float32),
              "weight-only int8, bf16 inputs": weight_only(torch.bfloat16),
              "_int_mm per-row": int_mm(True), "_int_mm per-tensor": int_mm(False),
              "oneDNN qlinear per-tensor": onednn_qlinear, "oneDNN dynamic per-tensor": onednn_dynamic}


def ms_per_call(fn, x, seconds: float) -> float:
    """Median over 5 rounds of the mean time per call, in ms (each round ``seconds`` / 5 long, at least 2 calls)."""
    for _ in range(2):
        fn(x)
    rounds = []
    for _ in range(5):
        calls, start = 0, time.perf_counter()
        while calls < 2 or time.perf_counter() - start < seconds / 5:
            fn(x)
            calls += 1
        rounds.append((time.perf_counter() - start) / calls * 1000)
    return statistics.median(rounds)


def measure(names: list[str], seconds: float) -> list[dict]:
    torch.manual_seed(0)
    table = []
    for product, out, inp, rows in SHAPES:
        w, x = torch.randn(out, inp) / inp**0.5, torch.randn(rows, inp)
        wt = w.t()
        exact = x @ wt
        base = ms_per_call(lambda a: torch.mm(a, wt), x, seconds)
        row = {"product": product, "weight": [out, inp], "rows": rows, "float32 mm ms": round(base, 4), "candidates": {}}
        for name in names:
            try:
                fn = CANDIDATES[name](w)
                if fn is None:
                    continue
                start = time.perf_counter()
                err = float((fn(x) - exact).abs().max() / exact.abs().max())
                first = (time.perf_counter() - start) * 1000
                slow = first > max(1000 * seconds, 100 * base)  # far too slow to repeat: its first call
                ms = first if slow else ms_per_call(fn, x, seconds)
                row["candidates"][name] = {"ms": round(ms, 4), "speedup": round(base / ms, 3),
                                           "rel_err": float(f"{err:.2g}"), **({"first call only": True} if slow else {})}
            except (RuntimeError, AttributeError, NotImplementedError) as exc:
                row["candidates"][name] = {"error": str(exc).splitlines()[0][:120]}
        table.append(row)
    return table


def machine() -> dict:
    name, flags = cpu_flags()
    return {"cpu": name, "flags": [f for f in FLAGS if f in flags], "torch": torch.__version__,
            "threads": torch.get_num_threads(), "int8_engine": int8_engine(),
            "quantized_engines": list(torch.backends.quantized.supported_engines)}


def print_table(facts: dict, table: list[dict], names: list[str]) -> None:
    print(f"cpu={facts['cpu']!r} flags={','.join(facts['flags'])} torch={facts['torch']} threads={facts['threads']} "
          f"engine={facts['int8_engine']}")
    print("ms per product (speed over float32 torch.mm; largest error / largest |result|)")
    for row in table:
        shape = f"{row['product']} {row['weight'][0]}x{row['weight'][1]}, {row['rows']} rows"
        print(f"\n{shape}: float32 mm {row['float32 mm ms']:.3f} ms")
        for name in names:
            result = row["candidates"].get(name)
            if result is None:
                continue
            if "error" in result:
                print(f"  {name:30} not runnable here: {result['error']}")
            else:
                note = "  (one call: too slow to repeat)" if result.get("first call only") else ""
                print(f"  {name:30} {result['ms']:9.3f} ms  {result['speedup']:6.2f}x  err {result['rel_err']:.1e}{note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=0.3, help="time per measurement (default 0.3)")
    parser.add_argument("--threads", type=int, help="torch threads (default: PyTorch's)")
    parser.add_argument("--candidates", help=f"a comma-separated subset of: {', '.join(CANDIDATES)}")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    names = args.candidates.split(",") if args.candidates else list(CANDIDATES)
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        parser.error(f"unknown candidates: {', '.join(unknown)} (choose from {', '.join(CANDIDATES)})")
    if args.threads:
        torch.set_num_threads(args.threads)
    with torch.inference_mode():
        facts, table = machine(), measure(names, args.seconds)
    if args.json:
        print(json.dumps({**facts, "products": table}, indent=2))
    else:
        print_table(facts, table, names)


if __name__ == "__main__":
    main()
