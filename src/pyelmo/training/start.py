"""Where a training run starts: a new biLM, or a trained one continued (``pyelmo train --init-from``).

A source with a softmax and its vocabulary (a folder ``pyelmo train`` or ``pyelmo export`` wrote, the
shipped model) continues as it is. Any other biLM that ``--model`` accepts (a released model by name,
a URL or NLPL-style archive, a bilm-tf options + HDF5 pair, a folder converted from ELMoForManyLangs)
has no softmax, and ``new_softmax`` asks for one over the run's vocabulary on any source: each
bias starts as the word's log frequency in the training text and each row at zero (or the biLM's own
layer-0 vector of the word: ``softmax.new_rows``), so the first step predicts the unigram
distribution; ``train.freeze_bilm_steps`` steps then train the softmax alone (docs/TRAINING.md,
"Adapt a released model", measures both starts).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from pyelmo.config import ElmoConfig
from pyelmo.runtime.precision import usable_bf16
from pyelmo.errors import ConfigError
from pyelmo.lm.model import LanguageModel
from pyelmo.modeling.bilm import BiLM
from pyelmo.lm.text import TokenizedText
from pyelmo.lm.vocab import DataError, Vocabulary, vocab_from_files
from pyelmo.training.checkpoints import CHECKPOINT_NAME, load_checkpoint, read_run
from pyelmo.training.config import TrainConfig
from pyelmo.training.data import DataFiles

#: ``train.freeze_bilm_steps`` when the config leaves it unset and the softmax is new (docs/TRAINING.md).
DEFAULT_FREEZE_STEPS = 200
#: ``softmax.new_rows = "layer0"``: the standard deviation of the first logits around the biases.
LOGIT_STD = 0.5
#: ``source["softmax"]`` of a source whose own softmax continues (else a new one was built).
SOFTMAX_CONTINUED = "continued from the source"
#: The way to another model size than a continued model's.
NEW_MODEL = "train a new model without --init-from"


@dataclass
class InitFrom:
    """``pyelmo train --init-from MODEL [--init-weight-file W] [--new-softmax]``."""

    model: str
    weight_file: str | None = None
    new_softmax: bool = False  # a new softmax over the run's vocabulary even when the source has one


@dataclass
class Start:
    """A run's first model and vocabulary, and where they came from (``None`` for a new biLM)."""

    model: LanguageModel
    vocab: Vocabulary
    source: dict[str, Any] | None = None
    built_softmax: bool = False  # the softmax is new: initialise it from the data (``init_softmax``)


def check_shape(stated: ElmoConfig | None, source: ElmoConfig, whose: str, instead: str) -> None:
    """A continued model keeps its shape: each model field the configuration sets (``stated``: its fields that
    differ from the defaults; the character-id count aside) must be the model's (``source``, ``whose`` in the
    message), or ``ConfigError`` (naming ``instead``, the way to another size)."""
    for section in ("char_cnn", "lstm") if stated is not None else ():
        for f in dataclasses.fields(getattr(stated, section)):
            want, have, default = (getattr(getattr(c, section), f.name) for c in (stated, source, ElmoConfig()))
            if f.name != "n_characters" and want != default and want != have:
                raise ConfigError(f"{section}.{f.name} = {want!r} cannot apply: {whose} has {section}.{f.name} = "
                                  f"{have!r} (a continued model keeps its size): drop the setting (and any "
                                  f"[{section}] section or preset), or {instead}")


