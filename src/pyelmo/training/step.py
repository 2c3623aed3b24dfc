"""What a training step runs with: the optimizer of ``[optim]``, its learning rate, the products of
``train.products``, the sampled negatives, and what each phase trains."""

from __future__ import annotations

from typing import Iterable

import numpy as np
import torch

from pyelmo.runtime.backends import Differentiable
from pyelmo.runtime.swap import swap_linears
from pyelmo.runtime.options import RunOptions
from pyelmo.runtime.products import PLAIN, Products
from pyelmo.runtime.training_linear import PrepackedTrainingLinear
from pyelmo.training.config import OptimSection


def make_optimizer(params: Iterable[torch.nn.Parameter], o: OptimSection) -> torch.optim.Optimizer:
    """``[optim]``'s optimizer (AdamW or Adagrad) over ``params``."""
    params = list(params)
    if o.name == "adagrad":
        return torch.optim.Adagrad(params, lr=o.lr, initial_accumulator_value=o.initial_accumulator)
    return torch.optim.AdamW(params, lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay)


def training_run_options(products: str) -> RunOptions:
    """The differentiable backend with ``train.products``: ``"plain"`` (``torch`` products, one
    convolution per width), ``"fused"`` (every convolution width in one product) or ``"onednn"``
    (fused, and the token encoder's products through oneDNN with prepacked weights: its linears swapped by
    :func:`swap_training_linears`)."""
    if products == "onednn":
        return RunOptions(Differentiable(Products(trained_linear=PrepackedTrainingLinear), fused_conv=True))
    return RunOptions(Differentiable(PLAIN, fused_conv=products == "fused"))


def swap_training_linears(bilm: torch.nn.Module, options: RunOptions) -> None:
    """Swap in ``options``' trained linear, if any, for the token encoder's ``nn.Linear`` s (the same Parameters:
    the optimizer, ``state_dict`` and checkpoints are unchanged), once, before training ``bilm``."""
    if options.products.trained_linear is not None:
        swap_linears(bilm.token_encoder, options.products)


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
