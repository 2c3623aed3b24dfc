"""How far the int8 mode's vectors are from the exact ones, and what that does to what they are used for.

    python benchmarks/int8_accuracy.py cosine --data work-data/tasks        # per-token cosines per layer
    python benchmarks/int8_accuracy.py senses                               # tests/data/senses.tsv
    python benchmarks/int8_accuracy.py pos                                  # pyelmo evaluate's POS probe
    python benchmarks/int8_accuracy.py tasks --exact-results E.json --int8-results Q.json --data work-data/tasks

- **cosine**: the shipped model (the default rule, which quantizes none of its small weights; and with
  ``int8_min_weight`` 65536, its gate products and highways, and 0, every product) and random weights of
  the released ``small`` and ``original`` sizes (the default rule), on the first ``--sentences`` sentences
  of the POS test set (``pyelmo task data build``): per layer the smallest per-token cosine to the exact
  vectors and its 1st percentile.
- **senses**: nearest-sense accuracy per layer on ``tests/data/senses.tsv`` (the shipped model), exact and int8.
- **pos**: ``pyelmo evaluate pos``'s probe (Brown; 2000 training and 1000 test sentences), exact and int8.
- **tasks**: task models of ``benchmarks/task_experiments.py`` trained on exact layers (``--grid elmo``,
  results in ``--exact-results``) are evaluated again on int8 layers (``pyelmo task evaluate --precision
  int8``), beside task models trained and evaluated on int8 layers (``--grid int8``, ``--int8-results``).

The shipped model's int8 runs use ``int8_min_weight`` 65536 (``INT8_RULE``): its weights are all below
the default rule's size, which would leave it exact. Results go to ``--results`` (JSON), merged per action.
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

from pyelmo.runtime.precision import Quantization

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: The shipped model's int8 rule in these measurements (its gate products and highways quantized).
INT8_RULE = 65536
TASK_METRIC = {"bbc": "accuracy", "tweets": "accuracy", "pos": "accuracy", "ner": "span_f1"}


def _merge(path: Path, key: str, value) -> None:
    results = json.loads(path.read_text()) if path.is_file() else {}
    results[key] = value
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _machine() -> dict:
    import torch

    from pyelmo.runtime.plan import machine_key

    return {"cpu": machine_key()["cpu"], "torch": torch.__version__, "threads": torch.get_num_threads(),
            "date": time.strftime("%Y-%m-%d %H:%M")}


def _per_layer(exact: list, int8: list) -> list[dict]:
    import numpy as np

    a, b = np.concatenate(exact, axis=1), np.concatenate(int8, axis=1)  # (L, tokens, D)
    rows = []
    for layer in range(a.shape[0]):
        cos = (a[layer] * b[layer]).sum(-1) / np.linalg.norm(a[layer], axis=-1) / np.linalg.norm(b[layer], axis=-1)
        rows.append({"layer": layer, "min": float(cos.min()), "p1": float(np.percentile(cos, 1)),
                     "mean": float(cos.mean()), "tokens": int(cos.size)})
    return rows


def cosine(args: argparse.Namespace) -> None:
    import torch

    from pyelmo.config import preset
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.modeling.bilm import BiLM
    from pyelmo.tasks.kind import task_kind

    sentences = [e.tokens for e in task_kind("tag").read(Path(args.data) / "pos" / "test.conll")]
    cases = [("english", None, None), ("english", INT8_RULE, None), ("english", 0, None),
             ("small (random)", None, "small"), ("original (random)", None, "original")]
    out = {"machine": _machine(), "text": "the first sentences of the POS test set", "models": {}}
    for name, rule, size in cases:
        n = args.sentences if size != "original" else args.original_sentences
        if size is None:
            model = None
        else:
            torch.manual_seed(0)
            model = BiLM(preset(size)).eval()
        exact = ElmoEmbedder(model).embed_sentences(sentences[:n])
        int8 = ElmoEmbedder(model, precision="int8", quantization=Quantization.of(rule))
        rows = _per_layer(list(exact), list(int8.embed_sentences(sentences[:n])))
        quantized = sorted({f"{w[0]}x{w[1]}" for (_, w), k in int8.options.products.decisions.items() if k == "int8"})
        label = f"{name}, int8_min_weight {int8.options.plan.quantization.min_weight}"
        out["models"][label] = {"sentences": n, "quantized weights": quantized, "layers": rows}
        print(f"{label} ({n} sentences; int8: {', '.join(quantized) or 'none'})")
        for r in rows:
            print(f"  layer {r['layer']}: min {r['min']:.5f}  p1 {r['p1']:.5f}  mean {r['mean']:.6f}")
    _merge(Path(args.results), "cosine", out)


def senses(args: argparse.Namespace) -> None:
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.evaluation.senses import read_sense_examples, sense_accuracy_per_layer

    examples = read_sense_examples(Path(__file__).resolve().parents[1] / "tests" / "data" / "senses.tsv")
    out = {"machine": _machine(), "examples": len(examples)}
    for label, kwargs in (("exact", {}), ("int8", {"precision": "int8", "quantization": Quantization(INT8_RULE)})):
        out[label] = sense_accuracy_per_layer(ElmoEmbedder(**kwargs), examples)
        print(label, {k: round(100 * v, 1) for k, v in out[label].items()})
    _merge(Path(args.results), "senses", out)


def pos(args: argparse.Namespace) -> None:
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.evaluation.pos import evaluate_pos
    from pyelmo.evaluation.run import registry_source

    brown = registry_source("brown", None)
    out = {"machine": _machine()}
    for label, kwargs in (("exact", {}), ("int8", {"precision": "int8", "quantization": Quantization(INT8_RULE)})):
        result = evaluate_pos(ElmoEmbedder(**kwargs), brown, None, progress=False)
        out[label] = {m: r["accuracy"] for m, r in result["methods"].items()}
        print(label, {k: round(100 * v, 2) for k, v in out[label].items()})
    _merge(Path(args.results), "pos", out)


def tasks(args: argparse.Namespace) -> None:
    from pyelmo.tasks.metrics import SCALE, in_percent

    exact = json.loads(Path(args.exact_results).read_text())
    int8 = json.loads(Path(args.int8_results).read_text())
    out = {"machine": _machine(), "int8_min_weight": INT8_RULE, "scale": SCALE, "runs": {}}
    def by_seed(item: tuple[str, dict]) -> tuple:  # s1, s2, ..., s10 (not s1, s10, s2)
        task, variant, seed = item[0].split("/")
        return task, variant, int(seed.lstrip("s"))

    for run_id, result in sorted(exact.items(), key=by_seed):
        task, variant, seed = run_id.split("/")
        ext = "tsv" if task in ("bbc", "tweets") else "conll"
        model_dir = result["command"].split("--out ")[1].split()[0]
        proc = subprocess.run([sys.executable, "-m", "pyelmo", "task", "evaluate", model_dir, "--test",
                               str(Path(args.data) / task / f"test.{ext}"), "--json", "--quiet", "--cache-dir",
                               args.cache_dir, "--precision", "int8", "--int8-min-weight", str(INT8_RULE)],
                              check=True, capture_output=True, text=True)
        metric = TASK_METRIC[task]
        twin = int8.get(f"{task}/{variant.replace('static+elmo', 'static+elmo+int8')}/{seed}")
        # task_experiments.py's runs recorded before every metric was in percent have no "scale"
        out["runs"][run_id] = {"exact": in_percent(result["test"], result.get("scale"))[metric],
                               "exact-trained, int8 layers": json.loads(proc.stdout.strip().splitlines()[-1])[metric],
                               "int8-trained, int8 layers":
                                   in_percent(twin["test"], twin.get("scale"))[metric] if twin else None}
        print(run_id, out["runs"][run_id], flush=True)
    print("\n| task (metric) | exact | trained exact, evaluated int8 | trained and evaluated int8 |\n|---|---|---|---|")
    for task, metric in TASK_METRIC.items():
        runs = [r for k, r in out["runs"].items() if k.startswith(f"{task}/")]
        if not runs:
            continue

        def cell(key: str, base: str | None = None) -> str:
            values = [r[key] for r in runs if r[key] is not None]  # percent
            if not values:
                return "-"
            text = f"{statistics.mean(values):.2f} ({', '.join(f'{v:.1f}' for v in values)})"
            if base:
                diff = statistics.mean(values) - statistics.mean(r[base] for r in runs)
                text += f" {diff:+.2f}"
            return text

        print(f"| {task} ({metric}) | {cell('exact')} | {cell('exact-trained, int8 layers', 'exact')} | "
              f"{cell('int8-trained, int8 layers', 'exact')} |")
    _merge(Path(args.results), "tasks", out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["cosine", "senses", "pos", "tasks"])
    parser.add_argument("--data", default="work-data/tasks", help="output of pyelmo task data build")
    parser.add_argument("--sentences", type=int, default=500, help="cosine: sentences per model")
    parser.add_argument("--original-sentences", type=int, default=200, help="cosine: sentences for original")
    parser.add_argument("--exact-results", default="work-data/int8-exact-results.json")
    parser.add_argument("--int8-results", default="work-data/int8-int8-results.json")
    parser.add_argument("--cache-dir", default="work-data/layer-cache")
    parser.add_argument("--results", default="benchmarks/int8_results.json")
    args = parser.parse_args()
    {"cosine": cosine, "senses": senses, "pos": pos, "tasks": tasks}[args.action](args)


if __name__ == "__main__":
    main()
