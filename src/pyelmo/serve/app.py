"""The ASGI app of ``pyelmo serve``: the JSON API, the page at ``/`` and their error handling.

Every error is a JSON body ``{"error": {"status": S, "field": F, "message": M}}``: 4xx for
anything the request got wrong (``field`` names the offending part, e.g. ``sentences[2]``),
413 for a body over the size limit. Model work runs on the batcher's thread, never on the
event loop, so a slow or vanished client holds up no one else.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from pyelmo.errors import InputError
from pyelmo.senses import find_word
from pyelmo.serve.batching import DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_WAIT, Batcher
from pyelmo.serve.neighbours import SampleCorpus
from pyelmo.serve.schemas import (EmbedRequest, ErrorResponse, Limits, NeighboursRequest, PredictRequest, Sentence,
                                  SimilarityRequest, TokenizeRequest)

log = logging.getLogger("pyelmo.serve")

#: Answers with more floats than this are rendered in a worker thread.
LARGE_ANSWER = 200_000

JSON_ROUNDING = "float32 values rounded to `decimals` decimal places (default 6); encoding=base64 gives them exactly"


class ApiError(Exception):
    """A request the API refuses: HTTP ``status`` and the ``field`` at fault."""

    def __init__(self, status: int, field: str, message: str) -> None:
        super().__init__(message)
        self.status, self.field, self.message = status, field, message


class AsciiJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped (so that any string survives encoding) and no NaN."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _error(status: int, field: str | None, message: str, details: list | None = None) -> AsciiJSONResponse:
    body: dict[str, Any] = {"status": status, "field": field, "message": message}
    if details:
        body["details"] = details
    return AsciiJSONResponse({"error": body}, status_code=status)


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

    @property
    def n_layers(self) -> int:
        return self.corpus.n_layers

    def close(self) -> None:
        self.batcher.close()


def build_service(model: str | os.PathLike | None = None, weight_file: str | os.PathLike | None = None, *,
                  batching: bool = True, max_wait: float = DEFAULT_MAX_WAIT,
                  max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS, limits: Limits | None = None,
                  cache_dir: str | os.PathLike | None = None) -> Service:
    """Load the model (default: the shipped one), its LM head when it has one, and the corpus vectors."""
    from pyelmo.embed import ElmoEmbedder
    from pyelmo.weights import model_fingerprint

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
    return Service(embedder, batcher, corpus, info, predictor, limits or Limits())


def _load_predictor(model):
    """The model's LM head (softmax + vocabulary), or None when the directory has none."""
    from pyelmo.errors import PyelmoError
    from pyelmo.predict import WordPredictor

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
    _install_error_handlers(app)
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

    @app.post("/v1/embed")
    async def embed(body: EmbedRequest) -> Response:
        """Per-token vectors of the chosen layers, their average or a scalar mix."""
        return await api.embed(body)

    @app.post("/v1/similarity")
    async def similarity(body: SimilarityRequest) -> dict:
        """Cosine similarity of one word across sentences, per layer and for the layer average."""
        return await api.similarity(body)

    @app.post("/v1/neighbours")
    async def neighbours(body: NeighboursRequest) -> dict:
        """A word's nearest contexts in the built-in sample corpus, per layer."""
        return await api.neighbours(body)

    @app.post("/v1/predict")
    async def predict(body: PredictRequest) -> dict:
        """The biLM's top words for a blank: forward, backward and combined."""
        return await api.predict(body)

    return app


def _static_dir() -> Path:
    return Path(str(resources.files("pyelmo.serve") / "static"))


