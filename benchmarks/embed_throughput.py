"""ELMo embedding throughput on CPU: pyelmo against AllenNLP 2.10.1's ``_ElmoBiLm``, side by side.

One table: for each config (``original``, ``small``: random weights of the released
sizes, written to the bilm-tf HDF5 so that both implementations load identical weights)
and batch size (1, 32): tokens/s of each side, the ratio, max-abs-diff of pyelmo's fast
path against its exact fp32 path and against AllenNLP, GEMM fraction (useful FLOPs/s /
the machine's fp32 matmul rate: the faster of ``torch.mm`` and oneDNN on a 2048^3 product,
measured in the same process, same run) and peak RSS of the process.

Each (side, config, batch size) runs in its own worker process (so its peak RSS is its
own); the sides' timed runs are interleaved (pyelmo, AllenNLP, ..., then the same in reverse
order, ...) and the median of ``--repeats`` is reported. AllenNLP's states are reset before every batch.
pyelmo's token cache is off in this table (every repeat recomputes every token); the
end-to-end run below uses the defaults, cache included. ``--bf16`` and ``--int8`` add a row per
(config, batch) for pyelmo's explicit reduced-precision modes (``embed --bf16``, ``embed
--precision int8``, each in a worker of its own; the int8 worker keeps only the int8 copy of the
weights it quantizes, as ``ElmoEmbedder`` does), timed in the same interleaved rounds, with their
max-abs-diff against the exact fp32 path, the 1st percentile of per-token cosines to it, and their
speed against the exact mode's.

``--weight-memory``: per precision, a fresh process loads the model (``ElmoEmbedder``, as ``pyelmo
embed`` does) and reports its resident memory after imports, after loading and at its peak; the
difference is the model's weight memory in that mode.

    python benchmarks/embed_throughput.py --reference-python /tmp/allennlp-ref/bin/python \
        --sentences-b1 128 --latency-sentences 128 --e2e-lines 2000      # + batch-1 latency, end to end
    python benchmarks/embed_throughput.py --skip-table --memory-check    # memory only

Every table is printed with the CPU (model name and a hash of its feature flags), whether it
has bfloat16 instructions, and its 2048^3 GEMM rates measured in the same run.

``--latency-sentences N``: batch 1 as a service sees it: N sentences of ``--latency-tokens``
(20) tokens one at a time through pyelmo's public ``ElmoEmbedder.embed_sentence`` (defaults,
and with the token cache off) against AllenNLP's ``_ElmoBiLm`` on a batch of one.

``--e2e-lines N``: whole file against whole file on the same N lines: each side in its own
process, timed from start (imports and model loading included) to end: the command ``pyelmo embed
--all`` with its defaults, and AllenNLP's ``embed_file`` loop (batch 32, consecutive lines, states reset
per batch, one dataset per line + sentence_to_index; its ``allennlp.commands.elmo`` module needs nltk, not
installed, so the loop is reproduced, without that command's imports), whose load and loop are also timed
apart. pyelmo runs before and after AllenNLP (their mean).
``--e2e-rounds R``: R such rounds, each with its ratio, and their median; with ``--base-src``, that tree
runs beside them in every round (before and after AllenNLP too), for the gain between the trees.
``--memory-check``: peak RSS of ``pyelmo embed`` on 20k vs 200k lines (tiny model, --top).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trees import JsonWorker, tree_env  # noqa: E402

MATMUL_N = 2048
PROCESS_START = time.perf_counter()  # as near the process start as this script gets (after Python's own startup)


# -- shared helpers (stdlib + torch only: they run in both environments) ------------------
def matmul_rate(torch) -> dict:
    """GFLOP/s of a 2048^3 matrix product (median of 5): float32 ``torch.mm`` (MKL here) and oneDNN
    with a prepacked weight (absent: 0), and bfloat16 ``torch.mm`` where the CPU has bfloat16
    instructions (else 0: without them it runs hundreds of times slower and pyelmo does not use it).
    The machine's float32 rate is the larger of the first two."""
    a, b = torch.randn(MATMUL_N, MATMUL_N), torch.randn(MATMUL_N, MATMUL_N)
    runs = {"mkl": lambda: a @ b}
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(b, MATMUL_N)
        runs["onednn"] = lambda: torch.ops.mkldnn._linear_pointwise(a, packed, None, "none", [], "")
    except (AttributeError, RuntimeError):
        pass
    try:
        if torch.ops.mkldnn._is_mkldnn_bf16_supported():
            a16, b16 = a.bfloat16(), b.bfloat16()
            runs["bf16"] = lambda: a16 @ b16
    except (AttributeError, RuntimeError):
        pass
    rates = {"mkl": 0.0, "onednn": 0.0, "bf16": 0.0}
    for name, run in runs.items():
        run()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        rates[name] = 2 * MATMUL_N**3 / statistics.median(times) / 1e9
    return rates


