"""The bidirectional language model (paper section 3.1): token encoder + forward and backward LSTM stacks."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn

from pyelmo.modeling.characters import bos_ids, eos_ids
from pyelmo.config import ElmoConfig
from pyelmo.modeling.encoder import TokenEncoder, encode_distinct, padded_conv_weights
from pyelmo.modeling.lstm import Level, LstmWithProjection, Together
from pyelmo.modeling.rows import PackedRows

FORWARD, BACKWARD = 0, 1
#: The products of a time step, which a level runs for both directions at once (:meth:`BiLM.plan_products`).
STEP_PRODUCTS = frozenset({"lstm.state_gates", "lstm.projection"})


@dataclass
class BiLMOutput:
    """``layers``: ``(num_layers, B, T, 2 * projection_dim)``; ``mask``: ``(B, T)`` bool;
    ``final_state``: each row's LSTM states after its last token, ``h (2, L, B, P)`` and
    ``c (2, L, B, H)`` (direction, layer, row)."""

    layers: torch.Tensor
    mask: torch.Tensor
    final_state: tuple[torch.Tensor, torch.Tensor] | None = None


def add_sentence_boundaries(char_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Wrap each row's tokens in ``<S>`` ... ``</S>``: ``(B, T, C)`` -> ``(B, T + 2, C)``."""
    batch, steps, n_chars = char_ids.shape
    out = char_ids.new_zeros(batch, steps + 2, n_chars)
    out[:, 1:-1] = char_ids
    out[:, 0] = torch.tensor(bos_ids(n_chars), dtype=char_ids.dtype, device=char_ids.device)
    out[torch.arange(batch, device=char_ids.device), lengths + 1] = torch.tensor(
        eos_ids(n_chars), dtype=char_ids.dtype, device=char_ids.device)
    return out


