"""Task models over static and ELMo features (the biLM itself stays outside, frozen).

* classify: features -> BiLSTM -> max pool over tokens -> linear layer (softmax).
* tag: features -> BiLSTM -> linear layer -> CRF (``pytorch-crf``).

Features per token: a static vector (frozen; unknown words share one learned vector)
and/or ``ELMo = gamma * sum_j softmax(w)_j h_j`` from a :class:`pyelmo.ScalarMix` over
the biLM layers, with dropout on the mixed vector (paper eq. 1).  With ``elmo_output`` a
second mix is concatenated to the encoder's output (paper Table 3).  ``top_only`` mixes
the top layer alone (paper Table 2).  :meth:`TaskModel.mix_penalty` is ``lambda * ||w||^2``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from pyelmo.modeling.mix import ScalarMix


@dataclass
class ModelConfig:
    """The task model's shape and switches (saved with a trained model)."""

    kind: str                 # "classify", "tag" or "qa" (pyelmo.tasks.reader)
    n_labels: int
    static_dim: int = 0       # 0: no static vectors
    static_size: int = 0      # rows of the static table (words)
    elmo_layers: int = 0      # 0: no ELMo
    elmo_dim: int = 0
    elmo_output: bool = False
    top_only: bool = False
    hidden: int = 128
    dropout: float = 0.2
    elmo_dropout: float = 0.5
    match: bool = False       # qa: each token's flag "in the other text" (reader.match_flags; False before 2026-12-04)

    def to_dict(self) -> dict:
        return asdict(self)


def add_static(module: nn.Module, config: ModelConfig, static_table: torch.Tensor | None) -> int:
    """Give ``module`` the frozen word table of ``config`` (row 0: padding, row 1: unknown) and the learned
    unknown-word vector; returns their width (0 without static vectors)."""
    if not config.static_dim:
        return 0
    table = torch.zeros(config.static_size + 2, config.static_dim)
    if static_table is not None:
        table[2:] = static_table
    module.register_buffer("static_table", table, persistent=False)
    module.unknown = nn.Parameter(torch.zeros(config.static_dim).normal_(0, 0.1))
    return config.static_dim


def static_vectors(module: nn.Module, static: torch.Tensor) -> torch.Tensor:
    """The static vectors of token ids ``static`` (unknown words: the learned vector)."""
    emb = module.static_table[static]
    return torch.where((static == 1).unsqueeze(-1), module.unknown.expand_as(emb), emb)


class TaskModel(nn.Module):
    """The classifier or tagger of :class:`ModelConfig`; ``static_table`` ``(V, d)`` is the frozen word table."""

    def __init__(self, config: ModelConfig, static_table: torch.Tensor | None = None) -> None:
        super().__init__()
        self.config = c = config
        in_dim = add_static(self, c, static_table)
        mixes = 0
        if c.elmo_layers:
            n = 1 if c.top_only else c.elmo_layers
            mixes = 2 if c.elmo_output else 1
            self.mixes = nn.ModuleList(ScalarMix(n) for _ in range(mixes))
            self.elmo_dropout = nn.Dropout(c.elmo_dropout)
            in_dim += c.elmo_dim
        if in_dim == 0:
            raise ValueError("a task model needs static vectors, ELMo or both")
        self.encoder = nn.LSTM(in_dim, c.hidden, batch_first=True, bidirectional=True)
        self.dropout = nn.Dropout(c.dropout)
        out_dim = 2 * c.hidden + (c.elmo_dim if mixes == 2 else 0)
        self.output = nn.Linear(out_dim, c.n_labels)
        if c.kind == "tag":
            from torchcrf import CRF

            self.crf = CRF(c.n_labels, batch_first=True)

    def elmo(self, layers: torch.Tensor, which: int, mask: torch.Tensor) -> torch.Tensor:
        """Mix ``which`` (0: encoder input, 1: output; the reader numbers its own) of ``(B, L, T, D)``, with dropout."""
        if self.config.top_only:
            layers = layers[:, -1:]
        return self.elmo_dropout(self.mixes[which](layers.unbind(1), mask))

    def mix_penalty(self, lambda_: float) -> torch.Tensor:
        """``lambda * ||w||^2`` summed over the ELMo mixes (0 without ELMo)."""
        if not self.config.elmo_layers or lambda_ == 0:
            return torch.zeros(())
        return sum(mix.regularization(lambda_) for mix in self.mixes)

    def features(self, static: torch.Tensor | None, layers: torch.Tensor | None,
                 mask: torch.Tensor) -> torch.Tensor:
        """Encoder output per token ``(B, T, H)`` (with the output mix appended when configured)."""
        parts = []
        if self.config.static_dim:
            parts.append(static_vectors(self, static))
        if self.config.elmo_layers:
            parts.append(self.elmo(layers, 0, mask))
        x = torch.cat(parts, dim=-1)
        lengths = mask.sum(1).cpu()
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        h, _ = pad_packed_sequence(self.encoder(packed)[0], batch_first=True, total_length=x.shape[1])
        if self.config.elmo_layers and self.config.elmo_output:
            h = torch.cat([h, self.elmo(layers, 1, mask)], dim=-1)
        return self.dropout(h)

    def scores(self, static, layers, mask) -> torch.Tensor:
        """classify: logits ``(B, C)``; tag: emission scores ``(B, T, C)``."""
        h = self.features(static, layers, mask)
        if self.config.kind == "classify":
            h = h.masked_fill(~mask.unsqueeze(-1), float("-inf")).max(dim=1).values
        return self.output(h)

    def loss(self, static, layers, mask, labels: torch.Tensor) -> torch.Tensor:
        """Mean negative log-likelihood of ``labels`` (cross-entropy; the CRF's for tag)."""
        scores = self.scores(static, layers, mask)
        if self.config.kind == "classify":
            return nn.functional.cross_entropy(scores, labels)
        return -self.crf(scores, labels.clamp(min=0), mask, reduction="mean")

    @torch.no_grad()
    def predict(self, static, layers, mask) -> tuple[list, list]:
        """classify: (label ids, their probabilities); tag: (tag id lists from Viterbi, [])."""
        scores = self.scores(static, layers, mask)
        if self.config.kind == "classify":
            probs = scores.softmax(-1)
            p, ids = probs.max(-1)
            return ids.tolist(), p.tolist()
        return self.crf.decode(scores, mask), []
