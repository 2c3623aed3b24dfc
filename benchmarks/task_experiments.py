"""The ELMo-in-task-models experiments of docs/TASKS.md: runs a grid of ``pyelmo task`` trainings.

Every run is ``pyelmo task train`` then ``pyelmo task evaluate --json`` on the task's test
file; the results go to a JSON file (``--results``) after each run, so a stopped grid is
resumed by running the same command again (finished runs are skipped).

    python benchmarks/task_experiments.py prepare        # the biLM layers of every task file, once
    python benchmarks/task_experiments.py run --grid table1 --data work-data/tasks
    python benchmarks/task_experiments.py report          # markdown tables, mean +- std over seeds
    python benchmarks/task_experiments.py figure2 --out docs/task-layer-weights.png

The Chinese tasks (docs/LANGUAGES.md, "Chinese tasks"): ``run --plan chinese`` runs table1 on zh-pos,
zh-ner and zh-sentiment and efficiency10 on zh-ner, with the biLM of ``--zh-model`` (default: the shipped
``chinese``) and the static vectors of ``DATA/zh-static`` (``pyelmo task data static``):

    python benchmarks/task_experiments.py run --plan chinese --data work-data/tasks \
        --runs runs/tasks-zh --results benchmarks/task_results_zh.json
    python benchmarks/task_experiments.py report --results benchmarks/task_results_zh.json

Grids (variants; every variant is run for each task and seed):
  table1      static | static+elmo                      (paper Table 1)
  efficiency  static, static+elmo at 1% and 10% of train (paper section 5.4; 100% is table1)
  table2      top layer only | all layers lambda = 1     (lambda = 0.001 is table1's static+elmo)
  table3      ELMo at input and output (--elmo-output)   (input only is table1's static+elmo)
  adapt       static+elmo with --adapted-model DIR, a biLM continued on the task's training text
  candidate   static+elmo with --candidate-model DIR, a biLM that may replace the shipped one
  elmo        static+elmo alone (with --bilm-context: one context's runs beside another's)
  int8        static+elmo with the biLM's layers computed in int8 (--precision int8)

``--bilm-context sentence`` passes ``--bilm-context sentence`` to every run (the biLM reads each
sentence of an example on its own) and records its runs as ``TASK/VARIANT@sentence/sN``, beside
the line-context runs (without ``--bilm-context``: ``--bilm-context line`` and ids without ``@``, as
the runs recorded before the option); ``prepare --bilm-context sentence`` fills the cache for it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TASKS = {"bbc": ("classify", "tsv"), "tweets": ("classify", "tsv"), "pos": ("tag", "conll"), "ner": ("tag", "conll"),
         "cloze": ("qa", "json"), "zh-pos": ("tag", "conll"), "zh-ner": ("tag", "conll"),
         "zh-sentiment": ("classify", "tsv")}
#: (grid, tasks) pairs that ``run --plan NAME`` runs in turn.
PLANS = {"chinese": [("table1", "zh-pos,zh-ner,zh-sentiment"), ("efficiency10", "zh-ner")]}
VARIANTS = {
    "static": ["--features", "static"],
    "static+elmo": ["--features", "static+elmo"],
    "static@1%": ["--features", "static", "--train-fraction", "0.01"],
    "static+elmo@1%": ["--features", "static+elmo", "--train-fraction", "0.01"],
    "static@10%": ["--features", "static", "--train-fraction", "0.1"],
    "static+elmo@10%": ["--features", "static+elmo", "--train-fraction", "0.1"],
    "top-layer": ["--features", "static+elmo", "--top-layer"],
    "lambda=1": ["--features", "static+elmo", "--mix-l2", "1"],
    "elmo-output": ["--features", "static+elmo", "--elmo-output"],
    # the biLM continued on the task's own training text (--adapted-model; docs/TASKS.md)
    "static+elmo+adapted": ["--features", "static+elmo", "--model", "{adapted}"],
    # a candidate biLM for shipping (--candidate-model; e.g. the model-v2 run's best/ folder)
    "static+elmo+candidate": ["--features", "static+elmo", "--model", "{candidate}"],
    # the biLM's layers computed in int8 (benchmarks/int8_accuracy.py); the shipped model's weights are all
    # below the default rule's size, so its gate products and highways are quantized explicitly
    "static+elmo+int8": ["--features", "static+elmo", "--precision", "int8", "--int8-min-weight", "65536"],
}
GRIDS = {
    "table1": ["static", "static+elmo"],
    "efficiency": ["static@1%", "static+elmo@1%", "static@10%", "static+elmo@10%"],
    "efficiency10": ["static@10%", "static+elmo@10%"],
    "table2": ["top-layer", "lambda=1"],
    "table3": ["elmo-output"],
    "adapt": ["static+elmo+adapted"],
    "candidate": ["static+elmo+candidate"],
    "elmo": ["static+elmo"],
    "int8": ["static+elmo+int8"],
}
#: Settings shared by every run (small task models; see docs/TASKS.md).  At least 300 updates
#: (--min-steps) so that 1% / 10% runs train; 20 minutes is a bound no full run should reach, even
#: under the shared machine's load.
COMMON = ["--hidden", "128", "--max-epochs", "8", "--patience", "2", "--min-steps", "300", "--max-minutes", "20",
          "--quiet"]
#: The reader's settings replace COMMON's epochs and patience: an epoch over the cloze set is ~5 minutes
#: on one core (1.5-2.5 s a batch), so 3 epochs, stopping after 1 without a better dev F1.
KIND_COMMON = {"qa": ["--max-epochs", "3", "--patience", "1", "--max-minutes", "40"]}
#: The biLM context a task's runs use when --bilm-context is not given (ids without @).
DEFAULT_CONTEXT = {"cloze": "sentence"}
#: Arguments of a task's runs: zh-sentiment's text is segmented by the data build.
TASK_ARGS = {"zh-sentiment": ["--pretokenized"]}


def _task_args(task: str, args: argparse.Namespace) -> list[str]:
    """A Chinese task's biLM (--zh-model) and static vectors (DATA/zh-static), and TASK_ARGS."""
    extra = TASK_ARGS.get(task, [])
    if not task.startswith("zh-"):
        return extra
    return ["--model", args.zh_model, "--static-vectors", str(Path(args.data) / "zh-static"), *extra]


