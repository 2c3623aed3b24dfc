"""The bidirectional language model (paper section 3.1): token encoder + forward and backward LSTM stacks."""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass

import torch
from torch import nn

from pyelmo.modeling.characters import bos_ids, eos_ids
from pyelmo.config import ElmoConfig
from pyelmo.modeling.encoder import TokenEncoder, encode_distinct, padded_conv_weights
from pyelmo.modeling.lstm import LEVELS, Level, LstmWithProjection, Together
from pyelmo.runtime.swap import swap_linears
from pyelmo.runtime.options import RunOptions
from pyelmo.runtime.products import Products
from pyelmo.runtime.rows import PackedRows

FORWARD, BACKWARD = 0, 1
#: The products of a time step, which a level runs for both directions at once (:meth:`BiLM.plan_products`).
STEP_PRODUCTS = frozenset({"lstm.state_gates", "lstm.projection"})
#: The default: the differentiable backend, stateless.
DIFFERENTIABLE_RUN = RunOptions()


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
    not depend on the rest of the batch. How a call runs is its ``options``
    (:class:`pyelmo.runtime.options.RunOptions`, owned by the caller): the differentiable
    backend by default, or ``RunOptions.inference(...)`` (the same function through an
    execution plan's products, no autograd: a model its owner planned, :meth:`apply_plan`, runs as it is;
    every inference-only owner that loads its biLM plans it so. A biLM its caller handed in and may still
    train runs as a planned copy, made once per run options: twice its weights in memory); stateful mode
    carries each batch row's final states into the same row of the next call through ``options.states``,
    like bilm-tf and AllenNLP.
    Every call runs over packed rows (:class:`pyelmo.runtime.rows.PackedRows`): each token is
    encoded once per distinct spelling, and no padding position is computed.
    """

    def __init__(self, config: ElmoConfig, dropout: float = 0.0) -> None:
        super().__init__()
        self.config = config
        lstm = config.lstm
        self.token_encoder = TokenEncoder(config.char_cnn, lstm.projection_dim)
        self.directions = nn.ModuleList(
            nn.ModuleList(
                LstmWithProjection(lstm.projection_dim, lstm.dim, lstm.projection_dim, lstm.cell_clip, lstm.proj_clip)
                for _ in range(lstm.n_layers)
            )
            for _ in (FORWARD, BACKWARD)
        )
        self.dropout = nn.Dropout(dropout)
        #: How each level runs its two directions (no weights; a plan swaps in its own, :meth:`apply_plan`).
        self.level: Level = Together()
        #: The products of the plan applied to this biLM (:meth:`apply_plan`), or None (its ``nn.Linear`` s).
        self.planned_products: Products | None = None

    def forward(self, char_ids: torch.Tensor, keep_sentence_boundaries: bool = False,
                options: RunOptions | None = None,
                initial_state: tuple[torch.Tensor, torch.Tensor] | None = None) -> BiLMOutput:
        """``char_ids (B, T, max_chars)`` from ``batch_to_ids`` -> all layers, the token mask and the final states.

        ``initial_state``: ``(h, c)`` as in ``BiLMOutput.final_state`` (default: zeros, or the
        carried states of a stateful ``options``).
        """
        options = options or DIFFERENTIABLE_RUN
        backend = options.backend
        if not backend.differentiable and torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters()):
            raise ValueError(f"the {backend.name} backend computes no gradients: run it under torch.no_grad() "
                             "or with frozen parameters, or use the differentiable backend (RunOptions())")
        return self.for_run(options)._run(char_ids, keep_sentence_boundaries, options, initial_state)

    def for_run(self, options: RunOptions) -> BiLM:
        """The biLM that runs with ``options``: this one, or (inference on a biLM nobody planned: one handed in by
        a caller who may still train it) a copy with their plan applied, made once and kept while this biLM's
        parameters are unchanged."""
        backend = options.backend
        if self.planned_products is None:
            if backend.differentiable:
                return self
            return backend.planned(self, lambda: copy.deepcopy(self).apply_plan(options))
        if backend.differentiable or self.planned_products is not backend.products:
            raise ValueError("this biLM runs the execution plan its owner applied (an embedder's): run it with that "
                             "owner's run options (embedder.options), or load the model again")
        return self

    def apply_plan(self, options: RunOptions, packed=None) -> BiLM:
        """Swap in the planned linears of ``options``' execution plan for this biLM's ``nn.Linear`` s and its
        level module (:data:`pyelmo.modeling.lstm.LEVELS`), once, at load
        (:func:`pyelmo.runtime.swap.swap_linears`; int8: only the int8 copies of the weights it quantizes are
        kept; ``packed(name, weight)``: each of them packed, e.g. from the numbers kept on disk,
        :mod:`pyelmo.runtime.int8_cache`). The biLM then runs with ``options`` only; ``load_state_dict`` (an
        unplanned biLM's keys) refreshes the prepared weights (int8: quantized again). For an inference-only
        owner of the biLM it loaded (``ElmoEmbedder``, a frozen ``Elmo``, ``LanguageModel.from_pretrained(...,
        options=...)``, the task features, ``pyelmo serve``). Returns this biLM."""
        if options.plan is None or self.planned_products is not None:
            raise ValueError("a plan is applied once, to a biLM not planned yet, from inference run options")
        swap_linears(self, options.products, packed)
        self.level = LEVELS[options.plan.level_order]()
        self.planned_products = options.products
        return self

    def _run(self, char_ids: torch.Tensor, keep_sentence_boundaries: bool, options: RunOptions,
             initial_state: tuple[torch.Tensor, torch.Tensor] | None) -> BiLMOutput:
        backend = options.backend
        mask = char_ids.gt(0).any(-1)
        lengths = mask.sum(-1)
        char_ids = add_sentence_boundaries(char_ids, lengths)
        lengths = lengths + 2
        full_mask = torch.arange(char_ids.shape[1], device=char_ids.device) < lengths[:, None]
        rows = PackedRows(lengths, char_ids.shape[1])
        # the inference products choose their own precision (the plan's): an enclosing autocast would
        # hand bfloat16 activations to its float32 weights
        inference = not backend.differentiable
        no_autocast = torch.autocast(char_ids.device.type, enabled=False) if inference else contextlib.nullcontext()
        with torch.no_grad() if inference else contextlib.nullcontext(), no_autocast:
            flat_ids = char_ids.reshape(-1, char_ids.shape[-1])[rows.forward_src]
            tokens = encode_distinct(self.token_encoder, flat_ids, backend.products, options.token_cache,
                                     fused_conv=backend.fused_conv)
            x = rows.both_directions(tokens)  # (2, n_packed, P): each direction's inputs
            h0, c0 = self._initial_state(len(lengths), x, initial_state, options)
            levels, final_h, final_c = [x], [], []
            for l in range(self.config.lstm.n_layers):
                pair = [self.directions[FORWARD][l], self.directions[BACKWARD][l]]
                out, h, c = self.level(pair, self.dropout(x), rows, rows.sort(h0[:, l]), rows.sort(c0[:, l]), backend)
                if l > 0 and self.config.lstm.use_skip_connections:
                    out = out + x
                final_h.append(rows.unsort(h))
                final_c.append(rows.unsort(c))
                levels.append(out)
                x = out
            stacked = rows.assemble(levels)
        final_state = (torch.stack(final_h, 1), torch.stack(final_c, 1))
        if options.states is not None:
            options.states.update(*final_state)

        if keep_sentence_boundaries:
            return BiLMOutput(stacked, full_mask, final_state)
        # drop <S> (first position) and </S> (position length + 1 of each row)
        return BiLMOutput(stacked[:, :, 1:-1] * mask[None, :, :, None], mask, final_state)

    @classmethod
    def from_pretrained(cls, model) -> "BiLM":
        """A trained biLM in evaluation mode from a resolved model (``pyelmo.resolve_model("english")``,
        ``"chinese"``, a released name, a folder, ...: :mod:`pyelmo.modelio.resolve`, which reads the files;
        ``pyelmo.load(...)`` resolves and loads in one call)."""
        return model.load_bilm()

    def with_dropout(self, dropout: float) -> "BiLM":
        """A copy of this biLM (its weights) that trains with ``dropout``."""
        copy = type(self)(self.config, dropout=dropout)
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

    def level_shape(self) -> tuple[int, int, int]:
        """A level's ``(input dim, cell dim H, projection dim P)``."""
        lstm = self.config.lstm
        return lstm.projection_dim, lstm.dim, lstm.projection_dim

    def _initial_state(self, batch: int, ref: torch.Tensor, given: tuple[torch.Tensor, torch.Tensor] | None,
                       options: RunOptions) -> tuple[torch.Tensor, torch.Tensor]:
        if given is not None:
            return given
        lstm = self.config.lstm
        h = ref.new_zeros(2, lstm.n_layers, batch, lstm.projection_dim)
        c = ref.new_zeros(2, lstm.n_layers, batch, lstm.dim)
        if options.states is not None:
            options.states.fill(h, c)
        return h, c
