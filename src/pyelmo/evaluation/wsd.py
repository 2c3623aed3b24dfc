"""Word sense disambiguation on WordNet 3.0's example sentences (paper section 5.3).

Data: for every single-word, polysemous lemma of each part of speech, the example
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

import hashlib
import itertools
import json
import os
import shutil
import warnings
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from pyelmo.corpus.splits import hash_bucket, wordnet_dir
from pyelmo.evaluation.common import EvaluationError, tokenize
from pyelmo.fileio import write_text_atomic

POS_NAMES = {"n": "noun", "v": "verb", "a": "adjective", "r": "adverb"}
TIE_TOLERANCE = 1e-6
DATASET_VERSION = "wsd-wordnet-examples-2"

#: WordNet's lexicographer files (the ``lexnames`` file, absent from Debian's wordnet-base).
LEXNAMES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body "
    "noun.cognition noun.communication noun.event noun.feeling noun.food noun.group noun.location "
    "noun.motive noun.object noun.person noun.phenomenon noun.plant noun.possession noun.process "
    "noun.quantity noun.relation noun.shape noun.state noun.substance noun.time verb.body verb.change "
    "verb.cognition verb.communication verb.competition verb.consumption verb.contact verb.creation "
    "verb.emotion verb.motion verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl"
).split()
_LEX_POS = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}
_WN_FILES = [f"{k}.{p}" for k in ("data", "index") for p in ("noun", "verb", "adj", "adv")] + \
    [f"{p}.exc" for p in ("noun", "verb", "adj", "adv")] + ["cntlist.rev", "lexnames"]


# --------------------------------------------------------------------------- the split


def wsd_split(pos: str, lemma: str, sentence: str) -> str:
    """THE train/dev/test split of a WSD context: ``sha1("pos|lemma|sentence") mod 100``:
    ``< 60`` train, ``< 70`` dev, else test."""
    b = hash_bucket(f"{pos}|{lemma}|{sentence}", 100)
    return "train" if b < 60 else ("dev" if b < 70 else "test")


# --------------------------------------------------------------------------- WordNet via NLTK


def lexnames_text() -> str:
    return "".join(f"{i:02d}\t{name}\t{_LEX_POS[name.split('.')[0]]}\n" for i, name in enumerate(LEXNAMES))


def prepare_wordnet_dir(source: str | os.PathLike, work_dir: str | os.PathLike) -> Path:
    """A folder NLTK's ``WordNetCorpusReader`` can read: copies of the database files of
    ``source`` plus a ``lexnames`` file when the source lacks one."""
    src = wordnet_dir(source)
    h = hashlib.sha1(str(src.resolve()).encode())
    for name in _WN_FILES:  # a changed source gets a fresh copy
        if (src / name).exists():
            st = (src / name).stat()
            h.update(f"{name}:{st.st_size}:{int(st.st_mtime)}".encode())
    key = h.hexdigest()[:12]
    dest = Path(work_dir) / f"wordnet-nltk-{key}"
    marker = dest / ".complete"
    if marker.exists():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    for name in _WN_FILES:
        s, d = src / name, dest / name
        if d.exists():
            d.unlink()
        if s.exists():
            shutil.copyfile(s, d)  # NLTK refuses symbolic and hard links
        elif name.endswith(".exc"):
            d.write_text("", encoding="utf-8")
        elif name == "lexnames":
            d.write_text(lexnames_text(), encoding="utf-8")
    marker.write_text(str(src) + "\n", encoding="utf-8")
    return dest


def open_wordnet(source: str | os.PathLike, work_dir: str | os.PathLike):
    """NLTK's ``WordNetCorpusReader`` on a local WordNet 3.0 (no NLTK download involved)."""
    try:
        import nltk
        from nltk.corpus.reader.wordnet import WordNetCorpusReader
    except ImportError:  # pragma: no cover
        raise EvaluationError("the WSD evaluation needs nltk: pip install 'pyelmo[eval]'") from None

    class _LocalWordNet(WordNetCorpusReader):
        """Reads WordNet 3.0 itself, so no mapping from another WordNet version is needed."""

        def map_wn(self, version: str = "wordnet"):
            return None

    root = prepare_wordnet_dir(source, work_dir)
    resolved = str(root.resolve())
    if resolved not in [str(p) for p in nltk.data.path]:
        nltk.data.path.append(resolved)  # NLTK only reads corpora under its data path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _LocalWordNet(resolved, None)


