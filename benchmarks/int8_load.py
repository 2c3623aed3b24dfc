"""Where an int8 load's time goes: loading the float weights, the fingerprint, quantizing, packing for the engine
(``linear_prepack``; serially and on threads), reading the kept int8 weights (``pyelmo.runtime.int8_cache``), and
``ElmoEmbedder(precision=...)`` whole: exact, int8 without the cache (the default), int8 on a cold and on a warm
cache (the opt-in ``int8_cache=True``); with ``--commands N``, also whole ``pyelmo embed`` commands of N sentences,
load included (exact, int8 with ``--int8-cache`` on a cold cache, then on a warm one; fresh processes, rounds
interleaved) and the exact command's time over each int8 one's. (Warm cache against none, side by side in fresh
processes: ``command_ab.py``.)

    python benchmarks/int8_load.py [--model DIR] [--repeats 3] [--commands 200] [--json]

Without ``--model`` a random biLM of the ``original`` size (4096 cells, 512 projection, 2048 filters, 2 highways)
is saved under a temporary folder first. Times are the median of ``--repeats`` runs, in seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch


def seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def on_threads(threads: int, numbers: list) -> list:
    from pyelmo.runtime.kernels import pack_int8

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda n: pack_int8(*n), numbers))


def empty(cache: Path) -> None:
    for entry in cache.glob("*.safetensors"):
        entry.unlink()


def random_original(folder: Path) -> Path:
    from pyelmo.config import preset
    from pyelmo.modeling.bilm import BiLM
    from pyelmo.modelio.weights import save_pretrained

    torch.manual_seed(0)
    save_pretrained(BiLM(preset("original")).eval(), folder)
    return folder


def phases(model: Path, repeats: int, cache: Path) -> dict[str, float]:
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.modelio.resolve import resolve_model
    from pyelmo.modelio.weights import model_fingerprint
    from pyelmo.runtime.int8_cache import Int8WeightCache, int8_key
    from pyelmo.runtime.kernels import int8_weights, pack_int8
    from pyelmo.runtime.products import Products
    from pyelmo.runtime.plan import ExecutionPlan

    plan = ExecutionPlan.for_machine(precision="int8")
    bilm = resolve_model(str(model)).load_bilm()
    named = {f"{name}.weight": m.weight for name, m in bilm.named_modules()
             if isinstance(m, torch.nn.Linear) and plan.quantized(tuple(m.weight.shape))}
    weights = list(named.values())
    numbers = [int8_weights(w) for w in weights]
    threads = torch.get_num_threads()
    key = int8_key(model_fingerprint(bilm), plan, Products(plan).int8_reduce_range)
    embedder = lambda **kw: ElmoEmbedder(str(model), **kw)  # noqa: E731
    result = {
        "load float weights": seconds(lambda: resolve_model(str(model)).load_bilm(), repeats),
        "fingerprint": seconds(lambda: model_fingerprint(bilm), repeats),
        "quantize (int8_weights)": seconds(lambda: [int8_weights(w) for w in weights], repeats),
        "prepack serially": seconds(lambda: [pack_int8(*n) for n in numbers], repeats),
        f"prepack on {threads} threads": seconds(lambda: on_threads(threads, numbers), repeats),
        "embedder float32": seconds(lambda: embedder(), repeats),
        "embedder int8, no cache": seconds(lambda: embedder(precision="int8"), repeats),
    }
    empty(cache)
    result["embedder int8, cold cache (writes it)"] = seconds(
        lambda: (embedder(precision="int8", int8_cache=True), empty(cache)), repeats)
    embedder(precision="int8", int8_cache=True)
    kept = Int8WeightCache(key, cache)
    assert all(kept.stored(name) is not None for name in named), "the entry does not hold every int8 weight"
    result["read and check kept int8 weights"] = seconds(lambda: [kept.stored(name) for name in named], repeats)
    result["embedder int8, warm cache"] = seconds(lambda: embedder(precision="int8", int8_cache=True), repeats)
    return result


def commands(model: Path, n: int, repeats: int, cache: Path, tmp: Path) -> dict[str, float]:
    """Median wall seconds of ``pyelmo embed`` of ``n`` sentences (embed_throughput's mix): exact, int8 on an
    emptied cache, int8 on the cache that run wrote; and the exact time over each int8 one's."""
    import subprocess
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from embed_throughput import make_sentences

    text = tmp / "sentences.txt"
    text.write_text("\n".join(" ".join(s) for s in make_sentences(n, seed=0)) + "\n", encoding="utf-8")
    runs = {"exact": [], "int8, cold cache": [], "int8, warm cache": []}
    for _ in range(repeats):
        empty(cache)
        for name, flags in (("exact", []), ("int8, cold cache", ["--precision", "int8", "--int8-cache"]),
                            ("int8, warm cache", ["--precision", "int8", "--int8-cache"])):
            out = tmp / f"{len(runs[name])}-{name.replace(', ', '-')}.h5"
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "pyelmo", "embed", str(text), str(out), "--model", str(model),
                            "--no-progress", *flags], check=True)
            runs[name].append(time.perf_counter() - start)
            out.unlink()
    result = {f"pyelmo embed {n} sentences, {name}": statistics.median(times) for name, times in runs.items()}
    exact = result[f"pyelmo embed {n} sentences, exact"]
    for name in ("int8, cold cache", "int8, warm cache"):
        result[f"exact / {name}"] = exact / result[f"pyelmo embed {n} sentences, {name}"]
    return result


def main() -> None:
    import os

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="a model folder (default: a random one of the original size)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--commands", type=int, default=0, metavar="N",
                        help="also time whole 'pyelmo embed' commands of N sentences (exact, int8 cold, int8 warm)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "int8"
        os.environ["PYELMO_INT8_CACHE"] = str(cache)  # the user's cache stays as it is
        model = args.model or random_original(Path(tmp) / "original")
        result = phases(model, args.repeats, cache)
        if args.commands:
            result.update(commands(model, args.commands, args.repeats, cache, Path(tmp)))
    from pyelmo.runtime.plan import cpu_flags

    if args.json:
        print(json.dumps({"cpu": cpu_flags()[0], "torch": torch.__version__, "threads": torch.get_num_threads(),
                          "seconds": result}, indent=2))
        return
    print(f"cpu={cpu_flags()[0]!r} torch={torch.__version__} threads={torch.get_num_threads()} (median of {args.repeats})")
    for name, value in result.items():
        print(f"{name:44} {value:7.3f}{'x' if name.startswith('exact /') else ' s'}")


if __name__ == "__main__":
    main()
