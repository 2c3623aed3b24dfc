"""The biLM as a language model: word predictions at a blank from the forward and backward directions.

Each direction alone predicts the blank from one side of it (``P_fwd(w | words before)``,
``P_bwd(w | words after)``). The combined ranking is the probability of the whole sentence with
``w`` in place: ``P(w | all other words)`` is proportional to ``P(sentence with w)``, which each
direction's LM gives as a product over every position (the words after the blank must follow
``w`` in the forward LM, the words before it must precede ``w`` in the backward LM). The two
directions' sentence probabilities are multiplied and renormalised over the candidates: the
``candidates`` best words of each direction and of their product (the rest of the vocabulary
would need a biLM pass per word). With ``candidates=0`` the combined ranking is the product of the
two directions' distributions at the blank, renormalised (no rescoring).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from pyelmo.modeling.characters import batch_to_ids
from pyelmo.errors import InputError
from pyelmo.lm.model import LanguageModel, full_softmax_nll
from pyelmo.runtime.options import RunOptions
from pyelmo.lm.vocab import BOS_ID, EOS_ID, SPECIALS, Vocabulary

BLANK = "___"
#: Words per ranking (forward, backward, their product) rescored by the whole sentence's probability
#: (on the shipped model's test sentences 100 and 200 give the same top 10, and 200 takes 1.8x as long).
CANDIDATES = 100


def blank_tokens(sentence: str, lang: str = "auto", split: Callable[[str], list[str]] | None = None) -> list[str]:
    """Tokenize raw text with one ``___`` marking the word to predict (kept as one token): the text on
    each side by ``split``, default ``pyelmo.text.tokenize.tokenize`` in the language ``lang``."""
    from pyelmo.text.tokenize import tokenize

    parts = sentence.split(BLANK)
    if len(parts) != 2:
        raise InputError(f"mark exactly one word to predict with {BLANK}")
    split = split or (lambda text: tokenize(text, lang))
    return split(parts[0]) + [BLANK] + split(parts[1])


@dataclass
class Predictions:
    """Top-k ``(word, probability)`` lists from each direction and their combination."""

    forward: list[tuple[str, float]]   # P(w | the words before the blank)
    backward: list[tuple[str, float]]  # P(w | the words after it)
    combined: list[tuple[str, float]]  # P(sentence with w) of both LMs, renormalised over the candidates


class WordPredictor:
    """Predicts a word from its context with a trained biLM's forward and backward LMs.

    ``candidates``: words of each ranking rescored by the whole sentence's probability (module
    docstring); 0 combines the two directions at the blank alone. ``batch_size``: candidate
    sentences per biLM call. ``options``: how the biLM runs (default ``RunOptions.inference()``, exact
    float32; ``pyelmo serve`` passes its embedder's, so both run one biLM at the server's precision).
    """

    def __init__(self, lm: LanguageModel, vocab: Vocabulary, candidates: int = CANDIDATES,
                 batch_size: int = 64, options: RunOptions | None = None) -> None:
        self.bilm = lm.bilm.eval()
        self.weight, self.bias = lm.softmax_weight.detach(), lm.softmax_bias.detach()
        self.vocab = vocab
        self.candidates, self.batch_size = candidates, batch_size
        self.options = options or RunOptions.inference()

    @classmethod
    def from_pretrained(cls, model=None, candidates: int | None = None) -> "WordPredictor":
        """Load a model with its softmax and vocabulary (:meth:`LanguageModel.from_pretrained`: a shipped
        model, default ``english``, or a folder ``pyelmo train`` or ``pyelmo export`` wrote).
        ``candidates``: see the class (default :data:`CANDIDATES`)."""
        options = RunOptions.inference()
        lm = LanguageModel.from_pretrained(model, options=options)  # planned in place: one copy of the weights
        return cls(lm, lm.vocab, CANDIDATES if candidates is None else candidates, options=options)

    @torch.inference_mode()
    def log_probs(self, tokens: Sequence[str], position: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward and backward log-probabilities ``(V,)`` of the word at ``position``.

        The forward LM reads the words before it, the backward LM the words after it;
        neither sees the word itself.
        """
        out = self.bilm(batch_to_ids([list(tokens)]), keep_sentence_boundaries=True, options=self.options).layers[-1, 0]
        p = self.bilm.config.projection_dim
        forward_state = out[position, :p]  # boundary-shifted: index position is the token before
        backward_state = out[position + 2, p:]  # the token after
        logits = torch.stack([forward_state, backward_state]) @ self.weight.T + self.bias
        return tuple(torch.log_softmax(logits, dim=-1))  # type: ignore[return-value]

    @torch.inference_mode()
    def sentence_log_probs(self, tokens: Sequence[str], position: int,
                           words: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(len(words),)`` forward and backward log-probabilities of ``tokens`` with vocabulary word
        ``words[i]`` at ``position``, each up to a constant shared by all the words: the predictions
        that cannot see ``position`` (the forward LM's before it, the backward LM's after it) are left out."""
        tokens, n, p = list(tokens), len(tokens), self.bilm.config.projection_dim
        context = self.vocab.encode(tokens)
        forward, backward = [], []
        for start in range(0, len(words), self.batch_size):
            chunk = list(words[start:start + self.batch_size])
            sentences = [tokens[:position] + [self.vocab.words[w]] + tokens[position + 1:] for w in chunk]
            targets = torch.tensor([[BOS_ID, *context[:position], w, *context[position + 1:], EOS_ID] for w in chunk])
            top = self.bilm(batch_to_ids(sentences), keep_sentence_boundaries=True, options=self.options).layers[-1]
            # boundary index j: the forward state there predicts target j + 1, the backward one target j - 1
            forward.append(self._log_likelihood(top[:, position:n + 1, :p], targets[:, position + 1:]))
            backward.append(self._log_likelihood(top[:, 1:position + 3, p:], targets[:, :position + 2]))
        return torch.cat(forward), torch.cat(backward)

    def _log_likelihood(self, states: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Summed log-probability of ``targets (B, T)`` under the full softmax of ``states (B, T, P)``, 256
        predictions at a time (their logits stay in cache for the normaliser: 1.5x faster than 2048)."""
        nll = full_softmax_nll(states.reshape(-1, states.shape[-1]), targets.reshape(-1), self.weight, self.bias,
                               chunk=256)
        return -nll.view(targets.shape).sum(-1)

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
        combined = (self._rescored(tokens, position, forward, backward, k) if self.candidates
                    else torch.log_softmax(forward + backward, dim=-1))
        return Predictions(self._top(forward, k), self._top(backward, k), self._top(combined, k))

    def _rescored(self, tokens: list[str], position: int, forward: torch.Tensor, backward: torch.Tensor,
                  k: int) -> torch.Tensor:
        """``(V,)`` log-probabilities of the candidates by the whole sentence's probability (others -inf)."""
        n = min(max(self.candidates, k), len(self.vocab.words) - len(SPECIALS))
        words = sorted({int(i) + len(SPECIALS) for scores in (forward, backward, forward + backward)
                        for i in scores[len(SPECIALS):].topk(n).indices})
        sentence_forward, sentence_backward = self.sentence_log_probs(tokens, position, words)
        combined = torch.full_like(forward, float("-inf"))
        combined[words] = torch.log_softmax(sentence_forward + sentence_backward, dim=-1)
        return combined

    def _top(self, log_probs: torch.Tensor, k: int) -> list[tuple[str, float]]:
        log_probs = log_probs.clone()
        log_probs[: len(SPECIALS)] = float("-inf")  # <S>, </S>, <UNK> are no answers
        values, indices = log_probs.exp().topk(min(k, len(self.vocab.words) - len(SPECIALS)))
        return [(self.vocab.words[i], float(v)) for v, i in zip(values, indices.tolist())]