def machine_line(threads: int) -> str:
    """The CPU (model name and flags hash, as the kernel cache keys it), bfloat16 support, torch and
    its GEMM rates, measured now: printed with every table."""
    import torch

    from pyelmo.runtime.plan import machine_key
    from pyelmo.runtime.precision import bf16_supported

    torch.set_num_threads(threads)
    rates = matmul_rate(torch)
    bf16 = f"{rates['bf16']:.0f}" if rates["bf16"] else "n/a (no bfloat16 instructions)"
    return (f"CPU {machine_key()['cpu']}, bfloat16 instructions: {'yes' if bf16_supported() else 'no'}, "
            f"torch {torch.__version__}, {threads} threads; GEMM 2048^3 GFLOP/s: fp32 torch.mm {rates['mkl']:.0f}, fp32 oneDNN "
            f"{rates['onednn']:.0f}, bf16 {bf16}")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make_sentences(n: int, seed: int, vocab_size: int = 50_000) -> list[list[str]]:
    """A realistic mix: lengths 5-60 (log-normal, median ~22), Zipfian word frequencies."""
    rng = random.Random(seed)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    vocab, seen = [], set()
    while len(vocab) < vocab_size:
        word = "".join(rng.choice(letters) for _ in range(max(1, min(14, int(rng.gauss(6, 2.5))))))
        if word not in seen:
            seen.add(word)
            vocab.append(word)
    weights = [1.0 / (r + 1) for r in range(vocab_size)]
    cumulative, total = [], 0.0
    for w in weights:
        total += w
        cumulative.append(total)
    sentences = []
    for _ in range(n):
        length = max(5, min(60, int(rng.lognormvariate(3.1, 0.5))))
        sentences.append(rng.choices(vocab, cum_weights=cumulative, k=length))
    return sentences


def batch_workload(n_sentences: int, batch_size: int) -> tuple[list[list[str]], list[list[list[str]]]]:
    """The per-batch table's sentences at ``batch_size`` (:func:`make_sentences`, seeded by the batch size)
    and their consecutive batches."""
    sentences = make_sentences(n_sentences, seed=1000 + batch_size)
    return sentences, [sentences[i : i + batch_size] for i in range(0, len(sentences), batch_size)]


# -- workers ------------------------------------------------------------------------------
#: The reduced-precision workers and their precision.
REDUCED = {"pyelmo-bf16": "bfloat16", "pyelmo-int8": "int8"}


class PyelmoSide:
    """pyelmo with its default plan, in the package layout or (``--base-src``) the flat one before it."""

    def __init__(self, options: str, weights: str, precision: str = "float32") -> None:
        from trees import inference_options, pyelmo_names

        self.names = pyelmo_names()
        self.model = self.names.load_bilm_hdf5(options, weights)
        # no token cache: every repeat recomputes every token
        self.options, _ = inference_options(self.names, "default", **({} if precision == "float32" else {"precision": precision}))
        try:  # as ElmoEmbedder does with a model it loads: planned in place (int8: the int8 copies only)
            from pyelmo.runtime.planning import plan_model

            plan_model(self.model, self.options)
        except ImportError:  # a tree that plans when run (int8: earlier, its own way)
            if precision == "int8" and hasattr(self.model, "apply_plan"):
                self.model.apply_plan(self.options)
            elif precision == "int8":  # a tree before planned linears
                self.model.release_weights(self.options.products)

    def sentence_runner(self, cache: bool):
        """``ElmoEmbedder.embed_sentence`` with the embedder's defaults (a fresh token cache) or the cache off."""
        embedder = self.names.ElmoEmbedder(self.model, **({} if cache else {"token_cache_size": 0}))
        return embedder.embed_sentence

    def run(self, batch, exact: bool = False):
        import torch

        ids = self.names.batch_to_ids(batch)
        with torch.inference_mode():
            layers = self.model(ids, options=None if exact else self.options).layers.numpy()
        return [layers[:, k, : len(s)] for k, s in enumerate(batch)]