def load_start(model: str | None, weight_file: str | None, run_vocab: Callable[[], Vocabulary],
               given_vocab: Vocabulary | None, dropout: float, new_softmax: bool = False,
               stated: ElmoConfig | None = None) -> Start:
    """The first model of a run continued from ``model`` (anything ``--model`` accepts; ``weight_file``:
    the HDF5 file of a bilm-tf options file ``model``). A new softmax is over ``run_vocab()`` (``vocab.path``
    or built from the training text); a source's own softmax comes with its vocabulary, which a
    ``given_vocab`` (``vocab.path``) must equal. A model size the configuration states (``stated``) must be
    the source's (:func:`check_shape`)."""
    from pyelmo.modelio.resolve import REMOTE_KINDS, resolve_model
    from pyelmo.modelio.weights import model_fingerprint

    source = resolve_model(model, weight_file)
    continued = source.has_softmax and not new_softmax
    if continued:
        lm = LanguageModel.from_pretrained(source, dropout=dropout)
        vocab = lm.vocab
        check_shape(stated, lm.bilm.config, f"the model continued from {source.name}", NEW_MODEL)
        if given_vocab is not None and given_vocab.words != vocab.words:
            raise DataError(f"the vocabulary given differs from {source.name}'s ({source.vocab_file}: one "
                            "softmax row per word): drop --vocab to continue with it, or add --new-softmax to build a "
                            "softmax over the new vocabulary")
        bilm, softmax = lm.bilm, SOFTMAX_CONTINUED
    else:
        bilm = BiLM.from_pretrained(source)
        check_shape(stated, bilm.config, f"the model continued from {source.name}", NEW_MODEL)
        bilm = bilm.with_dropout(dropout)
        vocab = run_vocab()
        lm = LanguageModel(bilm.config, len(vocab), dropout=dropout, bilm=bilm)
        softmax = "built over the run's vocabulary"
    info = {"model": source.name, "weight_file": str(weight_file) if weight_file else None,
            "format": "released" if source.kind in REMOTE_KINDS else source.format,
            "fingerprint": model_fingerprint(bilm), "language": source.language, "softmax": softmax}
    return Start(lm, vocab, info, built_softmax=not continued)


@torch.no_grad()
def init_softmax(model: LanguageModel, vocab: Vocabulary, text: TokenizedText, rows: str = "zero",
                 chunk: int = 4096, sample: int = 64) -> None:
    """A new softmax's start: each bias the word's add-one log frequency in ``text`` (``<S>`` and ``</S>``
    once per sentence), so the first step predicts the unigram distribution; rows zero, or with ``rows =
    "layer0"`` the biLM's layer-0 vector of each word, scaled so that the logits of the top-layer states
    of ``sample`` training sentences vary around the biases with standard deviation ``LOGIT_STD``."""
    counts = np.bincount(text.type_vocab[:-1].numpy()[text.tokens], minlength=len(vocab)).astype(np.float64)
    counts[vocab.id("<S>")] += len(text)
    counts[vocab.id("</S>")] += len(text)
    model.softmax_bias.copy_(torch.from_numpy(np.log((counts + 1) / (counts.sum() + len(vocab)))).float())
    model.softmax_weight.zero_()
    if rows == "layer0":
        model.softmax_weight.copy_(_layer0_rows(model, vocab, text, chunk, sample))


def _layer0_rows(model: LanguageModel, vocab: Vocabulary, text: TokenizedText, chunk: int, sample: int) -> torch.Tensor:
    from pyelmo.modeling.characters import batch_to_ids

    encoder, max_chars = model.bilm.token_encoder, model.bilm.config.char_cnn.max_characters_per_token
    device = model.softmax_weight.device
    was_training = model.training
    model.eval()
    rows = []
    for start in range(0, len(vocab), chunk):
        ids = batch_to_ids([[w] for w in vocab.words[start:start + chunk]], max_chars)[:, 0]
        rows.append(encoder(ids.to(device)).float())
    weight = torch.nn.functional.normalize(torch.cat(rows), dim=1)
    batch = text.batch(np.arange(min(sample, len(text))))
    states = model.hidden(batch.char_ids.to(device), batch.targets.to(device))[0].float()
    model.train(was_training)
    return weight * (LOGIT_STD / (states @ weight.t()).std().clamp_min(1e-6))


def freeze_steps(configured: int | None, start: Start | None) -> int:
    """``train.freeze_bilm_steps`` as it applies: the configured number, else ``DEFAULT_FREEZE_STEPS`` when
    the softmax is new and 0 otherwise."""
    if configured is not None:
        return configured
    return DEFAULT_FREEZE_STEPS if start is not None and start.built_softmax else 0


