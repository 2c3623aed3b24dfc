"""What a training step runs with: the optimizer of ``[optim]`` and the products of ``train.products``."""

from __future__ import annotations

from typing import Iterable

import torch

from pyelmo.runtime.backends import Differentiable
from pyelmo.runtime.options import RunOptions
from pyelmo.runtime.products import PLAIN
from pyelmo.runtime.training_products import TrainingProducts
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
    (fused, and the token encoder's products through oneDNN with prepacked weights)."""
    if products == "onednn":
        return RunOptions(Differentiable(TrainingProducts(), fused_conv=True))
    return RunOptions(Differentiable(PLAIN, fused_conv=products == "fused"))