class AllennlpSide:
    def __init__(self, options: str, weights: str) -> None:
        import warnings

        warnings.filterwarnings("ignore")
        from allennlp.modules.elmo import _ElmoBiLm

        self.module = _ElmoBiLm(options, weights).eval()

    def sentence_runner(self, cache: bool):
        """One sentence as AllenNLP's ``ElmoEmbedder.embed_sentence`` computes it (a batch of one), states reset."""
        return lambda tokens: self.run([tokens])[0]

    def run(self, batch, exact: bool = False):
        import torch
        from allennlp.modules.elmo import batch_to_ids

        self.module._elmo_lstm.reset_states()
        with torch.no_grad():
            out = self.module(batch_to_ids(batch))
        layers = torch.stack(out["activations"]).numpy()  # (3, B, T + 2, D)
        return [layers[:, k, 1 : len(s) + 1] for k, s in enumerate(batch)]


def worker(side_name: str) -> None:
    """Serve JSON commands on stdin, one JSON answer per line on stdout."""
    import numpy as np
    import torch

    out = sys.stdout
    sys.stdout = sys.stderr  # library prints must not corrupt the protocol
    side = None
    batches: list = []
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        answer: dict = {}
        if op == "init":
            torch.set_num_threads(cmd["threads"])
            if side_name == "allennlp":
                side = AllennlpSide(cmd["options"], cmd["weights"])
            else:
                side = PyelmoSide(cmd["options"], cmd["weights"], REDUCED.get(side_name, "float32"))
            batches = json.loads(Path(cmd["batches"]).read_text())
        elif op == "time":
            answer["gflops"] = matmul_rate(torch) if cmd.get("gemm", True) else {"mkl": 0.0, "onednn": 0.0, "bf16": 0.0}
            start = time.perf_counter()
            for batch in batches:
                side.run(batch)
            answer["seconds"] = time.perf_counter() - start
        elif op == "outputs":
            arrays = [a for batch in batches for a in side.run(batch, exact=cmd.get("exact", False))]
            np.savez(cmd["path"], *arrays)
        elif op == "latency":  # seconds per sentence, one at a time
            runner = side.sentence_runner(cmd["cache"])
            answer["seconds"] = []
            for tokens in json.loads(Path(cmd["sentences"]).read_text()):
                start = time.perf_counter()
                runner(tokens)
                answer["seconds"].append(time.perf_counter() - start)
        elif op == "quit":
            break
        elif op != "rss":
            raise ValueError(f"unknown op {op!r}")
        answer["rss_mb"] = peak_rss_mb()
        out.write(json.dumps(answer) + "\n")
        out.flush()


def reference_embed_file(side, input_path: str, output_path: str, batch_size: int) -> dict:
    """AllenNLP's ``ElmoEmbedder.embed_file`` loop (--all, consecutive batches) on its ``_ElmoBiLm``."""
    import h5py

    lines = [line.strip() for line in Path(input_path).read_text(encoding="utf-8").splitlines()]
    sentence_to_index = {}
    tokens = 0
    with h5py.File(output_path, "w") as fout:
        for i in range(0, len(lines), batch_size):
            batch = [line.split() for line in lines[i : i + batch_size]]
            for k, emb in enumerate(side.run(batch)):
                fout.create_dataset(str(i + k), emb.shape, dtype="float32", data=emb)
                sentence_to_index[lines[i + k]] = str(i + k)
                tokens += len(batch[k])
        dataset = fout.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())
        dataset[0] = json.dumps(sentence_to_index)
    return {"tokens": tokens, "lines": len(lines)}


def embed_file_process(options: str, weights: str, input_path: str, output_path: str, threads: int,
                       result_path: str) -> None:
    """AllenNLP's whole-file run, in a process of its own: load the model, run its ``embed_file`` loop, write
    ``{"startup", "loop"}`` seconds (from process start) to ``result_path``, and exit as Python does (as its
    ``allennlp elmo`` command would)."""
    import torch

    torch.set_num_threads(threads)
    side = AllennlpSide(options, weights)
    loaded = time.perf_counter()
    reference_embed_file(side, input_path, output_path, 32)
    done = time.perf_counter()
    Path(result_path).write_text(json.dumps({"startup": loaded - PROCESS_START, "loop": done - loaded}))


def pyelmo_embed_command(options: Path, weights: Path, text: Path, out: Path, threads: int) -> list[str]:
    """``pyelmo embed --all`` of ``text`` with the bilm-tf ``options`` and ``weights``, ``--threads``: the command a
    user runs, under this Python (its tree: ``PYTHONPATH``)."""
    return [sys.executable, "-m", "pyelmo", "embed", "--all", "--options-file", str(options), "--weight-file",
            str(weights), "--threads", str(threads), "--no-progress", "--overwrite", str(text), str(out)]


