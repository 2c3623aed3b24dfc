"""Per-class recall and the predicted label shares of trained classify models on labelled files
(docs/TASKS.md: where a model's dev and test scores disagree).

    python scripts/task_confusion.py --cache-dir CACHE --data DIR/tweets MODEL_DIR [MODEL_DIR ...]

For each model and each of DIR/dev.tsv and DIR/test.tsv: accuracy, recall per gold label, and
the share of each label among the gold labels and among the predictions.
"""

import argparse
from collections import Counter
from pathlib import Path

from pyelmo.tasks.data import read_classify
from pyelmo.tasks.saved import load_task

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("models", nargs="+", metavar="MODEL_DIR")
parser.add_argument("--data", required=True, help="folder with dev.tsv and test.tsv")
parser.add_argument("--cache-dir", help="biLM layers cached by the runs")
args = parser.parse_args()

for model in args.models:
    runner = load_task(model, progress=False, cache_dir=args.cache_dir)
    for split in ("dev", "test"):
        examples = read_classify(Path(args.data) / f"{split}.tsv")
        gold = [e.label for e in examples]
        pred = [label for label, _ in runner.predict(examples)]
        n = len(gold)
        recall = {c: sum(g == p == c for g, p in zip(gold, pred)) / k for c, k in sorted(Counter(gold).items())}
        gold_share, pred_share = Counter(gold), Counter(pred)
        print(f"{model} {split}: accuracy {sum(g == p for g, p in zip(gold, pred)) / n:.3f}; "
              + "; ".join(f"{c}: recall {r:.3f}, gold {gold_share[c] / n:.3f}, predicted {pred_share[c] / n:.3f}"
                          for c, r in recall.items()))
