"""The API's error bodies and their handlers, and the request-body limit of ``pyelmo serve``.

Every error is a JSON body ``{"error": {"status": S, "field": F, "message": M}}``: 4xx for
anything the request got wrong (``field`` names the offending part, e.g. ``sentences[2]``),
413 for a body over the size limit (:class:`BodyLimit`, which also cancels the work of a
client that leaves before its answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("pyelmo.serve")


class ApiError(Exception):
    """A request the API refuses: HTTP ``status`` and the ``field`` at fault."""

    def __init__(self, status: int, field: str, message: str) -> None:
        super().__init__(message)
        self.status, self.field, self.message = status, field, message


class AsciiJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped (so that any string survives encoding) and no NaN."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def error_response(status: int, field: str | None, message: str, details: list | None = None) -> AsciiJSONResponse:
    body: dict[str, Any] = {"status": status, "field": field, "message": message}
    if details:
        body["details"] = details
    return AsciiJSONResponse({"error": body}, status_code=status)


def _field_name(loc: Sequence) -> str:
    """``("body", "sentences", 0, "list[str]", 2)`` -> ``"sentences[0][2]"`` (union tags dropped)."""
    parts = [p for p in loc[1:] if not (isinstance(p, str) and (p in _TYPE_TAGS or "[" in p))]
    name = ""
    for p in parts:
        name += f"[{p}]" if isinstance(p, int) else (f".{p}" if name else str(p))
    return name or "body"


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "function-after", "function-before"}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def apierror_response(request: Request, exc: ApiError):
        return error_response(exc.status, exc.field, exc.message)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        details = [{"field": _field_name(e.get("loc", ())), "message": str(e.get("msg", "invalid"))}
                   for e in errors[:10]]
        first = details[0] if details else {"field": "body", "message": "invalid request"}
        status = 400 if errors and errors[0].get("type") == "json_invalid" else 422
        if status == 400:
            first = {"field": "body", "message": "the body is not valid JSON"}
        return error_response(status, first["field"], first["message"], details if len(details) > 1 else None)

    @app.exception_handler(StarletteHTTPException)
    async def httperror_response(request: Request, exc: StarletteHTTPException):
        return error_response(exc.status_code, None, str(exc.detail))

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception):
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(500, None, "internal error (the server log has the details)")


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
        response = error_response(413, "body", f"the request body is larger than {self.max_bytes} bytes")
        await response(scope, receive, send)