class Worker(JsonWorker):
    """This script's ``--worker SIDE`` under ``python`` (pyelmo's or the AllenNLP environment's)."""

    def __init__(self, python: str, side: str, env: dict | None = None) -> None:
        super().__init__([python, "-W", "ignore", __file__, "--worker", side], env, cwd="/tmp", name=side)


# -- model FLOPs --------------------------------------------------------------------------
def flops_per_position(config) -> float:
    c, lstm = config.char_cnn, config.lstm
    conv = sum(2 * (c.max_characters_per_token - w + 1) * c.embedding_dim * w * n for w, n in c.filters)
    highway = c.n_highway * 2 * 2 * c.n_filters**2
    projection = 2 * c.n_filters * lstm.projection_dim
    per_layer = 2 * (lstm.projection_dim * 4 * lstm.dim + lstm.projection_dim * 4 * lstm.dim + lstm.dim * lstm.projection_dim)
    return conv + highway + projection + 2 * lstm.n_layers * per_layer


def write_model(name: str, workdir: Path, seed: int = 0) -> tuple[Path, Path]:
    import torch

    from pyelmo.modeling.bilm import BiLM
    from pyelmo.config import preset
    from pyelmo.modelio.weights import save_bilm_hdf5

    options, weights = workdir / f"{name}_options.json", workdir / f"{name}_weights.hdf5"
    if not weights.exists():
        # PyTorch's default initialisation. (Much larger random weights, e.g. N(0, 0.05), make the
        # 4096-cell recurrence chaotic: float rounding differences then grow ~10x every 8 steps,
        # between any two exact implementations alike; trained weights are not like that.)
        torch.manual_seed(seed)
        save_bilm_hdf5(BiLM(preset(name)), options, weights)
    return options, weights


def cosine_p1(path_a: Path, path_b: Path) -> float:
    """The 1st percentile, over tokens and layers, of the per-token cosines between two outputs."""
    import numpy as np

    with np.load(path_a) as a, np.load(path_b) as b:
        cos = [((a[k] * b[k]).sum(-1) / np.linalg.norm(a[k], axis=-1) / np.linalg.norm(b[k], axis=-1)).ravel()
               for k in a.files]
    return float(np.percentile(np.concatenate(cos), 1))


def weight_memory(args, workdir: Path) -> None:
    """Resident memory of a loaded model per precision (``--weight-memory``), each in a fresh process."""
    options, weights = write_model(args.memory_config, workdir)
    print(f"\nWeight memory of a loaded `{args.memory_config}` (ElmoEmbedder, fresh process each; MB)\n")
    print("| precision | RSS after imports | RSS after loading | weights (difference) | share of exact | peak RSS |")
    print("|---|---|---|---|---|---|")
    exact = None
    for precision in ("float32", "int8"):
        proc = subprocess.run([sys.executable, __file__, "--weight-memory-process", str(options), str(weights), precision],
                              capture_output=True, text=True, check=True)
        before, after, peak = json.loads(proc.stdout.strip().splitlines()[-1])
        exact = exact or after - before
        print(f"| {precision} | {before:.0f} | {after:.0f} | {after - before:.0f} | {100 * (after - before) / exact:.0f}% "
              f"| {peak:.0f} |")


def weight_memory_process(options: str, weights: str, precision: str) -> None:
    import gc

    import torch  # noqa: F401  (imports first: their memory is not the model's)
    from pyelmo.embedding.embedder import ElmoEmbedder

    def rss_mb() -> float:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    before = rss_mb()
    embedder = ElmoEmbedder(options, weights, precision=precision)
    gc.collect()
    print(json.dumps([before, rss_mb(), peak_rss_mb()]))
    del embedder


def max_abs_diff(path_a: Path, path_b: Path) -> float:
    import numpy as np

    with np.load(path_a) as a, np.load(path_b) as b:
        return max(float(np.abs(a[k] - b[k]).max(initial=0.0)) for k in a.files)


