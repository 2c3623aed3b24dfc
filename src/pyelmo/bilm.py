"""The bidirectional language model (paper section 3.1): token encoder + forward and backward LSTM stacks."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pyelmo.characters import bos_ids, eos_ids
from pyelmo.config import ElmoConfig
from pyelmo.encoder import TokenEncoder, encode_distinct
from pyelmo.lstm import LstmWithProjection

FORWARD, BACKWARD = 0, 1


@dataclass
class BiLMOutput:
    """``layers``: ``(num_layers, B, T, 2 * projection_dim)``; ``mask``: ``(B, T)`` bool."""

    layers: torch.Tensor
    mask: torch.Tensor


def add_sentence_boundaries(char_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Wrap each row's tokens in ``<S>`` ... ``</S>``: ``(B, T, C)`` -> ``(B, T + 2, C)``."""
    batch, steps, n_chars = char_ids.shape
    out = char_ids.new_zeros(batch, steps + 2, n_chars)
    out[:, 1:-1] = char_ids
    out[:, 0] = torch.tensor(bos_ids(n_chars), dtype=char_ids.dtype)
    out[torch.arange(batch), lengths + 1] = torch.tensor(eos_ids(n_chars), dtype=char_ids.dtype)
    return out


def reverse_within_lengths(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each row's first ``lengths[b]`` steps of ``x (B, T, ...)``; padding stays in place."""
    steps = torch.arange(x.shape[1], device=x.device)
    index = torch.where(steps < lengths[:, None], lengths[:, None] - 1 - steps, steps)
    return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x))


