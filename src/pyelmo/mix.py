"""Task-specific mixing of the biLM layers (paper eq. 1) and the ``Elmo`` module for downstream models.

``ELMo_k = gamma * sum_j softmax(w)_j * h_{k,j}``. ``Elmo`` has the same contract as
AllenNLP's ``allennlp.modules.elmo.Elmo``, so porting code means changing the import;
unlike AllenNLP it is stateless (a sentence's vectors never depend on earlier batches).
"""

from __future__ import annotations

import os
import warnings
from typing import Sequence

import torch
from torch import nn

from pyelmo.bilm import BiLM
from pyelmo.errors import InputError
from pyelmo.strategy import RunOptions


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


class Elmo(nn.Module):
    """ELMo representations for a downstream model: ``num_output_representations`` learned mixes.

    ``Elmo(options_file, weight_file, num_output_representations)`` loads the released
    format; ``Elmo(model_dir_or_BiLM, None, n)`` a native model; ``Elmo(None, None, n)`` the
    shipped English model. ``forward(char_ids)`` returns
    ``{"elmo_representations": [n tensors (B, T, D)], "mask": (B, T)}``.

    With a frozen biLM (``requires_grad=False``) it runs the inference strategy
    (``RunOptions.inference()``); with ``requires_grad=True`` the plain differentiable one.
    ``options`` (a :class:`pyelmo.strategy.RunOptions`) overrides that choice.
    """

    def __init__(self, options_file: str | os.PathLike | BiLM | None = None, weight_file: str | os.PathLike | None = None,
                 num_output_representations: int = 1, requires_grad: bool = False, do_layer_norm: bool = False,
                 dropout: float = 0.5, keep_sentence_boundaries: bool = False,
                 scalar_mix_parameters: Sequence[float] | None = None,
                 vocab_to_cache: Sequence[str] | None = None, options: RunOptions | None = None) -> None:
        super().__init__()
        from pyelmo.characters import token_to_ids
        from pyelmo.models import load

        self.bilm = options_file if isinstance(options_file, BiLM) else load(options_file, weight_file)
        # word_inputs (B, T) index vocab_to_cache; row 0 is padding, as in AllenNLP (a buffer, not state)
        max_chars = self.bilm.config.char_cnn.max_characters_per_token
        self.register_buffer("_vocab_char_ids", None if vocab_to_cache is None else torch.tensor(
            [token_to_ids(word, max_chars) for word in vocab_to_cache], dtype=torch.long), persistent=False)
        if self._vocab_char_ids is not None and len(vocab_to_cache):
            self._vocab_char_ids[0] = 0
        for parameter in self.bilm.parameters():
            parameter.requires_grad_(requires_grad)
        self.requires_grad = requires_grad
        self.options = options or (RunOptions() if requires_grad else RunOptions.inference())
        self.keep_sentence_boundaries = keep_sentence_boundaries
        self.dropout = nn.Dropout(dropout)
        self.scalar_mixes = nn.ModuleList(
            ScalarMix(self.bilm.config.num_layers, do_layer_norm=do_layer_norm,
                      initial_scalar_parameters=scalar_mix_parameters, trainable=scalar_mix_parameters is None)
            for _ in range(num_output_representations)
        )

    def get_output_dim(self) -> int:
        return self.bilm.config.output_dim

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Also accepts the state dict of an AllenNLP ``Elmo`` (``_elmo_lstm...``, ``scalar_mix_0...``), or of
        an AllenNLP model holding one (``torch.load("weights.th", weights_only=True)``: its Elmo part is used)."""
        from pyelmo.interop.allennlp import from_allennlp, is_allennlp_state_dict

        if is_allennlp_state_dict(state_dict):
            state_dict = from_allennlp(state_dict)
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def forward(self, inputs: torch.Tensor | None, word_inputs: torch.Tensor | None = None
                ) -> dict[str, torch.Tensor | list[torch.Tensor]]:
        """``inputs``: character ids ``(B, T, max_chars)`` (extra leading dims are flattened and restored).

        ``word_inputs``: ids ``(B, T)`` into ``vocab_to_cache`` (0 = padding), used instead of
        ``inputs`` when this module has a cached vocabulary, as in AllenNLP (same vectors).
        """
        if word_inputs is not None:
            if self._vocab_char_ids is None:
                warnings.warn("word inputs were passed to Elmo but it has no vocab_to_cache; using the characters")
            else:
                if word_inputs.numel() and not 0 <= int(word_inputs.min()) <= int(word_inputs.max()) < \
                        len(self._vocab_char_ids):
                    raise InputError(f"word_inputs hold ids outside the cached vocabulary of "
                                     f"{len(self._vocab_char_ids)} words")
                inputs = self._vocab_char_ids[word_inputs]
        if inputs is None:
            raise InputError("Elmo needs character ids (batch_to_ids), or word_inputs with vocab_to_cache")
        leading = inputs.shape[:-2]
        char_ids = inputs.flatten(0, -3) if inputs.dim() > 3 else inputs
        if char_ids.shape[0] == 0:  # no sentences: empty outputs of the right shape
            layers = char_ids.new_zeros((self.bilm.config.num_layers, 0, char_ids.shape[1] + 2,
                                         self.get_output_dim()), dtype=torch.float)
            mask = char_ids.new_zeros((0, char_ids.shape[1] + 2), dtype=torch.bool)
        else:
            with torch.set_grad_enabled(self.requires_grad and torch.is_grad_enabled()):
                output = self.bilm(char_ids, keep_sentence_boundaries=True, options=self.options)
            layers, mask = output.layers, output.mask
        representations = [self.dropout(mix(layers, mask)) for mix in self.scalar_mixes]
        if not self.keep_sentence_boundaries:
            inner_mask = char_ids.gt(0).any(-1)
            representations = [r[:, 1:-1] * inner_mask.unsqueeze(-1) for r in representations]
            mask = inner_mask
        representations = [r.reshape(*leading, *r.shape[1:]) for r in representations]
        return {"elmo_representations": representations, "mask": mask.reshape(*leading, mask.shape[-1])}