# -- the table ----------------------------------------------------------------------------
def throughput_rows(args, workdir: Path) -> list[dict]:
    import numpy as np

    from pyelmo.config import preset

    rows = []
    for name in args.configs:
        options, weights = write_model(name, workdir)
        for batch_size in args.batch_sizes:
            n_sent = args.sentences_b32 if batch_size > 1 else args.sentences_b1
            sentences, batches = batch_workload(n_sent, batch_size)
            batch_file = workdir / f"batches_{name}_{batch_size}.json"
            batch_file.write_text(json.dumps(batches))
            tokens = sum(len(s) for s in sentences)
            sides = {"pyelmo": Worker(sys.executable, "pyelmo")}
            if args.base_src:  # the same worker code on another revision's sources, a kernel cache of its own
                env = tree_env(args.base_src, workdir / f"kernels-base-{name}-{batch_size}")
                sides["pyelmo-base"] = Worker(sys.executable, "pyelmo", env=env)
            if args.reference_python:
                sides["allennlp"] = Worker(args.reference_python, "allennlp")
            if args.bf16:
                sides["pyelmo-bf16"] = Worker(sys.executable, "pyelmo-bf16")
            if args.int8:
                sides["pyelmo-int8"] = Worker(sys.executable, "pyelmo-int8")
            try:
                for w in sides.values():
                    w.ask(op="init", threads=args.threads, options=str(options), weights=str(weights),
                          batches=str(batch_file))
                    w.ask(op="time", gemm=not args.no_gemm)  # warm-up
                samples: dict[str, list[dict]] = {k: [] for k in sides}
                for round_ in range(args.repeats):  # every other round in reverse order: no side always first
                    for k, w in (list(sides.items()) if round_ % 2 == 0 else reversed(sides.items())):
                        samples[k].append(w.ask(op="time", gemm=not args.no_gemm))
                fast, exact = workdir / "fast.npz", workdir / "exact.npz"
                sides["pyelmo"].ask(op="outputs", path=str(fast))
                sides["pyelmo"].ask(op="outputs", path=str(exact), exact=True)
                row = {"config": name, "batch": batch_size, "sentences": n_sent, "tokens": tokens,
                       "diff_exact": max_abs_diff(fast, exact)}
                for side in REDUCED:
                    if side in sides:
                        low = workdir / f"{side}.npz"
                        sides[side].ask(op="outputs", path=str(low))
                        row[f"diff_exact_{side}"] = max_abs_diff(low, exact)
                        row[f"cos_p1_{side}"] = cosine_p1(low, exact)
                        with np.load(exact) as e:
                            row["exact_max_abs"] = max(float(np.abs(e[k]).max(initial=0.0)) for k in e.files)
                if "allennlp" in sides:
                    ref = workdir / "allennlp.npz"
                    sides["allennlp"].ask(op="outputs", path=str(ref))
                    row["diff_allennlp"] = max_abs_diff(fast, ref)
                flops = flops_per_position(preset(name))
                for k in sides:
                    seconds = statistics.median(s["seconds"] for s in samples[k])
                    mkl = statistics.median(s["gflops"]["mkl"] for s in samples[k])
                    onednn = statistics.median(s["gflops"]["onednn"] for s in samples[k])
                    row[k] = {"tok_s": tokens / seconds, "gemm": tokens * flops / seconds / 1e9 / max(mkl, onednn, 1e-9),
                              "matmul_gflops": max(mkl, onednn), "mkl_gflops": mkl, "onednn_gflops": onednn,
                              "rss_mb": sides[k].ask(op="rss")["rss_mb"]}
            finally:
                for w in sides.values():
                    w.close()
            rows.append(row)
            print(f"# done {name} batch {batch_size}: {json.dumps(row)}", file=sys.stderr, flush=True)
    return rows


