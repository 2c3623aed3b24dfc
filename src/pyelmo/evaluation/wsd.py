"""Word sense disambiguation on WordNet 3.0's example sentences (paper section 5.3).

Data (:mod:`pyelmo.evaluation.wsddata`): for every single-word, polysemous lemma of each part of speech, the example
sentences of each of its senses that contain the lemma or an inflection of it (WordNet's
``*.exc`` exception lists and detachment rules, i.e. NLTK's morphy), tokenized Moses-style
as the corpus. Only lemmas with at least two senses that have such an example are kept, so every lemma
is really ambiguous within the data. Each context is assigned to train/dev/test by
:func:`wsd_split` (a hash of the lemma, part of speech and sentence: 60/10/30).

Method (the paper's): the vector of the target token is compared by cosine similarity with
the average vector of each sense of the same lemma seen in train; the nearest sense wins
(ties, within 1e-6, go to the more frequent WordNet sense). A lemma with no train context
(or a static vector that does not know the word) falls back to WordNet's first sense.
"""

from __future__ import annotations

import itertools
import os
from collections import defaultdict
from typing import Sequence

import numpy as np

from pyelmo.evaluation.common import EvaluationError
from pyelmo.evaluation.wsddata import POS_NAMES, WsdInstance

TIE_TOLERANCE = 1e-6

# --------------------------------------------------------------------------- 1-NN


