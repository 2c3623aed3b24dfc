"""Training a task model (early stopping on dev), saving it, and loading it back to predict.

A trained model is a folder: ``config.json`` (kind, features, model shape, labels, the
training options and history, and the identity of its biLM and static vectors),
``model.safetensors`` (the task model's weights: encoder, output layer, CRF, ELMo mixes,
the unknown-word vector) and ``vocab.txt`` (the static vocabulary, one word a line).
The folder is written under a temporary name and renamed when complete, so an
interrupted training leaves no half-written folder.  The biLM and the static vectors are
not copied: they are named in ``config.json`` with a SHA-1 fingerprint of their weights,
and a model used with different ones is refused.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Sequence

import torch

from pyelmo.errors import InputError
from pyelmo.tasks import DEFAULT_CONTEXT, KINDS
from pyelmo.tasks.data import Example, label_set, read_examples
from pyelmo.tasks.features import LayerCache, make_batch
from pyelmo.tasks.metrics import classify_metrics, tag_metrics
from pyelmo.tasks.model import ModelConfig, TaskModel
from pyelmo.tasks.options import BiLMSource, TrainOptions, bilm_fingerprint
from pyelmo.tasks.static import StaticVectors, load_static

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
VOCAB_NAME = "vocab.txt"
FORMAT = "pyelmo-task-1"


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def warn_unseen_labels(kind: str, examples: Sequence[Example], labels: Sequence[str], path) -> None:
    known = set(labels)
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
        return metrics["span_f1"] if metrics.get("span_f1") is not None else metrics["accuracy"]


def _check_out_dir(out: Path) -> None:
    if out.exists():
        raise InputError(f"{out} already exists (choose a new --out folder)")
    if not out.parent.is_dir():
        raise InputError(f"{out.parent} is not a folder (the parent of --out must exist)")


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
    options.check()
    options = replace(options, bilm_context=options.bilm_context or DEFAULT_CONTEXT[kind])
    out = Path(out_dir)
    _check_out_dir(out)
    full_train = read_examples(kind, train_file, options.pretokenized)
    train = _subsample(full_train, options.train_fraction)
    dev = read_examples(kind, dev_file, options.pretokenized)
    labels = label_set(kind, train)
    warn_unseen_labels(kind, dev, labels, dev_file)

    static = load_static(static_source) if options.uses_static else None
    bilm_model = bilm.load() if options.uses_elmo else None
    fingerprint = bilm_fingerprint(bilm_model) if bilm_model is not None else None
    max_tokens = bilm.max_tokens() if bilm_model is not None else None
    cache = (LayerCache(bilm_model, progress=options.progress, cache_dir=options.cache_dir, fingerprint=fingerprint,
                        context=options.bilm_context, max_tokens=max_tokens)
             if bilm_model is not None else None)
    config = ModelConfig(
        kind=kind, n_labels=len(labels),
        static_dim=static.dim if static else 0, static_size=len(static.words) if static else 0,
        elmo_layers=bilm_model.config.num_layers if bilm_model else 0,
        elmo_dim=bilm_model.config.output_dim if bilm_model else 0,
        elmo_output=options.elmo_output and options.uses_elmo, top_only=options.top_only,
        hidden=options.hidden, dropout=options.dropout, elmo_dropout=options.elmo_dropout)
    torch.manual_seed(options.seed)
    model = TaskModel(config, torch.from_numpy(static.vectors) if static else None)
    runner = TaskRunner(kind, model, labels, static, cache)
    if cache is not None:
        # with a disk cache, the whole file's layers: one entry serves every --train-fraction
        cache.add([e.tokens for e in (full_train if options.cache_dir else train)], desc="biLM layers (train)")
        cache.add([e.tokens for e in dev], desc="biLM layers (dev)")

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
                     "stopped": stop, "seconds": round(time.monotonic() - started, 1), "history": history},
    }
    model.load_state_dict(best_state)
    _write_model_dir(out, saved, model, static)
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
            b = runner._batch(examples, True)
            loss = model.loss(b.static, b.layers, b.mask, b.labels)
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
            name = "span F1" if metrics.get("span_f1") is not None else "accuracy"
            print(f"epoch {epoch}: loss {total / max(count, 1):.4f}  dev {name} {score:.4f}"
                  f"  ({steps} steps){'  (best)' if improved else ''}", file=sys.stderr)
        if timed_out:
            stop = "time limit"
            break
        if since_best >= options.patience and steps >= options.min_steps:
            stop = "early stopping"
            break
    return history, best, best_state, stop


def _write_model_dir(out: Path, saved: dict, model: TaskModel, static: StaticVectors | None) -> None:
    from safetensors.torch import save_file

    from pyelmo.fileio import write_json_atomic, write_text_atomic

    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp / WEIGHTS_NAME))
        write_text_atomic(tmp / VOCAB_NAME, "".join(w + "\n" for w in static.words) if static else "")
        write_json_atomic(tmp / CONFIG_NAME, saved)
        if out.exists():
            raise InputError(f"{out} already exists (choose a new --out folder)")
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_task(directory: str | os.PathLike, bilm: BiLMSource | None = None, progress: bool = True,
              cache_dir: str | os.PathLike | None = None) -> TaskRunner:
    """A trained task model from ``directory``; ``bilm`` overrides the biLM it names (it must be the same)."""
    from safetensors.torch import load_file

    d = Path(directory)
    config_path = d / CONFIG_NAME
    if not config_path.is_file() or not (d / WEIGHTS_NAME).is_file():
        raise InputError(f"{d} is not a trained task model (no {CONFIG_NAME} / {WEIGHTS_NAME})")
    try:
        saved = json.loads(config_path.read_text(encoding="utf-8"))
        config = ModelConfig(**saved["model"])
        kind, labels = saved["kind"], list(saved["labels"])
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{config_path}: not a task model config ({exc})") from None
    if saved.get("format") != FORMAT:
        raise InputError(f"{config_path}: unknown format {saved.get('format')!r} (expected {FORMAT})")
    static = None
    if saved.get("static"):
        static = load_static(saved["static"]["source"])
        if static.fingerprint() != saved["static"]["fingerprint"]:
            raise InputError(f"{d} was trained with other static vectors than those now at "
                             f"{saved['static']['source']} (fingerprints differ)")
    cache = None
    if saved.get("bilm"):
        recorded = BiLMSource(saved["bilm"].get("model"), saved["bilm"].get("weight_file"))
        source = bilm if bilm is not None and (bilm.model or bilm.weight_file) else recorded
        bilm_model = source.load()
        found = bilm_fingerprint(bilm_model)
        if found != saved["bilm"]["fingerprint"]:
            raise InputError(f"{d} was trained with a different biLM ({recorded.describe()}, fingerprint "
                             f"{saved['bilm']['fingerprint'][:12]}); {source.describe()} has fingerprint {found[:12]}")
        cache = LayerCache(bilm_model, progress=progress, cache_dir=cache_dir, fingerprint=found,
                           context=saved["options"].get("bilm_context") or "line",
                           max_tokens=int(saved["bilm"].get("max_tokens", 100)))
    model = TaskModel(config, torch.from_numpy(static.vectors) if static else None)
    try:
        model.load_state_dict(load_file(str(d / WEIGHTS_NAME)))
    except Exception as exc:  # safetensors / shape errors
        raise InputError(f"{d / WEIGHTS_NAME}: cannot load the task model: {str(exc).splitlines()[0]}") from None
    model.eval()
    return TaskRunner(kind, model, labels, static, cache, saved)