class BiLM(nn.Module):
    """ELMo's biLM. ``forward(char_ids)`` returns every layer's vectors for every token.

    Stateless by default: every sentence starts from zero LSTM states, so its vectors do
    not depend on the rest of the batch. ``stateful=True`` instead carries each batch
    row's final states into the same row of the next call, like bilm-tf and AllenNLP;
    ``reset_states()`` clears them.

    Under ``torch.no_grad()`` / ``torch.inference_mode()`` with no active dropout, the
    same function is computed by ``pyelmo.fast.bilm_layers_inference`` (packed rows, both
    directions per step in one product, token encoder once per distinct token and, if
    ``token_cache`` is set, across calls). ``use_fast_path = False`` forces the plain path.
    ``inference_dtype = torch.bfloat16`` makes that path's matrix products bfloat16 (an
    explicit reduced-precision mode: outputs differ by about 0.5% of their largest value).
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
        self.stateful = False
        self._states: list[torch.Tensor] | None = None  # h and c per (direction, layer): (2, L, rows, size)
        self.use_fast_path = True
        self.token_cache = None  # an optional pyelmo.fast.TokenCache (used by the inference fast path only)
        self.inference_dtype = None  # sets inference_products: how the fast path runs its matrix products

    @property
    def inference_dtype(self) -> torch.dtype | None:
        """``None`` (exact float32) or ``torch.bfloat16``: the precision of the fast path's matrix products."""
        return self.inference_products.dtype

    @inference_dtype.setter
    def inference_dtype(self, dtype: torch.dtype | None) -> None:
        from pyelmo.fast import Products, usable_bf16

        if dtype not in (None, torch.float32, torch.bfloat16):
            raise ValueError(f"inference_dtype must be None, torch.float32 or torch.bfloat16, got {dtype}")
        on_cpu = next(self.parameters()).device.type == "cpu"
        if dtype == torch.bfloat16 and on_cpu and not usable_bf16(True):
            dtype = None
        self.inference_products = Products(None if dtype == torch.float32 else dtype)

    # -- states ---------------------------------------------------------------------------
    def reset_states(self) -> None:
        """Forget the carried LSTM states (stateful mode)."""
        self._states = None

    def _initial_states(self, batch: int, ref: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lstm = self.config.lstm
        h = ref.new_zeros(2, lstm.n_layers, batch, lstm.projection_dim)
        c = ref.new_zeros(2, lstm.n_layers, batch, lstm.dim)
        if self.stateful and self._states is not None:
            rows = min(batch, self._states[0].shape[2])
            h[:, :, :rows] = self._states[0][:, :, :rows]
            c[:, :, :rows] = self._states[1][:, :, :rows]
        return h, c

    def _store_states(self, h: torch.Tensor, c: torch.Tensor) -> None:
        h, c = h.detach(), c.detach()
        if self._states is not None and self._states[0].shape[2] > h.shape[2]:
            old_h, old_c = self._states
            h = torch.cat([h, old_h[:, :, h.shape[2]:]], dim=2)
            c = torch.cat([c, old_c[:, :, c.shape[2]:]], dim=2)
        self._states = [h, c]

    # -- model ----------------------------------------------------------------------------
    def forward(self, char_ids: torch.Tensor, keep_sentence_boundaries: bool = False) -> BiLMOutput:
        """``char_ids (B, T, max_chars)`` from ``batch_to_ids`` -> all layers and the token mask."""
        mask = char_ids.gt(0).any(-1)
        lengths = mask.sum(-1)
        char_ids = add_sentence_boundaries(char_ids, lengths)
        lengths = lengths + 2
        full_mask = torch.arange(char_ids.shape[1], device=char_ids.device) < lengths[:, None]

        if self._fast_path_applies(char_ids):
            from pyelmo.fast import bilm_layers_inference

            stacked = bilm_layers_inference(self, char_ids, lengths)
        else:
            tokens = encode_distinct(self.token_encoder, char_ids) * full_mask.unsqueeze(-1)
            layers = [torch.cat([tokens, tokens], dim=-1)]
            for direction_output in zip(*self._run_directions(tokens, lengths)):
                layers.append(torch.cat(direction_output, dim=-1))
            stacked = torch.stack(layers)

        if keep_sentence_boundaries:
            return BiLMOutput(stacked, full_mask)
        # drop <S> (first position) and </S> (position length + 1 of each row)
        return BiLMOutput(stacked[:, :, 1:-1] * mask[None, :, :, None], mask)

    def _fast_path_applies(self, char_ids: torch.Tensor) -> bool:
        """The inference fast path: no autograd, no active dropout, a non-empty batch."""
        dropout_active = self.training and self.dropout.p > 0
        return (self.use_fast_path and not torch.is_grad_enabled() and not dropout_active
                and char_ids.shape[0] > 0)

    def _run_directions(self, tokens: torch.Tensor, lengths: torch.Tensor) -> list[list[torch.Tensor]]:
        """Each direction's per-layer outputs, ``[direction][layer] -> (B, T, projection_dim)``."""
        order = torch.argsort(lengths, descending=True, stable=True)
        restore = torch.argsort(order)
        sorted_lengths = lengths[order]
        steps = int(sorted_lengths[0]) if len(lengths) else 0
        batch_sizes = (sorted_lengths[None, :] > torch.arange(steps)[:, None]).sum(-1).tolist()
        h0, c0 = self._initial_states(len(lengths), tokens)
        h_final, c_final = torch.zeros_like(h0), torch.zeros_like(c0)
        outputs: list[list[torch.Tensor]] = []
        for d, layers in enumerate(self.directions):
            x = tokens[order]
            if d == BACKWARD:
                x = reverse_within_lengths(x, sorted_lengths)
            per_layer = []
            for l, layer in enumerate(layers):
                out, (h, c) = layer(self.dropout(x), batch_sizes, (h0[d, l][order], c0[d, l][order]))
                h_final[d, l], c_final[d, l] = h[restore], c[restore]
                if l > 0 and self.config.lstm.use_skip_connections:
                    out = out + x
                x = out
                y = reverse_within_lengths(out, sorted_lengths) if d == BACKWARD else out
                per_layer.append(y[restore])
            outputs.append(per_layer)
        if self.stateful:
            self._store_states(h_final, c_final)
        return outputs
