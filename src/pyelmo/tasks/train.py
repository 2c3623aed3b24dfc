"""Training a task model (early stopping on dev), saving it, and loading it back to predict.

A trained model is a folder (:mod:`pyelmo.tasks.saved`): ``config.json``, ``model.safetensors``
(the task model's weights: encoder, output layer, CRF, ELMo mixes, the unknown-word vector) and
``vocab.txt``.  The biLM and the static vectors are not copied: they are named in ``config.json``
with a SHA-1 fingerprint of their weights, and a model used with different ones is refused.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Sequence

import torch

from pyelmo.errors import InputError
from pyelmo.tasks import DEFAULT_CONTEXT, KINDS
from pyelmo.tasks.data import Example, check_kind, label_set, read_examples
from pyelmo.tasks.features import LayerCache, make_batch
from pyelmo.tasks.metrics import classify_metrics, tag_metrics
from pyelmo.tasks.model import ModelConfig, TaskModel
from pyelmo.tasks.options import BiLMSource, TrainOptions, bilm_fingerprint, features_plan
from pyelmo.tasks.reader import LABELS, QARunner, build_model
from pyelmo.tasks.saved import FORMAT, WEIGHTS_NAME, read_saved, write_model_dir
from pyelmo.tasks.static import StaticVectors, load_static, warn_coverage


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def warn_unseen_labels(kind: str, examples: Sequence[Example], labels: Sequence[str], path) -> None:
    known = set(labels)
    if kind == "qa":
        return
    if kind == "classify":
        unseen = [e for e in examples if e.label not in known]
        names = sorted({e.label for e in unseen})
        what = "examples have"
    else:
        unseen = [t for e in examples for t in e.label if t not in known]
        names = sorted(set(unseen))
        what = "tokens have"
    if unseen:
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        _warn(f"{path}: {len(unseen)} {what} a label never seen in training ({shown}); they count as wrong")


def _subsample(examples: list[Example], fraction: float) -> list[Example]:
    """A fixed subset (the same for every seed and feature set) of ``fraction`` of the examples."""
    if fraction >= 1:
        return examples
    k = max(1, round(fraction * len(examples)))
    order = random.Random(0).sample(range(len(examples)), k)
    return [examples[i] for i in sorted(order)]


def _batch_count(n: int, batch_size: int, pool_batches: int = 50) -> int:
    """How many batches ``_batches`` makes of ``n`` examples."""
    pool = batch_size * pool_batches
    return sum(math.ceil(min(pool, n - start) / batch_size) for start in range(0, n, pool))


def passes_per_epoch(n_examples: int, options: TrainOptions) -> int:
    """Passes over the training data per epoch: 1, or more for small data, so that
    ``max_epochs`` epochs hold at least ``min_steps`` optimizer updates."""
    per_pass = _batch_count(n_examples, options.batch_size)
    wanted = math.ceil(options.min_steps / options.max_epochs)
    return max(1, math.ceil(wanted / max(per_pass, 1)))


def _batches(examples: Sequence[Example], batch_size: int, rng: random.Random) -> list[list[Example]]:
    """Shuffled batches of similar lengths (pools of 50 batches sorted by length)."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    pool = batch_size * 50
    batches = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start:start + pool], key=lambda i: len(examples[i].tokens))
        batches += [[examples[i] for i in chunk[b:b + batch_size]] for b in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


class TaskRunner:
    """A task model with its features: predicts and scores examples (trained or loaded)."""

    def __init__(self, kind: str, model: TaskModel, labels: list[str], static: StaticVectors | None,
                 cache: LayerCache | None, saved: dict | None = None) -> None:
        self.kind = kind
        self.saved = saved  # the config.json of a loaded model
        self.model = model
        self.labels = labels
        self.label_index = {l: i for i, l in enumerate(labels)}
        self.static = static
        self.cache = cache

    def _batch(self, examples, labelled: bool):
        return make_batch(examples, self.static, self.cache, self.label_index if labelled else None, self.kind)

    def loss(self, examples) -> torch.Tensor:
        b = self._batch(examples, True)
        return self.model.loss(b.static, b.layers, b.mask, b.labels)

    def predict(self, examples: Sequence[Example], batch_size: int = 64, desc: str = "") -> list:
        """classify: ``(label, probability)`` per example; tag: a tag list per example (input order)."""
        if self.cache is not None:
            self.cache.add([e.tokens for e in examples], desc=f"biLM layers {desc}".strip())
        self.model.eval()
        order = sorted(range(len(examples)), key=lambda i: len(examples[i].tokens))
        out: list = [None] * len(examples)
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            b = self._batch([examples[i] for i in rows], False)
            ids, probs = self.model.predict(b.static, b.layers, b.mask)
            for k, i in enumerate(rows):
                if self.kind == "classify":
                    out[i] = (self.labels[ids[k]], probs[k])
                else:
                    out[i] = [self.labels[t] for t in ids[k]]
        return out

    def evaluate(self, examples: Sequence[Example], desc: str = "") -> dict:
        """The task's metrics on labelled ``examples``."""
        pred = self.predict(examples, desc=desc)
        if self.kind == "classify":
            return classify_metrics([e.label for e in examples], [p[0] for p in pred])
        return tag_metrics([e.label for e in examples], pred)

    def score(self, metrics: dict) -> float:
        """The dev score early stopping maximises: span F1 for BIO/BIOES tags, else accuracy."""
        return _dev_score(metrics)


def _check_out_dir(out: Path) -> None:
    from pyelmo.fileio import check_output_folder

    if out.exists():
        raise InputError(f"{out} already exists (choose a new --out folder)")
    check_output_folder(out.parent, "--out's parent")


def train_task(kind: str, train_file: str | os.PathLike, dev_file: str | os.PathLike, out_dir: str | os.PathLike,
               options: TrainOptions = TrainOptions(), bilm: BiLMSource = BiLMSource(),
               static_source: str | None = None) -> dict:
    """Train a ``kind`` model on ``train_file``, stop early on ``dev_file``, write the best to ``out_dir``.

    Everything is checked before any work (an existing ``out_dir``, unreadable data);
    the folder appears only when complete.  Returns the saved config (with its history).
    """
    started = time.monotonic()
    if kind not in KINDS:
        raise InputError(f"task kind must be one of {', '.join(KINDS)}, got {kind!r}")
    options = options.for_kind(kind)
    options.check()
    options = replace(options, bilm_context=options.bilm_context or DEFAULT_CONTEXT[kind])
    out = Path(out_dir)
    _check_out_dir(out)
    full_train = read_examples(kind, train_file, options.pretokenized, training=True)
    check_kind(kind, full_train, train_file, trust_format=options.trust_format)
    train = _subsample(full_train, options.train_fraction)
    dev = read_examples(kind, dev_file, options.pretokenized, training=kind == "qa")
    check_kind(kind, dev, dev_file, training=False, trust_format=options.trust_format)
    labels = LABELS if kind == "qa" else label_set(kind, train)
    warn_unseen_labels(kind, dev, labels, dev_file)

    static = load_static(static_source) if options.uses_static else None
    if static is not None:
        warn_coverage(static, train, train_file)
    bilm_model = bilm.load() if options.uses_elmo else None
    fingerprint = bilm_fingerprint(bilm_model) if bilm_model is not None else None
    max_tokens = bilm.max_tokens() if bilm_model is not None else None
    cache = (LayerCache(bilm_model, progress=options.progress, cache_dir=options.cache_dir, fingerprint=fingerprint,
                        context=options.bilm_context, max_tokens=max_tokens, plan=options.plan())
             if bilm_model is not None else None)
    config = ModelConfig(
        kind=kind, n_labels=len(labels),
        static_dim=static.dim if static else 0, static_size=len(static.words) if static else 0,
        elmo_layers=bilm_model.config.num_layers if bilm_model else 0,
        elmo_dim=bilm_model.config.output_dim if bilm_model else 0,
        elmo_output=options.elmo_output, top_only=options.top_only,
        hidden=options.hidden, dropout=options.dropout, elmo_dropout=options.elmo_dropout, match=kind == "qa")
    torch.manual_seed(options.seed)
    model = build_model(config, torch.from_numpy(static.vectors) if static else None)
    runner = (QARunner if kind == "qa" else TaskRunner)(kind, model, labels, static, cache)
    if cache is not None:
        # with a disk cache, the whole file's layers: one entry serves every --train-fraction
        cache.add([t for e in (full_train if options.cache_dir else train) for t in e.texts],
                  desc="biLM layers (train)")
        cache.add([t for e in dev for t in e.texts], desc="biLM layers (dev)")

    history, best, best_state, stop = _fit(runner, train, dev, options, started)
    saved = {
        "format": FORMAT, "kind": kind, "features": options.features, "labels": labels,
        "model": config.to_dict(),
        "bilm": ({**asdict(bilm.absolute()), "fingerprint": fingerprint, "max_tokens": max_tokens}
                 if bilm_model else None),
        "static": ({"source": static.source, "fingerprint": static.fingerprint(), "words": len(static.words)}
                   if static else None),
        "options": {k: v for k, v in asdict(options).items() if k not in ("progress", "cache_dir")},
        "training": {"train_examples": len(train), "dev_examples": len(dev), "best_dev": best,
                     "steps": history[-1]["steps"] if history else 0,
                     "stopped": stop, "stop_reason": stop_reason(stop, options, history),
                     "seconds": round(time.monotonic() - started, 1), "history": history},
    }
    model.load_state_dict(best_state)
    write_model_dir(out, saved, model.state_dict(), static.words if static else [])
    return saved


def _fit(runner: TaskRunner, train, dev, options: TrainOptions, started: float):
    from tqdm import tqdm

    model = runner.model
    deadline = started + options.max_minutes * 60 if options.max_minutes else math.inf
    rng = random.Random(options.seed)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=options.lr)
    history: list[dict] = []
    best, best_state, since_best, stop = -math.inf, None, 0, "max epochs"
    passes, steps = passes_per_epoch(len(train), options), 0
    for epoch in range(1, options.max_epochs + 1):
        model.train()
        total, count, timed_out = 0.0, 0, False
        batches = [b for _ in range(passes) for b in _batches(train, options.batch_size, rng)]
        bar = tqdm(batches, desc=f"epoch {epoch}", unit="batch", leave=False, disable=not options.progress,
                   file=sys.stderr)
        for examples in bar:
            loss = runner.loss(examples)
            optimizer.zero_grad()
            (loss + model.mix_penalty(options.mix_l2)).backward()
            torch.nn.utils.clip_grad_norm_(trainable, 5.0)
            optimizer.step()
            steps += 1
            total += float(loss.detach()) * len(examples)
            count += len(examples)
            if time.monotonic() > deadline:
                timed_out = True
                break
        bar.close()
        metrics = runner.evaluate(dev)
        score = runner.score(metrics)
        improved = score > best
        if improved:
            best, since_best = score, 0
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        else:
            since_best += 1
        history.append({"epoch": epoch, "steps": steps, "loss": round(total / max(count, 1), 5), "dev": metrics,
                        "seconds": round(time.monotonic() - started, 1)})
        if options.progress:
            name = "F1" if "f1" in metrics else "span F1" if metrics.get("span_f1") is not None else "accuracy"
            print(f"epoch {epoch}: loss {total / max(count, 1):.4f}  dev {name} {score:.4f}"
                  f"  ({steps} steps){'  (best)' if improved else ''}", file=sys.stderr)
        if timed_out:
            stop = "time limit"
            break
        if score >= 1.0:  # nothing left to learn from dev: --min-steps does not hold a perfect score
            stop = "perfect dev"
            break
        if since_best >= options.patience and steps >= options.min_steps:
            stop = "early stopping" if since_best == options.patience else "min steps"
            break
    return history, best, best_state, stop