class Api:
    """The endpoints' work, kept apart from routing."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.limits = service.limits

    # ------------------------------------------------------------------ input

    def tokens(self, sentence: Sentence, where: str) -> list[str]:
        """Validated tokens of a raw-text or pre-tokenized sentence."""
        from pyelmo.tokenize import tokenize

        limits = self.limits
        if isinstance(sentence, str):
            if len(sentence) > limits.max_chars:
                raise ApiError(422, where, f"longer than {limits.max_chars} characters")
            _check_text(sentence, where)
            tokens = tokenize(sentence)
        else:
            for j, token in enumerate(sentence):
                _check_text(token, f"{where}[{j}]")
                if not token.strip():
                    raise ApiError(422, f"{where}[{j}]", "a token must not be empty or only whitespace")
            tokens = list(sentence)
        if not tokens:
            raise ApiError(422, where, "the sentence has no tokens")
        if len(tokens) > limits.max_tokens:
            raise ApiError(422, where, f"{len(tokens)} tokens; at most {limits.max_tokens} per sentence")
        return tokens

    def sentences(self, sentences: Sequence[Sentence], name: str = "sentences") -> list[list[str]]:
        if len(sentences) > self.limits.max_sentences:
            raise ApiError(422, name, f"{len(sentences)} sentences; at most {self.limits.max_sentences} per request")
        return [self.tokens(s, f"{name}[{i}]") for i, s in enumerate(sentences)]

    def check_k(self, k: int) -> None:
        if k > self.limits.max_k:
            raise ApiError(422, "k", f"at most {self.limits.max_k}")

    def position(self, tokens: list[str], word: str | None, position: int | None, where: str) -> int:
        """The token index named by ``word`` (first case-insensitive match) or ``position``."""
        if (word is None) == (position is None):
            raise ApiError(422, "word", "give either `word` or `position`")
        if position is not None:
            if not 0 <= position < len(tokens):
                raise ApiError(422, where, f"position {position} is outside the sentence ({len(tokens)} tokens)")
            return position
        try:
            return find_word(tokens, word, where=where)
        except InputError as exc:
            raise ApiError(422, "word", str(exc)) from None

    # ------------------------------------------------------------------ endpoints

    async def embed(self, body: EmbedRequest) -> Response:
        tokens = self.sentences(body.sentences)
        n = self.service.n_layers
        layers = list(range(n)) if body.layers is None else body.layers
        if not 1 <= len(layers) <= n:
            raise ApiError(422, "layers", f"name 1 to {n} layers")
        for i, layer in enumerate(layers):
            if not -n <= layer < n:
                raise ApiError(422, f"layers[{i}]", f"layer {layer} does not exist; the model has {n} (0..{n - 1})")
        layers = [layer % n for layer in layers]
        weights = None
        if body.output == "mix":
            if body.mix_weights is None or len(body.mix_weights) != len(layers):
                raise ApiError(422, "mix_weights", f"output=mix needs one weight per chosen layer ({len(layers)})")
            w = np.asarray(body.mix_weights, dtype=np.float64)
            w = np.exp(w - w.max())
            weights = (w / w.sum()).astype(np.float32)
        elif body.mix_weights is not None:
            raise ApiError(422, "mix_weights", "mix_weights go with output=mix")

        vectors = await self.service.batcher.embed(tokens)

        def render() -> bytes:
            results = []
            for toks, v in zip(tokens, vectors):
                chosen = v[layers]
                if body.output == "average":
                    chosen = chosen.mean(axis=0)
                elif body.output == "mix":
                    chosen = body.gamma * np.tensordot(weights, chosen, axes=1)
                chosen = np.ascontiguousarray(chosen, dtype="<f4")
                item: dict[str, Any] = {"tokens": toks, "shape": list(chosen.shape)}
                if body.encoding == "base64":
                    item["base64"] = base64.b64encode(chosen.tobytes()).decode("ascii")
                else:
                    item["vectors"] = np.round(chosen.astype(np.float64), body.decimals).tolist()
                results.append(item)
            return AsciiJSONResponse(None).render({
                "model": self.service.model_info["id"], "layers": layers, "output": body.output,
                "dtype": "float32", "encoding": body.encoding,
                "rounding": JSON_ROUNDING if body.encoding == "json" else "exact little-endian float32",
                "sentences": results})

        # A large answer (up to 64 x 100 x 3 x 256 floats) is built off the event loop; a small one
        # is not worth the hand-over to another thread.
        size = sum(len(t) for t in tokens) * len(layers) * vectors[0].shape[-1]
        content = await asyncio.to_thread(render) if size > LARGE_ANSWER else render()
        return Response(content, media_type="application/json")

    async def similarity(self, body: SimilarityRequest) -> dict:
        from pyelmo.senses import cosine_matrix, with_average_layer

        tokens = self.sentences(body.sentences)
        if body.positions is not None and len(body.positions) != len(tokens):
            raise ApiError(422, "positions", f"one position per sentence ({len(tokens)})")
        if body.senses is not None and len(body.senses) != len(tokens):
            raise ApiError(422, "senses", f"one sense label per sentence ({len(tokens)})")
        positions = [self.position(t, body.word, None if body.positions is None else body.positions[i],
                                   f"sentences[{i}]" if body.positions is None else f"positions[{i}]")
                     for i, t in enumerate(tokens)]
        outputs = await self.service.batcher.embed(tokens)
        vectors = np.stack([out[:, p] for out, p in zip(outputs, positions)])  # (n, L, D)
        vectors, names = with_average_layer(vectors)
        sims = {name: cosine_matrix(vectors[:, k]) for k, name in enumerate(names)}
        n = len(tokens)
        pairs = [{"first": i, "second": j, "by_layer": {name: float(sims[name][i, j]) for name in names}}
                 for i in range(n) for j in range(i + 1, n)]
        result: dict[str, Any] = {
            "layers": names,
            "sentences": [{"tokens": t, "position": p, "word": t[p]} for t, p in zip(tokens, positions)],
            "pairs": pairs,
            "matrices": {name: sims[name].tolist() for name in names},
            "senses": None,
        }
        if body.senses is not None:
            result["senses"] = _sense_means(sims, names, body.senses)
        if body.project:
            result["projection"] = self._projection(vectors, names, tokens[0][positions[0]])
        return result

    def _projection(self, vectors: np.ndarray, names: list[str], word: str) -> dict:
        """2-D PCA per layer of the word in the request's sentences and in the sample corpus."""
        from pyelmo.demo import pca2

        corpus = self.service.corpus
        rows = corpus.contexts(word)
        unit = vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
        sample = corpus.unit_vectors(rows)  # (L + 1, m, D)
        points = {name: np.round(pca2(np.concatenate([unit[:, k], sample[k]])), 5).tolist()
                  for k, name in enumerate(names)}
        examples = [corpus.examples[corpus.rows[r][0]] for r in rows]
        return {"points": points, "sentences": len(vectors),
                "sample": [{"sense": corpus.sense_of(r) or "other", "sentence": " ".join(e.tokens)}
                           for r, e in zip(rows, examples)]}

    async def neighbours(self, body: NeighboursRequest) -> dict:
        self.check_k(body.k)
        tokens = self.tokens(body.sentence, "sentence")
        position = self.position(tokens, body.word, body.position, "position" if body.word is None else "sentence")
        corpus = self.service.corpus
        word = tokens[position]
        rows = corpus.contexts(word) if body.same_word else np.arange(len(corpus.rows))
        if len(rows) == 0:
            raise ApiError(422, "word", f"{word!r} does not occur in the sample corpus; "
                                        "same_word=false searches all of its tokens")
        (vectors,) = await self.service.batcher.embed([tokens])
        query = vectors[:, position]
        query = np.concatenate([query, query.mean(axis=0, keepdims=True)])
        names = [f"layer {i}" for i in range(corpus.n_layers)] + ["average"]
        found = corpus.nearest(query, rows, body.k, exclude=tokens)
        layers = {}
        for name, neighbours in zip(names, found):
            layers[name] = [{"sentence": " ".join(corpus.examples[nb.sentence].tokens), "position": nb.position,
                             "word": corpus.examples[nb.sentence].tokens[nb.position],
                             "sense": corpus.sense_of(nb.row), "similarity": nb.similarity} for nb in neighbours]
        return {"tokens": tokens, "position": position, "word": word,
                "corpus": {"sentences": len(corpus.examples), "contexts": int(len(rows))}, "layers": layers}

    async def predict(self, body: PredictRequest) -> dict:
        from pyelmo.predict import BLANK
        from pyelmo.tokenize import tokenize

        predictor = self.service.predictor
        if predictor is None:
            raise ApiError(404, "model", "the served model has no LM head (softmax and vocabulary); "
                                         "predictions need a model trained by `pyelmo train`")
        self.check_k(body.k)
        sentence = body.sentence
        if isinstance(sentence, str) and body.position is None:
            parts = sentence.split(BLANK)
            if len(parts) != 2:
                raise ApiError(422, "sentence", f"mark exactly one word to predict with {BLANK}")
            self.tokens(sentence, "sentence")  # the limits, on the whole text
            tokens = tokenize(parts[0]) + [BLANK] + tokenize(parts[1])
        else:
            tokens = self.tokens(sentence, "sentence")
        if len(tokens) > self.limits.max_tokens:
            raise ApiError(422, "sentence", f"{len(tokens)} tokens; at most {self.limits.max_tokens} per sentence")
        if body.position is None:
            if tokens.count(BLANK) != 1:
                raise ApiError(422, "sentence", f"mark exactly one word to predict with {BLANK}")
            position = tokens.index(BLANK)
        else:
            position = self.position(tokens, None, body.position, "position")
        found = await self.service.batcher.run(lambda: predictor.predict(tokens, position, body.k))

        def listed(pairs):
            return [{"word": w, "probability": p} for w, p in pairs]

        return {"tokens": tokens, "position": position, "forward": listed(found.forward),
                "backward": listed(found.backward), "combined": listed(found.combined)}


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(422, where, "not valid Unicode text (a lone surrogate)") from None


