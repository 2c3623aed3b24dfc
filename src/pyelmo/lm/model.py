"""The biLM as a language model: the biLM plus one softmax shared by both directions.

One home for what predict, perplexity, export and training share: the model
(:class:`LanguageModel`), its loader (:meth:`LanguageModel.from_pretrained`, one read of a model
folder) and its perplexity (:func:`evaluate`, :func:`perplexity`); the export to the released
bilm-tf layout is :func:`pyelmo.lm.export.export_bilm_hdf5`.

Training uses TensorFlow's ``sampled_softmax_loss`` with a unique log-uniform (Zipfian)
candidate sampler over the count-sorted vocabulary: one set of negatives per batch,
logits corrected by subtracting the log expected counts, accidental hits removed.
Evaluation uses the full softmax.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pyelmo.modeling.bilm import BiLM
from pyelmo.config import ElmoConfig
from pyelmo.fileio import PathLike
from pyelmo.lm.text import TokenizedText, eval_batches
from pyelmo.runtime.options import RunOptions
from pyelmo.lm.vocab import Vocabulary

if TYPE_CHECKING:
    from pyelmo.modelio.resolve import ResolvedModel


class LogUniformSampler:
    """TF's ``log_uniform_candidate_sampler(unique=True)``: P(k) = log((k+2)/(k+1)) / log(V+1)."""

    def __init__(self, range_max: int) -> None:
        self.range_max = range_max
        k = np.arange(range_max, dtype=np.float64)
        self.log_range = math.log(range_max + 1)
        self.probs = torch.from_numpy((np.log(k + 2) - np.log(k + 1)) / self.log_range)

    def sample(self, num_sampled: int, generator: np.random.Generator) -> tuple[torch.Tensor, int]:
        """``num_sampled`` distinct ids (in draw order) and the number of draws it took."""
        num_sampled = min(num_sampled, self.range_max)
        draws: list[np.ndarray] = []
        total = 0
        chunk = max(2 * num_sampled, 64)
        while True:
            u = generator.random(chunk)
            d = (np.floor(np.exp(u * self.log_range)) - 1).astype(np.int64)
            draws.append(np.clip(d, 0, self.range_max - 1))
            total += chunk
            all_draws = np.concatenate(draws)
            uniq, first = np.unique(all_draws, return_index=True)
            if len(uniq) >= num_sampled:
                first.sort()
                first = first[:num_sampled]
                return torch.from_numpy(all_draws[first].copy()), int(first[-1]) + 1
            chunk *= 2

    def log_expected_count(self, ids: torch.Tensor, num_tries: int) -> torch.Tensor:
        """log of the expected count of ``ids`` in ``num_tries`` draws: ``log(1 - (1 - p)^tries)``."""
        p = self.probs.to(ids.device)[ids]
        return torch.log(-torch.expm1(num_tries * torch.log1p(-p))).float()


@dataclass
class Negatives:
    """One batch's shared negatives: ids, their log expected counts, and the draw count."""

    ids: torch.Tensor
    log_q: torch.Tensor
    num_tries: int


