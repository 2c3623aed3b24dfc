"""The ASGI app of ``pyelmo serve``: the service it serves, the routes of the JSON API and the page at ``/``.

The endpoints' work is :mod:`pyelmo.serve.endpoints`; error bodies and the body limit are
:mod:`pyelmo.serve.errors`. Model work runs on the batcher's thread, never on the event
loop, so a slow or vanished client holds up no one else.
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from pyelmo.serve.batching import DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_WAIT, Batcher
from pyelmo.serve.endpoints import Api
from pyelmo.serve.errors import AsciiJSONResponse, BodyLimit, install_error_handlers  # noqa: F401  (BodyLimit: former home)
from pyelmo.serve.neighbours import SampleCorpus
from pyelmo.serve.schemas import ErrorResponse, Limits, TokenizeRequest

log = logging.getLogger("pyelmo.serve")



# ---------------------------------------------------------------------------- the service


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
                  cache_dir: str | os.PathLike | None = None, lang: str = "auto") -> Service:
    """Load the model (default: the shipped one), its LM head when it has one, and the corpus vectors.
    ``lang``: the language raw-text sentences are tokenized as (``auto``: from their script)."""
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.modelio.weights import model_fingerprint
    from pyelmo.text.tokenize import check_lang

    check_lang(lang)
    embedder = ElmoEmbedder(model, weight_file)
    fingerprint = model_fingerprint(embedder.model)
    predictor = None
    if weight_file is None:
        predictor = _load_predictor(model)
    corpus = SampleCorpus.load(embedder, fingerprint, cache_dir)
    config = embedder.model.config
    info = {
        "id": fingerprint[:12],
        "fingerprint": fingerprint,
        "source": "shipped English model" if model is None else str(model),
        "layers": config.lstm.n_layers + 1,
        "dim": 2 * config.lstm.projection_dim,
        "predict": predictor is not None,
    }
    batcher = Batcher(embedder, batching=batching, max_wait=max_wait, max_tokens=max_batch_tokens)
    return Service(embedder, batcher, corpus, info, predictor, limits or Limits(), lang)


def _load_predictor(model):
    """The model's LM head (softmax + vocabulary), or None when the directory has none."""
    from pyelmo.errors import PyelmoError
    from pyelmo.lm.predict import WordPredictor

    try:
        return WordPredictor.from_pretrained(model)
    except (PyelmoError, OSError, KeyError, ValueError) as exc:
        log.info("no LM predictions for this model: %s", exc)
        return None


# ---------------------------------------------------------------------------- the app


def create_app(service: Service) -> FastAPI:
    """The FastAPI app over ``service`` (closed when the app shuts down)."""

    @asynccontextmanager
    async def lifespan(app):
        try:
            yield
        finally:
            service.close()

    errors = {status: {"model": ErrorResponse, "description": text} for status, text in (
        (400, "the body is not JSON"), (413, "the body is over the size limit"),
        (422, "a field is invalid or over a limit; `field` names it"))}
    app = FastAPI(title="pyelmo", version="1", description="ELMo contextual word vectors over HTTP.",
                  docs_url=None, redoc_url=None, lifespan=lifespan, default_response_class=AsciiJSONResponse,
                  responses=errors)
    app.add_middleware(BodyLimit, max_bytes=service.limits.max_body_bytes)
    install_error_handlers(app)
    static = _static_dir()
    app.mount("/static", StaticFiles(directory=static), name="static")
    api = Api(service)

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(static / "index.html", media_type="text/html")

    @app.get("/health")
    async def health() -> dict:
        """Liveness: ``{"status": "ok"}`` while the server accepts requests."""
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict:
        """The served model, its layers and dimension, and the request limits."""
        return {"models": [service.model_info], "limits": service.limits.__dict__}

    @app.post("/v1/tokenize")
    async def tokenize(body: TokenizeRequest) -> dict:
        """Tokens of each sentence, as the other endpoints see them."""
        return {"sentences": [{"tokens": t} for t in api.sentences(body.sentences)]}

    for path, endpoint, summary in (
            ("/v1/embed", api.embed, "Per-token vectors of the chosen layers, their average or a scalar mix."),
            ("/v1/similarity", api.similarity,
             "Cosine similarity of one word across sentences, per layer and for the layer average."),
            ("/v1/neighbours", api.neighbours, "A word's nearest contexts in the built-in sample corpus, per layer."),
            ("/v1/predict", api.predict, "The biLM's top words for a blank: forward, backward and combined.")):
        app.add_api_route(path, endpoint, methods=["POST"], description=summary)

    return app


def _static_dir() -> Path:
    return Path(str(resources.files("pyelmo.serve") / "static"))


def app_from_settings(settings: dict) -> FastAPI:
    """The app from JSON-able settings: ``build_service``'s arguments, ``limits`` as a dict, and
    ``threads`` (PyTorch's intra-op threads for this process)."""
    settings = dict(settings)
    limits = Limits(**settings.pop("limits", {}))
    threads = settings.pop("threads", None)
    if threads:
        import torch

        torch.set_num_threads(threads)
    return create_app(build_service(settings.pop("model", None), settings.pop("weight_file", None), limits=limits,
                                    **settings))


def app_from_environment() -> FastAPI:
    """The app of one of several uvicorn worker processes, from ``$PYELMO_SERVE_SETTINGS``
    (written by ``pyelmo serve --workers N``)."""
    return app_from_settings(json.loads(os.environ["PYELMO_SERVE_SETTINGS"]))