def _sense_means(sims: dict[str, np.ndarray], names: list[str], senses: list[str]) -> dict:
    """Mean similarity over pairs of sentences with the same sense label, and with different ones."""
    n = len(senses)
    within = [(i, j) for i in range(n) for j in range(i + 1, n) if senses[i] == senses[j]]
    across = [(i, j) for i in range(n) for j in range(i + 1, n) if senses[i] != senses[j]]

    def mean(pairs):
        if not pairs:
            return None
        return {name: float(np.mean([sims[name][i, j] for i, j in pairs])) for name in names}

    return {"within": mean(within), "across": mean(across), "within_pairs": len(within), "across_pairs": len(across)}


# ---------------------------------------------------------------------------- errors and limits


def _field_name(loc: Sequence) -> str:
    """``("body", "sentences", 0, "list[str]", 2)`` -> ``"sentences[0][2]"`` (union tags dropped)."""
    parts = [p for p in loc[1:] if not (isinstance(p, str) and (p in _TYPE_TAGS or "[" in p))]
    name = ""
    for p in parts:
        name += f"[{p}]" if isinstance(p, int) else (f".{p}" if name else str(p))
    return name or "body"


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "function-after", "function-before"}


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError):
        return _error(exc.status, exc.field, exc.message)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        details = [{"field": _field_name(e.get("loc", ())), "message": str(e.get("msg", "invalid"))}
                   for e in errors[:10]]
        first = details[0] if details else {"field": "body", "message": "invalid request"}
        status = 400 if errors and errors[0].get("type") == "json_invalid" else 422
        if status == 400:
            first = {"field": "body", "message": "the body is not valid JSON"}
        return _error(status, first["field"], first["message"], details if len(details) > 1 else None)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return _error(exc.status_code, None, str(exc.detail))

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception):
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return _error(500, None, "internal error (the server log has the details)")


class BodyLimit:
    """Reads a request body up to ``max_bytes`` before the app sees it (a larger one gets a 413), and
    cancels the request if the client disconnects before it is answered."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await self._too_large(scope, receive, send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left: nothing to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return await self._too_large(scope, receive, send)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False
        disconnected = asyncio.Event()

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            await disconnected.wait()
            return {"type": "http.disconnect"}

        async def watch():  # after the body, the next message says that the client left
            while (await receive())["type"] != "http.disconnect":
                pass
            disconnected.set()

        # A client that leaves before its answer cancels its request, and so its queued model work.
        answer = asyncio.ensure_future(self.app(scope, replay, send))
        watcher = asyncio.ensure_future(watch())
        await asyncio.wait({answer, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if answer.done():
            watcher.cancel()
            return answer.result()
        answer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await answer

    async def _too_large(self, scope, receive, send):
        response = _error(413, "body", f"the request body is larger than {self.max_bytes} bytes")
        await response(scope, receive, send)


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