class LanguageModel(nn.Module):
    """``BiLM`` + shared softmax ``W (vocab, P)``, ``b (vocab,)``; ``forward`` returns NLL sums."""

    def __init__(self, config: ElmoConfig, vocab_size: int, dropout: float = 0.0, init_std: float = 0.0,
                 bilm: BiLM | None = None) -> None:
        """``bilm``: a trained biLM to continue (with its own dropout); default a new ``BiLM(config, dropout)``."""
        super().__init__()
        self.bilm = bilm if bilm is not None else BiLM(config, dropout=dropout)
        projection = config.projection_dim
        std = init_std or 1.0 / math.sqrt(projection)
        self.softmax_weight = nn.Parameter(torch.randn(vocab_size, projection) * std)
        self.softmax_bias = nn.Parameter(torch.zeros(vocab_size))
        self.top_dropout = nn.Dropout(dropout)
        self.sampler = LogUniformSampler(vocab_size)
        self.vocab: Vocabulary | None = None  # set by from_pretrained
        if bilm is None:
            with torch.no_grad():  # bilm-tf initialises the highway transform-gate bias to -2
                for highway in self.bilm.token_encoder.highways:
                    highway.carry.bias.fill_(-2.0)

    @classmethod
    def from_pretrained(cls, model: ResolvedModel | PathLike | None = None, dropout: float = 0.0,
                        bilm: BiLM | None = None, options: RunOptions | None = None) -> "LanguageModel":
        """A trained biLM with its softmax and vocabulary (``.vocab``): a shipped model (default
        ``english``), a folder ``pyelmo train`` or ``pyelmo export`` wrote (see :func:`_from_pretrained`).
        ``options``: inference run options for a model loaded only to run them (perplexity, predictions): the
        biLM it loads is planned in place, once (:func:`pyelmo.runtime.planning.plan_model`)."""
        lm = _from_pretrained(cls, model, dropout, bilm)
        if options is not None and bilm is None:
            from pyelmo.runtime.planning import plan_model

            plan_model(lm.bilm, options)
        return lm

    @property
    def vocab_size(self) -> int:
        return self.softmax_weight.shape[0]

    def hidden(self, char_ids: torch.Tensor, targets: torch.Tensor,
               options: RunOptions | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-layer states and their targets: ``(2N, P)`` (forward rows first) and ``(2N,)``."""
        top = self.bilm(char_ids, keep_sentence_boundaries=True, options=options).layers[-1]
        top = self.top_dropout(top)
        p = top.shape[-1] // 2
        mask = targets[:, 1:].ge(0)
        h = torch.cat([top[:, :-1, :p][mask], top[:, 1:, p:][mask]])
        y = torch.cat([targets[:, 1:][mask], targets[:, :-1][mask]])
        return h, y

    def forward(self, char_ids: torch.Tensor, targets: torch.Tensor, neg_ids: torch.Tensor | None = None,
                neg_log_q: torch.Tensor | None = None, num_tries: int = 0,
                options: RunOptions | None = None) -> torch.Tensor:
        """``(2,)`` tensor: summed NLL of the forward and of the backward LM over the batch.

        With negatives (see ``sample_negatives``) the sampled softmax is used, otherwise the
        full softmax. The arguments are plain tensors so that DistributedDataParallel can
        move them; ``options``: how the biLM runs (default: the differentiable backend).
        """
        h, y = self.hidden(char_ids, targets, options)
        if neg_ids is None:
            nll = full_softmax_nll(h, y, self.softmax_weight, self.softmax_bias)
        else:
            nll = self.sampled_nll(h, y, Negatives(neg_ids, neg_log_q, num_tries))
        n = nll.shape[0] // 2
        return torch.stack([nll[:n].sum(), nll[n:].sum()])

    def sample_negatives(self, num_sampled: int, generator: np.random.Generator) -> Negatives:
        ids, tries = self.sampler.sample(num_sampled, generator)
        return Negatives(ids, self.sampler.log_expected_count(ids, tries), tries)

    def sampled_nll(self, h: torch.Tensor, y: torch.Tensor, negatives: Negatives) -> torch.Tensor:
        """Per-prediction NLL of TF ``sampled_softmax_loss`` (``remove_accidental_hits=True``)."""
        w, b = self.softmax_weight, self.softmax_bias
        ids = negatives.ids.to(h.device)
        true_logit = (h * w[y].to(h.dtype)).sum(-1) + b[y] - self.sampler.log_expected_count(y, negatives.num_tries)
        sampled = h @ w[ids].to(h.dtype).t() + b[ids] - negatives.log_q.to(h.device)
        sampled = sampled.float().masked_fill(y[:, None] == ids[None, :], torch.finfo(torch.float32).min)
        logits = torch.cat([true_logit.float()[:, None], sampled], dim=1)
        return torch.logsumexp(logits, dim=1) - logits[:, 0]


def full_softmax_nll(h: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                     chunk: int = 2048) -> torch.Tensor:
    """Per-prediction NLL under the full softmax, in chunks of rows to bound memory."""
    out = []
    for i in range(0, h.shape[0], chunk):
        logits = (h[i:i + chunk] @ weight.to(h.dtype).t()).float() + bias
        out.append(F.cross_entropy(logits, y[i:i + chunk], reduction="none"))
    return torch.cat(out) if out else h.new_zeros(0)


# -- loading ---------------------------------------------------------------------------------
def no_softmax(what: str) -> Exception:
    """The error for a model without an LM head, naming the folders and the flag that work."""
    from pyelmo.errors import WeightFileError

    return WeightFileError(f"{what} has no softmax and vocabulary (a biLM alone cannot predict words or score "
                           "text): use a folder 'pyelmo train' wrote (RUN or RUN/model), one 'pyelmo export' "
                           "wrote, or a shipped model (english, chinese)")


def _from_pretrained(cls, model: ResolvedModel | PathLike | None = None, dropout: float = 0.0,
                     bilm: BiLM | None = None) -> "LanguageModel":
    """A biLM with its softmax and its vocabulary (``.vocab``), read once: anything
    :func:`pyelmo.modelio.resolve.resolve_model` takes that has an LM head (a shipped model, a folder
    ``pyelmo train`` or ``pyelmo export`` wrote), loaded through its record
    (:meth:`~pyelmo.modelio.resolve.ResolvedModel.load_with_softmax`). ``bilm``: the biLM already loaded from the
    same model (then only the softmax and vocabulary are read: ``pyelmo serve`` holds one biLM)."""
    from pyelmo.errors import WeightFileError
    from pyelmo.modelio.resolve import resolve_model

    source = resolve_model(model)
    if not source.has_softmax:
        raise no_softmax({"released": f"the released model {source.name!r}", "url": f"the downloaded model "
                          f"{source.name!r}"}.get(source.kind, source.name if source.folder is None else str(source.folder)))
    bilm, w, b = source.load_with_softmax(bilm, dropout)
    vocab = Vocabulary.load(source.vocab_file)
    config = bilm.config
    if w.shape != (len(vocab), config.projection_dim) or b.shape != (len(vocab),):
        raise WeightFileError(f"{source.folder}: softmax shape {tuple(w.shape)} does not match vocabulary "
                              f"({len(vocab)}) and projection ({config.projection_dim})")
    lm = cls(config, len(vocab), dropout=dropout, bilm=bilm)
    with torch.no_grad():
        lm.softmax_weight.copy_(w)
        lm.softmax_bias.copy_(b)
    lm.vocab = vocab
    return lm.eval()


# -- perplexity -----------------------------------------------------------------------------
@dataclass
class Perplexity:
    """Full-softmax perplexities; ``average`` is ``exp`` of the mean of both directions' losses."""

    forward: float
    backward: float
    average: float
    tokens: int

    def as_dict(self) -> dict[str, float]:
        return {"ppl": self.average, "ppl_forward": self.forward, "ppl_backward": self.backward,
                "predictions": self.tokens}


@torch.no_grad()
def evaluate(model: LanguageModel, text: TokenizedText, batch_tokens: int = 8192, *, rank: int = 0, world: int = 1,
             device: torch.device | None = None,
             all_reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
             options: RunOptions | None = None) -> Perplexity:
    """Forward, backward and average perplexity of ``text`` (with ``world`` ranks, this one does every world-th
    batch and ``all_reduce`` sums the counts), in float32 (no autocast) and without autograd."""
    device = device or next(model.parameters()).device
    options = options or RunOptions.inference(device=device)
    was_training = model.training
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64)
    with torch.autocast(device.type, enabled=False):
        for rows in eval_batches(text.lengths, batch_tokens)[rank::world]:
            batch = text.batch(rows)
            s = model(batch.char_ids.to(device), batch.targets.to(device), options=options)
            sums += torch.tensor([float(s[0]), float(s[1]), batch.n_predictions], dtype=torch.float64)
    if all_reduce is not None:
        sums = all_reduce(sums)
    model.train(was_training)
    f, b, n = (float(x) for x in sums)
    return Perplexity(math.exp(f / n), math.exp(b / n), math.exp((f + b) / (2 * n)), int(n))


def perplexity(model: ResolvedModel | PathLike | None, files: Sequence[PathLike], batch_tokens: int = 8192,
               max_length: int | None = None) -> Perplexity:
    """Full-softmax perplexity of a trained model (see :meth:`LanguageModel.from_pretrained`) on text files (one
    sentence per line); ``max_length``: the model's training setting (100 for an exported model)."""
    from pyelmo.modelio.resolve import resolve_model

    source = resolve_model(model)
    options = RunOptions.inference()
    lm = LanguageModel.from_pretrained(source, options=options)  # planned in place: one copy of the weights
    text = TokenizedText(files, lm.vocab, max_length or source.max_length,
                         lm.bilm.config.char_cnn.max_characters_per_token)
    return evaluate(lm, text, batch_tokens, options=options)
