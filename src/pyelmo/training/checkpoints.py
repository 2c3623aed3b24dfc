"""The run folder of a training run: checkpoint, run record, metrics, loss curves, model copies.

Every file is written atomically; a checkpoint is read with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import torch

from pyelmo.errors import PyelmoError
from pyelmo.fileio import PathLike, atomic_writer, write_text_atomic

CHECKPOINT_NAME = "checkpoint.pt"
RUN_NAME = "run.json"
METRICS_NAME = "metrics.jsonl"
CURVES_NAME = "curves.png"


class CheckpointError(PyelmoError):
    """A checkpoint that is missing, unreadable or does not match the run."""


# -- helpers --------------------------------------------------------------------------------
def torch_save_atomic(obj: Any, path: Path) -> None:
    with atomic_writer(path) as tmp:
        torch.save(obj, tmp)


def load_checkpoint(path: PathLike) -> dict[str, Any]:
    """A checkpoint written by the trainer (tensors and plain containers only: ``weights_only``)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for corrupt files
        raise CheckpointError(f"cannot read checkpoint {path}: {str(exc).splitlines()[0]}") from None


def read_run(out: Path) -> dict[str, Any]:
    """The run record ``out/run.json`` of a run to resume."""
    path = out / RUN_NAME
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"cannot resume: {path} unreadable ({exc})") from None


def remove_stale_temporaries(directory: Path) -> list[Path]:
    """Delete ``.NAME.PID.tmp`` files (see ``atomic_path``) in ``directory`` whose writer process is gone.

    A run killed (e.g. SIGKILL) while writing leaves such a file; it is never read.
    """
    removed = []
    for tmp in directory.glob(".*.tmp") if directory.is_dir() else ():
        pid = tmp.name.rsplit(".", 2)[-2]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # still running
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


def copy_dir_atomic(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.startswith("."):
            with atomic_writer(dst / f.name) as tmp:
                shutil.copyfile(f, tmp)


def metrics_record_step(line: str) -> float:
    """The step of a metrics.jsonl line; infinity (dropped on resume) for a blank or cut-off line."""
    try:
        record = json.loads(line)
        return float(record.get("step", 0)) if isinstance(record, dict) else math.inf
    except ValueError:
        return math.inf  # the last line of a run killed while appending


def plot_metrics(metrics: Path, out: Path) -> None:
    """Training loss and validation perplexity against steps, as a PNG (written atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [json.loads(l) for l in metrics.read_text(encoding="utf-8").splitlines() if l.strip()]
    train = [(r["step"], r["loss"]) for r in records if "loss" in r]
    valid = [(r["step"], r["valid_ppl"]) for r in records if "valid_ppl" in r]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    if train:
        a.plot(*zip(*train), label="train (sampled softmax)")
    a.set_xlabel("step"), a.set_ylabel("loss (nats)"), a.set_title("training loss")
    if valid:
        b.plot(*zip(*valid), marker="o", color="C1", label="validation")
        b.set_yscale("log")
    b.set_xlabel("step"), b.set_ylabel("perplexity (full softmax)"), b.set_title("validation perplexity")
    fig.tight_layout()
    try:
        with atomic_writer(out) as tmp:
            fig.savefig(tmp, format="png", dpi=100)
    finally:
        plt.close(fig)


def save_model_folder(model, vocab, directory: Path, meta: dict, source: dict | None = None) -> None:
    """A trained ``LanguageModel`` as a native model folder: the biLM, the softmax beside it, ``vocab.txt``;
    ``source`` (where the run started) and, without ``meta["language"]``, its language recorded in ``config.json``."""
    from pyelmo.modelio.lexicon import lexicon_ids, save_lexicons
    from pyelmo.modelio.weights import save_pretrained

    meta = dict(meta)
    if source:
        meta["source"] = source
        if source.get("language") and "language" not in meta:  # data.language, when given, names the text
            meta["language"] = source["language"]
    if lexicon_ids(model.bilm) is not None:  # continued from ELMoForManyLangs: their lexicons too
        directory.mkdir(parents=True, exist_ok=True)
        meta.update(save_lexicons(model.bilm, directory))
    save_pretrained(model.bilm, directory, metadata=meta,
                    extra_tensors={"softmax.weight": model.softmax_weight, "softmax.bias": model.softmax_bias})
    vocab.save(directory / "vocab.txt")


class RunFolder:
    """The files of a run's folder as the trainer writes them: only the main process writes (on the other
    ranks every call does nothing)."""

    def __init__(self, out: Path, main: bool) -> None:
        self.out, self.main = out, main

    def remove_temporaries(self) -> None:
        if self.main:
            for folder in (self.out, self.out / "model", self.out / "best"):
                remove_stale_temporaries(folder)

    def start(self, vocab, run: dict[str, Any], state: dict[str, Any]) -> None:
        """A new run's vocabulary, empty metrics and step-0 checkpoint, then ``run.json``: a run that has
        a ``run.json`` can always be resumed."""
        self.out.mkdir(parents=True, exist_ok=True)
        vocab.save(self.out / "vocab.txt")
        write_text_atomic(self.out / METRICS_NAME, "")
        torch_save_atomic(state, self.out / CHECKPOINT_NAME)
        write_text_atomic(self.out / RUN_NAME, json.dumps(run, indent=2) + "\n")

    def save_checkpoint(self, state: Callable[[], dict[str, Any]]) -> None:
        if self.main:
            torch_save_atomic(state(), self.out / CHECKPOINT_NAME)

    def log(self, record: dict[str, Any]) -> None:
        if self.main:
            with open(self.out / METRICS_NAME, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

    def keep_metrics_until(self, step: int) -> None:
        """Drop the metrics logged after ``step`` (a resumed run's checkpoint)."""
        if self.main:
            path = self.out / METRICS_NAME
            lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
            kept = [l for l in lines if metrics_record_step(l) <= step]
            write_text_atomic(path, "".join(l + "\n" for l in kept))

    def save_final(self, save_model: Callable[[Path], None], from_best: bool) -> Path:
        """``model/``: a copy of ``best/`` (``from_best`` and it exists) or ``save_model``'s, and the loss
        curves."""
        model_dir = self.out / "model"
        if not self.main:
            return model_dir
        best = self.out / "best"
        if from_best and best.is_dir():
            copy_dir_atomic(best, model_dir)
        else:
            save_model(model_dir)
        plot_metrics(self.out / METRICS_NAME, self.out / CURVES_NAME)
        return model_dir
