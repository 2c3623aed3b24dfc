"""Task-specific mixing of the biLM layers (paper eq. 1): ``ELMo_k = gamma * sum_j softmax(w)_j * h_{k,j}``."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn



class ScalarMix(nn.Module):
    """``gamma * sum_j softmax(w)_j * layer_j``, with optional layer norm over unmasked elements.

    ``w`` starts equal (all ``initial_scalar_parameters``, default 0), ``gamma`` at 1.
    With ``trainable=False`` the weights stay fixed.
    """

    def __init__(self, mixture_size: int, do_layer_norm: bool = False,
                 initial_scalar_parameters: Sequence[float] | None = None, trainable: bool = True) -> None:
        super().__init__()
        if initial_scalar_parameters is None:
            initial_scalar_parameters = [0.0] * mixture_size
        if len(initial_scalar_parameters) != mixture_size:
            raise ValueError(f"{len(initial_scalar_parameters)} scalar parameters given for {mixture_size} layers")
        self.mixture_size = mixture_size
        self.do_layer_norm = do_layer_norm
        self.scalar_parameters = nn.Parameter(torch.tensor(list(initial_scalar_parameters), dtype=torch.float),
                                              requires_grad=trainable)
        self.gamma = nn.Parameter(torch.tensor([1.0]), requires_grad=trainable)

    @property
    def weights(self) -> torch.Tensor:
        """The normalised layer weights ``softmax(w)``."""
        return torch.softmax(self.scalar_parameters, dim=0)

    def regularization(self, lambda_: float) -> torch.Tensor:
        """``lambda * ||w||^2``: add to the task loss (lambda = 1 keeps the mix near an average)."""
        return lambda_ * (self.scalar_parameters ** 2).sum()

    def forward(self, layers: Sequence[torch.Tensor] | torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Mix ``layers`` (a sequence or a stacked tensor of ``(B, T, D)``); ``mask (B, T)`` for layer norm."""
        if len(layers) != self.mixture_size:
            raise ValueError(f"{len(layers)} layers given to a mix of {self.mixture_size}")
        weights = self.weights
        if self.do_layer_norm:
            if mask is None:
                raise ValueError("layer norm needs the mask")
            layers = [_masked_layer_norm(layer, mask) for layer in layers]
        mixed = sum(w * layer for w, layer in zip(weights, layers))
        return self.gamma * mixed


def _masked_layer_norm(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Normalise ``x`` by the mean and variance of all its unmasked elements (AllenNLP's convention)."""
    m = mask.unsqueeze(-1).to(x.dtype)
    count = m.sum() * x.shape[-1]
    mean = (x * m).sum() / count
    variance = (((x * m - mean) * m) ** 2).sum() / count
    return (x - mean) / torch.sqrt(variance + 1e-12)
