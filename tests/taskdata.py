"""Tiny task data shared by the task-model tests: the fixture biLMs and a separable classify and tag task."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

REF = Path(__file__).parent / "fixtures" / "reference"
OPTIONS, WEIGHTS = REF / "allennlp" / "options.json", REF / "allennlp" / "lm_weights.hdf5"
OTHER_OPTIONS, OTHER_WEIGHTS = REF / "bilm-tf" / "options.json", REF / "bilm-tf" / "lm_weights.hdf5"
BILM_ARGS = ["--options-file", str(OPTIONS), "--weight-file", str(WEIGHTS)]
POS, NEG, FILL = ["good", "great", "fine", "nice"], ["bad", "awful", "sad", "poor"], ["the", "a", "film", "was", "it"]


def write_task_data(d: Path, seed: int = 0) -> None:
    """A separable classify task (the label is the polar word's class) and a separable tag task."""
    rng = random.Random(seed)
    for name, n in (("train", 60), ("dev", 20), ("test", 20)):
        rows, conll = [], []
        for _ in range(n):
            label = rng.choice(["pos", "neg"])
            words = [rng.choice(FILL) for _ in range(rng.randint(1, 4))]
            words.insert(rng.randint(0, len(words)), rng.choice(POS if label == "pos" else NEG))
            rows.append(f"{label}\t{' '.join(words)}\n")
            toks = [rng.choice(FILL + POS + NEG) for _ in range(rng.randint(2, 6))]
            conll.append("".join(f"{t}\t{'B-P' if t in POS else 'B-N' if t in NEG else 'O'}\n" for t in toks) + "\n")
        (d / f"{name}.tsv").write_text("".join(rows))
        (d / f"{name}.conll").write_text("".join(conll))
    vec = np.random.default_rng(seed).normal(size=(len(POS + NEG + FILL), 6))
    (d / "vec.txt").write_text(f"{len(vec)} 6\n" + "".join(
        w + " " + " ".join(f"{x:.5f}" for x in v) + "\n" for w, v in zip(POS + NEG + FILL, vec)))
