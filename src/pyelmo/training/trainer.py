"""Train a biLM on raw text (single process or DistributedDataParallel under torchrun).

Determinism: the batch order depends on ``(seed, epoch)``, the negatives and the dropout
masks on ``(seed, step[, rank])``, so a resumed run repeats an uninterrupted one exactly.
Under torchrun every rank builds the same global batch and takes every ``world``-th of its
(length-sorted) rows; the loss is normalised by the global prediction count, so the
gradient equals that of one process running the whole global batch.
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from pyelmo.runtime.precision import bf16_supported
from pyelmo.training.config import TrainConfig, config_from_dict
from pyelmo.lm.model import evaluate
from pyelmo.lm.text import TokenizedText
from pyelmo.training.data import DataFiles, DataOrder, resolve_data, shard
from pyelmo.fileio import PathLike
from pyelmo.training.checkpoints import CheckpointError, RunFolder, save_model_folder
from pyelmo.training.distributed import setup_distributed
from pyelmo.training.report import LossWindow, Progress, RunLength, TrainResult, limit_reached, setting
from pyelmo.training.start import InitFrom, init_softmax, open_run, prepare_start
from pyelmo.training.step import learning_rate, make_optimizer, phase_model, step_negatives, use_products
from pyelmo.training.stop import StopRequest


# -- the trainer ----------------------------------------------------------------------------
class Trainer:
    """One training run writing into ``out_dir``; ``run()`` trains and saves the model."""

    def __init__(self, config: TrainConfig, out_dir: PathLike, data: DataFiles | None = None,
                 resume: bool = False, init_from: PathLike | InitFrom | None = None, progress: bool = True) -> None:
        self.out = Path(out_dir)
        self.progress = progress
        self.dist = setup_distributed(config.train.device)
        self.folder = RunFolder(self.out, self.dist.main)
        self.folder.remove_temporaries()
        self.checkpoint, run, data, init = open_run(self.out, data, resume, init_from)
        self.config = config
        self.data = data
        self.init_from = init.model if init else None
        if config.train.threads:
            torch.set_num_threads(config.train.threads)
        start = prepare_start(config, data.train, None if resume else init, run, self.out, self.dist.device)
        self.model, self.vocab, self.source = start.model, start.vocab, start.source
        self.freeze = config.train.freeze_bilm_steps  # phase 1: the softmax alone for this many steps
        self._read_text()
        if start.built_softmax and not resume:
            init_softmax(self.model, self.vocab, self.train_text, config.softmax.new_rows)
        use_products(self.model.bilm, config.train.products)
        self.optimizer = make_optimizer(self.model.parameters(), config.optim)
        self.ddp: torch.nn.Module = self.model
        self.frozen: bool | None = None  # whether the biLM is frozen (phase 1) in the current wrapper

        self.step = 0
        self.tokens = 0
        self.best: float | None = None
        self.bad_evals = 0
        self.elapsed = 0.0
        self.stopped = ""  # why the run stopped, in words
        self.valid_ppl: float | None = None  # the latest validation perplexity
        self.signal: int | None = None
        if self.checkpoint is not None:
            self._restore(self.checkpoint)
        elif self.dist.main:
            self._write_start()

    # -- setup -------------------------------------------------------------------------
    def _read_text(self) -> None:
        """The training and validation text in the vocabulary, the batch order and the run's length."""
        max_chars = self.model.bilm.config.char_cnn.max_characters_per_token
        d = self.config.data
        self.train_text = TokenizedText(self.data.train, self.vocab, d.max_length, max_chars)
        self.valid_text = (TokenizedText(self.data.valid, self.vocab, d.max_length, max_chars, d.max_valid_sentences)
                           if self.data.valid else None)
        self.min_rows = max(d.min_rows, self.dist.world)
        self.order = DataOrder(self.train_text.lengths, d.batch_tokens, self.config.train.seed, self.min_rows,
                               d.pool_batches)
        self.run_length = RunLength.of(len(self.order.epoch_batches(0)), self.config.train)

    def _write_start(self) -> None:
        run = {"config": self.config.to_dict(), "train_files": self.data.train, "valid_files": self.data.valid,
               "init_from": self.init_from, "source": self.source, "model_options": self.model.bilm.config.to_options(),
               "world_size": self.dist.world}
        self.folder.start(self.vocab, run, self.state_dict())

    def _restore(self, ckpt: dict[str, Any]) -> None:
        try:
            self.model.load_state_dict(ckpt["model"])
            self.optimizer.load_state_dict(ckpt["optimizer"])
            self.order.load_state_dict(ckpt["data"])
            self.step, self.tokens = int(ckpt["step"]), int(ckpt["tokens"])
            self.best, self.bad_evals = ckpt["best"], int(ckpt["bad_evals"])
            self.elapsed = float(ckpt["elapsed"])
            torch.set_rng_state(ckpt["rng"]["torch"])
        except (KeyError, RuntimeError, ValueError, TypeError) as exc:
            raise CheckpointError(f"checkpoint does not match this run: {str(exc).splitlines()[0]}") from None
        self.folder.keep_metrics_until(self.step)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: tensors and plain Python values only."""
        return {"step": self.step, "tokens": self.tokens, "best": self.best, "bad_evals": self.bad_evals,
                "elapsed": self.elapsed, "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(), "data": self.order.state_dict(),
                "sampler": {"seed": self.config.train.seed, "negatives": self.config.softmax.negatives,
                            "step": self.step},
                "rng": {"torch": torch.get_rng_state()}}

    def save_checkpoint(self) -> None:
        self.folder.save_checkpoint(self.state_dict)

    def log(self, record: dict[str, Any]) -> None:
        self.folder.log(record)

    # -- one step --------------------------------------------------------------------------
    def autocast(self) -> contextlib.AbstractContextManager:
        if self.config.train.bf16 and (self.dist.device.type != "cpu" or bf16_supported()):
            return torch.autocast(device_type=self.dist.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _set_phase(self) -> None:
        """Phase 1 (``step < train.freeze_bilm_steps``) trains the softmax alone (see ``phase_model``)."""
        frozen = self.step < self.freeze
        if frozen != self.frozen:
            self.frozen = frozen
            self.ddp = phase_model(self.model, frozen, self.dist)

    def train_step(self, rows: np.ndarray) -> torch.Tensor:
        """One optimizer step on a global batch; returns the global ``[nll_fwd, nll_bwd, count]``."""
        self._set_phase()
        seed = self.config.train.seed
        torch.manual_seed(int(np.random.default_rng([seed, 2, self.step, self.dist.rank]).integers(2**62)))
        lengths = self.train_text.lengths[rows]
        n_global = int(lengths.sum()) + len(rows)  # predictions per direction
        batch = self.train_text.batch(shard(rows, self.dist.rank, self.dist.world))
        dev = self.dist.device
        neg = step_negatives(self.model, self.config.softmax.negatives, seed, self.step, dev)
        o = self.config.optim
        lr = learning_rate(o, self.step, self.freeze)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        with self.autocast():
            sums = self.ddp(batch.char_ids.to(dev), batch.targets.to(dev), *neg)
        loss = sums.sum() * (self.dist.world / (2 * n_global))
        loss.backward()
        if o.clip_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), o.clip_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        stats = torch.cat([sums.detach().float().cpu(), torch.tensor([0.0])])
        stats = self.dist.all_reduce(stats)
        stats[2] = n_global
        return stats

    # -- evaluation ------------------------------------------------------------------------
    def validate(self) -> dict[str, float] | None:
        if self.valid_text is None:
            return None
        # exact float32 even when training under bfloat16 autocast (evaluate switches it off): runs of either
        # precision report comparable perplexities
        result = evaluate(self.model, self.valid_text, 2 * self.config.data.batch_tokens, rank=self.dist.rank,
                          world=self.dist.world, device=self.dist.device, all_reduce=self.dist.all_reduce)
        return result.as_dict()

    # -- the loop ----------------------------------------------------------------------------
    def run(self, handle_signals: bool = True) -> TrainResult:
        """Train, validate, checkpoint, write ``model/``. With ``handle_signals``, SIGTERM / SIGINT stop
        every rank after the same step and only the checkpoint is written (``TrainResult.signal``)."""
        with StopRequest(enabled=handle_signals) as request:
            return self._run(request)

    def _run(self, request: StopRequest) -> TrainResult:
        t = self.config.train
        bar = Progress(self.progress and self.dist.main, self.run_length.total, min(self.step, self.run_length.total))
        start = time.perf_counter() - self.elapsed
        window = LossWindow()
        stop = bool(t.max_steps) and self.step >= t.max_steps
        while not stop and self.order.epoch < t.max_epochs:
            batches = self.order.epoch_batches(self.order.epoch)
            while self.order.position < len(batches):
                self._take_step(batches[self.order.position], window, bar, start)
                stop = self._stop_now(request, bar, start)
                self.elapsed = time.perf_counter() - start
                if stop:
                    break
                if t.checkpoint_every and self.step % t.checkpoint_every == 0:
                    self.save_checkpoint()
            else:
                self.order.epoch += 1
                self.order.position = 0
        bar.close()
        return self._finish(start, window.last_loss)

    def _take_step(self, rows: np.ndarray, window: LossWindow, bar: Progress, start: float) -> None:
        """One step on ``rows``, counted, and logged every ``train.log_every`` steps and at the last."""
        stats = self.train_step(rows)
        self.step += 1
        self.order.position += 1
        n_tokens = int(self.train_text.lengths[rows].sum())
        self.tokens += n_tokens
        window.add(stats, n_tokens)
        bar.step()
        if self.step % self.config.train.log_every == 0 or self.step == self.run_length.total:
            loss, rate, now = window.close()
            self.log({"step": self.step, "epoch": self.order.epoch, "tokens": self.tokens, "loss": loss,
                      "ppl": math.exp(min(loss, 50)), "tokens_per_s": rate,
                      "lr": self.optimizer.param_groups[0]["lr"], "elapsed_s": now - start})
            bar.training(loss, math.exp(min(loss, 50)), rate)

    def _stop_now(self, request: StopRequest, bar: Progress, start: float) -> bool:
        """Validate when due, then whether the run stops after this step: early stopping, the step limit,
        the time limit or a signal (every rank agrees)."""
        t = self.config.train
        stop = False
        if t.eval_every and self.step % t.eval_every == 0:
            stop = self._evaluate_and_decide()
            bar.validation(self.valid_ppl)
        if stop or (t.max_steps and self.step >= t.max_steps):
            return True
        late = bool(t.max_minutes) and time.perf_counter() - start > 60 * t.max_minutes
        late, received = request.agreed(late, self.dist.all_reduce)
        if received is not None:
            self.signal, self.stopped = int(received), f"stopped by {received.name}"
            return True
        if late:
            self.stopped = f"time limit: {setting('max_minutes', t.max_minutes)} reached"
            return True
        return False

    def _finish(self, start: float, last_loss: float | None) -> TrainResult:
        """A last validation where the last step had none, the checkpoint, and ``model/`` (not after a signal)."""
        t = self.config.train
        self.stopped = self.stopped or limit_reached(t, self.step)
        if self.signal is None and self.valid_text is not None and (not t.eval_every or self.step % t.eval_every):
            self._evaluate_and_decide()
        self.elapsed = time.perf_counter() - start
        self.save_checkpoint()
        model_dir = (self.out / "model" if self.signal is not None else
                     self.folder.save_final(self._save_model, t.keep_best and self.best is not None))
        if self.dist.world > 1:
            torch.distributed.barrier()
            if self.dist.initialized_here:
                torch.distributed.destroy_process_group()
        return TrainResult(self.out, model_dir, self.step, self.tokens, self.best, last_loss, self.signal)

    def _evaluate_and_decide(self) -> bool:
        """Validate, keep the best model, and say whether early stopping ends the run."""
        result = self.validate()
        if result is None:
            return False
        self.log({"step": self.step, **{f"valid_{k}": v for k, v in result.items()}})
        ppl = self.valid_ppl = result["ppl"]
        if self.best is None or ppl < self.best:
            self.best, self.bad_evals = ppl, 0
            if self.config.train.keep_best and self.dist.main:
                self._save_model(self.out / "best")
        else:
            self.bad_evals += 1
            if self.config.train.patience and self.bad_evals >= self.config.train.patience:
                self.stopped = self.stopped or (f"early stopping: {self.bad_evals} validations without "
                                                f"improvement ({setting('patience', self.config.train.patience)})")
                return True
        return False

    def _save_model(self, directory: Path) -> None:
        language = {"language": self.config.data.language} if self.config.data.language else {}
        meta = {**language, "training": {"steps": self.step, "tokens": self.tokens, "epoch": self.order.epoch,
                             "best_valid_ppl": self.best, "vocab_size": len(self.vocab),
                             "max_length": self.config.data.max_length, "config": self.config.to_dict(),
                             "init_from": self.init_from, "world_size": self.dist.world,
                             "softmax": ["softmax.weight", "softmax.bias"]}}
        save_model_folder(self.model, self.vocab, directory, meta, self.source)


def train(config: TrainConfig | dict, out_dir: PathLike, data_dir: PathLike | None = None,
          train_files: Sequence[PathLike] | None = None, valid_files: Sequence[PathLike] | None = None,
          resume: bool = False, init_from: PathLike | InitFrom | None = None, progress: bool = False) -> TrainResult:
    """Python API of ``pyelmo train``."""
    if isinstance(config, dict):
        config = config_from_dict(config)
    data = None
    if data_dir is not None or train_files:
        data = resolve_data(data_dir, train_files, valid_files)
    return Trainer(config, out_dir, data, resume=resume, init_from=init_from, progress=progress).run()
