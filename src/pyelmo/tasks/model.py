"""Task models over static and ELMo features (the biLM itself stays outside, frozen).

* :class:`TaskModel`, their shared part: features per token -> BiLSTM encoder -> an output layer;
* :class:`Classifier` (classify): max pool over tokens -> linear layer (softmax), cross-entropy;
* :class:`Tagger` (tag): linear layer -> CRF (``pytorch-crf``), its likelihood, Viterbi decoding.

Each kind (:mod:`pyelmo.tasks.kinds`) names its model; qa's reader is :mod:`pyelmo.tasks.reader`.

Features per token: a static vector (frozen; unknown words share one learned vector)
and/or ``ELMo = gamma * sum_j softmax(w)_j h_j`` from a :class:`pyelmo.modeling.mix.ScalarMixes` over
the biLM layers, with dropout on the mixed vector (paper eq. 1).  With ``elmo_output`` a
second mix is concatenated to the encoder's output (paper Table 3).  ``top_only`` mixes
the top layer alone (paper Table 2).  :meth:`TaskModel.mix_penalty` is ``lambda * ||w||^2``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from pyelmo.modeling.mix import ScalarMixes


@dataclass
class ModelConfig:
    """The task model's shape and switches (saved with a trained model)."""

    kind: str                 # a registered task kind (pyelmo.tasks.kind): "classify", "tag", "qa", ...
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


def elmo_mixes(config: ModelConfig, count: int) -> ScalarMixes:
    """``count`` mixes of the biLM's layers (of its top layer alone with ``top_only``), each with dropout."""
    return ScalarMixes(1 if config.top_only else config.elmo_layers, count, config.elmo_dropout)


def mix_elmo(mixes: ScalarMixes, config: ModelConfig, layers: torch.Tensor, which: int,
             mask: torch.Tensor) -> torch.Tensor:
    """ELMo from mix ``which`` of the ``(B, L, T, D)`` layers, with dropout."""
    if config.top_only:
        layers = layers[:, -1:]
    return mixes.mix(which, layers.unbind(1), mask)


def static_vectors(module: nn.Module, static: torch.Tensor) -> torch.Tensor:
    """The static vectors of token ids ``static`` (unknown words: the learned vector)."""
    emb = module.static_table[static]
    return torch.where((static == 1).unsqueeze(-1), module.unknown.expand_as(emb), emb)


class TaskModel(nn.Module):
    """Features and the BiLSTM encoder of :class:`ModelConfig` (``static_table`` ``(V, d)``: the frozen word
    table) and an output layer to ``n_labels``; a kind's model adds ``scores``, ``loss`` and ``predict``."""

    def __init__(self, config: ModelConfig, static_table: torch.Tensor | None = None) -> None:
        super().__init__()
        self.config = c = config
        in_dim = add_static(self, c, static_table)
        mixes = 0
        if c.elmo_layers:
            mixes = 2 if c.elmo_output else 1
            self.mixes = elmo_mixes(c, mixes)
            in_dim += c.elmo_dim
        if in_dim == 0:
            raise ValueError("a task model needs static vectors, ELMo or both")
        self.encoder = nn.LSTM(in_dim, c.hidden, batch_first=True, bidirectional=True)
        self.dropout = nn.Dropout(c.dropout)
        out_dim = 2 * c.hidden + (c.elmo_dim if mixes == 2 else 0)
        self.output = nn.Linear(out_dim, c.n_labels)

    def elmo(self, layers: torch.Tensor, which: int, mask: torch.Tensor) -> torch.Tensor:
        """Mix ``which`` (0: encoder input, 1: output; the reader numbers its own) of ``(B, L, T, D)``, with dropout."""
        return mix_elmo(self.mixes, self.config, layers, which, mask)

    def mix_penalty(self, lambda_: float) -> torch.Tensor:
        """``lambda * ||w||^2`` summed over the ELMo mixes (0 without ELMo)."""
        if not self.config.elmo_layers or lambda_ == 0:
            return torch.zeros(())
        return self.mixes.regularization(lambda_)

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


class Classifier(TaskModel):
    """A BiLSTM over the features, max pooled over tokens, then a linear layer to the labels."""

    def scores(self, static, layers, mask) -> torch.Tensor:
        """Logits ``(B, C)``."""
        h = self.features(static, layers, mask)
        return self.output(h.masked_fill(~mask.unsqueeze(-1), float("-inf")).max(dim=1).values)

    def loss(self, static, layers, mask, labels: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of ``labels`` ``(B,)``."""
        return nn.functional.cross_entropy(self.scores(static, layers, mask), labels)

    @torch.no_grad()
    def predict(self, static, layers, mask) -> list[tuple[int, float]]:
        """``(label id, its probability)`` per example."""
        p, ids = self.scores(static, layers, mask).softmax(-1).max(-1)
        return list(zip(ids.tolist(), p.tolist()))


class Tagger(TaskModel):
    """A BiLSTM over the features, a linear layer to emission scores, and a CRF over the tags."""

    def __init__(self, config: ModelConfig, static_table: torch.Tensor | None = None) -> None:
        from torchcrf import CRF

        super().__init__(config, static_table)
        self.crf = CRF(config.n_labels, batch_first=True)

    def scores(self, static, layers, mask) -> torch.Tensor:
        """Emission scores ``(B, T, C)``."""
        return self.output(self.features(static, layers, mask))

    def loss(self, static, layers, mask, labels: torch.Tensor) -> torch.Tensor:
        """The CRF's mean negative log-likelihood of ``labels`` ``(B, T)`` (padding -1)."""
        return -self.crf(self.scores(static, layers, mask), labels.clamp(min=0), mask, reduction="mean")

    @torch.no_grad()
    def predict(self, static, layers, mask) -> list[list[int]]:
        """The Viterbi tag ids per sentence."""
        return self.crf.decode(self.scores(static, layers, mask), mask)
