"""The biLM as a language model: word predictions at a blank from the forward and backward directions."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from pyelmo.bilm import BiLM
from pyelmo.characters import batch_to_ids
from pyelmo.errors import InputError, WeightFileError

BLANK = "___"
N_SPECIAL = 3  # a trained vocabulary starts with <S>, </S>, <UNK>
VOCAB_NAME = "vocab.txt"


@dataclass
class Predictions:
    """Top-k ``(word, probability)`` lists from each direction and their combination."""

    forward: list[tuple[str, float]]
    backward: list[tuple[str, float]]
    combined: list[tuple[str, float]]


class LanguageModel:
    """A biLM with its softmax and vocabulary (as saved by ``pyelmo train``)."""

    def __init__(self, bilm: BiLM, softmax_weight: torch.Tensor, softmax_bias: torch.Tensor,
                 vocab: Sequence[str]) -> None:
        if softmax_weight.shape != (len(vocab), bilm.config.projection_dim):
            raise WeightFileError(f"softmax has shape {tuple(softmax_weight.shape)}, expected "
                                  f"({len(vocab)}, {bilm.config.projection_dim}) for this vocabulary and model")
        self.bilm = bilm.eval()
        self.weight, self.bias = softmax_weight.float(), softmax_bias.float()
        self.vocab = list(vocab)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike | None = None) -> "LanguageModel":
        """Load a native model directory that holds ``softmax.*`` tensors and ``vocab.txt``."""
        from pyelmo.models import default_model_dir
        from pyelmo.weights import from_pretrained, load_native_tensors

        directory = Path(directory) if directory is not None else default_model_dir()
        tensors = load_native_tensors(directory)
        vocab_path = directory / VOCAB_NAME
        if "softmax.weight" not in tensors or not vocab_path.exists():
            raise WeightFileError(f"{directory} has no softmax and vocabulary (only models trained with "
                                  "`pyelmo train` can predict words)")
        vocab = vocab_path.read_text(encoding="utf-8").split("\n")
        vocab = [w for w in vocab if w]
        return cls(from_pretrained(directory), tensors["softmax.weight"], tensors["softmax.bias"], vocab)

    @torch.inference_mode()
    def log_probs(self, tokens: Sequence[str], position: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward and backward log-probabilities ``(V,)`` of the word at ``position``.

        The forward LM reads the words before it, the backward LM the words after it;
        neither sees the word itself.
        """
        out = self.bilm(batch_to_ids([list(tokens)]), keep_sentence_boundaries=True).layers[-1, 0]
        p = self.bilm.config.projection_dim
        forward_state = out[position, :p]  # boundary-shifted: index position is the token before
        backward_state = out[position + 2, p:]  # the token after
        logits = torch.stack([forward_state, backward_state]) @ self.weight.T + self.bias
        return tuple(torch.log_softmax(logits, dim=-1))  # type: ignore[return-value]

    def predict(self, tokens: Sequence[str], position: int | None = None, k: int = 10) -> Predictions:
        """Top-k words at ``position`` (default: the token ``___``)."""
        tokens = list(tokens)
        if position is None:
            if tokens.count(BLANK) != 1:
                raise InputError(f"mark exactly one word to predict with {BLANK}")
            position = tokens.index(BLANK)
        if not 0 <= position < len(tokens):
            raise InputError(f"position {position} is outside the sentence")
        forward, backward = self.log_probs(tokens, position)
        combined = torch.log_softmax(forward + backward, dim=-1)
        return Predictions(self._top(forward, k), self._top(backward, k), self._top(combined, k))

    def _top(self, log_probs: torch.Tensor, k: int) -> list[tuple[str, float]]:
        log_probs = log_probs.clone()
        log_probs[: min(N_SPECIAL, len(self.vocab))] = float("-inf")  # <S>, </S>, <UNK> are no answers
        values, indices = log_probs.exp().topk(min(k, max(len(self.vocab) - N_SPECIAL, 1)))
        return [(self.vocab[i], float(v)) for v, i in zip(values, indices.tolist())]
