"""What a training step runs with: the optimizer of ``[optim]`` and the products of ``train.products``."""

from __future__ import annotations

from typing import Iterable

import torch

from pyelmo.runtime.products import PLAIN
from pyelmo.runtime.options import RunOptions
from pyelmo.training.config import OptimSection
from pyelmo.runtime.training_products import TrainingProducts


def make_optimizer(params: Iterable[torch.nn.Parameter], o: OptimSection) -> torch.optim.Optimizer:
    """``[optim]``'s optimizer (AdamW or Adagrad) over ``params``."""
    params = list(params)
    if o.name == "adagrad":
        return torch.optim.Adagrad(params, lr=o.lr, initial_accumulator_value=o.initial_accumulator)
    return torch.optim.AdamW(params, lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay)


def training_run_options(products: str) -> RunOptions:
    """The plain (differentiable) strategy with ``train.products``' implementation: ``"plain"`` (the
    reference modules), ``"fused"`` or ``"onednn"`` (:class:`pyelmo.runtime.training_products.TrainingProducts`)."""
    if products == "plain":
        return RunOptions("plain", PLAIN)
    return RunOptions("plain", TrainingProducts(onednn=products == "onednn"))
