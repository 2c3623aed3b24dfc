"""Writing results: one JSON file per task, PNG bar charts per layer, a Markdown report.

The report is rebuilt from every ``<task>.json`` present in the output folder, so running
the tasks one at a time into the same folder still gives one complete report.
"""

from __future__ import annotations

import io
import json
import math
import os
from pathlib import Path

from pyelmo.evaluation.registry import EVALUATIONS, NAMES
from pyelmo.fileio import write_bytes_atomic, write_json_atomic, write_text_atomic

_LABELS = {"first_sense": "first sense", "most_frequent_tag": "most frequent tag", "word2vec": "word2vec",
           "average": "layer average", "mix": "tuned mix"}


def label(method: str) -> str:
    if method.startswith("layer_"):
        return f"layer {method.split('_', 1)[1]}"
    return _LABELS.get(method, method)


def _pct(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def bar_chart(path: str | os.PathLike, title: str, values: dict[str, float], ylabel: str = "accuracy (%)") -> None:
    """A bar chart (PNG, matplotlib Agg) of ``values`` in percent, written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(values)
    heights = [100 * values[n] for n in names]
    fig, ax = plt.subplots(figsize=(1.2 * len(names) + 2, 4))
    colors = ["#4c72b0" if n.startswith("layer") or n in ("layer average", "tuned mix") else "#999999" for n in names]
    bars = ax.bar(names, heights, color=colors)
    for b, h in zip(bars, heights):
        ax.text(b.get_x() + b.get_width() / 2, h, f"{h:.1f}", ha="center", va="bottom", fontsize=8)
    finite = [h for h in heights if not math.isnan(h)]
    low = max(0.0, (min(finite) if finite else 0.0) - 10)
    ax.set_ylim(low, min(100.0, (max(finite) if finite else 100.0) + 5))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())


def write_task(out_dir: str | os.PathLike, result: dict) -> None:
    """``<task>.json`` and, for the scored tasks, ``<task>.png``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    task = result["task"]
    write_json_atomic(out / f"{task}.json", result)
    title = EVALUATIONS[task].chart
    if title is not None:
        values = {label(m): r["accuracy"] for m, r in result["methods"].items()}
        bar_chart(out / f"{task}.png", title, values)


def _wsd_md(r: dict) -> list[str]:
    d = r["data"]
    pos_names = list(r["methods"]["first_sense"]["per_pos"])
    lines = ["## Word sense disambiguation (WordNet 3.0 examples, 1-nearest-neighbour)", "",
             f"Contexts: {d['contexts']['train']} train / {d['contexts']['dev']} dev / {d['contexts']['test']} test "
             f"over {d['lemmas']} lemma/POS pairs; {d['test_lemmas_seen_in_train']} of {d['test_lemmas']} test lemmas have "
             "train contexts (the others fall back to the first sense); "
             f"{d['test_contexts_with_sense_in_train']} test contexts have a sense with train contexts (the "
             "ceiling of 1-NN outside fallbacks; column 'seen senses'). Split: " + d["split"] + ".", "",
             "| method | accuracy | macro F1 | " + " | ".join(pos_names) + " | seen senses | first-sense fallbacks |",
             "|---|---|---|" + "---|" * len(pos_names) + "---|---|"]
    for m, s in r["methods"].items():
        per = " | ".join(f"{_pct(s['per_pos'][p]['accuracy'])} (n={s['per_pos'][p]['n']})" for p in pos_names)
        lines.append(f"| {label(m)} | {_pct(s['accuracy'])} | {_pct(s['f1_macro'])} | {per} | "
                     f"{_pct(s.get('accuracy_seen_senses'))} | {_pct(s.get('fallback_rate'))} |")
    lines.append("")
    if r.get("mix"):
        w = ", ".join(f"{x:.1f}" for x in r["mix"]["weights"])
        lines += [f"Tuned mix: layer weights ({w}) chosen on dev (dev accuracy {_pct(r['mix']['dev_accuracy'])}, "
                  f"grid step {r['mix']['grid_step']}).", ""]
    lines += ["Accuracy equals the Senseval-style F1 here (every context is answered). " + EVALUATIONS["wsd"].paper + ".", "",
              "![WSD](wsd.png)", ""]
    return lines


def _pos_md(r: dict) -> list[str]:
    d = r["data"]
    lines = ["## Part-of-speech probe (Brown, gold tags, linear classifier on frozen vectors)", "",
             f"Tag set {d['tagset']} ({d['n_tags']} tags in train). {d['train_sentences']} train sentences "
             f"({d['train_tokens']} tokens) / {d['test_sentences']} test sentences ({d['test_tokens']} tokens, "
             f"{_pct(d['test_unseen_word_rate'])}% of them words unseen in the probe's train sentences). "
             f"Probe: {r['probe']['model']}, L2 {r['probe']['l2']}, at most {r['probe']['max_iter']} iterations.", "",
             "| method | accuracy | accuracy on unseen words | train accuracy |", "|---|---|---|---|"]
    for m, s in r["methods"].items():
        lines.append(f"| {label(m)} | {_pct(s['accuracy'])} | {_pct(s['accuracy_unseen_words'])} | "
                     f"{_pct(s.get('train_accuracy'))} |")
    extra = r["methods"].get("word2vec", {}).get("oov_rate")
    lines += [""] + ([f"word2vec knows {_pct(1 - extra)}% of the test tokens (unknown ones get a zero vector).", ""]
                     if extra is not None else [])
    lines += [EVALUATIONS["pos"].paper + ".", "", "![POS](pos.png)", ""]
    return lines


def _neighbours_md(r: dict) -> list[str]:
    lines = ["## Nearest neighbours (paper Table 4)", "",
             f"biLM: Brown sentences whose occurrence of the word is nearest (cosine, layer {r['data']['layer']}) "
             "to the query's.", ""]
    for word in r["data"]["occurrences"]:
        lines.append(f"### {word}")
        lines.append("")
        nn = (r.get("word2vec") or {}).get(word)
        if nn is not None:
            lines.append("word2vec nearest words: " + (", ".join(f"{n['word']} ({n['cosine']:.2f})" for n in nn)
                                                       or "(not in the vocabulary)"))
            lines.append("")
        for q in r["queries"]:
            if q["word"] != word:
                continue
            lines.append(f"- **{q['sense']}**: *{q['query']}*")
            for n in q["neighbours"]:
                lines.append(f"  - {n['cosine']:.3f} [{n['file']} {n['genre']}] {n['sentence']}")
            if not q["neighbours"]:
                lines.append("  - (no Brown sentence with this word)")
        lines.append("")
    return lines


def write_report(out_dir: str | os.PathLike, header: dict) -> Path:
    """``report.md`` from the task JSON files in ``out_dir``; ``header`` describes the model."""
    out = Path(out_dir)
    lines = ["# pyelmo evaluation: what the layers know", ""]
    for k, v in header.items():
        lines.append(f"- {k}: {v}")
    lines.append("")
    current = header.get("model fingerprint (sha1 of weights)")
    for task in NAMES:
        render = _SECTIONS[task]
        path = out / f"{task}.json"
        if path.exists():
            result = json.loads(path.read_text(encoding="utf-8"))
            section = render(result)
            fp = (result.get("model") or {}).get("fingerprint")
            if current and fp and fp != current:  # left over from a run on another model
                section[1:1] = ["", f"**Note: computed with another model ({result['model'].get('source')}, "
                                    f"fingerprint {fp[:12]}).**"]
            lines += section
    report = out / "report.md"
    write_text_atomic(report, "\n".join(lines))
    return report


#: The report's section of each evaluation of the registry (:data:`pyelmo.evaluation.registry.EVALUATIONS`; a test
#: checks that every one has its section).
_SECTIONS = {"wsd": _wsd_md, "pos": _pos_md, "neighbours": _neighbours_md}
