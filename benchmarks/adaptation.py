"""Adapt the shipped model to a domain it never saw, three ways, and compare validation perplexity (docs/TRAINING.md).

    python benchmarks/adaptation.py run --data DOMAIN_CORPUS --out RUNS [--steps 400]
    python benchmarks/adaptation.py report --out RUNS --png docs/adaptation.png
    python benchmarks/adaptation.py report --results benchmarks/adaptation_results.json   # the runs in the docs

Runs (each ``pyelmo train`` with configs/adapt.toml, one thread, the shipped vocabulary so that every
perplexity counts the same words): ``native`` (--init-from the shipped folder: its softmax continues),
``hdf5`` (--init-from the shipped model exported to the bilm-tf layout, options + weights only: a new
softmax, trained alone for the default freeze_bilm_steps first), ``scratch`` (the same model size from
random weights, the same steps: at least the adapted runs' CPU time). ``unadapted``: the shipped model
as it is. The test perplexity of each run's kept model (the best validation) is measured at the end.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "src" / "pyelmo" / "pretrained" / "english"
PYELMO = [sys.executable, "-m", "pyelmo"]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _perplexity(model: str, files: list[str]) -> dict:
    out = subprocess.run([*PYELMO, "perplexity", "--model", model, *files, "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def run(args: argparse.Namespace) -> None:
    out, data = Path(args.out), Path(args.data)
    out.mkdir(parents=True, exist_ok=True)
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").is_file() else {}
    valid, test = sorted(map(str, (data / "valid").glob("*.txt"))), sorted(map(str, (data / "test").glob("*.txt")))
    exported = out / "exported"
    if not (exported / "weights.hdf5").is_file():
        subprocess.run([*PYELMO, "export", "--format", "bilm-hdf5", str(exported)], check=True)
    scratch_config = out / "scratch.json"
    saved = json.loads((SHIPPED / "config.json").read_text())["training"]["config"]
    scratch_config.write_text(json.dumps({"char_cnn": saved["char_cnn"], "lstm": saved["lstm"]}))
    common = ["--config", str(ROOT / "configs" / "adapt.toml"), "--data", str(data), "--vocab",
              str(SHIPPED / "vocab.txt"), "--max-steps", str(args.steps), "--threads", "1", "--no-progress"]
    runs = {
        "native": ["--init-from", str(SHIPPED)],
        "hdf5": ["--init-from", str(exported / "options.json"), "--init-weight-file", str(exported / "weights.hdf5")],
        "scratch": ["--set", f"char_cnn.filters={json.dumps(saved['char_cnn']['filters'])}",
                    "--set", "char_cnn.n_highway=1", "--set", "char_cnn.embedding_dim=16",
                    "--set", "lstm.dim=256", "--set", "lstm.projection_dim=128", "--set", "lstm.n_layers=2",
                    "--set", "lstm.cell_clip=3.0", "--set", "lstm.proj_clip=3.0",
                    "--set", "lstm.use_skip_connections=true", "--set", "optim.warmup_steps=100"],
    }
    if "unadapted" not in results:
        results["unadapted"] = {"valid": _perplexity(str(SHIPPED), valid), "test": _perplexity(str(SHIPPED), test)}
    for name in args.runs.split(","):
        if name in results:
            continue
        before = _cpu()
        cmd = [*PYELMO, "train", *common, *runs[name], "--out", str(out / name), "--overwrite"]
        print(" ".join(cmd[2:]), flush=True)
        subprocess.run(cmd, check=True)
        cpu = _cpu() - before
        metrics = [json.loads(l) for l in (out / name / "metrics.jsonl").read_text().splitlines()]
        results[name] = {"command": " ".join(cmd[2:]), "cpu_seconds": round(cpu, 1),
                         "curve": [(m["step"], m["valid_ppl"]) for m in metrics if "valid_ppl" in m],
                         "test": _perplexity(str(out / name), test)}
        (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")


def report(args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = json.loads(Path(args.results or Path(args.out) / "results.json").read_text())
    base = results["unadapted"]
    print("| start | steps | CPU s | best valid ppl (step) | valid ppl at the last step | test ppl |")
    print("|---|---|---|---|---|---|")
    print(f"| shipped model, unadapted | 0 | 0 | {base['valid']['average']:.1f} | | {base['test']['average']:.1f} |")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.axhline(base["valid"]["average"], color="grey", ls="--", lw=1, label="unadapted")
    labels = {"native": "native folder (its softmax)", "hdf5": "bilm-tf HDF5 (new softmax)",
              "scratch": "from scratch"}
    for name in ("native", "hdf5", "scratch"):
        if name not in results:
            continue
        r = results[name]
        steps, ppl = zip(*r["curve"])
        best = min(r["curve"], key=lambda c: c[1])
        print(f"| {labels[name]} | {steps[-1]} | {r['cpu_seconds']:.0f} | {best[1]:.1f} ({best[0]}) | {ppl[-1]:.1f} | "
              f"{r['test']['average']:.1f} |")
        ax.plot(steps, ppl, marker=".", label=labels[name])
    if "hdf5" in results:
        ax.axvline(200, color="C1", lw=0.8, ls=":", label="HDF5 run: end of the softmax-only phase")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("validation perplexity")
    ax.set_title("Adapting the shipped model to a new domain")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.png, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["run", "report"])
    p.add_argument("--data", help="the domain's corpus folder (train/, valid/, test/)")
    p.add_argument("--out", default="runs/adaptation", help="where the runs go (and their results.json)")
    p.add_argument("--results", help="report: this results file instead of OUT/results.json "
                   "(benchmarks/adaptation_results.json: the runs of docs/TRAINING.md)")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--runs", default="native,hdf5,scratch")
    p.add_argument("--png", default="docs/adaptation.png")
    args = p.parse_args()
    {"run": run, "report": report}[args.action](args)


if __name__ == "__main__":
    main()
