"""How fast the packed biLM could run ``embed_throughput.py``'s batch workload with this CPU's kernels.

The same sentences as ``embed_throughput.py`` at ``--batch`` (its ``batch_workload``), encoded
and run as the inference backend runs them (the default plan). For every product the time loop
makes, the step's recurrent ``(rows, P) x (P, 4H)`` and projection ``(rows, H) x (H, P)`` at each
step's row count and the input-to-gate blocks as the loop forms them (``PackedRows.gate_blocks``
of ``INPUT_GATE_CHUNK_ROWS``), each exact float32 kernel is timed stand-alone with its weight
cache-warm (:func:`time_kernels`: the fastest of a few calls) and the fastest
kept. Then:

- **library floor**: those fastest times summed over the workload (layers x directions x
  steps), plus the token encoder as measured in the run; the gate nonlinearities and copies
  count as zero, so no run with these kernels can be faster;
- **hardware floor**: each product at the larger of its arithmetic at the 2048^3 GEMM rate
  and its weight bytes at the measured read rate beyond L2 (``torch.sum`` of 64 MB), plus the
  measured encoder: what perfect kernels could do (for weights larger than L2, as the
  ``original`` size's are; a weight that stays in L2 across steps, as the ``small`` size's may at
  batch 1, reads faster than this);
- **measured**: the model itself on the same batches (median of ``--repeats``), by part.

With ``--reference-python`` (the AllenNLP environment of ``embed_throughput.py``), AllenNLP runs the
same batches on the same weights in its own worker, its timed runs alternating with pyelmo's, and
each line also gives the ratio it makes against AllenNLP's median.

``--alternatives``: for the recurrent and projection weights at a few row counts, other exact
float32 products against the fastest of the kernels pyelmo chooses from (medians of interleaved
calls): MKL's packed-weight GEMM (packed for that one row count), NumPy's BLAS (OpenBLAS in the
PyPI wheels), ``W @ x^T`` with its transposed result copied to the gate buffers' layout, and inductor's
GEMM templates (``torch.compile`` max-autotune, where a C++ compiler is present). NumPy and inductor
are timed in their own passes (each with pyelmo's fastest kernel again, side by side): another
thread pool, or compile workers, sharing the cores would distort the others' timings.

    python benchmarks/lstm_bound.py --config original --batch 32 --reference-python /tmp/allennlp-ref/bin/python
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import embed_throughput  # noqa: E402  (the workload's sentences and the 2048^3 rate)


def read_rate(megabytes: int = 64, calls: int = 15) -> float:
    """Bytes per second ``torch.sum`` reads from a buffer larger than L2 (median)."""
    x = torch.randn(megabytes * 2**20 // 4)
    x.sum()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        x.sum()
        times.append(time.perf_counter() - start)
    return x.numel() * 4 / statistics.median(times)


def medians(calls: dict, rounds: int = 9) -> dict[str, float]:
    """Each call's median seconds over interleaved rounds, after two warm-up calls each."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call(), call()
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def alternatives(args: argparse.Namespace) -> None:
    """Other exact float32 implementations of the loop's step products, against pyelmo's kernels."""
    import numpy as np

    from pyelmo.config import preset
    from pyelmo.modeling.bilm import BiLM
    from pyelmo.runtime.plan import KERNELS, ExecutionPlan, onednn_available
    from pyelmo.runtime.products import Products

    torch.manual_seed(0)
    layer = BiLM(preset(args.config)).directions[0][0]
    products = Products(ExecutionPlan())  # exact float32 inference products: each kernel on its prepared weight
    print(f"\nAlternatives, config {args.config}: ms per product (median), and the fastest of pyelmo's kernels "
          "over each (> 1: the alternative is faster)")
    print("| weight | rows | pyelmo's fastest | MKL packed | NumPy BLAS | W @ x^T, transposed | inductor |")
    print("|---|---|---|---|---|---|---|")
    cases = []
    for name, w in (("recurrent", layer.state_gates.weight.detach()), ("projection", layer.projection.weight.detach())):
        prepared = {k: products.prepare(w, k) for k in KERNELS if k != "onednn" or onednn_available()}
        wt_np = np.ascontiguousarray(w.numpy().T)
        for rows in (4, 8, 16, 32):
            x = torch.randn(rows, w.shape[1])
            x_np, out_np = x.numpy(), np.empty((rows, w.shape[0]), np.float32)
            packed = torch.ops.mkl._mkl_reorder_linear_weight(w, rows)
            # each gives x @ W^T as a (rows, out) row-major result, the layout the gate buffers have
            calls = {k: (lambda k=k, x=x, p=prepared: products.kernels[k].run(x, p[k])) for k in prepared}
            calls["MKL packed"] = lambda x=x, w=w, p=packed, n=rows: torch.ops.mkl._mkl_linear(x, p, w, None, n)
            calls["W @ x^T"] = lambda x=x, w=w: torch.mm(w, x.t()).t().contiguous()
            with torch.no_grad():
                seconds = medians(calls)
            fastest = min(prepared, key=seconds.get)
            ratios = {k: seconds[fastest] / seconds[k] for k in ("MKL packed", "W @ x^T")}
            # NumPy's BLAS has its own thread pool: timed apart from torch's, each after the other's threads idle
            time.sleep(0.5)
            numpy_s = medians({"numpy": lambda a=x_np, b=wt_np, out=out_np: np.matmul(a, b, out=out)})["numpy"]
            time.sleep(0.5)
            with torch.no_grad():
                ratios["NumPy BLAS"] = medians({"pyelmo": calls[fastest]})["pyelmo"] / numpy_s
            cases.append((f"{name} {tuple(w.shape)}", w, x, calls[fastest], seconds[fastest], ratios))
    try:  # last: its compile workers must not share the CPU with the timings above
        import torch._inductor.config as inductor

        for _, w, x, fastest, _, ratios in cases:
            with inductor.patch(max_autotune=True, max_autotune_gemm_backends="CPP,ATEN", freezing=True,
                                compile_threads=1), torch.no_grad():
                linear = torch.nn.Linear(w.shape[1], w.shape[0], bias=False).eval()
                linear.weight.data = w
                compiled = torch.compile(linear, dynamic=False)
                compiled(x)
                both = medians({"pyelmo": fastest, "inductor": lambda: compiled(x)})  # side by side again
                ratios["inductor"] = both["pyelmo"] / both["inductor"]
    except Exception as exc:  # noqa: BLE001  (no C++ compiler, or no CPU GEMM template in this torch)
        print(f"(inductor not measured: {type(exc).__name__}: {exc})", file=sys.stderr)
    for label, _, x, _, best, ratios in cases:
        cells = [f"{best * 1e3:.3f}"] + [f"{ratios[k]:.2f}x" if k in ratios else "-"
                                         for k in ("MKL packed", "NumPy BLAS", "W @ x^T", "inductor")]
        print(f"| {label} | {x.shape[0]} | " + " | ".join(cells) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="original")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reference-python", help="python of the AllenNLP environment (e.g. /tmp/allennlp-ref/bin/python)")
    parser.add_argument("--alternatives", action="store_true",
                        help="time other exact product implementations against the chosen kernels (instead of the floors)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.alternatives:
        alternatives(args)
        return
    with tempfile.TemporaryDirectory(prefix="pyelmo-bound-") as tmp:
        bound(args, Path(tmp))


def time_kernels(products, rows: int, w: torch.Tensor, calls: int = 6) -> dict[str, float]:
    """Seconds of each available float32 kernel for ``rows`` rows times ``w.T``: each on ``w`` prepared for it
    and random inputs, in interleaved rounds after one warm-up round; each kernel's fastest call."""
    from pyelmo.runtime.plan import KERNELS, onednn_available

    candidates = [k for k in KERNELS if k != "onednn" or onednn_available()]
    best = dict.fromkeys(candidates, float("inf"))
    with torch.no_grad():
        x = torch.randn(rows, w.shape[1])
        prepared = {k: products.kernels[k].prepare(w) for k in candidates}
        for round_ in range(calls + 1):
            for k in candidates:
                began = time.perf_counter()
                products.kernels[k].run(x, prepared[k])
                if round_:
                    best[k] = min(best[k], time.perf_counter() - began)
    return best


def bound(args: argparse.Namespace, workdir: Path) -> None:
    """The floors and the measured run of the batch workload (see the module docstring)."""
    from pyelmo.modeling import bilm, lstm
    from pyelmo.modeling.characters import batch_to_ids
    from pyelmo.modelio.weights import load_bilm_hdf5
    from pyelmo.runtime.options import RunOptions
    from pyelmo.runtime.planning import INPUT_GATE_CHUNK_ROWS, plan_model
    from pyelmo.runtime.plan import ExecutionPlan
    from pyelmo.runtime.products import Products
    from pyelmo.modeling.rows import PackedRows

    options_file, weights_file = embed_throughput.write_model(args.config, workdir)
    model = load_bilm_hdf5(options_file, weights_file)
    sentences, batches = embed_throughput.batch_workload(args.sentences, args.batch)
    tokens = sum(len(s) for s in sentences)
    reference, reference_runs = None, []
    if args.reference_python:
        (workdir / "batches.json").write_text(json.dumps(batches))
        reference = embed_throughput.Worker(args.reference_python, "allennlp")
        reference.ask(op="init", threads=args.threads, options=str(options_file), weights=str(weights_file),
                      batches=str(workdir / "batches.json"))

    # the measured run, with the token encoder and each level timed
    parts: dict[str, float] = collections.defaultdict(float)
    encode = bilm.encode_distinct

    def timed(name, f):
        def call(*a, **k):
            start = time.perf_counter()
            out = f(*a, **k)
            parts[name] += time.perf_counter() - start
            return out
        return call

    bilm.encode_distinct = timed("encoder", encode)
    lstm.Level.__call__ = timed("LSTM levels", torch.nn.Module.__call__)  # every level module's call
    options = RunOptions.inference()
    plan_model(model, options)
    ids = [batch_to_ids(b) for b in batches]
    runs = []
    try:
        with torch.inference_mode():
            for rep in range(args.repeats + 1):  # the first warms up (prepared weights, oneDNN kernels)
                parts.clear()
                start = time.perf_counter()
                for batch_ids in ids:
                    model(batch_ids, options=options)
                runs.append((time.perf_counter() - start, dict(parts)))
                if reference is not None:
                    reference_runs.append(reference.ask(op="time", gemm=False)["seconds"])
    finally:
        bilm.encode_distinct = encode
        del lstm.Level.__call__
        if reference is not None:
            reference.close()
    measured, measured_parts = sorted(runs[1:], key=lambda r: r[0])[len(runs[1:]) // 2]

    # the products the packed loop makes on these batches
    layer = model.directions[0][0]
    weights = {"recurrent": layer.state_gates.weight, "projection": layer.projection.weight,
               "input gates": layer.input_gates.weight}
    shapes: collections.Counter = collections.Counter()
    for batch_ids in ids:
        lengths = batch_ids.gt(0).any(-1).sum(-1) + 2
        packed = PackedRows(lengths, int(lengths.max()))
        for rows in packed.batch_sizes:
            shapes["recurrent", rows] += 1
            shapes["projection", rows] += 1
        for t0, t1 in packed.gate_blocks(INPUT_GATE_CHUNK_ROWS):
            shapes["input gates", packed.offsets[t1] - packed.offsets[t0]] += 1
    units = 2 * model.config.lstm.n_layers  # directions x layers, each with its own weights of these shapes

    products = Products(ExecutionPlan())
    gemm = embed_throughput.matmul_rate(torch)
    peak = max(gemm["mkl"], gemm["onednn"]) * 1e9
    bandwidth = read_rate()
    library = collections.defaultdict(float)
    hardware = collections.defaultdict(float)
    for (role, rows), count in sorted(shapes.items()):
        w = weights[role]
        best = min(time_kernels(products, rows, w).values())
        flops, nbytes = 2 * rows * w.numel(), 4 * w.numel()
        library[role] += units * count * best
        hardware[role] += units * count * max(flops / peak, nbytes / bandwidth)
    encoder = measured_parts["encoder"]

    reference_s = statistics.median(reference_runs[1:]) if reference_runs else None

    def line(label: str, seconds: float) -> str:
        ratio = f"{reference_s / seconds:.2f}x" if reference_s else "-"
        return f"| {label} | {seconds:.3f} | {tokens / seconds:.0f} | {ratio} |"

    print(f"config {args.config}, batch {args.batch}, {args.sentences} sentences ({tokens} tokens), "
          f"{args.threads} threads; {embed_throughput.machine_line(args.threads)}; read rate beyond L2 "
          f"{bandwidth / 1e9:.0f} GB/s; steps per unit {sum(c for (r, _), c in shapes.items() if r == 'recurrent')}, "
          f"of them at most 5 rows {sum(c for (r, n), c in shapes.items() if r == 'recurrent' and n <= 5)}")
    print("\n| part | measured s | library floor s | hardware floor s |\n|---|---|---|---|")
    for role in weights:
        print(f"| LSTM {role} products | - | {library[role]:.3f} | {hardware[role]:.3f} |")
    print(f"| LSTM levels in all | {measured_parts['LSTM levels']:.3f} | {sum(library.values()):.3f} | "
          f"{sum(hardware.values()):.3f} |")
    print(f"| token encoder | {encoder:.3f} | {encoder:.3f} | {encoder:.3f} |")
    print(f"| whole model | {measured:.3f} | - | - |")
    print("\n| pyelmo | seconds | tok/s | AllenNLP seconds / these |\n|---|---|---|---|")
    if reference_s:
        print(f"| (AllenNLP, measured alternately) | {reference_s:.3f} | {tokens / reference_s:.0f} | 1.00x |")
    print(line("measured", measured))
    print(line("library floor (every product at its fastest stand-alone kernel)", sum(library.values()) + encoder))
    print(line("hardware floor (GEMM peak or read rate, whichever binds)", sum(hardware.values()) + encoder))


if __name__ == "__main__":
    main()