# --------------------------------------------------------------------------- the data


@dataclass(frozen=True)
class WsdInstance:
    """One sense-labelled context: the target is ``tokens[index]``."""

    lemma: str
    pos: str  # n, v, a (adjectives and satellites), r
    sense: str  # synset name, e.g. play.n.01
    sense_rank: int  # 0 = WordNet's first (most frequent) sense of the lemma
    first_sense: str
    n_senses: int
    tokens: tuple[str, ...]
    index: int
    split: str

    @property
    def key(self) -> tuple[str, str]:
        return self.lemma, self.pos


def find_target(tokens: Sequence[str], lemma: str, pos: str, wn) -> int | None:
    """Index of the first token that is ``lemma`` or an inflection of it (morphy), else None."""
    for i, tok in enumerate(tokens):
        low = tok.lower()
        if low == lemma:
            return i
        if low.isalpha() or "-" in low or "'" in low:
            try:
                if lemma in wn._morphy(low, pos):
                    return i
            except (KeyError, IndexError):
                continue
    return None


def lemma_senses(wn, lemma: str, pos: str) -> list:
    """The synsets of exactly ``lemma`` (not of other base forms) in WordNet's order."""
    return [s for s in wn.synsets(lemma, pos) if any(l.name().lower() == lemma for l in s.lemmas())]


def build_instances(wn, progress: bool = False, limit_lemmas: int | None = None) -> list[WsdInstance]:
    """Every sense-labelled context of WordNet's example sentences (see the module docstring)."""
    from tqdm import tqdm

    token_cache: dict[str, list[str]] = {}
    out: list[WsdInstance] = []
    lemmas = [(pos, lemma) for pos in POS_NAMES for lemma in sorted(set(wn.all_lemma_names(pos)))
              if "_" not in lemma and " " not in lemma]
    kept = 0
    for pos, lemma in tqdm(lemmas, desc="WordNet examples", unit="lemma", disable=not progress):
        if limit_lemmas is not None and kept >= limit_lemmas:
            break
        synsets = lemma_senses(wn, lemma, pos)
        if len(synsets) < 2:
            continue
        found: list[WsdInstance] = []
        for rank, syn in enumerate(synsets):
            for example in syn.examples():
                toks = token_cache.get(example)
                if toks is None:
                    toks = token_cache[example] = tokenize(example)
                idx = find_target(toks, lemma, pos, wn)
                if idx is None:
                    continue
                found.append(WsdInstance(lemma, pos, syn.name(), rank, synsets[0].name(), len(synsets),
                                         tuple(toks), idx, wsd_split(pos, lemma, example)))
        if len({i.sense for i in found}) >= 2:
            out.extend(found)
            kept += 1
    return out


def load_instances(wordnet_source: str | os.PathLike, work_dir: str | os.PathLike, progress: bool = True,
                   limit_lemmas: int | None = None) -> list[WsdInstance]:
    """``build_instances`` with its result cached as JSON in ``work_dir`` (keyed by the files)."""
    src = wordnet_dir(wordnet_source)
    h = hashlib.sha1(DATASET_VERSION.encode())
    for name in sorted(_WN_FILES):
        p = src / name
        if p.exists():
            st = p.stat()
            h.update(f"{name}:{st.st_size}:{int(st.st_mtime)}".encode())
    h.update(str(limit_lemmas).encode())
    cache = Path(work_dir) / f"wsd-instances-{h.hexdigest()[:16]}.json"
    if cache.exists():
        try:
            rows = json.loads(cache.read_text(encoding="utf-8"))
            return [WsdInstance(**{**r, "tokens": tuple(r["tokens"])}) for r in rows]
        except (ValueError, TypeError, KeyError):
            pass
    wn = open_wordnet(src, work_dir)
    instances = build_instances(wn, progress=progress, limit_lemmas=limit_lemmas)
    if not instances:
        raise EvaluationError(f"no sense-labelled WordNet example sentences found in {src}")
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    write_text_atomic(cache, json.dumps([asdict(i) for i in instances], ensure_ascii=False))
    return instances


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
