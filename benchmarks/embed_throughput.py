"""ELMo embedding throughput on CPU: pyelmo against AllenNLP 2.10.1's ``_ElmoBiLm``, side by side.

One table: for each config (``original``, ``small``: random weights of the released
sizes, written to the bilm-tf HDF5 so that both implementations load identical weights)
and batch size (1, 32): tokens/s of each side, the ratio, max-abs-diff of pyelmo's fast
path against its exact fp32 path and against AllenNLP, GEMM fraction (useful FLOPs/s /
the machine's fp32 matmul rate: the faster of ``torch.mm`` and oneDNN on a 2048^3 product,
measured in the same process, same run) and peak RSS of the process.

Each (side, config, batch size) runs in its own worker process (so its peak RSS is its
own); the two sides' timed runs are interleaved (pyelmo, AllenNLP, pyelmo, ...) and the
median of ``--repeats`` is reported. AllenNLP's states are reset before every batch.
pyelmo's token cache is off in this table (every repeat recomputes every token); the
end-to-end run below uses the defaults, cache included. ``--bf16`` adds a row per
(config, batch) for pyelmo's explicit reduced-precision mode (``embed --bf16``), timed in
the same interleaved rounds, with its max-abs-diff against the exact fp32 path.

    python benchmarks/embed_throughput.py --reference-python /tmp/allennlp-ref/bin/python
    python benchmarks/embed_throughput.py --e2e-lines 20000 --memory-check   # + end to end, memory

``--e2e-lines N``: ``pyelmo embed`` (default settings, ``--all``) on an N-line file, end to
end (process start to finish), against AllenNLP's ``embed_file`` loop (batch 32,
consecutive lines, states reset per batch, one dataset per line + sentence_to_index),
measured in the reference worker on the first ``--e2e-reference-lines`` lines, just before and
just after the pyelmo run (its
``allennlp.commands.elmo`` module needs nltk, not installed, so the loop is reproduced).
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

MATMUL_N = 2048


# -- shared helpers (stdlib + torch only: they run in both environments) ------------------
def matmul_rate(torch) -> dict:
    """fp32 GFLOP/s of a 2048^3 matrix product (median of 5): ``torch.mm`` (MKL here) and oneDNN
    with a prepacked weight (the library pyelmo's fast path uses; absent: 0). On this AMD CPU
    oneDNN is the faster of the two, so the machine's rate is the larger one."""
    a, b = torch.randn(MATMUL_N, MATMUL_N), torch.randn(MATMUL_N, MATMUL_N)
    runs = {"mkl": lambda: a @ b}
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(b, MATMUL_N)
        runs["onednn"] = lambda: torch.ops.mkldnn._linear_pointwise(a, packed, None, "none", [], "")
    except (AttributeError, RuntimeError):
        pass
    rates = {"mkl": 0.0, "onednn": 0.0}
    for name, run in runs.items():
        run()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        rates[name] = 2 * MATMUL_N**3 / statistics.median(times) / 1e9
    return rates


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


# -- workers ------------------------------------------------------------------------------
class PyelmoSide:
    def __init__(self, options: str, weights: str, bf16: bool = False) -> None:
        from pyelmo.weights import load_bilm_hdf5

        self.model = load_bilm_hdf5(options, weights)
        try:
            from pyelmo.strategy import RunOptions
        except ImportError:  # a revision before pyelmo.strategy (--base-src): settings were model attributes
            import torch

            self.options = None
            self.model.token_cache = None
            self.model.inference_dtype = torch.bfloat16 if bf16 else None
        else:
            self.options = RunOptions.inference(bf16=bf16)  # no token cache: every repeat recomputes every token

    def run(self, batch, exact: bool = False):
        import torch

        from pyelmo.characters import batch_to_ids

        ids = batch_to_ids(batch)
        with torch.inference_mode():
            if self.options is None:
                self.model.use_fast_path = not exact
                layers = self.model(ids).layers.numpy()
            else:
                layers = self.model(ids, options=None if exact else self.options).layers.numpy()
        return [layers[:, k, : len(s)] for k, s in enumerate(batch)]


class AllennlpSide:
    def __init__(self, options: str, weights: str) -> None:
        import warnings

        warnings.filterwarnings("ignore")
        from allennlp.modules.elmo import _ElmoBiLm

        self.module = _ElmoBiLm(options, weights).eval()

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
                side = PyelmoSide(cmd["options"], cmd["weights"], bf16=side_name == "pyelmo-bf16")
            batches = json.loads(Path(cmd["batches"]).read_text())
        elif op == "time":
            answer["gflops"] = matmul_rate(torch) if cmd.get("gemm", True) else {"mkl": 0.0, "onednn": 0.0}
            start = time.perf_counter()
            for batch in batches:
                side.run(batch)
            answer["seconds"] = time.perf_counter() - start
        elif op == "outputs":
            arrays = [a for batch in batches for a in side.run(batch, exact=cmd.get("exact", False))]
            np.savez(cmd["path"], *arrays)
        elif op == "embed_file":
            answer.update(reference_embed_file(side, cmd["input"], cmd["output"], cmd["batch_size"]))
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

    start = time.perf_counter()
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
    return {"seconds": time.perf_counter() - start, "tokens": tokens, "lines": len(lines)}


class Worker:
    def __init__(self, python: str, side: str, env: dict | None = None) -> None:
        self.proc = subprocess.Popen([python, "-W", "ignore", __file__, "--worker", side], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env, cwd="/tmp")

    def ask(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker died (exit {self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        try:
            self.ask(op="quit")
        except (RuntimeError, BrokenPipeError):
            pass
        self.proc.wait()


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

    from pyelmo.bilm import BiLM
    from pyelmo.config import preset
    from pyelmo.weights import save_bilm_hdf5

    options, weights = workdir / f"{name}_options.json", workdir / f"{name}_weights.hdf5"
    if not weights.exists():
        # PyTorch's default initialisation. (Much larger random weights, e.g. N(0, 0.05), make the
        # 4096-cell recurrence chaotic: float rounding differences then grow ~10x every 8 steps,
        # between any two exact implementations alike; trained weights are not like that.)
        torch.manual_seed(seed)
        save_bilm_hdf5(BiLM(preset(name)), options, weights)
    return options, weights


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
            sentences = make_sentences(n_sent, seed=1000 + batch_size)
            batches = [sentences[i : i + batch_size] for i in range(0, len(sentences), batch_size)]
            batch_file = workdir / f"batches_{name}_{batch_size}.json"
            batch_file.write_text(json.dumps(batches))
            tokens = sum(len(s) for s in sentences)
            sides = {"pyelmo": Worker(sys.executable, "pyelmo")}
            if args.base_src:  # the same worker code on another revision's sources
                sides["pyelmo-base"] = Worker(sys.executable, "pyelmo", env={**os.environ, "PYTHONPATH": args.base_src})
            if args.reference_python:
                sides["allennlp"] = Worker(args.reference_python, "allennlp")
            if args.bf16:
                sides["pyelmo-bf16"] = Worker(sys.executable, "pyelmo-bf16")
            try:
                for w in sides.values():
                    w.ask(op="init", threads=args.threads, options=str(options), weights=str(weights),
                          batches=str(batch_file))
                    w.ask(op="time", gemm=not args.no_gemm)  # warm-up
                samples: dict[str, list[dict]] = {k: [] for k in sides}
                for _ in range(args.repeats):
                    for k, w in sides.items():
                        samples[k].append(w.ask(op="time", gemm=not args.no_gemm))
                fast, exact = workdir / "fast.npz", workdir / "exact.npz"
                sides["pyelmo"].ask(op="outputs", path=str(fast))
                sides["pyelmo"].ask(op="outputs", path=str(exact), exact=True)
                row = {"config": name, "batch": batch_size, "sentences": n_sent, "tokens": tokens,
                       "diff_exact": max_abs_diff(fast, exact)}
                if "pyelmo-bf16" in sides:
                    low = workdir / "bf16.npz"
                    sides["pyelmo-bf16"].ask(op="outputs", path=str(low))
                    row["diff_exact_bf16"] = max_abs_diff(low, exact)
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
            f"{100 * a['gemm']:.0f}%" if a else "-", f"{p['mkl_gflops']:.0f} / {p['onednn_gflops']:.0f}",
            f"{p['rss_mb']:.0f} / {a['rss_mb']:.0f}" if a else f"{p['rss_mb']:.0f}",
        ]) + " |")
        if "pyelmo-bf16" in r:  # the explicit reduced-precision mode (--bf16): its error is the diff vs exact
            b = r["pyelmo-bf16"]
            print("| " + " | ".join([
                f"{r['config']} --bf16", str(r["batch"]), f"{b['tok_s']:.1f}", f"{a['tok_s']:.1f}" if a else "-",
                f"{b['tok_s'] / a['tok_s']:.2f}x" if a else "-",
                f"{r['diff_exact_bf16']:.2e} (outputs up to {r['exact_max_abs']:.2f})", "-", "-", "-", "-",
                f"{b['rss_mb']:.0f}",
            ]) + " |")


# -- end to end and memory ----------------------------------------------------------------
def run_cli(argv: list[str]) -> tuple[float, float]:
    """Run a command; (wall seconds, peak RSS MB of that process)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{argv} failed")
    return seconds, usage.ru_maxrss / 1024


def pyelmo_cli() -> str:
    return str(Path(sys.executable).with_name("pyelmo"))


def end_to_end(args, workdir: Path) -> None:
    """``pyelmo embed`` with default settings on the whole file; AllenNLP's loop on a prefix, run just
    before and just after (the machine is shared: the mean of the two is the reference rate)."""
    name = args.e2e_config
    options, weights = write_model(name, workdir)
    sentences = make_sentences(args.e2e_lines, seed=7)
    text = workdir / f"e2e_{args.e2e_lines}.txt"
    text.write_text("\n".join(" ".join(s) for s in sentences) + "\n", encoding="utf-8")
    tokens = sum(len(s) for s in sentences)
    reference = []

    def run_reference() -> None:
        ref_lines = min(args.e2e_reference_lines, args.e2e_lines)
        ref_text = workdir / "e2e_reference.txt"
        ref_text.write_text("\n".join(" ".join(s) for s in sentences[:ref_lines]) + "\n", encoding="utf-8")
        batches = workdir / "empty.json"
        batches.write_text("[]")
        w = Worker(args.reference_python, "allennlp")
        try:
            w.ask(op="init", threads=args.threads, options=str(options), weights=str(weights), batches=str(batches))
            reference.append(w.ask(op="embed_file", input=str(ref_text), output=str(workdir / "e2e_ref.hdf5"),
                                   batch_size=32))
        finally:
            w.close()
            (workdir / "e2e_ref.hdf5").unlink(missing_ok=True)

    if args.reference_python:
        run_reference()
    out = workdir / "e2e_pyelmo.hdf5"
    seconds, rss = run_cli([pyelmo_cli(), "embed", str(text), str(out), "--overwrite", "--no-progress",
                            "--threads", str(args.threads), "--options-file", str(options), "--weight-file", str(weights)])
    size_gb = out.stat().st_size / 1e9
    out.unlink()
    if args.reference_python:
        run_reference()
    print(f"\nEnd to end, config {name}, {args.e2e_lines} lines, {tokens} tokens, --all (output {size_gb:.1f} GB), "
          f"load average {os.getloadavg()[0]:.1f}:")
    print("| side | lines | tokens | seconds | tokens/s | peak RSS MB |\n|---|---|---|---|---|---|")
    print(f"| pyelmo embed (defaults) | {args.e2e_lines} | {tokens} | {seconds:.1f} | {tokens / seconds:.0f} | {rss:.0f} |")
    for when, r in zip(("before", "after"), reference):
        print(f"| AllenNLP embed_file loop, batch 32, first {r['lines']} lines ({when}) | {r['lines']} | {r['tokens']} | "
              f"{r['seconds']:.1f} | {r['tokens'] / r['seconds']:.0f} | {r['rss_mb']:.0f} |")
    if reference:
        rate = statistics.mean(r["tokens"] / r["seconds"] for r in reference)
        print(f"ratio (tokens/s, pyelmo / mean AllenNLP): {tokens / seconds / rate:.2f}x")


def memory_check(args, workdir: Path) -> None:
    """Peak RSS of ``pyelmo embed --top`` on 20k vs 200k lines (``--memory-lines``); model ``--memory-config``."""
    import torch

    from pyelmo.bilm import BiLM
    from pyelmo.config import CharCNNConfig, ElmoConfig, LSTMConfig
    from pyelmo.weights import save_bilm_hdf5

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
        seconds, rss = run_cli([pyelmo_cli(), "embed", str(text), str(out), "--top", "--overwrite", "--no-progress",
                                "--threads", str(args.memory_threads), "--options-file", str(options),
                                "--weight-file", str(weights)])
        out.unlink()
        text.unlink()
        results.append(rss)
        print(f"| {n} | {seconds:.1f} | {rss:.0f} |")
    print(f"peak RSS {args.memory_lines[-1]} / {args.memory_lines[0]} lines: {results[-1] / results[0]:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", choices=["pyelmo", "pyelmo-bf16", "allennlp"], help=argparse.SUPPRESS)
    parser.add_argument("--reference-python", help="python of the AllenNLP environment (e.g. /tmp/allennlp-ref/bin/python)")
    parser.add_argument("--configs", default="original,small", type=lambda s: s.split(","))
    parser.add_argument("--batch-sizes", default="1,32", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--sentences-b32", type=int, default=64, help="sentences per timed run at batch > 1")
    parser.add_argument("--sentences-b1", type=int, default=8, help="sentences per timed run at batch 1")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-table", action="store_true")
    parser.add_argument("--base-src", help="also time pyelmo from this source folder (another revision's src/), "
                        "interleaved with the current one, e.g. a `git worktree` of the previous commit")
    parser.add_argument("--no-gemm", action="store_true", help="skip the matmul-rate measurement of every sample")
    parser.add_argument("--bf16", action="store_true",
                        help="add rows for pyelmo's explicit reduced-precision mode (embed --bf16)")
    parser.add_argument("--e2e-lines", type=int, default=0, help="end-to-end `pyelmo embed` on this many lines")
    parser.add_argument("--e2e-config", default="small")
    parser.add_argument("--e2e-reference-lines", type=int, default=1000)
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
    with tempfile.TemporaryDirectory(prefix="pyelmo-bench-") as tmp:
        workdir = Path(args.workdir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        print(f"date {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, threads {args.threads}, "
              f"load average {os.getloadavg()[0]:.1f}, command: {' '.join(sys.argv)}")
        if not args.skip_table:
            rows = throughput_rows(args, workdir)
            print_table(rows)
            if args.base_src:
                print("\n| config | batch | pyelmo tok/s (this tree) | pyelmo tok/s (--base-src) | this / base |")
                print("|---|---|---|---|---|")
                for r in rows:
                    p, b = r["pyelmo"]["tok_s"], r["pyelmo-base"]["tok_s"]
                    print(f"| {r['config']} | {r['batch']} | {p:.1f} | {b:.1f} | {p / b:.2f}x |")
        if args.e2e_lines:
            end_to_end(args, workdir)
        if args.memory_check:
            memory_check(args, workdir)


if __name__ == "__main__":
    main()