def stop_reason(stop: str, options: TrainOptions, history: list[dict]) -> str:
    """Why ``_fit`` stopped (``stop``), in words, with the option that decided it."""
    if stop == "perfect dev":
        return f"perfect dev score (1.0) at epoch {len(history)}"
    if stop == "time limit":
        return f"--max-minutes {options.max_minutes:g} reached"
    if stop == "max epochs":
        return f"--max-epochs {options.max_epochs} reached"
    best_epoch = max(history, key=lambda h: _dev_score(h["dev"]))["epoch"]
    if stop == "min steps":
        return (f"--min-steps {options.min_steps} reached (no better dev score since epoch {best_epoch}; "
                f"--patience {options.patience} waited for the minimum steps)")
    p = options.patience
    return (f"early stopping: no better dev score in the {p} epoch{'s' if p != 1 else ''} after the best, "
            f"epoch {best_epoch} (--patience {p})")


def _dev_score(metrics: dict) -> float:
    """The dev score early stopping maximises: F1 (qa, as a fraction), span F1 for BIO/BIOES tags, else accuracy."""
    if "f1" in metrics:
        return metrics["f1"] / 100
    return metrics["span_f1"] if metrics.get("span_f1") is not None else metrics["accuracy"]


def load_task(directory: str | os.PathLike, bilm: BiLMSource | None = None, progress: bool = True,
              cache_dir: str | os.PathLike | None = None, precision: str | None = None,
              int8_min_weight: int | None = None) -> TaskRunner:
    """A trained task model from ``directory``; ``bilm`` overrides the biLM it names (it must be the same);
    ``precision`` and ``int8_min_weight`` how the biLM computes the layers (default: as in training)."""
    from safetensors.torch import load_file

    d = Path(directory)
    saved, config = read_saved(d)
    if precision is None:  # as in training
        precision = saved["options"].get("precision")  # None: exact
        int8_min_weight = saved["options"].get("int8_min_weight") if int8_min_weight is None else int8_min_weight
    plan = features_plan(precision, int8_min_weight)
    static = None
    if saved.get("static") is not None:
        static = load_static(saved["static"]["source"])
        if static.fingerprint() != saved["static"]["fingerprint"]:
            raise InputError(f"{d} was trained with other static vectors than those now at "
                             f"{saved['static']['source']} (fingerprints differ)")
        if (static.dim, len(static.words)) != (config.static_dim, config.static_size):
            raise InputError(f"{d}: config.json's 'model.static_dim' and 'model.static_size' ({config.static_dim}, "
                             f"{config.static_size}) do not match its static vectors ({static.dim}, "
                             f"{len(static.words)})")
    cache = None
    if saved.get("bilm") is not None:
        recorded = BiLMSource(saved["bilm"].get("model"), saved["bilm"].get("weight_file"))
        source = bilm if bilm is not None and (bilm.model or bilm.weight_file) else recorded
        bilm_model = source.load()
        found = bilm_fingerprint(bilm_model)
        if found != saved["bilm"]["fingerprint"]:
            raise InputError(f"{d} was trained with a different biLM ({recorded.describe()}, fingerprint "
                             f"{saved['bilm']['fingerprint'][:12]}); {source.describe()} has fingerprint {found[:12]}")
        shape = (bilm_model.config.num_layers, bilm_model.config.output_dim)
        if (config.elmo_layers, config.elmo_dim) != shape:
            raise InputError(f"{d}: config.json's 'model.elmo_layers' and 'model.elmo_dim' ({config.elmo_layers}, "
                             f"{config.elmo_dim}) do not match its biLM {shape}")
        cache = LayerCache(bilm_model, progress=progress, cache_dir=cache_dir, fingerprint=found,
                           context=saved["options"].get("bilm_context") or "line",
                           max_tokens=saved["bilm"].get("max_tokens", 100),
                           plan=plan)
    model = build_model(config, torch.from_numpy(static.vectors) if static else None)
    try:
        model.load_state_dict(load_file(str(d / WEIGHTS_NAME)))
    except Exception as exc:  # safetensors' own errors on a damaged file
        raise InputError(f"{d / WEIGHTS_NAME}: cannot load the task model: {str(exc).splitlines()[0]}") from None
    model.eval()
    runner = QARunner if config.kind == "qa" else TaskRunner
    return runner(config.kind, model, list(saved["labels"]), static, cache, saved)
