"""The biLM as a language model: the biLM plus one softmax shared by both directions.

One home for what predict, perplexity, export and training share: the model
(:class:`LanguageModel`), its loader (:func:`load_language_model`, one read of a model
folder), its perplexity (:func:`evaluate`, :func:`perplexity`) and the export to the
released bilm-tf layout (:func:`export_bilm_hdf5`).

Training uses TensorFlow's ``sampled_softmax_loss`` with a unique log-uniform (Zipfian)
candidate sampler over the count-sorted vocabulary: one set of negatives per batch,
logits corrected by subtracting the log expected counts, accidental hits removed.
Evaluation uses the full softmax.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

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
        if bilm is None:
            with torch.no_grad():  # bilm-tf initialises the highway transform-gate bias to -2
                for highway in self.bilm.token_encoder.highways:
                    highway.carry.bias.fill_(-2.0)

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


# -- loading and export ---------------------------------------------------------------------
SOFTMAX_HDF5 = "softmax.hdf5"


def language_model_dir(model: PathLike | None = None) -> Path:
    """The folder of a biLM with its softmax: ``None`` or ``"english"`` (the shipped model), a folder
    ``pyelmo train`` wrote (the run folder or its ``model/``) or one ``pyelmo export`` wrote. Anything
    else is refused in one line naming what works."""
    from pyelmo.modelio import hub
    from pyelmo.errors import WeightFileError
    from pyelmo.modelio.hub import default_model_dir
    from pyelmo.modelio.load import run_model_dir, task_model_check
    from pyelmo.modelio.weights import CONFIG_NAME

    if model is None or str(model) == "english":
        return default_model_dir()
    path = Path(model)
    if not path.exists():
        if str(model) in hub.RELEASES or hub.is_url(str(model)):
            raise no_softmax(f"the {'released' if str(model) in hub.RELEASES else 'downloaded'} model {str(model)!r}")
        raise WeightFileError(f"model directory not found: {path}")
    if path.is_file():
        raise no_softmax(f"{path} (a file)")
    path = run_model_dir(path)
    if (path / CONFIG_NAME).is_file():
        task_model_check(path)
    if (path / CONFIG_NAME).is_file() or (path / SOFTMAX_HDF5).is_file():
        return path
    raise no_softmax(str(path))


def no_softmax(what: str) -> Exception:
    """The error for a model without an LM head, naming the folders and the flag that work."""
    from pyelmo.errors import WeightFileError

    return WeightFileError(f"{what} has no softmax and vocabulary (a biLM alone cannot predict words or score "
                           "text): use a folder 'pyelmo train' wrote (RUN or RUN/model), one 'pyelmo export' "
                           "wrote, or the shipped English model (no --model)")


def load_language_model(model: PathLike | None = None, dropout: float = 0.0) -> tuple[LanguageModel, Vocabulary]:
    """A biLM with its softmax and vocabulary, read once, from what :func:`language_model_dir` accepts: the
    native layout (``save_pretrained`` + ``softmax.weight``/``softmax.bias`` + ``vocab.txt``) or the
    exported one (``options.json``, ``weights.hdf5``, ``softmax.hdf5``, ``vocab.txt``)."""
    from pyelmo.errors import WeightFileError
    from pyelmo.modelio.weights import (CONFIG_NAME, config_from_options, load_bilm_hdf5, load_native_state,
                                        load_native_tensors, read_native_config)

    model_dir = language_model_dir(model)
    lexicon_bilm = None
    if (model_dir / SOFTMAX_HDF5).is_file():
        bilm = load_bilm_hdf5(model_dir / "options.json", model_dir / "weights.hdf5")
        config, tensors = bilm.config, bilm.state_dict()
        w, b = _read_softmax_hdf5(model_dir / SOFTMAX_HDF5)
    else:
        from pyelmo.modelio import elmoformanylangs

        native = read_native_config(model_dir)
        config = config_from_options(native["options"], model_dir / CONFIG_NAME)
        tensors = load_native_tensors(model_dir)
        if "softmax.weight" not in tensors or "softmax.bias" not in tensors:
            raise no_softmax(str(model_dir))
        w, b = tensors["softmax.weight"].float(), tensors["softmax.bias"].float()
        if elmoformanylangs.is_converted(native):  # continued from an ELMoForManyLangs model: their token encoder
            lexicon_bilm = elmoformanylangs.load_converted(model_dir, dropout, native, tensors)
    vocab = Vocabulary.load(model_dir / "vocab.txt")
    if w.shape != (len(vocab), config.projection_dim) or b.shape != (len(vocab),):
        raise WeightFileError(f"{model_dir}: softmax shape {tuple(w.shape)} does not match vocabulary "
                              f"({len(vocab)}) and projection ({config.projection_dim})")
    lm = LanguageModel(config, len(vocab), dropout=dropout, bilm=lexicon_bilm)
    if lexicon_bilm is None:  # (load_converted loaded and checked its weights)
        load_native_state(lm.bilm, tensors, model_dir)
    with torch.no_grad():
        lm.softmax_weight.copy_(w)
        lm.softmax_bias.copy_(b)
    return lm.eval(), vocab


def _read_softmax_hdf5(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax/W`` and ``softmax/b`` of an exported ``softmax.hdf5``."""
    import h5py

    from pyelmo.errors import WeightFileError

    try:
        with h5py.File(path, "r") as f:
            return (torch.from_numpy(np.asarray(f["softmax/W"][...], dtype=np.float32)),
                    torch.from_numpy(np.asarray(f["softmax/b"][...], dtype=np.float32)))
    except (OSError, KeyError, RuntimeError, ValueError) as exc:
        raise WeightFileError(f"{path} is not a readable softmax file (datasets softmax/W, softmax/b: {exc})") from None


