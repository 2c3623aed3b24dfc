"""Where a batch's time goes in ``ElmoEmbedder.embed_batch`` + writing it: per stage, per batch, on the CPU.

A random-weight biLM of a released size (``--configs``: ``pyelmo.config.preset``, seed 0) is saved with
``save_pretrained`` into a temporary folder and loaded through ``ElmoEmbedder(folder)``, so it is planned the
way ``pyelmo embed`` plans it (defaults: token cache on). Sentences: ``embed_throughput.make_sentences`` (lengths
5-60, Zipfian words), in consecutive batches of each ``--batch-sizes`` size, run through ``embed_batch``; each
batch's vectors are then selected (``--all``) and written to an HDF5 file as ``pyelmo embed``'s parts are.

The stages are timed from outside the library, by thin timing wrappers swapped in here only:

- ``ids``: ``batch_to_ids`` as the embedder calls it (character ids);
- ``encoder``: ``encode_distinct`` as the biLM calls it (the token encoder on the distinct tokens, the token
  cache's lookups and stores included);
- ``cache``: of ``encoder``, the token cache's bookkeeping (its keys where the tree has ``row_keys``, its
  ``lookup``, ``gather`` and ``store``);
- ``level k``: each call of the biLM's ``level`` module (a level's LSTM loop, both directions; forward hooks);
- ``assemble``: ``PackedRows.assemble`` (packed rows back to ``(L + 1, B, T, 2P)``);
- ``model other``: the rest of the biLM's forward (sentence boundaries, packing, the mask);
- ``split``: the rest of ``embed_batch`` (to float32 numpy, one array per sentence);
- ``write``: each sentence's stored array (``--all``) and its HDF5 dataset (one file per round, as a part).

Each round runs every batch once, with the token cache cleared first (each round is a first pass over the
text; ``--warm-cache``: kept from round to round, the steady state of a long file); ``--warmup`` rounds are not timed. Per stage: ms per batch (the median round's total over the batches)
and its share of the batch's time. ``--json`` prints the figures as JSON instead of the table.

    PYTHONPATH=src python benchmarks/stages.py --configs small,original --batch-sizes 1,32,256 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from embed_throughput import make_sentences  # noqa: E402

STAGES = ("ids", "encoder", "cache", "levels", "assemble", "model other", "split", "write")


class Clock:
    """Seconds per stage, added up over a round."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, stage: str, seconds: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds

    def timed(self, stage: str, function):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.add(stage, time.perf_counter() - start)
        return wrapper


@contextmanager
def swapped(owner, name: str, value):
    """``owner.name`` replaced by ``value`` for the block."""
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def hook_calls(module, clock: Clock, name) -> list:
    """Forward hooks on ``module`` adding each call's seconds to ``name(call number in the batch)``."""
    state = {"start": 0.0, "calls": 0}

    def before(_module, _args):
        state["start"] = time.perf_counter()

    def after(_module, _args, _output):
        clock.add(name(state["calls"]), time.perf_counter() - state["start"])
        state["calls"] += 1

    return [module.register_forward_pre_hook(before), module.register_forward_hook(after)], state


def run_config(config: str, batch_sizes: list[int], args, workdir: Path) -> list[dict]:
    import h5py
    import torch

    import pyelmo.embedding.embedder as embedder_module
    import pyelmo.modeling.bilm as bilm_module
    from pyelmo.config import preset
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.embedding.store import _select
    from pyelmo.modeling.rows import PackedRows
    from pyelmo.modelio.weights import save_pretrained
    import pyelmo.runtime.token_cache as cache_module

    torch.manual_seed(0)
    folder = workdir / config
    save_pretrained(bilm_module.BiLM(preset(config)), folder)
    embedder = ElmoEmbedder(str(folder), token_cache_size=args.token_cache_size)
    results = []
    for batch_size in batch_sizes:
        n = args.sentences_b1 if batch_size == 1 else max(args.sentences, batch_size)
        sentences = make_sentences(n, seed=1000 + batch_size)
        batches = [sentences[i : i + batch_size] for i in range(0, n, batch_size)]
        rounds = []
        names = {"embedder_module": embedder_module, "bilm_module": bilm_module, "PackedRows": PackedRows,
                 "cache_module": cache_module}
        for _ in range(args.warmup + args.rounds):
            if embedder.options.token_cache is not None and not args.warm_cache:
                embedder.options.token_cache.clear()
            rounds.append(one_round(embedder, batches, Clock(), workdir / "part.hdf5", h5py, _select, names))
        timed = rounds[args.warmup :]
        stages = sorted({s for t in timed for s in t if s != "total"}, key=stage_order)
        per_batch = {s: 1e3 * statistics.median(t.get(s, 0.0) for t in timed) / len(batches) for s in stages}
        whole = 1e3 * statistics.median(t["total"] for t in timed) / len(batches)
        tokens = sum(len(s) for s in sentences)
        results.append({"config": config, "batch": batch_size, "batches": len(batches), "tokens": tokens,
                        "ms_per_batch": per_batch, "total_ms_per_batch": whole,
                        "tokens_per_s": tokens / (whole * len(batches) / 1e3)})
        print(f"# done {config} b{batch_size}", file=sys.stderr, flush=True)
    return results