def _normalize(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.where(n > 0, x / np.maximum(n, 1e-30), 0.0)


def sense_centroids(vectors: np.ndarray, known: np.ndarray, instances: Sequence[WsdInstance]
                    ) -> dict[tuple[str, str], tuple[list[str], np.ndarray]]:
    """Per lemma: its senses seen in ``instances`` (in WordNet order) and their unit-length
    average vectors. Rows where ``known`` is False (a static vector lacking the word) are skipped."""
    groups: dict[tuple[str, str], dict[tuple[int, str], list[int]]] = defaultdict(lambda: defaultdict(list))
    for row, inst in enumerate(instances):
        if known[row]:
            groups[inst.key][(inst.sense_rank, inst.sense)].append(row)
    out = {}
    for key, senses in groups.items():
        order = sorted(senses)
        means = np.stack([vectors[senses[s]].mean(axis=0) for s in order])
        out[key] = ([s for _, s in order], _normalize(means))
    return out


def nearest_sense(senses: Sequence[str], centroids: np.ndarray, query: np.ndarray) -> str:
    """The sense whose unit centroid is most cosine-similar to ``query``; near ties
    (within ``TIE_TOLERANCE``) go to the earliest (most frequent) sense."""
    sims = centroids @ _normalize(query)
    best = float(sims.max())
    return senses[int(np.flatnonzero(sims >= best - TIE_TOLERANCE)[0])]


def predict_1nn(train_vectors: np.ndarray, train_known: np.ndarray, train: Sequence[WsdInstance],
                test_vectors: np.ndarray, test_known: np.ndarray, test: Sequence[WsdInstance]
                ) -> tuple[list[str], np.ndarray]:
    """Predicted sense per test instance and a mask of first-sense fallbacks."""
    cents = sense_centroids(train_vectors, train_known, train)
    preds: list[str] = []
    fallback = np.zeros(len(test), dtype=bool)
    for row, inst in enumerate(test):
        entry = cents.get(inst.key)
        if entry is None or not test_known[row]:
            preds.append(inst.first_sense)
            fallback[row] = True
        else:
            preds.append(nearest_sense(entry[0], entry[1], test_vectors[row]))
    return preds, fallback


def score(preds: Sequence[str], instances: Sequence[WsdInstance], fallback: np.ndarray | None = None,
          seen_senses: set[tuple[str, str, str]] | None = None) -> dict:
    """Accuracy (= Senseval F1, since every instance is answered), macro F1 over the gold
    senses, both per part of speech, and (with ``seen_senses``, the (lemma, pos, sense) of
    the train contexts) the accuracy on the contexts whose sense has train contexts."""
    from sklearn.metrics import f1_score

    gold = [i.sense for i in instances]

    def part(rows: list[int]) -> dict:
        g = [gold[r] for r in rows]
        p = [preds[r] for r in rows]
        res = {"n": len(rows), "accuracy": float(np.mean([a == b for a, b in zip(g, p)])) if rows else float("nan"),
               "f1_macro": float(f1_score(g, p, labels=sorted(set(g)), average="macro", zero_division=0))
               if rows else float("nan")}
        if fallback is not None and rows:
            res["fallback_rate"] = float(np.mean(fallback[rows]))
        return res

    result = part(list(range(len(instances))))
    if seen_senses is not None:
        rows = [r for r, i in enumerate(instances) if (i.lemma, i.pos, i.sense) in seen_senses]
        result["n_seen_senses"] = len(rows)
        result["accuracy_seen_senses"] = (float(np.mean([preds[r] == gold[r] for r in rows])) if rows
                                          else float("nan"))
    result["per_pos"] = {POS_NAMES[p]: part([r for r, i in enumerate(instances) if i.pos == p])
                         for p in POS_NAMES if any(i.pos == p for i in instances)}
    return result


def simplex_grid(n: int, step: float = 0.1) -> list[tuple[float, ...]]:
    """All weight vectors of ``n`` entries, multiples of ``step``, summing to 1."""
    k = round(1 / step)
    return [tuple(c / k for c in combo) for combo in itertools.product(range(k + 1), repeat=n) if sum(combo) == k]


def tune_mix(layers_train: np.ndarray, known_train: np.ndarray, train: Sequence[WsdInstance],
             layers_dev: np.ndarray, known_dev: np.ndarray, dev: Sequence[WsdInstance], step: float = 0.1
             ) -> tuple[tuple[float, ...], float]:
    """The layer weights (a point of the simplex grid) with the best dev accuracy; ties go to
    the weights closest to the plain average. Returns (weights, dev accuracy)."""
    n_layers = layers_train.shape[0]
    uniform = np.full(n_layers, 1 / n_layers)
    best: tuple[float, float, tuple[float, ...]] | None = None
    for w in simplex_grid(n_layers, step):
        wa = np.asarray(w, dtype=np.float32)
        preds, _ = predict_1nn(np.tensordot(wa, layers_train, 1), known_train, train,
                               np.tensordot(wa, layers_dev, 1), known_dev, dev)
        acc = float(np.mean([p == i.sense for p, i in zip(preds, dev)])) if dev else 0.0
        cand = (acc, -float(np.linalg.norm(wa - uniform)), w)
        if best is None or cand[:2] > best[:2]:
            best = cand
    assert best is not None
    return best[2], best[0]


# --------------------------------------------------------------------------- the evaluation



def evaluate_wsd(model, instances: Sequence[WsdInstance], static=None, *, fingerprint: str | None = None,
                 cache_dir: str | os.PathLike | None = None, batch_size: int = 32, progress: bool = True,
                 mix_step: float = 0.1) -> dict:
    """All WSD metrics: first sense, word2vec, each biLM layer, their average and a tuned mix."""
    from pyelmo.evaluation.common import token_vectors

    by_split = {s: [i for i in instances if i.split == s] for s in ("train", "dev", "test")}
    for s in ("train", "test"):
        if not by_split[s]:
            raise EvaluationError(f"the WSD data has no {s} contexts")
    ordered = by_split["train"] + by_split["dev"] + by_split["test"]
    vectors = token_vectors(model, [i.tokens for i in ordered], [[i.index] for i in ordered],
                            fingerprint=fingerprint, cache_dir=cache_dir, tag="wsd", batch_size=batch_size,
                            progress=progress)
    n_tr, n_dev = len(by_split["train"]), len(by_split["dev"])
    tr, dv, te = vectors[:, :n_tr], vectors[:, n_tr : n_tr + n_dev], vectors[:, n_tr + n_dev :]
    train, dev, test = by_split["train"], by_split["dev"], by_split["test"]
    ones = lambda n: np.ones(n, dtype=bool)  # noqa: E731
    seen = {(i.lemma, i.pos, i.sense) for i in train}

    def scored(preds: list[str], insts: list[WsdInstance], fb: np.ndarray | None = None) -> dict:
        return score(preds, insts, fb, seen)

    methods: dict[str, dict] = {}
    methods["first_sense"] = scored([i.first_sense for i in test], test)
    if static is not None:
        w_tr, k_tr = static.matrix([i.tokens[i.index] for i in train])
        w_te, k_te = static.matrix([i.tokens[i.index] for i in test])
        preds, fb = predict_1nn(w_tr, k_tr, train, w_te, k_te, test)
        methods["word2vec"] = scored(preds, test, fb)
    for layer in range(vectors.shape[0]):
        preds, fb = predict_1nn(tr[layer], ones(n_tr), train, te[layer], ones(len(test)), test)
        methods[f"layer_{layer}"] = scored(preds, test, fb)
    avg = np.full(vectors.shape[0], 1 / vectors.shape[0], dtype=np.float32)
    preds, fb = predict_1nn(np.tensordot(avg, tr, 1), ones(n_tr), train, np.tensordot(avg, te, 1),
                            ones(len(test)), test)
    methods["average"] = scored(preds, test, fb)
    mix_info = None
    if dev:
        weights, dev_acc = tune_mix(tr, ones(n_tr), train, dv, ones(n_dev), dev, mix_step)
        wa = np.asarray(weights, dtype=np.float32)
        preds, fb = predict_1nn(np.tensordot(wa, tr, 1), ones(n_tr), train, np.tensordot(wa, te, 1),
                                ones(len(test)), test)
        methods["mix"] = scored(preds, test, fb)
        mix_info = {"weights": list(weights), "dev_accuracy": dev_acc, "grid_step": mix_step}
    return {
        "task": "wsd",
        "data": {
            "source": "WordNet 3.0 example sentences",
            "contexts": {s: len(v) for s, v in by_split.items()},
            "lemmas": len({i.key for i in instances}),
            "test_lemmas_seen_in_train": len({i.key for i in test} & {i.key for i in train}),
            "test_lemmas": len({i.key for i in test}),
            "test_contexts_with_sense_in_train": sum((i.lemma, i.pos, i.sense) in seen for i in test),
            "split": "sha1(pos|lemma|sentence) mod 100: <60 train, <70 dev, else test",
        },
        "methods": methods,
        "mix": mix_info,
    }
