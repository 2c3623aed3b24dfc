"""The ASGI app of ``pyelmo serve``: the routes of the JSON API and the page at ``/``.

What it serves is :mod:`pyelmo.serve.service`; the endpoints' work is :mod:`pyelmo.serve.endpoints`;
error bodies and the body limit are :mod:`pyelmo.serve.errors`. Model work runs on the batcher's
thread, never on the event loop, so a slow or vanished client holds up no one else.
"""

from __future__ import annotations

import json
import os
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from pyelmo.serve.endpoints import Api
from pyelmo.serve.errors import AsciiJSONResponse, BodyLimit, install_error_handlers
from pyelmo.serve.schemas import ErrorResponse, Limits, TokenizeRequest
from pyelmo.serve.service import Service, build_service

#: The environment variable holding ``app_from_settings``'s settings (JSON) for worker processes.
SETTINGS_VARIABLE = "PYELMO_SERVE_SETTINGS"

#: The page's language (its ``<html lang>``, naming its message table in static/messages.js) for each
#: --lang that has one; the page is English for any other.
PAGE_LANGUAGES = {"zh": "zh-CN"}


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
    html = page_html(static, service.lang)

    @app.get("/", include_in_schema=False)
    async def page():
        return HTMLResponse(html)

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
            ("/v1/neighbours", api.neighbours, "A word's nearest contexts in the built-in sample corpus, per layer, "
             "and how each layer separates the word's senses there (`senses`: mean similarity of same-sense and "
             "different-sense pairs, and of this occurrence to each sense's contexts; null without two senses)."),
            ("/v1/predict", api.predict, "The biLM's top words for a blank: forward, backward and combined.")):
        app.add_api_route(path, endpoint, methods=["POST"], description=summary)

    return app


def _static_dir() -> Path:
    return Path(str(resources.files("pyelmo.serve") / "static"))


def page_html(static: Path, lang: str) -> str:
    """The page for a server tokenizing as ``lang``: index.html with its header (header.html, the browser
    export's header too: :func:`pyelmo.web.export.render_page`), in the language of ``PAGE_LANGUAGES``."""
    header = (static / "header.html").read_text(encoding="utf-8").rstrip("\n")
    html = (static / "index.html").read_text(encoding="utf-8").replace("{{header}}", header, 1)
    return html.replace('<html lang="en">', f'<html lang="{PAGE_LANGUAGES.get(lang, "en")}">', 1)


def app_from_settings(settings: dict) -> FastAPI:
    """The app from JSON-able settings: ``build_service``'s arguments, ``limits`` and ``quantization`` as dicts
    (``quantization``: absent or null for the plan's default), and ``threads`` (PyTorch's intra-op threads for
    this process)."""
    from pyelmo.runtime.precision import Quantization

    settings = dict(settings)
    limits = Limits(**settings.pop("limits", {}))
    rule = settings.pop("quantization", None)
    settings["quantization"] = None if rule is None else Quantization(**rule)
    threads = settings.pop("threads", None)
    if threads:
        import torch

        torch.set_num_threads(threads)
    return create_app(build_service(settings.pop("model", None), settings.pop("weight_file", None), limits=limits,
                                    **settings))


def app_from_environment() -> FastAPI:
    """The app of one of several uvicorn worker processes, from ``$PYELMO_SERVE_SETTINGS``
    (written by ``pyelmo.serve.process.run_server``)."""
    return app_from_settings(json.loads(os.environ[SETTINGS_VARIABLE]))
