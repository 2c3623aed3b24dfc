"""The reader on a small set: a learning curve (F1 per minute) of ``pyelmo task train qa`` with its defaults.

The set is generated, deterministically and offline: passages of 5 sentences of words drawn from the
shipped static vocabulary (ranks 30-3,000, with Zipf weights 1/rank, so frequent words repeat as in
text); each question is one of the passage's sentences with a span of 1-3 words replaced by "what"
and a quarter of its other words dropped (never the span's neighbours), the span its answer.
Answering is lexical matching: find the sentence holding the question's words, then the words the
question lacks.  Two questions per passage (different sentences); 400 / 100 / 200 questions
(train / dev / test) by default.

    python benchmarks/reader_small.py --minutes 4 --threads 2            # the curve of docs/TASKS.md
    python benchmarks/reader_small.py --minutes 1 --set hidden=128 --out run.json   # another setting

It trains in-process with ``TrainOptions()`` (the command line's defaults) but ``--features static``
and ``--max-minutes``; the curve is the best dev F1 reached by the end of each minute (from the run's
history: each epoch's dev F1 and time), and the saved (best) model's test F1 at the end.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

VOCAB = Path(__file__).resolve().parents[1] / "src/pyelmo/pretrained/english/static-vocab.txt"


def _words() -> tuple[list[str], list[float]]:
    """Lower-case alphabetic words of the static vocabulary, ranks 30-3,000, with weights 1/rank."""
    ranked = VOCAB.read_text(encoding="utf-8").split("\n")[30:3000]
    words = [(w, 1 / (30 + r)) for r, w in enumerate(ranked) if w.isalpha() and w.islower()]
    return [w for w, _ in words], [p for _, p in words]


def _question(rng: random.Random, sentence: list[str]) -> tuple[str, int, int]:
    """A question on ``sentence`` and its answer's word span ``[a, b)``."""
    n = rng.randint(1, 3)
    a = rng.randrange(0, len(sentence) - n)
    kept = [w for i, w in enumerate(sentence)  # the answer's neighbours stay: they mark its ends
            if (i < a or i >= a + n) and (i in (a - 1, a + n) or rng.random() >= 0.25)]
    return " ".join(["what", *kept]) + " ?", a, a + n


def make_set(n_questions: int, seed: int) -> dict:
    """SQuAD v1.1 JSON: ``n_questions`` questions, two per passage of 5 generated sentences."""
    rng = random.Random(seed)
    words, weights = _words()
    paragraphs = []
    for p in range((n_questions + 1) // 2):
        sentences = [rng.choices(words, weights, k=rng.randint(8, 16)) for _ in range(5)]
        context = " ".join(" ".join(s) + " ." for s in sentences)
        starts = [0]  # each sentence's first character
        for s in sentences[:-1]:
            starts.append(starts[-1] + len(" ".join(s)) + 3)
        qas = []
        for k, which in enumerate(rng.sample(range(5), 2)[: n_questions - 2 * p]):
            question, a, b = _question(rng, sentences[which])
            answer = " ".join(sentences[which][a:b])
            start = starts[which] + len(" ".join(sentences[which][:a])) + (1 if a else 0)
            assert context[start:start + len(answer)] == answer
            qas.append({"id": f"s{seed}-{p}-{k}", "question": question,
                        "answers": [{"text": answer, "answer_start": start}]})
        paragraphs.append({"context": context, "qas": qas})
    return {"version": "1.1", "data": [{"title": "generated", "paragraphs": paragraphs}]}


def curve(history: list[dict], minutes: float) -> list[tuple[int, float]]:
    """The best dev F1 reached by the end of each whole minute (0 before the first evaluation)."""
    points = []
    for m in range(1, int(minutes + 0.999) + 1):
        reached = [h["dev"]["f1"] for h in history if h["seconds"] <= 60 * m]
        points.append((m, max(reached, default=0.0)))
    return points


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=4.0, help="training time budget (default 4)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    ap.add_argument("--train", type=int, default=400, help="training questions (default 400)")
    ap.add_argument("--dev", type=int, default=100, help="dev questions (default 100)")
    ap.add_argument("--test", type=int, default=200, help="test questions (default 200)")
    ap.add_argument("--seed", type=int, default=1, help="the training seed (the data do not change)")
    ap.add_argument("--set", action="append", default=[], metavar="OPTION=VALUE",
                    help="override a TrainOptions field (e.g. lr=0.002), to compare settings")
    ap.add_argument("--out", default=None, help="write the results here as JSON")
    args = ap.parse_args(argv)

    import torch

    from pyelmo.tasks.options import TrainOptions
    from pyelmo.tasks.saved import load_task
    from pyelmo.tasks.squad import read_squad
    from pyelmo.tasks.train import train_task

    torch.set_num_threads(args.threads)
    options = replace(TrainOptions(), features="static", seed=args.seed, max_minutes=args.minutes, progress=False)
    for item in args.set:
        key, value = item.split("=", 1)
        options = replace(options, **{key: ast.literal_eval(value)})
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for split, n, seed in (("train", args.train, 1), ("dev", args.dev, 2), ("test", args.test, 3)):
            files[split] = Path(tmp) / f"{split}.json"
            files[split].write_text(json.dumps(make_set(n, seed)))
        started = time.monotonic()
        saved = train_task("qa", files["train"], files["dev"], Path(tmp) / "run", options)
        seconds = time.monotonic() - started
        test = load_task(Path(tmp) / "run", progress=False).evaluate(read_squad(files["test"]))
    t = saved["training"]
    points = curve(t["history"], args.minutes)
    for m, f1 in points:
        print(f"minute {m}: best dev F1 {f1:.1f}")
    print(f"{len(t['history'])} epochs, {t['steps']} updates, {seconds:.0f} s; stopped: {t['stop_reason']}; "
          f"test EM {test['exact_match']:.1f} F1 {test['f1']:.1f}")
    if args.out:
        Path(args.out).write_text(json.dumps({"options": saved["options"], "curve": points, "test": test,
                                              "seconds": round(seconds, 1), "history": t["history"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