class BiLM(nn.Module):
    """ELMo's biLM. ``forward(char_ids)`` returns every layer's vectors for every token.

    Stateless by default: every sentence starts from zero LSTM states, so its vectors do
    not depend on the rest of the batch. Stateful mode carries each batch row's final states into the
    same row of the next call (``options.states``, like bilm-tf and AllenNLP); ``options.token_cache`` keeps token
    vectors across calls (``options``: the caller's :class:`pyelmo.runtime.options.RunOptions`).
    Every call runs over packed rows (:class:`pyelmo.modeling.rows.PackedRows`): each token is
    encoded once per distinct spelling, and no padding position is computed.

    The modules are plain ``nn.Module`` s, differentiable. An execution plan
    (:func:`pyelmo.runtime.planning.plan_model`) swaps in its own once, at load (planned linears, a level
    module with buffers, the fused convolution on a planned product): a model whose level module is not
    differentiable runs without autograd, an enclosing autocast switched off (the plan picks the precision).
    """

    def __init__(self, config: ElmoConfig, dropout: float = 0.0, token_ids: nn.Module | None = None) -> None:
        """``token_ids``: the token encoder's input module (:class:`~pyelmo.modeling.encoder.TokenEncoder`)."""
        super().__init__()
        self.config = config
        lstm = config.lstm
        self.token_encoder = TokenEncoder(config.char_cnn, lstm.projection_dim, token_ids)
        self.directions = nn.ModuleList(
            nn.ModuleList(
                LstmWithProjection(lstm.projection_dim, lstm.dim, lstm.projection_dim, lstm.cell_clip, lstm.proj_clip)
                for _ in range(lstm.n_layers)
            )
            for _ in (FORWARD, BACKWARD)
        )
        self.dropout = nn.Dropout(dropout)
        #: How each level runs its two directions (no weights; a plan swaps in its own).
        self.level: Level = Together()

    def forward(self, char_ids: torch.Tensor, keep_sentence_boundaries: bool = False, options=None,
                initial_state: tuple[torch.Tensor, torch.Tensor] | None = None,
                final_state: bool = True) -> BiLMOutput:
        """``char_ids (B, T, max_chars)`` from ``batch_to_ids`` -> all layers, the token mask and the final states.

        ``options``: the caller's run state (``token_cache``, ``states``; see the class), or None.
        ``initial_state``: ``(h, c)`` as in ``BiLMOutput.final_state`` (default: zeros, or the
        carried states of a stateful ``options``). ``final_state=False``: the caller needs no final states, which
        lets a stateless call skip work (:meth:`_shared_start`; ``BiLMOutput.final_state`` is then None).
        """
        cache = getattr(options, "token_cache", None)
        inference = not self.level.differentiable
        if cache is not None and not inference and torch.is_grad_enabled():
            raise ValueError("a token cache keeps no gradients: run under torch.no_grad(), or without one")
        no_autocast = torch.autocast(char_ids.device.type, enabled=False) if inference else contextlib.nullcontext()
        states = getattr(options, "states", None)
        # (in training, the shared steps would share their dropout too)
        shared = not (keep_sentence_boundaries or final_state or self.training or states is not None
                      or initial_state is not None)
        with torch.no_grad() if inference else contextlib.nullcontext(), no_autocast:
            if shared:
                return self._shared_start(char_ids, cache)
            output = self._run(char_ids, keep_sentence_boundaries, cache, states, initial_state)
        return output if final_state else BiLMOutput(output.layers, output.mask)

    def _run(self, char_ids: torch.Tensor, keep_sentence_boundaries: bool, cache, states,
             initial_state: tuple[torch.Tensor, torch.Tensor] | None) -> BiLMOutput:
        mask = char_ids.gt(0).any(-1)
        lengths = mask.sum(-1)
        char_ids = add_sentence_boundaries(char_ids, lengths)
        lengths = lengths + 2
        full_mask = torch.arange(char_ids.shape[1], device=char_ids.device) < lengths[:, None]
        rows = PackedRows(lengths, char_ids.shape[1])
        flat_ids = char_ids.reshape(-1, char_ids.shape[-1])[rows.forward_src]
        tokens = encode_distinct(self.token_encoder, flat_ids, cache)
        x = rows.both_directions(tokens)  # (2, n_packed, P): each direction's inputs
        h0, c0 = self._initial_state(len(lengths), x, initial_state, states)
        levels, final_h, final_c = [x], [], []
        for l in range(self.config.lstm.n_layers):
            out, h, c = self._level(l, x, rows, rows.sort(h0[:, l]), rows.sort(c0[:, l]))
            final_h.append(rows.unsort(h))
            final_c.append(rows.unsort(c))
            levels.append(out)
            x = out
        stacked = rows.assemble(levels)
        final_state = (torch.stack(final_h, 1), torch.stack(final_c, 1))
        if states is not None:
            states.update(*final_state)

        if keep_sentence_boundaries:
            return BiLMOutput(stacked, full_mask, final_state)
        # drop <S> (first position) and </S> (position length + 1 of each row)
        return BiLMOutput(stacked[:, :, 1:-1] * mask[None, :, :, None], mask, final_state)

    def _shared_start(self, char_ids: torch.Tensor, cache) -> BiLMOutput:
        """Stateless, without the boundaries' vectors or the final states: the same layers as :meth:`_run`.

        Every sentence's forward LSTMs start from zero states with ``<S>``, its backward ones with ``</S>``:
        those steps are the same for every sentence, so they run once, on one row, and every sentence's tokens
        start from the states they reach. The forward ``</S>`` and backward ``<S>`` steps, whose vectors
        are dropped, do not run.
        """
        mask = char_ids.gt(0).any(-1)
        rows = PackedRows(mask.sum(-1), char_ids.shape[1])
        n_chars = char_ids.shape[-1]
        boundaries = char_ids.new_tensor([bos_ids(n_chars), eos_ids(n_chars)])
        tokens = encode_distinct(self.token_encoder, torch.cat([char_ids.reshape(-1, n_chars)[rows.forward_src],
                                                                boundaries]), cache)
        x = rows.both_directions(tokens[:-2])
        start = tokens[-2:, None]  # (2, 1, P): the forward direction's <S>, the backward one's </S>
        one = PackedRows(mask.new_ones(1, dtype=torch.long), 1)
        lstm = self.config.lstm
        levels = [x]
        for l in range(lstm.n_layers):
            start, h, c = self._level(l, start, one, start.new_zeros(2, 1, lstm.projection_dim),
                                      start.new_zeros(2, 1, lstm.dim))
            h, c = (state.expand(-1, rows.batch, -1).contiguous() for state in (h, c))
            x, _, _ = self._level(l, x, rows, h, c)
            levels.append(x)
        return BiLMOutput(rows.assemble(levels), mask)

    def _level(self, l: int, x: torch.Tensor, rows: PackedRows, h: torch.Tensor,
               c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Level ``l``'s two directions over packed ``x`` from states ``h``, ``c`` (sorted rows): the outputs
        (with the skip connection above the first level) and each row's final states."""
        pair = [self.directions[FORWARD][l], self.directions[BACKWARD][l]]
        out, h, c = self.level(pair, self.dropout(x), rows, h, c)
        if l > 0 and self.config.lstm.use_skip_connections:
            out = out + x
        return out, h, c

    @classmethod
    def from_pretrained(cls, model) -> "BiLM":
        """A trained biLM in evaluation mode from a resolved model (``pyelmo.resolve_model("english")``,
        ``"chinese"``, a released name, a folder, ...: :mod:`pyelmo.modelio.resolve`, which reads the files;
        ``pyelmo.load(...)`` resolves and loads in one call)."""
        return model.load_bilm()

    def with_dropout(self, dropout: float) -> "BiLM":
        """A copy of this biLM (its weights and its token encoder's input module) that trains with ``dropout``."""
        copy = type(self)(self.config, dropout=dropout, token_ids=self.token_encoder.token_ids)
        copy.load_state_dict(self.state_dict())
        return copy

    def plan_products(self) -> dict[str, nn.Module | torch.Tensor]:
        """The model's matrix products, once per distinct use (to print a plan): its linear modules
        (planned ones once a plan is applied) and the fused convolutions' weight."""
        encoder, lstm = self.token_encoder, self.directions[FORWARD]
        products = {"token_encoder.convolutions (all widths)": padded_conv_weights(encoder.convolutions)[0].detach()}
        if encoder.highways:
            products["token_encoder.highways"] = encoder.highways[0].carry
        products["token_encoder.projection"] = encoder.projection
        products["lstm.input_gates"] = lstm[0].input_gates
        products["lstm.state_gates"] = lstm[0].state_gates
        products["lstm.projection"] = lstm[0].projection
        return products

    def _initial_state(self, batch: int, ref: torch.Tensor, given: tuple[torch.Tensor, torch.Tensor] | None,
                       states) -> tuple[torch.Tensor, torch.Tensor]:
        if given is not None:
            return given
        lstm = self.config.lstm
        h = ref.new_zeros(2, lstm.n_layers, batch, lstm.projection_dim)
        c = ref.new_zeros(2, lstm.n_layers, batch, lstm.dim)
        if states is not None:
            states.fill(h, c)
        return h, c