def describe(source: dict[str, Any] | None, freeze: int) -> list[str]:
    """The start summary's lines about the source."""
    if source is None:
        return []
    lines = [f"continued from: {source['model']}"
             + (f" + {source['weight_file']}" if source.get("weight_file") else "")
             + f" ({source['format']}, fingerprint {source['fingerprint'][:12]}); softmax {source['softmax']}"]
    if freeze:
        lines.append(f"phase 1: the softmax alone for {freeze:,} steps (train.freeze_bilm_steps), then everything")
    return lines


def resume_model(run: dict[str, Any], vocab: Vocabulary, dropout: float) -> LanguageModel:
    """The model a run folder's checkpoint loads into: built from its ``run.json`` (``model_options``), or,
    for a biLM continued from ELMoForManyLangs (their lexicons), from the recorded source again."""

    source = run.get("source") or {}
    if source.get("format") == "elmoformanylangs":
        from pyelmo.modelio.resolve import load

        bilm = load(source["model"]).with_dropout(dropout)
        return LanguageModel(bilm.config, len(vocab), dropout=dropout, bilm=bilm)
    return LanguageModel(ElmoConfig.from_options(run["model_options"]), len(vocab), dropout=dropout)


def starting_point(config: TrainConfig, train_files: Sequence[str], init: InitFrom | None,
                   run: dict[str, Any] | None, out: Path) -> Start:
    """A run's first model and vocabulary: resumed (``run``: its ``run.json``; the checkpoint then loads
    into it), continued from ``init``, or new (``vocab.path`` or a vocabulary built from the text)."""
    dropout = config.train.dropout
    if run is not None:
        vocab = Vocabulary.load(out / "vocab.txt")
        model = resume_model(run, vocab, dropout)
        check_shape(config.model_config(), model.bilm.config, "the resumed run's model",
                    "start a new run without --resume")
        return Start(model, vocab, run.get("source"))
    given = Vocabulary.load(config.vocab.path) if config.vocab.path else None

    def run_vocab() -> Vocabulary:
        return given or vocab_from_files(train_files, config.vocab.max_size, config.vocab.min_count)

    torch.manual_seed(config.train.seed)
    if init is not None:
        return load_start(init.model, init.weight_file, run_vocab, given, dropout, init.new_softmax,
                          config.model_config())
    vocab = run_vocab()
    return Start(LanguageModel(config.model_config(), len(vocab), dropout=dropout, init_std=config.softmax.init_std),
                 vocab)


def prepare_start(config: TrainConfig, train_files: Sequence[str], init: InitFrom | None, run: dict[str, Any] | None,
                  out: Path, device: torch.device) -> Start:
    """``starting_point`` checked and on ``device``; ``config.train.freeze_bilm_steps`` resolved (phase 1: the
    softmax alone for that many steps; kept so in run.json's config)."""
    start = starting_point(config, train_files, init, run, out)
    if start.model.vocab_size != len(start.vocab):
        raise DataError(f"softmax has {start.model.vocab_size} rows but the vocabulary {len(start.vocab)} words")
    freeze = freeze_steps(config.train.freeze_bilm_steps, start)
    config.train = dataclasses.replace(config.train, freeze_bilm_steps=freeze)
    start.model.to(device)
    if config.train.bf16 and device.type == "cpu":
        usable_bf16(True)  # warns where the CPU lacks bfloat16 instructions (autocast() then stays float32)
    return start


def open_run(out: Path, data: DataFiles | None, resume: bool, init_from: str | Path | InitFrom | None
             ) -> tuple[dict[str, Any] | None, dict[str, Any] | None, DataFiles, InitFrom | None]:
    """A run's checkpoint and run record (None, None for a new run), its data files and its source:
    what ``out`` recorded when resuming, else what was given."""
    checkpoint = run = None
    if resume:
        checkpoint = load_checkpoint(out / CHECKPOINT_NAME)
        run = read_run(out)
        data = data or DataFiles(run["train_files"], run["valid_files"])
        init_from = run.get("init_from")
    elif data is None:
        raise DataError("no training data given")
    init = InitFrom(str(init_from)) if init_from is not None and not isinstance(init_from, InitFrom) else init_from
    return checkpoint, run, data, init
