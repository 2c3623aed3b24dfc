"""The token encoder (paper section 3.1 / bilm-tf ``CNN``): characters to a token vector.

char embedding -> 1-D convolutions of several widths, max over positions, activation
-> highway layers -> linear projection. Its output is the biLM's layer 0.
"""

from __future__ import annotations

import torch
from torch import nn

from pyelmo.config import CharCNNConfig

N_CHAR_IDS = 262  # 261 character ids + the padding id 0


class Highway(nn.Module):
    """``y = t * relu(x W_transform + b_transform) + (1 - t) * x`` with ``t = sigmoid(x W_carry + b_carry)``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.carry = nn.Linear(dim, dim)  # TF name "carry" is the transform gate t
        self.transform = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.carry(x))
        return gate * torch.relu(self.transform(x)) + (1 - gate) * x


class TokenEncoder(nn.Module):
    """Maps character ids ``(..., max_chars)`` to context-independent token vectors ``(..., projection_dim)``."""

    def __init__(self, config: CharCNNConfig, projection_dim: int) -> None:
        super().__init__()
        self.config = config
        self.char_embedding = nn.Embedding(N_CHAR_IDS, config.embedding_dim, padding_idx=0)
        self.convolutions = nn.ModuleList(
            nn.Conv1d(config.embedding_dim, n_maps, kernel_size=width) for width, n_maps in config.filters
        )
        self.activation = torch.relu if config.activation == "relu" else torch.tanh
        self.highways = nn.ModuleList(Highway(config.n_filters) for _ in range(config.n_highway))
        self.projection = nn.Linear(config.n_filters, projection_dim)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        shape = char_ids.shape[:-1]
        chars = self.char_embedding(char_ids.reshape(-1, char_ids.shape[-1])).transpose(1, 2)
        # max over positions then activation (equal to activation then max for monotone activations)
        # (max rather than amax: the same values, and a backward pass that scatters to the argmax)
        pooled = [self.activation(conv(chars).max(dim=-1).values) for conv in self.convolutions]
        x = torch.cat(pooled, dim=-1)
        for highway in self.highways:
            x = highway(x)
        return self.projection(x).reshape(*shape, -1)


def encode_distinct(encoder: TokenEncoder, char_ids: torch.Tensor) -> torch.Tensor:
    """``encoder(char_ids)`` computed once per distinct token (row of character ids).

    Text repeats its words, so a batch has far fewer distinct tokens than positions; the
    gradient of a repeated token is the sum over its positions, as without the sharing.
    """
    rows = char_ids.reshape(-1, char_ids.shape[-1])
    if rows.shape[0] == 0:
        return encoder(char_ids)
    distinct, inverse = torch.unique(rows, dim=0, return_inverse=True)
    return encoder(distinct)[inverse].reshape(*char_ids.shape[:-1], -1)
