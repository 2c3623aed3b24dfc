"""What a training step runs with: the optimizer of ``[optim]``, its learning rate, the products of
``train.products``, the sampled negatives, and what each phase trains."""

from __future__ import annotations

from typing import Iterable

import numpy as np
import torch

from pyelmo.modeling.encoder import ConvMax, FusedConvMax
from pyelmo.runtime.planning import swap_modules
from pyelmo.training.config import OptimSection


def make_optimizer(params: Iterable[torch.nn.Parameter], o: OptimSection) -> torch.optim.Optimizer:
    """``[optim]``'s optimizer (AdamW or Adagrad) over ``params``."""
    params = list(params)
    if o.name == "adagrad":
        return torch.optim.Adagrad(params, lr=o.lr, initial_accumulator_value=o.initial_accumulator)
    return torch.optim.AdamW(params, lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay)


def use_products(bilm: torch.nn.Module, products: str) -> None:
    """``train.products`` in ``bilm``, before it trains: ``"plain"`` (one convolution per width, the model as
    built) or ``"fused"`` (every convolution width in one product: :class:`FusedConvMax` swapped in)."""
    if products == "fused":
        swap_modules(bilm, {ConvMax: lambda name, child: FusedConvMax()})


def learning_rate(o: OptimSection, step: int, freeze: int) -> float:
    """``optim.lr`` after a linear warm-up of ``optim.warmup_steps`` steps; each phase (the softmax alone for
    ``freeze`` steps, then everything) warms up."""
    since = step - (freeze if step >= freeze else 0)
    return o.lr * min(1.0, (since + 1) / o.warmup_steps) if o.warmup_steps else o.lr


def step_negatives(model, k: int, seed: int, step: int, device: torch.device) -> tuple:
    """The ``k`` sampled softmax negatives of ``step`` (the same on every rank) as the model's forward takes
    them: ``(ids, log_q, num_tries)`` on ``device``, or ``()`` for the full softmax (``k`` 0)."""
    if not k:
        return ()
    negatives = model.sample_negatives(k, np.random.default_rng([seed, 1, step]))
    return negatives.ids.to(device), negatives.log_q.to(device), negatives.num_tries


def phase_model(model: torch.nn.Module, frozen: bool, dist) -> torch.nn.Module:
    """What a step of a phase runs: with the biLM ``frozen`` (phase 1) its parameters get no gradient, so the
    optimizer leaves them bit-identical; under torchrun, DistributedDataParallel wraps what the phase trains."""
    for p in model.bilm.parameters():
        p.requires_grad_(not frozen)
    if dist.world <= 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [dist.device.index] if dist.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)
