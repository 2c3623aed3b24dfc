"""The ``Elmo`` module for downstream models: a biLM and learned layer mixes.

It has the same contract as AllenNLP's ``allennlp.modules.elmo.Elmo``, so porting code means
changing the import; unlike AllenNLP it is stateless (a sentence's vectors never depend on
earlier batches).
"""

from __future__ import annotations

import numbers
import os
import warnings
from typing import Sequence

import torch
from torch import nn

from pyelmo.errors import InputError
from pyelmo.modelio.allennlp import checked_state_dict
from pyelmo.modelio.resolve import load
from pyelmo.modeling.bilm import BiLM
from pyelmo.modeling.characters import token_to_ids
from pyelmo.modeling.mix import ScalarMixes
from pyelmo.runtime.options import RunOptions


class Elmo(nn.Module):
    """ELMo representations for a downstream model: ``num_output_representations`` learned mixes.

    The arguments are AllenNLP's, in AllenNLP's order, so a call written for
    ``allennlp.modules.elmo.Elmo`` (positional or keyword) means the same here:

    - ``Elmo(options_file, weight_file, n)``: the released format (options JSON + bilm-tf HDF5);
    - ``Elmo(NAME_OR_DIR, None, n)``: a model by name (``"english"`` and ``"chinese"`` are shipped,
      ``"original"``, ... released), a URL, or a model directory (anything ``pyelmo.load`` takes);
    - ``Elmo(None, None, n, module=bilm)``: an already-built :class:`pyelmo.BiLM` (AllenNLP's
      ``module=``; a BiLM as the first argument works too).

    ``Elmo(None, None, n)`` without ``module`` is an error: name the model. ``forward(char_ids)``
    returns ``{"elmo_representations": [n tensors (B, T, D)], "mask": (B, T)}``.

    A frozen biLM (``requires_grad=False``) that ``Elmo`` loads itself is planned once, here
    (``RunOptions.inference()``, :func:`pyelmo.runtime.planning.plan_model`: one copy of its weights; it then
    runs with ``self.options`` only, and ``load_state_dict`` refreshes it); with ``requires_grad=True`` its
    own differentiable modules run. A ``BiLM`` passed in runs as it is (its own modules, or those of the plan
    it was given with ``plan_model``), under ``torch.no_grad()`` when frozen. pyelmo's own arguments are
    keyword-only: ``options`` (a :class:`pyelmo.runtime.options.RunOptions`) overrides the run options.
    """

    def __init__(self, options_file: str | os.PathLike | BiLM | None = None, weight_file: str | os.PathLike | None = None,
                 num_output_representations: int = 1, requires_grad: bool = False, do_layer_norm: bool = False,
                 dropout: float = 0.5, vocab_to_cache: Sequence[str] | None = None,
                 keep_sentence_boundaries: bool = False, scalar_mix_parameters: Sequence[float] | None = None,
                 module: BiLM | None = None, *, options: RunOptions | None = None) -> None:
        super().__init__()
        self.bilm = _bilm(options_file, weight_file, module)
        if isinstance(num_output_representations, bool) or \
                not isinstance(num_output_representations, numbers.Integral) or num_output_representations < 0:
            raise InputError(f"num_output_representations must be a whole number, got {num_output_representations!r}")
        # word_inputs (B, T) index vocab_to_cache; row 0 is padding, as in AllenNLP (a buffer, not state)
        max_chars = self.bilm.config.char_cnn.max_characters_per_token
        self.register_buffer("_vocab_char_ids", None if vocab_to_cache is None else torch.tensor(
            [token_to_ids(word, max_chars) for word in vocab_to_cache], dtype=torch.long), persistent=False)
        if self._vocab_char_ids is not None and len(vocab_to_cache):
            self._vocab_char_ids[0] = 0
        for parameter in self.bilm.parameters():
            parameter.requires_grad_(requires_grad)
        self.requires_grad = requires_grad
        loaded = module is None and not isinstance(options_file, BiLM)
        self.options = options or (RunOptions.inference() if loaded and not requires_grad else RunOptions())
        if loaded and not requires_grad and not self.options.differentiable:  # ours, frozen: planned here
            from pyelmo.runtime.planning import plan_model

            plan_model(self.bilm, self.options)
        self.keep_sentence_boundaries = keep_sentence_boundaries
        self.scalar_mixes = ScalarMixes(self.bilm.config.num_layers, num_output_representations, dropout,
                                        do_layer_norm=do_layer_norm, initial_scalar_parameters=scalar_mix_parameters,
                                        trainable=scalar_mix_parameters is None)

    def get_output_dim(self) -> int:
        return self.bilm.config.output_dim

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Also accepts the state dict of an AllenNLP ``Elmo`` (``_elmo_lstm...``, ``scalar_mix_0...``), or of
        an AllenNLP model holding one (``torch.load("weights.th", weights_only=True)``: its Elmo part is used).
        The whole state dict is checked first (keys and shapes): a refused one leaves the module unchanged."""
        state_dict = checked_state_dict(self.state_dict(), state_dict, strict)
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def forward(self, inputs: torch.Tensor | None, word_inputs: torch.Tensor | None = None
                ) -> dict[str, torch.Tensor | list[torch.Tensor]]:
        """``inputs``: character ids ``(B, T, max_chars)`` (extra leading dims are flattened and restored).

        ``word_inputs``: ids ``(B, T)`` into ``vocab_to_cache`` (0 = padding), used instead of
        ``inputs`` when this module has a cached vocabulary, as in AllenNLP (same vectors). As
        there, a batch with an id outside the cached vocabulary runs on ``inputs`` instead.
        """
        if word_inputs is not None:
            if self._vocab_char_ids is None:
                warnings.warn("word inputs were passed to Elmo but it has no vocab_to_cache; using the characters")
            elif not word_inputs.numel() or 0 <= int(word_inputs.min()) <= int(word_inputs.max()) < \
                    len(self._vocab_char_ids):
                inputs = self._vocab_char_ids[word_inputs]
            elif inputs is None:  # AllenNLP falls back to the characters; here there are none
                raise InputError(f"word_inputs hold ids outside the cached vocabulary of "
                                 f"{len(self._vocab_char_ids)} words, and no character ids were given")
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
        representations = [self.scalar_mixes.mix(i, layers, mask) for i in range(len(self.scalar_mixes))]
        if not self.keep_sentence_boundaries:
            inner_mask = char_ids.gt(0).any(-1)
            representations = [r[:, 1:-1] * inner_mask.unsqueeze(-1) for r in representations]
            mask = inner_mask
        representations = [r.reshape(*leading, *r.shape[1:]) for r in representations]
        return {"elmo_representations": representations, "mask": mask.reshape(*leading, mask.shape[-1])}


def _bilm(options_file, weight_file, module) -> BiLM:
    """The biLM that ``Elmo``'s first, second and ``module`` arguments name."""
    if module is not None:
        if options_file is not None or weight_file is not None:
            raise InputError("give Elmo either module= or options_file/weight_file, not both")
        if not isinstance(module, BiLM):
            raise InputError(f"Elmo's module must be a pyelmo BiLM (pyelmo.load(...)), got {type(module).__name__}")
        return module
    if isinstance(options_file, BiLM):
        return options_file
    if options_file is None:
        raise InputError("Elmo needs a model: options_file and weight_file (the released format), a model name "
                         "such as 'english' (the shipped model) or 'original', a model directory, or module=BiLM")
    return load(options_file, weight_file)
