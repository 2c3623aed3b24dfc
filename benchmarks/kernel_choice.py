"""What autotuning (``ExecutionPlan.for_machine(autotune=True)``, opt-in) finds on this machine, and what it costs.

For every product shape class of a released model size (``--configs``; random weights of that
size), the time of each exact float32 kernel (``torch.mm`` on ``W`` as stored, ``torch.mm``
on a contiguous ``W^T``, oneDNN prepacked), measured as ``pyelmo.runtime.autotune.time_kernels``
does at first use; the kernel autotuning keeps (the fastest, unless within 10% of the fixed rule's);
the fixed rule's kernel (the default plan's, never measured); and the time all of a model's
measurements took (once per machine, torch version and thread count: the choices are then read
from the cache file).

    python benchmarks/kernel_choice.py --configs small,original --threads 2
"""

from __future__ import annotations

import argparse
import time

import torch


def shapes(name: str) -> dict[str, tuple[int, int]]:
    """The weights ``(out, in)`` of a model's products, by role."""
    from pyelmo.config import preset
    from pyelmo.modeling.bilm import BiLM
    from pyelmo.modeling.encoder import padded_conv_weights

    model = BiLM(preset(name))
    encoder, layer = model.token_encoder, model.directions[0][0]
    conv, _, _ = padded_conv_weights(encoder.convolutions)
    return {"char convolutions": tuple(conv.shape), "highway": tuple(encoder.highways[0].carry.weight.shape),
            "token projection": tuple(encoder.projection.weight.shape),
            "LSTM gates (input and state)": tuple(layer.input_gates.weight.shape),
            "LSTM projection": tuple(layer.projection.weight.shape)}


def main() -> None:
    from pyelmo.runtime.autotune import MEASURE_ROWS, choose_kernel, machine_key, time_kernels
    from pyelmo.runtime.plan import ExecutionPlan, fixed_kernel, onednn_available
    from pyelmo.runtime.products import Products

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="small,original", type=lambda s: s.split(","),
                        help="model sizes, comma-separated (small, medium, original)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    products = Products(ExecutionPlan())  # exact float32: time_kernels times each kernel on it
    print(f"date {time.strftime('%Y-%m-%d %H:%M')}, CPU {machine_key()['cpu']}, torch {torch.__version__}, "
          f"{args.threads} threads")
    for name in args.configs:
        print(f"\n{name}: microseconds per product (fastest call), by row class (measured at rows)")
        print("| product | weight | rows | torch.mm | torch.mm on W^T | oneDNN | autotune keeps | fixed rule |")
        print("|---|---|---|---|---|---|---|---|")
        started = time.perf_counter()
        for role, (out, inp) in shapes(name).items():
            w = torch.randn(out, inp) * 0.05
            for row_class, rows in MEASURE_ROWS.items():
                seconds = time_kernels(products, rows, w)
                cells = [f"{1e6 * seconds[k]:.0f}" if k in seconds else "-" for k in ("mm", "mm_t", "onednn")]
                chosen = choose_kernel(seconds, rows, w)
                fixed = fixed_kernel(row_class, (out, inp), onednn_available())
                print(f"| {role} | {out}x{inp} | {rows} | {' | '.join(cells)} | {chosen} | {fixed} |")
        print(f"all of {name}'s classes measured in {time.perf_counter() - started:.2f} s")


if __name__ == "__main__":
    main()