def stage_order(stage: str) -> tuple:
    if stage.startswith("level "):
        return (STAGES.index("levels"), int(stage.split()[1]))
    return (STAGES.index(stage), 0)


def one_round(embedder, batches, clock: Clock, path: Path, h5py, select, names: dict) -> dict[str, float]:
    """Every batch once: seconds per stage, and ``total``."""
    handles, level_calls = hook_calls(embedder.model.level, clock, lambda k: f"level {k}")
    model_handles, model_calls = hook_calls(embedder.model, clock, lambda k: "model")
    with swapped(names["embedder_module"], "batch_to_ids", clock.timed("ids", names["embedder_module"].batch_to_ids)), \
            swapped(names["bilm_module"], "encode_distinct", clock.timed("encoder", names["bilm_module"].encode_distinct)), \
            swapped(names["PackedRows"], "assemble", clock.timed("assemble", names["PackedRows"].assemble)), \
            cache_timed(names["cache_module"], clock):
        embed = clock.timed("embed", embedder.embed_batch)
        start = time.perf_counter()
        with h5py.File(path, "w") as part:
            key = 0
            for batch in batches:
                level_calls["calls"] = 0
                vectors = embed(batch)
                write_start = time.perf_counter()
                for emb in vectors:
                    part.create_dataset(str(key), data=select(emb, "all"))
                    key += 1
                clock.add("write", time.perf_counter() - write_start)
        total = time.perf_counter() - start
    for handle in (*handles, *model_handles):
        handle.remove()
    s = dict(clock.seconds)
    levels = sum(v for k, v in s.items() if k.startswith("level "))
    s["model other"] = s.pop("model") - s["encoder"] - levels - s["assemble"]
    s["split"] = s.pop("embed") - s["ids"] - s["model other"] - s["encoder"] - levels - s["assemble"]
    s["total"] = total
    return s


@contextmanager
def cache_timed(module, clock: Clock):
    """The token cache's bookkeeping timed as ``cache`` (``row_keys`` only where this tree has it)."""
    cache = module.TokenCache
    with swapped(cache, "lookup", clock.timed("cache", cache.lookup)), \
            swapped(cache, "gather", clock.timed("cache", cache.gather)), \
            swapped(cache, "store", clock.timed("cache", cache.store)):
        if hasattr(module, "row_keys"):
            with swapped(module, "row_keys", clock.timed("cache", module.row_keys)):
                yield
        else:
            yield


def print_table(results: list[dict]) -> None:
    stages = sorted({s for r in results for s in r["ms_per_batch"]}, key=stage_order)
    print("| config | batch | tokens/s | ms per batch | " + " | ".join(f"{s} ms (%)" for s in stages) + " |")
    print("|---" * (4 + len(stages)) + "|")
    for r in results:
        whole = r["total_ms_per_batch"]
        cells = [f"{r['ms_per_batch'].get(s, 0.0):.3f} ({100 * r['ms_per_batch'].get(s, 0.0) / whole:.1f}%)"
                 for s in stages]
        print(f"| {r['config']} | {r['batch']} | {r['tokens_per_s']:.0f} | {whole:.2f} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="small", type=lambda s: s.split(","), help="small, medium, original")
    parser.add_argument("--batch-sizes", default="1,32,256", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--sentences", type=int, default=512, help="sentences per round at batch > 1")
    parser.add_argument("--sentences-b1", type=int, default=64, help="sentences per round at batch 1")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--token-cache-size", type=int, default=None,
                        help="the embedder's token cache (default: its default; 0: off)")
    parser.add_argument("--warm-cache", action="store_true",
                        help="keep the token cache from round to round (default: cleared before each round)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.token_cache_size is None:
        from pyelmo.text.batching import DEFAULT_TOKEN_CACHE_SIZE

        args.token_cache_size = DEFAULT_TOKEN_CACHE_SIZE
    with tempfile.TemporaryDirectory(prefix="pyelmo-stages-") as tmp:
        results = [r for config in args.configs for r in run_config(config, args.batch_sizes, args, Path(tmp))]
    if args.json:
        print(json.dumps(results, indent=1))
        return
    import pyelmo

    print(f"date {time.strftime('%Y-%m-%d %H:%M')}, pyelmo from {Path(pyelmo.__file__).parent}, torch "
          f"{torch.__version__}, {args.threads} thread(s), {args.rounds} rounds (median) after {args.warmup} warm-up, "
          f"token cache {'warm' if args.warm_cache else 'cleared each round'}, "
          f"load average {os.getloadavg()[0]:.1f}; command: {' '.join(sys.argv)}")
    print_table(results)


if __name__ == "__main__":
    main()
