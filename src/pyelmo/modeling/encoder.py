"""The token encoder (paper section 3.1 / bilm-tf ``CNN``): characters to a token vector.

char embedding -> 1-D convolutions of several widths, max over positions, activation
-> highway layers -> (a word embedding's vector before it, where the model has one) -> linear projection.
Its output is the biLM's layer 0.

Its input is ``batch_to_ids``' character ids; the module ``token_ids`` prepares what the embeddings look up:
:class:`ByteIds` (those ids as they are) or, for a model whose characters and words are ids of lexicons
(ELMoForManyLangs'), a module that maps each token to them (:class:`pyelmo.modelio.lexicon.LexiconIds`).

The linear layers are the modules' own (``nn.Linear``, or the planned linears a plan swapped in). How the
convolutions and their max over positions run is the module ``conv_max``: :class:`ConvMax` (one
convolution per width, the reference) or :class:`FusedConvMax` (every width in one product over the same
weights, :func:`conv_max_gemm`; training's and, with its product planned, inference's).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pyelmo.config import CharCNNConfig
from pyelmo.modeling.characters import PAD_CHAR

N_CHAR_IDS = 262  # 261 character ids + the padding id 0
PAD_ID = PAD_CHAR + 1  # the padding character's id (ids are shifted by +1)
#: Token rows per chunk of the fused convolution product: bounds its (rows * max_chars, n_filters) buffer.
CONV_CHUNK_TOKENS = 256


class Highway(nn.Module):
    """``y = t * relu(x W_transform + b_transform) + (1 - t) * x`` with ``t = sigmoid(x W_carry + b_carry)``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.carry = nn.Linear(dim, dim)  # TF name "carry" is the transform gate t
        self.transform = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.carry(x))
        return gate * torch.relu(self.transform(x)) + (1 - gate) * x


class ByteIds(nn.Module):
    """The encoder's input as it comes: rows of ``batch_to_ids``' character ids, and no word ids."""

    def forward(self, rows: torch.Tensor) -> tuple[torch.Tensor, None]:
        return rows, None


class ConvMax(nn.Module):
    """Each convolution's max over positions, bias included, before the activation: ``(N, C) -> (N, n_filters)``,
    one convolution per width (a module without weights: it runs the encoder's). ``padding_id``: the
    character id that pads a token's characters (only :class:`FusedConvMax` uses it, to skip windows)."""

    def forward(self, char_embedding: nn.Embedding, convolutions: nn.ModuleList, char_ids: torch.Tensor,
                padding_id: int) -> torch.Tensor:
        # (max rather than amax: the same values, and a backward pass that scatters to the argmax)
        chars = char_embedding(char_ids).transpose(1, 2)
        return torch.cat([conv(chars).max(dim=-1).values for conv in convolutions], dim=-1)


class FusedConvMax(ConvMax):
    """:class:`ConvMax`'s values from one product over every width's filters zero-padded to the widest
    (:func:`conv_max_gemm`); the encoder runs it on ``chunk_tokens`` tokens at a time, which bounds the
    product's buffer. Differentiable: :meth:`fused` makes the padded weights under autograd at every call."""

    chunk_tokens = CONV_CHUNK_TOKENS

    def fused(self, convolutions: nn.ModuleList) -> tuple:
        """The fused product ``x -> x W^T``, the biases, the filter groups and the widest width."""
        weight, bias, groups = padded_conv_weights(convolutions)
        return (lambda x: x @ weight.t()), bias, groups, max(width for _, _, width in groups)

    def forward(self, char_embedding, convolutions, char_ids, padding_id):
        return conv_max_gemm(char_embedding, char_ids, self.fused(convolutions), padding_id)


class TokenEncoder(nn.Module):
    """Maps character ids ``(..., max_chars)`` to context-independent token vectors ``(..., projection_dim)``.

    ``config``: its sizes; the characters are the 262 byte ids, or ids of a lexicon
    (``config.n_lexicon_characters``), and a word embedding (``config.word_dim``) is optional.
    ``token_ids``: the module that prepares the embeddings' ids from the input (default :class:`ByteIds`).
    """

    def __init__(self, config: CharCNNConfig, projection_dim: int, token_ids: nn.Module | None = None) -> None:
        super().__init__()
        self.config = config
        #: What the embeddings look up, from the input rows: ``(character ids, word ids or None)``.
        self.token_ids = token_ids if token_ids is not None else ByteIds()
        n_ids, padding_idx = (config.n_lexicon_characters, None) if config.n_lexicon_characters else (N_CHAR_IDS, 0)
        self.padding_id = config.lexicon_padding_id if config.n_lexicon_characters else PAD_ID
        self.char_embedding = nn.Embedding(n_ids, config.embedding_dim, padding_idx=padding_idx,
                                           _weight=_initial_char_embedding(n_ids, config.embedding_dim, padding_idx))
        self.convolutions = nn.ModuleList(
            nn.Conv1d(config.embedding_dim, n_maps, kernel_size=width) for width, n_maps in config.filters
        )
        self.activation = torch.relu if config.activation == "relu" else torch.tanh
        self.highways = nn.ModuleList(Highway(config.n_filters) for _ in range(config.n_highway))
        self.word_embedding = nn.Embedding(config.n_words, config.word_dim) if config.word_dim else None
        self.projection = nn.Linear(config.word_dim + config.n_filters, projection_dim)
        #: How the convolutions and their max run (no weights; training and a plan swap in their own).
        self.conv_max: ConvMax = ConvMax()

    @property
    def chunk_tokens(self) -> int | None:
        """Tokens per call when encoding many (:func:`encode_distinct`): its ``conv_max``'s bound, if any."""
        return getattr(self.conv_max, "chunk_tokens", None)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        shape = char_ids.shape[:-1]
        chars, words = self.token_ids(char_ids.reshape(-1, char_ids.shape[-1]))
        pooled = self.conv_max(self.char_embedding, self.convolutions, chars, self.padding_id)
        # max over positions then activation (equal to activation then max for monotone activations)
        x = self.activation(pooled)
        for highway in self.highways:
            x = highway(x)
        if self.word_embedding is not None:  # the word's vector first, then the characters'
            x = torch.cat([self.word_embedding(words), x], dim=-1)
        return self.projection(x).reshape(*shape, -1)