def print_table(rows: list[dict]) -> None:
    header = ("config", "batch", "pyelmo tok/s", "AllenNLP tok/s", "ratio", "diff vs exact", "diff vs AllenNLP",
              "GEMM frac pyelmo", "GEMM frac AllenNLP", "GEMM GF/s torch.mm / oneDNN", "peak RSS MB pyelmo / AllenNLP")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        p, a = r["pyelmo"], r.get("allennlp")
        print("| " + " | ".join([
            r["config"], str(r["batch"]), f"{p['tok_s']:.1f}", f"{a['tok_s']:.1f}" if a else "-",
            f"{p['tok_s'] / a['tok_s']:.2f}x" if a else "-", f"{r['diff_exact']:.2e}",
            f"{r['diff_allennlp']:.2e}" if a else "-", f"{100 * p['gemm']:.0f}%" if p["matmul_gflops"] else "-",
            f"{100 * a['gemm']:.0f}%" if a and a["matmul_gflops"] else "-",
            f"{p['mkl_gflops']:.0f} / {p['onednn_gflops']:.0f}",
            f"{p['rss_mb']:.0f} / {a['rss_mb']:.0f}" if a else f"{p['rss_mb']:.0f}",
        ]) + " |")
        for side, flag in (("pyelmo-bf16", "--bf16"), ("pyelmo-int8", "--precision int8")):
            if side not in r:  # an explicit reduced-precision mode: its error is the diff vs exact
                continue
            b = r[side]
            print("| " + " | ".join([
                f"{r['config']} {flag}", str(r["batch"]), f"{b['tok_s']:.1f} ({b['tok_s'] / p['tok_s']:.2f}x exact)",
                f"{a['tok_s']:.1f}" if a else "-", f"{b['tok_s'] / a['tok_s']:.2f}x" if a else "-",
                f"{r[f'diff_exact_{side}']:.2e} (outputs up to {r['exact_max_abs']:.2f}; cosine p1 "
                f"{r[f'cos_p1_{side}']:.5f})", "-", "-", "-", "-", f"{b['rss_mb']:.0f}",
            ]) + " |")


