"""Training a task model (early stopping on dev) and saving it (:func:`pyelmo.tasks.saved.load_task` loads it).

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
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Sequence

import torch

from pyelmo.runtime.options import RunOptions
from pyelmo.runtime.planning import plan_model
from pyelmo.errors import InputError
from pyelmo.tasks.data import Example
from pyelmo.tasks.features import LayerCache
from pyelmo.tasks.kind import TaskKind, build_model, task_kind
from pyelmo.tasks.metrics import SCALE
from pyelmo.tasks.model import ModelConfig
from pyelmo.tasks.options import BiLMSource, TrainOptions, bilm_fingerprint
from pyelmo.tasks.runner import TaskRunner
from pyelmo.tasks.saved import FORMAT, write_model_dir
from pyelmo.tasks.static import StaticVectors, load_static, warn_coverage


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def warn_unseen_labels(kind: TaskKind, examples: Sequence, labels: Sequence[str], path) -> None:
    """Warn when ``examples`` have labels a model trained on ``labels`` never predicts."""
    count, names = kind.unseen(examples, labels)
    if count:
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        _warn(f"{path}: {count} {kind.unit_names[1]} a label never seen in training ({shown}); they count as wrong")


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


def _check_out_dir(out: Path) -> None:
    from pyelmo.fileio import check_output_folder

    if out.exists():
        raise InputError(f"{out} already exists (choose a new --out folder)")
    check_output_folder(out.parent, "--out's parent")


@dataclass
class _Data:
    """What training reads: the whole training file, the subset trained on, the dev examples, the labels."""

    full_train: list
    train: list
    dev: list
    labels: list[str]


@dataclass
class _Features:
    """The features a model trains on: static vectors and the biLM (its layers cached), each or None."""

    static: StaticVectors | None
    bilm: object | None
    fingerprint: str | None
    max_tokens: int | None
    cache: LayerCache | None


def train_task(kind: str, train_file: str | os.PathLike, dev_file: str | os.PathLike, out_dir: str | os.PathLike,
               options: TrainOptions = TrainOptions(), bilm: BiLMSource = BiLMSource(),
               static_source: str | None = None) -> dict:
    """Train a ``kind`` model on ``train_file``, stop early on ``dev_file``, write the best to ``out_dir``.

    Everything is checked before any work (an existing ``out_dir``, unreadable data);
    the folder appears only when complete.  Returns the saved config (with its history).
    """
    started = time.monotonic()
    task = task_kind(kind)
    options = options.for_kind(kind)
    options.check()
    options = replace(options, bilm_context=options.bilm_context or task.context)
    out = Path(out_dir)
    _check_out_dir(out)
    data = _read_data(task, train_file, dev_file, options)
    features = _load_features(options, bilm, static_source, data, train_file)
    config = _model_config(task, data.labels, features, options)
    torch.manual_seed(options.seed)
    model = build_model(config, torch.from_numpy(features.static.vectors) if features.static else None)
    runner = task.runner(model, data.labels, features.static, features.cache)
    if features.cache is not None:
        _cache_layers(features.cache, data, options)
    history, best, best_state, stop = _fit(runner, data.train, data.dev, options, started)
    saved = _saved_config(task, config, data, features, options, bilm)
    saved["training"].update({"best_dev": best, "steps": history[-1]["steps"] if history else 0, "stopped": stop,
                              "stop_reason": stop_reason(stop, options, history, task),
                              "seconds": round(time.monotonic() - started, 1), "history": history})
    model.load_state_dict(best_state)
    write_model_dir(out, saved, model.state_dict(), features.static.words if features.static else [])
    return saved


def _read_data(kind: TaskKind, train_file, dev_file, options: TrainOptions) -> _Data:
    """The training and dev examples, checked (:meth:`TaskKind.check`), and the labels of the training ones."""
    full_train = kind.read(train_file, options.pretokenized)
    kind.check(full_train, train_file, trust_format=options.trust_format)
    train = _subsample(full_train, options.train_fraction)
    dev = kind.read(dev_file, options.pretokenized)
    kind.check(dev, dev_file, training=False, trust_format=options.trust_format)
    labels = kind.labels(train)
    warn_unseen_labels(kind, dev, labels, dev_file)
    return _Data(full_train, train, dev, labels)


def _load_features(options: TrainOptions, bilm: BiLMSource, static_source, data: _Data, train_file) -> _Features:
    """The static vectors and the biLM the options ask for (its layer cache still empty)."""
    static = load_static(static_source) if options.uses_static else None
    if static is not None:
        warn_coverage(static, data.train, train_file)
    if not options.uses_elmo:
        return _Features(static, None, None, None, None)
    bilm_model = bilm.load()
    fingerprint, max_tokens = bilm_fingerprint(bilm_model), bilm.max_tokens()
    planned = plan_model(bilm_model, RunOptions.inference(options.plan()))  # loaded here for its layers alone
    cache = LayerCache(planned, progress=options.progress, cache_dir=options.cache_dir, fingerprint=fingerprint, context=options.bilm_context, max_tokens=max_tokens,
                       plan=options.plan())
    return _Features(static, bilm_model, fingerprint, max_tokens, cache)


def _cache_layers(cache: LayerCache, data: _Data, options: TrainOptions) -> None:
    """The biLM's layers of the training and dev examples (with a disk cache, of the whole training file:
    one entry then serves every --train-fraction)."""
    cache.add([t for e in (data.full_train if options.cache_dir else data.train) for t in e.texts],
              desc="biLM layers (train)")
    cache.add([t for e in data.dev for t in e.texts], desc="biLM layers (dev)")


def _model_config(kind: TaskKind, labels: list[str], features: _Features, options: TrainOptions) -> ModelConfig:
    static, bilm = features.static, features.bilm
    return ModelConfig(
        kind=kind.name, n_labels=len(labels),
        static_dim=static.dim if static else 0, static_size=len(static.words) if static else 0,
        elmo_layers=bilm.config.num_layers if bilm else 0, elmo_dim=bilm.config.output_dim if bilm else 0,
        elmo_output=options.elmo_output, top_only=options.top_only,
        hidden=options.hidden, dropout=options.dropout, elmo_dropout=options.elmo_dropout,
        **kind.model_switches)


def _saved_config(kind: TaskKind, config: ModelConfig, data: _Data, features: _Features, options: TrainOptions,
                  bilm: BiLMSource) -> dict:
    """config.json of the trained model, but for the outcome of training."""
    static = features.static
    return {
        "format": FORMAT, "kind": kind.name, "features": options.features, "labels": data.labels,
        "model": config.to_dict(),
        "bilm": ({**asdict(bilm.absolute()), "fingerprint": features.fingerprint, "max_tokens": features.max_tokens}
                 if features.bilm is not None else None),
        "static": ({"source": static.source, "fingerprint": static.fingerprint(), "words": len(static.words)}
                   if static else None),
        "options": options.saved(),
        "training": {"train_examples": len(data.train), "dev_examples": len(data.dev), "scale": SCALE},
    }


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
            print(f"epoch {epoch}: loss {total / max(count, 1):.4f}  dev {runner.kind.headline(metrics)} {score:.2f}"
                  f"  ({steps} steps){'  (best)' if improved else ''}", file=sys.stderr)
        if timed_out:
            stop = "time limit"
            break
        if score >= 100:  # nothing left to learn from dev: --min-steps does not hold a perfect score
            stop = "perfect dev"
            break
        if since_best >= options.patience and steps >= options.min_steps:
            stop = "early stopping" if since_best == options.patience else "min steps"
            break
    return history, best, best_state, stop


def stop_reason(stop: str, options: TrainOptions, history: list[dict], kind: TaskKind) -> str:
    """Why ``_fit`` stopped (``stop``), in words, with the option that decided it."""
    if stop == "perfect dev":
        return f"perfect dev score (100%) at epoch {len(history)}"
    if stop == "time limit":
        return f"--max-minutes {options.max_minutes:g} reached"
    if stop == "max epochs":
        return f"--max-epochs {options.max_epochs} reached"
    best_epoch = max(history, key=lambda h: kind.dev_score(h["dev"]))["epoch"]
    if stop == "min steps":
        return (f"--min-steps {options.min_steps} reached (no better dev score since epoch {best_epoch}; "
                f"--patience {options.patience} waited for the minimum steps)")
    p = options.patience
    return (f"early stopping: no better dev score in the {p} epoch{'s' if p != 1 else ''} after the best, "
            f"epoch {best_epoch} (--patience {p})")