def _load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _save(path: Path, results: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def run(args: argparse.Namespace) -> None:
    if args.plan:
        for grid, tasks in PLANS[args.plan]:
            run(argparse.Namespace(**{**vars(args), "plan": None, "grid": grid, "tasks": tasks}))
        return
    results_path = Path(args.results)
    results = _load(results_path)
    pyelmo = [sys.executable, "-m", "pyelmo"]
    variants = [v for g in args.grid.split(",") for v in GRIDS[g]]
    # seeds outermost: a grid stopped early still covers every task and variant
    for seed in [int(s) for s in args.seeds.split(",")]:
        for task in args.tasks.split(","):
            kind, ext = TASKS[task]
            data = Path(args.data) / task
            for variant in variants:
                name = variant + (f"@{args.bilm_context}" if args.bilm_context else "")
                run_id = f"{task}/{name}/s{seed}"
                if run_id in results:
                    continue
                out = Path(args.runs) / task / f"{name.replace('%', 'pct')}-s{seed}"
                if out.exists():
                    subprocess.run(["rm", "-rf", str(out)], check=True)
                out.parent.mkdir(parents=True, exist_ok=True)
                train = [*pyelmo, "task", "train", kind, "--train", str(data / f"train.{ext}"),
                         "--dev", str(data / f"dev.{ext}"), "--out", str(out), "--seed", str(seed),
                         "--cache-dir", args.cache_dir, *_task_args(task, args), *_variant_args(variant, args),
                         *COMMON, *KIND_COMMON.get(kind, []), *args.train_args.split()]
                # the runs recorded without @CONTEXT read whole lines (the context before it was an option),
                # apart from the tasks of DEFAULT_CONTEXT
                train += ["--bilm-context", args.bilm_context or DEFAULT_CONTEXT.get(task, "line")]
                started = time.time()
                print(f"[{time.strftime('%H:%M:%S')}] {run_id}", flush=True)
                subprocess.run(train, check=True)
                evaluate = [*pyelmo, "task", "evaluate", str(out), "--test", str(data / f"test.{ext}"),
                            "--json", "--quiet", "--cache-dir", args.cache_dir]
                proc = subprocess.run(evaluate, check=True, capture_output=True, text=True)
                metrics = json.loads(proc.stdout.strip().splitlines()[-1])
                scale = metrics.pop("scale")
                saved = json.loads((out / "config.json").read_text())
                results[run_id] = {"test": metrics, "scale": scale, "command": " ".join(train[2:]),
                                   "best_dev": saved["training"]["best_dev"],
                                   "epochs": len(saved["training"]["history"]),
                                   "steps": saved["training"].get("steps"),
                                   "stopped": saved["training"]["stopped"],
                                   "train_seconds": saved["training"]["seconds"],
                                   "wall_seconds": round(time.time() - started, 1),
                                   "mix_weights": _mix_weights(out)}
                _save(results_path, results)
                print(f"    {metrics}  ({results[run_id]['wall_seconds']} s)", flush=True)


def _mix_weights(model_dir: Path) -> list[list[float]]:
    """The softmax weights of each learned ELMo mix of a trained task model (empty without ELMo)."""
    import numpy as np
    from safetensors.numpy import load_file

    tensors = load_file(str(model_dir / "model.safetensors"))
    mixes = sorted(k for k in tensors if k.startswith("mixes.") and k.endswith(".scalar_parameters"))
    return [[round(float(x), 4) for x in np.exp(tensors[k]) / np.exp(tensors[k]).sum()] for k in mixes]


def _variant_args(variant: str, args: argparse.Namespace) -> list[str]:
    models = {"{adapted}": args.adapted_model, "{candidate}": args.candidate_model}
    for placeholder, model in models.items():
        if placeholder in VARIANTS[variant] and not model:
            sys.exit(f"variant {variant} needs --{placeholder.strip('{}')}-model DIR")
    return [models.get(a) or a for a in VARIANTS[variant]]


def prepare(args: argparse.Namespace) -> None:
    """Compute the shipped biLM's layers of every task file into --cache-dir, in the order the runs read them."""
    from pyelmo.modelio.resolve import load
    from pyelmo.tasks.kind import task_kind
    from pyelmo.tasks.features import LayerCache
    from pyelmo.tasks.options import BiLMSource, bilm_fingerprint

    for task in args.tasks.split(","):
        kind, ext = TASKS[task]
        bilm = load(args.zh_model if task.startswith("zh-") else None).eval()
        fingerprint = bilm_fingerprint(bilm)
        context = args.bilm_context or DEFAULT_CONTEXT.get(task, "line")

        def new_cache():
            return LayerCache(bilm, cache_dir=args.cache_dir, fingerprint=fingerprint, context=context,
                              max_tokens=BiLMSource().max_tokens())

        train_cache = new_cache()
        for split in ("train", "dev", "test"):
            examples = task_kind(kind).read(Path(args.data) / task / f"{split}.{ext}")
            cache = train_cache if split != "test" else new_cache()
            started = time.time()
            texts = [t for e in examples for t in e.texts] if kind == "qa" else [e.tokens for e in examples]
            cache.add(texts, desc=f"{task} {split}")
            print(f"{task} {split}: {sum(len(t) for t in texts)} tokens, {time.time() - started:.0f} s")


def _metric(task: str, metrics: dict) -> float:
    """The task's headline test metric (percent)."""
    if TASKS[task][0] == "qa":
        return metrics["f1"]
    return metrics["span_f1"] if task in ("ner", "zh-ner") else metrics["accuracy"]


def _percent(run: dict) -> dict:
    """A run with its scores in percent: runs recorded before every metric was in percent (no ``scale``) held
    accuracy, macro-F1, span F1 and the best dev score as fractions (``pyelmo.tasks.metrics.in_percent``)."""
    from pyelmo.tasks.metrics import SCALE, in_percent

    if run.get("scale") == SCALE:
        return run
    return {**run, "scale": SCALE, "best_dev": 100 * run["best_dev"], "test": in_percent(run["test"], None)}


TABLES = {
    "Table 1: static baseline vs static + ELMo": ["static", "static+elmo"],
    "Sample efficiency (section 5.4): 1% / 10% / 100% of the training data": [
        "static@1%", "static+elmo@1%", "static@10%", "static+elmo@10%", "static", "static+elmo"],
    "Table 2: which layers (static + ELMo)": ["top-layer", "lambda=1", "static+elmo"],
    "Table 3: where ELMo enters the task model (static + ELMo)": ["static+elmo", "elmo-output"],
    "Domain adaptation: the shipped biLM vs the biLM continued on the task's training text": [
        "static", "static+elmo", "static+elmo+adapted"],
    "Table 1 with the biLM reading each sentence on its own (--bilm-context sentence)": [
        "static@sentence", "static+elmo@line", "static+elmo@sentence"],
    "Candidate biLM (model v2 run) against the shipped one, sentence context": [
        "static@sentence", "static+elmo@sentence", "static+elmo+candidate@sentence"],
}
NAMES = {"bbc": "BBC topics (acc.)", "tweets": "tweet sentiment (acc.)", "pos": "Brown POS (acc.)",
         "ner": "NER, agreement with spaCy (span F1)", "cloze": "cloze reading comprehension (F1)",
         "zh-pos": "Chinese POS, PKU tags (acc.)", "zh-ner": "Chinese NER, PER/LOC/ORG (span F1)",
         "zh-sentiment": "Chinese review sentiment (acc.)"}
HEADERS = {"static+elmo": "static + ELMo (all layers, λ = 0.001, input)", "lambda=1": "all layers, λ = 1",
           "top-layer": "top layer only", "elmo-output": "input and output",
           "static+elmo+adapted": "static + ELMo, adapted biLM",
           "static+elmo+candidate@sentence": "static + ELMo, candidate biLM",
           "static@sentence": "static (same settings)", "static+elmo@line": "static + ELMo, line context", "static+elmo@sentence": "static + ELMo, sentence context"}


#: The biLM context of each task's main runs (the default of ``pyelmo task train``: sentence for
#: classify, line for tag).  A table cell of such a task reports its ``VARIANT@sentence`` runs, and
#: the line-context runs (ids without ``@``) only where those were not run, marked "line".
TASK_CONTEXT = {"bbc": "sentence", "tweets": "sentence"}


def _runs(results: dict, task: str, variant: str) -> tuple[list[dict], str]:
    """The runs of ``variant`` for ``task`` and a marker naming their context when it is not the task's own."""
    if "@line" in variant or "@sentence" in variant or task not in TASK_CONTEXT:
        return [r for k, r in results.items() if k.startswith(f"{task}/{variant}/")], ""
    own = [r for k, r in results.items() if k.startswith(f"{task}/{variant}@{TASK_CONTEXT[task]}/")]
    if own:
        return own, ""
    return [r for k, r in results.items() if k.startswith(f"{task}/{variant}/")], ", line"


def _cell(results: dict, task: str, variant: str, split: str = "test") -> str:
    runs, marker = _runs(results, task, variant)
    vals = [_metric(task, r["test"]) if split == "test" else r["best_dev"] for r in map(_percent, runs)]
    if not vals:
        return "not run"
    if len(vals) == 1:
        return f"{vals[0]:.1f} (1 seed{marker})"
    return f"{statistics.mean(vals):.1f} ± {statistics.stdev(vals):.1f} ({len(vals)}{marker})"


def report(args: argparse.Namespace) -> None:
    """Markdown tables: test (or with --split dev, the best dev) score in percent, mean ± standard deviation
    over seeds (number of seeds)."""
    results = _load(Path(args.results))
    for title, variants in TABLES.items():
        own = [v for v in variants if v not in GRIDS["table1"]] or variants
        if not any(k.split("/")[1].removesuffix("@sentence").removesuffix("@line") in own for k in results):
            continue
        print(f"### {title}\n")
        print("| task | " + " | ".join(HEADERS.get(v, v) for v in variants) + " |")
        print("|---|" + "---|" * len(variants))
        for task in _run_tasks(results):
            print(f"| {NAMES[task]} | " + " | ".join(_cell(results, task, v, args.split) for v in variants) + " |")
        print()
    _report_weights(results)
    print("| task | run | train + evaluate, wall s (min-max) | epochs | stopped by |")
    print("|---|---|---|---|---|")
    for task in _run_tasks(results):
        for variant in ("static", "static+elmo", "static@sentence", "static+elmo@sentence"):
            rs = [r for k, r in results.items() if k.startswith(f"{task}/{variant}/")]
            if rs:
                secs = [r["wall_seconds"] for r in rs]
                stops = sorted({r["stopped"] for r in rs})
                print(f"| {task} | {variant} | {min(secs):.0f}-{max(secs):.0f} | "
                      f"{'/'.join(str(r['epochs']) for r in rs)} | {', '.join(stops)} |")


def _run_tasks(results: dict) -> list[str]:
    """The tasks with at least one recorded run, in TASKS order."""
    return [t for t in TASKS if any(k.startswith(f"{t}/") for k in results)]


def _report_weights(results: dict) -> None:
    """The learned softmax weights of the input mix (layer 0 first), mean over the static+elmo seeds."""
    rows = {t: [r["mix_weights"][0] for r in _runs(results, t, "static+elmo")[0] if r.get("mix_weights")]
            for t in _run_tasks(results)}
    rows = {t: w for t, w in rows.items() if w}
    if not rows:
        return
    print("### Learned layer weights (static + ELMo, input mix, mean over seeds)\n")
    print("| task | seeds | weights, layer 0 first |\n|---|---|---|")
    for task, ws in rows.items():
        means = [statistics.mean(col) for col in zip(*ws)]
        print(f"| {NAMES[task]} | {len(ws)} | " + " / ".join(f"{m:.2f}" for m in means) + " |")
    print()


def figure2(args: argparse.Namespace) -> None:
    """The learned softmax weights of the input mix (static+elmo models, mean over seeds) per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from safetensors.numpy import load_file

    results = _load(Path(args.results))
    weights = {}
    for task in TASKS:
        # recorded with the results; else read from the models under --runs
        rows = [r["mix_weights"][0] for r in _runs(results, task, "static+elmo")[0] if r.get("mix_weights")]
        for model in [] if rows else sorted((Path(args.runs) / task).glob("static+elmo-s*")):
            w = load_file(str(model / "model.safetensors"))["mixes.0.scalar_parameters"]
            rows.append(np.exp(w) / np.exp(w).sum())
        if rows:
            weights[task] = np.mean(rows, axis=0)
    if not weights:
        sys.exit("no static+elmo models under " + args.runs)
    fig, ax = plt.subplots(figsize=(6, 3))
    width = 0.8 / len(weights)
    for i, (task, w) in enumerate(weights.items()):
        ax.bar(np.arange(len(w)) + i * width, w, width, label=task)
    ax.axhline(1 / len(next(iter(weights.values()))), color="grey", lw=0.8, ls="--")
    ax.set_xticks(np.arange(len(w)) + 0.4 - width / 2, [f"layer {j}" for j in range(len(w))])
    ax.set_ylabel("softmax weight")
    ax.set_title("Learned ELMo layer weights (input mix, mean over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(json.dumps({t: [round(float(x), 3) for x in w] for t, w in weights.items()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["prepare", "run", "report", "figure2"])
    parser.add_argument("--grid", default="table1", help="comma-separated grids: " + ", ".join(GRIDS))
    parser.add_argument("--tasks", default="bbc,tweets,pos,ner")
    parser.add_argument("--train-args", default="", metavar="ARGS",
                        help="run: more arguments of every 'pyelmo task train', after the common ones (a smoke "
                             "test: --train-args='--max-epochs 1 --min-steps 0')")
    parser.add_argument("--plan", choices=sorted(PLANS), help="run: the (grid, tasks) pairs of a plan, in turn")
    parser.add_argument("--zh-model", default="chinese", metavar="MODEL",
                        help="the biLM of the zh-* tasks (default: the shipped Chinese model)")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--data", default="work-data/tasks", help="output of pyelmo task data build")
    parser.add_argument("--runs", default="runs/tasks", help="where the trained models go")
    parser.add_argument("--cache-dir", default="work-data/layer-cache", help="biLM layers shared by the runs")
    parser.add_argument("--results", default="benchmarks/task_results.json")
    parser.add_argument("--out", default="docs/task-layer-weights.png")
    parser.add_argument("--split", choices=["test", "dev"], default="test",
                        help="report: the test score, or the best dev score (the one model selection saw)")
    parser.add_argument("--bilm-context", choices=["line", "sentence"],
                        help="--bilm-context of every run; run ids get @CONTEXT (default: line, ids without @)")
    parser.add_argument("--adapted-model", metavar="DIR", help="the adapted biLM of the adapt grid (pyelmo train OUT/model)")
    parser.add_argument("--candidate-model", metavar="DIR", help="the biLM of the candidate grid (a model folder)")
    args = parser.parse_args()
    {"prepare": prepare, "run": run, "report": report, "figure2": figure2}[args.action](args)


if __name__ == "__main__":
    main()