# -- end to end and memory ----------------------------------------------------------------
def run_cli(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Run a command (in ``env``); (wall seconds, peak RSS MB of that process)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{argv} failed")
    return seconds, usage.ru_maxrss / 1024


def latency_sentences(n: int, length: int, seed: int) -> list[list[str]]:
    """``n`` sentences of exactly ``length`` tokens, cut from :func:`make_sentences`' text."""
    words = [w for s in make_sentences(n * length // 10 + 10, seed=seed) for w in s]
    return [words[i * length : (i + 1) * length] for i in range(n)]


def latency_table(args, workdir: Path) -> None:
    """Batch 1 as a service sees it: ``--latency-sentences`` sentences of ``--latency-tokens`` tokens, one at
    a time, through pyelmo's ``ElmoEmbedder.embed_sentence`` (defaults: a token cache, fresh each round;
    and with the cache off) and AllenNLP's ``_ElmoBiLm`` on a batch of one (what its ``embed_sentence``
    runs). Rounds interleave the sides; each side's figure is its median round's mean latency."""
    name = args.latency_config
    options, weights = write_model(name, workdir)
    sentences = workdir / "latency.json"
    sentences.write_text(json.dumps(latency_sentences(args.latency_sentences, args.latency_tokens, seed=11)))
    sides = {"pyelmo": ("pyelmo", True), "pyelmo, token cache off": ("pyelmo", False)}
    if args.reference_python:
        sides["AllenNLP"] = ("allennlp", False)
    workers = {}
    try:
        for label, (side, _) in sides.items():
            python = args.reference_python if side == "allennlp" else sys.executable
            workers[label] = w = Worker(python, side)
            w.ask(op="init", threads=args.threads, options=str(options), weights=str(weights),
                  batches=str(workdir / "empty.json"))
            w.ask(op="latency", sentences=str(sentences), cache=sides[label][1])  # warm-up round
        rounds: dict[str, list[float]] = {label: [] for label in sides}
        for _ in range(args.repeats):
            for label, w in workers.items():
                seconds = w.ask(op="latency", sentences=str(sentences), cache=sides[label][1])["seconds"]
                rounds[label].append(statistics.mean(seconds))
    finally:
        for w in workers.values():
            w.close()
    print(f"\nBatch 1, config {name}: {args.latency_sentences} sentences of {args.latency_tokens} tokens one at a "
          f"time, {args.repeats} rounds (median), load average {os.getloadavg()[0]:.1f}; {machine_line(args.threads)}")
    print("| side | ms per sentence | sentences/s | tokens/s | pyelmo / this |\n|---|---|---|---|---|")
    ms = {label: 1e3 * statistics.median(r) for label, r in rounds.items()}
    for label, value in ms.items():
        print(f"| {label} | {value:.2f} | {1e3 / value:.1f} | {1e3 * args.latency_tokens / value:.0f} | "
              f"{value / ms['pyelmo']:.2f}x |")


def end_to_end(args, workdir: Path) -> None:
    """Whole file against whole file, on the same ``--e2e-lines`` lines: each side in a process of its
    own, timed from its start (model loading included) to its end (AllenNLP's load and loop also apart,
    measured inside). pyelmo runs before and after AllenNLP (the machine is shared: their mean),
    ``--e2e-rounds`` times; the ``--base-src`` tree likewise, beside it."""
    name = args.e2e_config
    options, weights = write_model(name, workdir)
    sentences = make_sentences(args.e2e_lines, seed=7)
    text = workdir / f"e2e_{args.e2e_lines}.txt"
    text.write_text("\n".join(" ".join(s) for s in sentences) + "\n", encoding="utf-8")
    tokens = sum(len(s) for s in sentences)
    mine = ["pyelmo", "base"] if args.base_src else ["pyelmo"]
    order = [*mine, "allennlp", *reversed(mine)] if args.reference_python else mine
    rounds = [{side: [] for side in ["allennlp", *mine]} for _ in range(args.e2e_rounds)]
    for k, runs in enumerate(rounds):
        for side in order:
            out, result = workdir / f"e2e_{side}.hdf5", workdir / "e2e_result.json"
            if side == "allennlp":
                seconds, rss = run_cli([args.reference_python, "-W", "ignore", __file__, "--embed-file-process",
                                        str(options), str(weights), str(text), str(out), str(args.threads), str(result)])
                runs[side].append({"whole": seconds, "rss": rss, **json.loads(result.read_text())})
            else:
                env = tree_env(args.base_src, Path(tempfile.mkdtemp(prefix="e2e-base-", dir=workdir)) / "kernels") \
                    if side == "base" else None
                seconds, rss = run_cli(pyelmo_embed_command(options, weights, text, out, args.threads), env)
                runs[side].append({"whole": seconds, "rss": rss})
            out.unlink()
    print(f"\nEnd to end, config {name}, the same {args.e2e_lines} lines ({tokens} tokens) on both sides, --all, "
          f"load average {os.getloadavg()[0]:.1f}; {machine_line(args.threads)}")
    print("| round | side | run | whole process s | startup s | loop s | tokens/s whole | tokens/s loop | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    labels = {"pyelmo": "`pyelmo embed --all`", "allennlp": "AllenNLP embed_file loop, batch 32",
              "base": f"`pyelmo embed --all` of {args.base_src}"}
    for k, runs in enumerate(rounds, start=1):
        for side, side_runs in runs.items():
            for j, r in enumerate(side_runs, start=1):
                parts = (f"{r['startup']:.1f} | {r['loop']:.1f} | {tokens / r['whole']:.0f} | {tokens / r['loop']:.0f}"
                         if "loop" in r else f"- | - | {tokens / r['whole']:.0f} | -")
                print(f"| {k} | {labels[side]} | {j} | {r['whole']:.1f} | {parts} | {r['rss']:.0f} |")
    for side in mine if rounds[0]["allennlp"] else []:
        ratios = [runs["allennlp"][0]["whole"] / statistics.mean(r["whole"] for r in runs[side]) for runs in rounds]
        print(f"ratio {side} (whole process, AllenNLP seconds / mean {side} seconds): "
              f"{', '.join(f'{x:.2f}x' for x in ratios)}; median {statistics.median(ratios):.2f}x")


def memory_check(args, workdir: Path) -> None:
    """Peak RSS of ``pyelmo embed --top`` on 20k vs 200k lines (``--memory-lines``); model ``--memory-config``."""
    import torch

    from pyelmo.modeling.bilm import BiLM
    from pyelmo.config import CharCNNConfig, ElmoConfig, LSTMConfig
    from pyelmo.modelio.weights import save_bilm_hdf5

    if args.memory_config == "tiny":
        torch.manual_seed(0)
        config = ElmoConfig(char_cnn=CharCNNConfig(filters=((1, 8), (2, 8), (3, 16)), n_highway=1, embedding_dim=4),
                            lstm=LSTMConfig(dim=32, projection_dim=16))
        options, weights = workdir / "tiny_options.json", workdir / "tiny_weights.hdf5"
        save_bilm_hdf5(BiLM(config), options, weights)
    else:
        options, weights = write_model(args.memory_config, workdir)
    print(f"\nPeak memory of `pyelmo embed --top` ({args.memory_config} model, --threads {args.memory_threads}, "
          "defaults otherwise):")
    print("| lines | seconds | peak RSS MB |\n|---|---|---|")
    results = []
    for n in args.memory_lines:
        text = workdir / f"mem_{n}.txt"
        with text.open("w", encoding="utf-8") as f:
            for start in range(0, n, 20_000):
                for s in make_sentences(min(20_000, n - start), seed=start):
                    f.write(" ".join(s) + "\n")
        out = workdir / "mem.hdf5"
        seconds, rss = run_cli([sys.executable, "-m", "pyelmo", "embed", str(text), str(out), "--top", "--overwrite", "--no-progress",
                                "--threads", str(args.memory_threads), "--options-file", str(options),
                                "--weight-file", str(weights)])
        out.unlink()
        text.unlink()
        results.append(rss)
        print(f"| {n} | {seconds:.1f} | {rss:.0f} |")
    print(f"peak RSS {args.memory_lines[-1]} / {args.memory_lines[0]} lines: {results[-1] / results[0]:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", choices=["pyelmo", "pyelmo-bf16", "pyelmo-int8", "allennlp"], help=argparse.SUPPRESS)
    parser.add_argument("--reference-python", help="python of the AllenNLP environment (e.g. /tmp/allennlp-ref/bin/python)")
    parser.add_argument("--configs", default="original,small", type=lambda s: s.split(","))
    parser.add_argument("--batch-sizes", default="1,32", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--sentences-b32", type=int, default=64, help="sentences per timed run at batch > 1")
    parser.add_argument("--sentences-b1", type=int, default=8, help="sentences per timed run at batch 1")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-table", action="store_true")
    parser.add_argument("--base-src", help="also time pyelmo from this source folder (another revision's src/, "
                        "in the package or the flat layout, with an empty kernel-choice cache of its own), "
                        "interleaved with the current one, e.g. a `git worktree` of the previous commit")
    parser.add_argument("--no-gemm", action="store_true", help="skip the matmul-rate measurement of every sample")
    parser.add_argument("--bf16", action="store_true",
                        help="add rows for pyelmo's explicit reduced-precision mode (embed --bf16)")
    parser.add_argument("--int8", action="store_true", help="add rows for the int8 mode (embed --precision int8)")
    parser.add_argument("--weight-memory", action="store_true",
                        help="resident memory of a loaded --memory-config model per precision (fresh processes)")
    parser.add_argument("--weight-memory-process", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--e2e-lines", type=int, default=0,
                        help="end to end: both sides embed the same file of this many lines, whole process each")
    parser.add_argument("--e2e-config", default="small")
    parser.add_argument("--e2e-rounds", type=int, default=1, help="rounds of the end-to-end comparison")
    parser.add_argument("--latency-sentences", type=int, default=0,
                        help="batch-1 latency table through ElmoEmbedder.embed_sentence on this many sentences "
                             "(at least 128 for a stable figure)")
    parser.add_argument("--latency-tokens", type=int, default=20, help="tokens per sentence of the latency table")
    parser.add_argument("--latency-config", default="small")
    parser.add_argument("--embed-file-process", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument("--memory-check", action="store_true")
    parser.add_argument("--memory-config", default="tiny", choices=["tiny", "small", "original"],
                        help="model of the memory check (tiny: random 32-cell biLM; others: released sizes)")
    parser.add_argument("--memory-threads", type=int, default=1, help="threads for the memory check (default 1)")
    parser.add_argument("--memory-lines", default="20000,200000", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--workdir", help="where to keep models and data (default: a temporary folder)")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    if args.weight_memory_process:
        weight_memory_process(*args.weight_memory_process)
        return
    if args.embed_file_process:
        options, weights, text, out, threads, result = args.embed_file_process
        embed_file_process(options, weights, text, out, int(threads), result)
        return
    with tempfile.TemporaryDirectory(prefix="pyelmo-bench-") as tmp:
        workdir = Path(args.workdir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "empty.json").write_text("[]")
        print(f"date {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, threads {args.threads}, "
              f"load average {os.getloadavg()[0]:.1f}, command: {' '.join(sys.argv)}")
        if not args.skip_table:
            rows = throughput_rows(args, workdir)
            print(f"\n{machine_line(args.threads)}; load average {os.getloadavg()[0]:.1f}")
            print_table(rows)
            if args.base_src:
                print("\n| config | batch | pyelmo tok/s (this tree) | pyelmo tok/s (--base-src) | this / base |")
                print("|---|---|---|---|---|")
                for r in rows:
                    p, b = r["pyelmo"]["tok_s"], r["pyelmo-base"]["tok_s"]
                    print(f"| {r['config']} | {r['batch']} | {p:.1f} | {b:.1f} | {p / b:.2f}x |")
        if args.latency_sentences:
            latency_table(args, workdir)
        if args.e2e_lines:
            end_to_end(args, workdir)
        if args.memory_check:
            memory_check(args, workdir)
        if args.weight_memory:
            weight_memory(args, workdir)


if __name__ == "__main__":
    main()
