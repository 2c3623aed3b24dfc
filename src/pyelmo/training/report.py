"""What a training run tells its user: the plan at the start (model, vocabulary, data, and the limit
that ends the run first: ``RunLength``), the logged loss, the progress bar's figures, the reason it
stopped, and what it produced (``TrainResult``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pyelmo.training.config import TrainSection
from pyelmo.training.start import SOFTMAX_CONTINUED, describe


@dataclass
class TrainResult:
    """What a finished run produced."""

    out_dir: Path
    model_dir: Path
    steps: int
    tokens: int
    best_valid_ppl: float | None
    final_loss: float | None
    signal: int | None = None  # SIGTERM / SIGINT that stopped the run at a checkpoint (``model/`` not written)


#: The command-line flag of each ``[train]`` limit (``pyelmo train --help``).
_FLAGS = {"max_steps": "--max-steps", "max_epochs": "--max-epochs", "max_minutes": "--max-minutes"}


def setting(name: str, value: Any) -> str:
    """``train.NAME = VALUE (--flag)``: a limit as the config and the command line name it."""
    flag = f" ({_FLAGS[name]})" if name in _FLAGS else ""
    return f"train.{name} = {value:g}{flag}" if isinstance(value, float) else f"train.{name} = {value}{flag}"


def limit_reached(t: TrainSection, step: int) -> str:
    """Why a run that ran out of steps or epochs stopped."""
    if t.max_steps and step >= t.max_steps:
        return f"{setting('max_steps', t.max_steps)} reached"
    return f"{setting('max_epochs', t.max_epochs)} reached"


@dataclass
class RunLength:
    """How many steps a run takes at most, and the limit that decides it."""

    per_epoch: int  # steps in an epoch (the first epoch's count; later epochs differ by a few)
    total: int
    binding: str  # the limit that ends the run first, in words

    @classmethod
    def of(cls, per_epoch: int, t: TrainSection) -> "RunLength":
        by_epochs = per_epoch * t.max_epochs
        if t.max_steps and t.max_steps <= by_epochs:
            return cls(per_epoch, t.max_steps, f"{setting('max_steps', t.max_steps)} ends the run "
                                               f"(before {setting('max_epochs', t.max_epochs)}: {by_epochs} steps)")
        after = f" before {setting('max_steps', t.max_steps)}" if t.max_steps else " (no step limit)"
        return cls(per_epoch, by_epochs, f"{setting('max_epochs', t.max_epochs)} ends the run{after}")


def start_summary(trainer: Any) -> str:
    """The lines ``pyelmo train`` prints before the first step (``trainer``: a ``Trainer``): what is
    trained, on what, and for how long."""
    model, t, length = trainer.model, trainer.config.train, trainer.run_length
    softmax = model.softmax_weight.numel() + model.softmax_bias.numel()
    total = sum(p.numel() for p in model.parameters())
    source = trainer.source
    built = source is not None and source.get("softmax") != SOFTMAX_CONTINUED
    vocab_from = (f"from {trainer.init_from}" if trainer.init_from and not built else
                  f"from {trainer.config.vocab.path}" if trainer.config.vocab.path else
                  f"built from the training text, max_size {trainer.config.vocab.max_size}, "
                  f"min_count {trainer.config.vocab.min_count}")
    valid = trainer.valid_text
    every = f", every {t.eval_every} steps and at the end" if t.eval_every else ", at the end"
    lines = [
        f"model: {total:,} parameters (biLM {total - softmax:,}, softmax {softmax:,})",
        f"vocabulary: {len(trainer.vocab):,} words ({vocab_from})",
        f"training data: {len(trainer.train_text):,} sentences, {trainer.train_text.n_tokens:,} tokens "
        f"in {len(trainer.data.train)} file(s)",
        (f"validation: {len(valid):,} sentences, {valid.n_tokens:,} tokens in {len(trainer.data.valid)} file(s)"
         f"{every}" if valid is not None else "validation: none (no validation files)"),
        f"plan: {length.total:,} steps ({length.per_epoch:,} per epoch, at most {trainer.config.data.batch_tokens:,} "
        f"padded tokens each); {length.binding}",
    ]
    lines += describe(source, trainer.freeze)
    also = []
    if t.max_minutes:
        also.append(setting("max_minutes", t.max_minutes))
    if t.patience and valid is not None:
        also.append(f"early stopping after {setting('patience', t.patience)} validations without improvement")
    if also:
        lines.append("may stop sooner: " + "; ".join(also))
    if trainer.step:
        lines.append(f"resuming at step {trainer.step:,}")
    return "\n".join(lines)


class LossWindow:
    """The summed ``[nll_fwd, nll_bwd, count]`` and the tokens of the steps since the last log line."""

    def __init__(self) -> None:
        self.sums = torch.zeros(3)
        self.start, self.tokens = time.perf_counter(), 0
        self.last_loss: float | None = None

    def add(self, stats: torch.Tensor, tokens: int) -> None:
        self.sums += stats
        self.tokens += tokens

    def close(self) -> tuple[float, float, float]:
        """The window's mean loss and tokens per second, and the time now; a new window starts."""
        now = time.perf_counter()
        loss = float((self.sums[0] + self.sums[1]) / (2 * self.sums[2]))
        rate = self.tokens / max(now - self.start, 1e-9)
        self.last_loss = loss
        self.sums.zero_()
        self.start, self.tokens = now, 0
        return loss, rate, now


class Progress:
    """The run's progress bar (tqdm, on stderr; nothing when not ``enabled``): steps, the training loss
    and perplexity, and the latest validation perplexity once one is known."""

    def __init__(self, enabled: bool, total: int, initial: int) -> None:
        self.figures: dict[str, str] = {}
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, smoothing=0.1)

    def step(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def training(self, loss: float, ppl: float, tokens_per_s: float) -> None:
        self.figures.update(loss=f"{loss:.3f}", train_ppl=f"{ppl:.1f}", tok_s=f"{tokens_per_s:.0f}")
        self._show()

    def validation(self, ppl: float | None) -> None:
        if ppl is not None:
            self.figures["valid_ppl"] = f"{ppl:.1f}"
            self._show()

    def _show(self) -> None:
        if self.bar is not None:
            order = ("loss", "train_ppl", "valid_ppl", "tok_s")
            self.bar.set_postfix({k: self.figures[k] for k in order if k in self.figures}, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
