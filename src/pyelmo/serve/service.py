"""What ``pyelmo serve`` serves: an embedder behind a batcher, an optional LM head and the sample corpus."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from pyelmo.runtime.precision import Quantization
from pyelmo.serve.batching import DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_WAIT, Batcher
from pyelmo.serve.neighbours import SampleCorpus
from pyelmo.serve.schemas import Limits

log = logging.getLogger("pyelmo.serve")


@dataclass
class Service:
    """What the app serves: an embedder behind a batcher, an optional LM head, the sample corpus."""

    embedder: Any
    batcher: Batcher
    corpus: SampleCorpus
    model_info: dict
    predictor: Any = None
    limits: Limits = field(default_factory=Limits)
    lang: str = "auto"  # the language raw-text sentences are tokenized as (pyelmo.text.tokenize)

    @property
    def n_layers(self) -> int:
        return self.corpus.n_layers

    def close(self) -> None:
        self.batcher.close()


def build_service(model: str | os.PathLike | None = None, weight_file: str | os.PathLike | None = None, *,
                  batching: bool = True, max_wait: float = DEFAULT_MAX_WAIT,
                  max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS, limits: Limits | None = None,
                  cache_dir: str | os.PathLike | None = None, lang: str = "auto",
                  precision: str | None = None, quantization: Quantization | None = None,
                  int8_cache: bool = False) -> Service:
    """Load the model (default: the shipped model of ``lang``, as :func:`pyelmo.modelio.resolve.resolve_model`
    picks it), its LM head when it has one, and the corpus vectors. One biLM serves both: the LM head runs on
    the embedder's model with its run options (``precision``, ``quantization``, ``int8_cache``: those of
    :class:`pyelmo.embedding.embedder.ElmoEmbedder`; default exact float32).
    ``lang``: the language raw-text sentences are tokenized as (``auto``: from their script)."""
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.modelio.resolve import resolve_model
    from pyelmo.text.tokenize import check_lang

    check_lang(lang)
    source = resolve_model(model, weight_file, lang=lang)
    embedder = ElmoEmbedder(source, precision=precision, quantization=quantization, int8_cache=int8_cache)
    fingerprint = embedder.fingerprint
    predictor = _load_predictor(source, embedder)
    corpus = SampleCorpus.load(embedder, fingerprint, cache_dir, lang=lang)  # keyed by the plan too (vector_cache)
    config = embedder.model.config
    info = {
        "id": fingerprint[:12],
        "fingerprint": fingerprint,
        "source": source.describe(),
        "layers": config.lstm.n_layers + 1,
        "dim": 2 * config.lstm.projection_dim,
        "predict": predictor is not None,
        "precision": embedder.options.plan.precision,
        "execution_plan": embedder.options.plan.summary(),
    }
    batcher = Batcher(embedder, batching=batching, max_wait=max_wait, max_tokens=max_batch_tokens)
    return Service(embedder, batcher, corpus, info, predictor, limits or Limits(), lang)


def _load_predictor(source, embedder):
    """The model's LM head (softmax + vocabulary) on the embedder's biLM and run options, or None when
    the model has none. (Both run in the batcher's one thread.)"""
    from pyelmo.errors import PyelmoError
    from pyelmo.lm.model import LanguageModel
    from pyelmo.lm.predict import CANDIDATES, WordPredictor

    if not source.has_softmax:
        log.info("no LM predictions for this model: %s has no softmax and vocabulary", source.describe())
        return None
    try:
        lm = LanguageModel.from_pretrained(source, bilm=embedder.model)
    except (PyelmoError, OSError, KeyError, ValueError) as exc:
        log.info("no LM predictions for this model: %s", exc)
        return None
    return WordPredictor(lm, lm.vocab, CANDIDATES, options=embedder.options)