EXPORT_OUTPUTS = ("options.json", "weights.hdf5", "softmax.hdf5", "vocab.txt")


def export_bilm_hdf5(model: PathLike | None, outdir: PathLike, overwrite: bool = False) -> Path:
    """Write ``options.json``, ``weights.hdf5``, ``softmax.hdf5`` and ``vocab.txt`` into ``outdir``
    (the released bilm-tf layout; each file atomically). ``model``: see :func:`language_model_dir`.

    Refuses (``InputError``) an ``outdir`` that is a file or already holds one of them, unless ``overwrite``.
    """
    import h5py

    from pyelmo.errors import InputError
    from pyelmo.fileio import atomic_writer
    from pyelmo.modelio.weights import save_bilm_hdf5

    outdir = Path(outdir)
    if outdir.exists() and not outdir.is_dir():
        raise InputError(f"output path is a file, expected a folder: {outdir}")
    existing = [name for name in EXPORT_OUTPUTS if (outdir / name).exists()]
    if existing and not overwrite:
        raise InputError(f"{outdir} already holds {', '.join(existing)} (use --overwrite to replace)")
    lm, vocab = load_language_model(model)
    if hasattr(lm.bilm, "save_lexicons"):
        raise InputError(f"{model} is an ELMoForManyLangs model (continued): its token encoder (their character "
                         "lexicon and a word embedding) has no place in the bilm-tf layout; use the folder itself")
    outdir.mkdir(parents=True, exist_ok=True)
    save_bilm_hdf5(lm.bilm, outdir / "options.json", outdir / "weights.hdf5")
    with atomic_writer(outdir / SOFTMAX_HDF5) as tmp, h5py.File(tmp, "w") as f:
        f.create_dataset("softmax/W", data=lm.softmax_weight.detach().numpy().astype(np.float32))
        f.create_dataset("softmax/b", data=lm.softmax_bias.detach().numpy().astype(np.float32))
    vocab.save(outdir / "vocab.txt")
    return outdir


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
             all_reduce: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Perplexity:
    """Forward, backward and average perplexity of ``text`` (with ``world`` ranks, this one does
    every world-th batch and ``all_reduce`` sums the counts). Runs the inference backend."""
    device = device or next(model.parameters()).device
    options = RunOptions.inference(device=device)
    was_training = model.training
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64)
    for rows in eval_batches(text.lengths, batch_tokens)[rank::world]:
        batch = text.batch(rows)
        s = model(batch.char_ids.to(device), batch.targets.to(device), options=options)
        sums += torch.tensor([float(s[0]), float(s[1]), batch.n_predictions], dtype=torch.float64)
    if all_reduce is not None:
        sums = all_reduce(sums)
    model.train(was_training)
    f, b, n = (float(x) for x in sums)
    return Perplexity(math.exp(f / n), math.exp(b / n), math.exp((f + b) / (2 * n)), int(n))


def perplexity(model: PathLike | None, files: Sequence[PathLike], batch_tokens: int = 8192,
               max_length: int | None = None) -> Perplexity:
    """Full-softmax perplexity of a trained model (see :func:`language_model_dir`) on text files (one
    sentence per line); ``max_length``: the model's training setting (100 for an exported model)."""
    from pyelmo.modelio.weights import CONFIG_NAME, read_native_config

    lm, vocab = load_language_model(model)
    if max_length is None:
        model_dir = language_model_dir(model)
        training = read_native_config(model_dir).get("training", {}) if (model_dir / CONFIG_NAME).is_file() else {}
        max_length = int(training.get("max_length", 100))
    text = TokenizedText(files, vocab, max_length, lm.bilm.config.char_cnn.max_characters_per_token)
    return evaluate(lm, text, batch_tokens)