def encode_distinct(encoder: nn.Module, char_ids: torch.Tensor, cache=None) -> torch.Tensor:
    """``encoder(char_ids)`` computed once per distinct token (row of character ids), ``encoder.chunk_tokens``
    at a time where it has a bound.

    Text repeats its words, so a batch has far fewer distinct tokens than positions; the
    gradient of a repeated token is the sum over its positions, as without the sharing.
    With a ``cache`` (inference only; ``cache.encode(encoder, distinct, encode)``, as
    :class:`pyelmo.runtime.token_cache.TokenCache`), tokens seen in earlier calls are not computed again.
    """
    rows = char_ids.reshape(-1, char_ids.shape[-1])
    if rows.shape[0] == 0:
        return encoder(char_ids)
    distinct, inverse = torch.unique(rows, dim=0, return_inverse=True)

    chunk = getattr(encoder, "chunk_tokens", None)

    def encode(ids: torch.Tensor) -> torch.Tensor:
        if chunk is None:
            return encoder(ids)
        chunks = [encoder(ids[k : k + chunk]) for k in range(0, ids.shape[0], chunk)]
        return torch.cat(chunks) if len(chunks) > 1 else chunks[0]

    vectors = encode(distinct) if cache is None else cache.encode(encoder, distinct, encode)
    return vectors[inverse].reshape(*char_ids.shape[:-1], -1)


def padded_conv_weights(convolutions: torch.nn.ModuleList) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int, int]]]:
    """All convolution filters zero-padded to the widest: ``W (n_filters, widest * emb)`` in
    ``[offset, emb]`` order, the biases, and ``(first column, end column, width)`` of each filter group."""
    widest = max(conv.kernel_size[0] for conv in convolutions)
    blocks, groups, start = [], [], 0
    for conv in convolutions:
        n, _, w = conv.weight.shape  # (n, emb, w)
        blocks.append(F.pad(conv.weight, (0, widest - w)))
        groups.append((start, start + n, w))
        start += n
    weight = torch.cat(blocks).transpose(1, 2).reshape(start, -1).contiguous()
    return weight, torch.cat([conv.bias for conv in convolutions]), groups


def _initial_char_embedding(n: int, dim: int, padding_idx: int | None) -> torch.Tensor:
    """``nn.Embedding``'s initialisation (N(0, 1), the padding row zero), skipped on the ``meta`` device (a model
    about to be loaded), where ``normal_`` would import ``torch._dynamo`` (~70 MB resident)."""
    weight = torch.empty(n, dim)
    if weight.device.type != "meta":
        nn.init.normal_(weight)
        if padding_idx is not None:
            weight[padding_idx].zero_()
    return weight


def conv_max_gemm(char_embedding: torch.nn.Embedding, char_ids: torch.Tensor, fused: tuple,
                  padding_id: int = PAD_ID) -> torch.Tensor:
    """Every convolution's max over positions (bias included, before the activation): ``(N, C) -> (N, n_filters)``,
    from ``fused``: :meth:`FusedConvMax.fused`'s product (its results in the product's own precision), biases,
    filter groups and widest width; ``padding_id``: the id that pads a token's characters.

    One product ``windows (N * positions, widest * emb) @ W^T`` gives every filter's
    response at every window start; each filter group's max runs over its valid starts
    ``0 .. C - width`` (the zero-padded tail is left out), and the bias comes after the
    max (it commutes with it). Windows that start after the rows' last
    non-padding character hold padding characters only: they all give one response per
    filter, computed once instead of at each of those starts.
    """
    product, bias, groups, widest = fused
    n_tokens, n_chars = char_ids.shape
    emb = char_embedding.embedding_dim
    # window starts computed one by one: 0 .. (the last non-padding character of any row)
    positions = torch.arange(1, n_chars + 1, device=char_ids.device)
    starts = max(int((char_ids.ne(padding_id) * positions).amax()) if n_tokens else 0, 1)
    kept = min(n_chars, starts + widest - 1)  # the characters those windows read; zeros after the row's end
    chars = F.pad(char_embedding(char_ids[:, :kept]), (0, 0, 0, starts + widest - 1 - kept))
    windows = chars.unfold(1, widest, 1).transpose(2, 3).reshape(n_tokens * starts, widest * emb)
    responses = product(windows).view(n_tokens, starts, -1)  # bfloat16 in the bfloat16 mode
    padding_window = char_embedding.weight[padding_id].repeat(widest)[None]  # (1, widest * emb)
    padding_response = product(padding_window)[0]
    if starts <= n_chars - widest:  # every filter's windows are valid, and some hold padding only: one max
        # (under autograd ``max``, whose backward scatters to the argmax, rather than ``amax``'s tie masks)
        pooled = responses.max(dim=1).values if responses.requires_grad else responses.amax(dim=1)
        return torch.maximum(pooled, padding_response).float() + bias
    pooled = []
    for a, b, w in groups:
        group = responses[:, : min(starts, n_chars - w + 1), a:b].amax(dim=1)
        if starts <= n_chars - w:  # some valid windows hold padding only
            group = torch.maximum(group, padding_response[a:b])
        pooled.append(group)
    return torch.cat(pooled, dim=1).float() + bias
