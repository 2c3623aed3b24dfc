"""The biLM as a language model: word predictions at a blank from the forward and backward directions."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import torch

from pyelmo.characters import batch_to_ids
from pyelmo.errors import InputError
from pyelmo.lm import LanguageModel, load_language_model
from pyelmo.vocab import SPECIALS, Vocabulary

BLANK = "___"


def blank_tokens(sentence: str) -> list[str]:
    """Tokenize raw text with one ``___`` marking the word to predict (kept as one token)."""
    from pyelmo.tokenize import tokenize

    parts = sentence.split(BLANK)
    if len(parts) != 2:
        raise InputError(f"mark exactly one word to predict with {BLANK}")
    return tokenize(parts[0]) + [BLANK] + tokenize(parts[1])


@dataclass
class Predictions:
    """Top-k ``(word, probability)`` lists from each direction and their combination."""

    forward: list[tuple[str, float]]
    backward: list[tuple[str, float]]
    combined: list[tuple[str, float]]


class WordPredictor:
    """Predicts a word from its context with a trained biLM's forward and backward LMs."""

    def __init__(self, lm: LanguageModel, vocab: Vocabulary) -> None:
        self.bilm = lm.bilm.eval()
        self.weight, self.bias = lm.softmax_weight.detach(), lm.softmax_bias.detach()
        self.vocab = vocab.words

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike | None = None) -> "WordPredictor":
        """Load a model directory written by ``pyelmo train`` (biLM, softmax, ``vocab.txt``); default: shipped."""
        from pyelmo.models import default_model_dir

        return cls(*load_language_model(directory if directory is not None else default_model_dir()))

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
        log_probs[: len(SPECIALS)] = float("-inf")  # <S>, </S>, <UNK> are no answers
        values, indices = log_probs.exp().topk(min(k, len(self.vocab) - len(SPECIALS)))
        return [(self.vocab[i], float(v)) for v, i in zip(values, indices.tolist())]
