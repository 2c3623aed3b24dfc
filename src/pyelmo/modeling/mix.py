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


class ScalarMixes(nn.ModuleList):
    """``count`` learned mixes of the same layers, each output followed by dropout: ELMo where a model uses it
    (paper section 3.3: a mix per place ELMo enters, dropout on the mixed vector).  ``Elmo`` and the task
    models (:mod:`pyelmo.tasks`) hold one; its state dict is that of a list of :class:`ScalarMix` (``0.gamma``, ...).
    """

    def __init__(self, mixture_size: int, count: int, dropout: float = 0.5, do_layer_norm: bool = False,
                 initial_scalar_parameters: Sequence[float] | None = None, trainable: bool = True) -> None:
        super().__init__(ScalarMix(mixture_size, do_layer_norm, initial_scalar_parameters, trainable)
                         for _ in range(count))
        self.dropout = dropout  # a rate, not a module: the list holds the mixes only

    def __getitem__(self, index):
        if isinstance(index, slice):  # some of the mixes: a plain list of them
            return nn.ModuleList(list(self)[index])
        return super().__getitem__(index)

    def mix(self, which: int, layers: Sequence[torch.Tensor] | torch.Tensor,
            mask: torch.Tensor | None = None) -> torch.Tensor:
        """Mix number ``which`` of ``layers``, with dropout on the result (in training mode)."""
        return nn.functional.dropout(self[which](layers, mask), self.dropout, self.training)

    def regularization(self, lambda_: float) -> torch.Tensor:
        """``lambda * ||w||^2`` summed over the mixes."""
        return sum(mix.regularization(lambda_) for mix in self)


def _masked_layer_norm(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Normalise ``x`` by the mean and variance of all its unmasked elements (AllenNLP's convention)."""
    m = mask.unsqueeze(-1).to(x.dtype)
    count = m.sum() * x.shape[-1]
    mean = (x * m).sum() / count
    variance = (((x * m - mean) * m) ** 2).sum() / count
    return (x - mean) / torch.sqrt(variance + 1e-12)
