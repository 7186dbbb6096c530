"""Bearer-token check, request-body size limit and per-route metrics, as one ASGI middleware.

Pure ASGI rather than BaseHTTPMiddleware: it adds microseconds, not a task per request. The
body limit is enforced twice: on Content-Length before reading, and on the bytes actually
received (a chunked body cannot lie its way past it). Probes, docs and the kube-scheduler
extender verbs (kube-scheduler cannot send a bearer token) are not authenticated.
"""
from __future__ import annotations

import hmac
import os
import time
from pathlib import Path
from typing import Any

import orjson
from starlette.responses import JSONResponse

from ground.errors import ForesightError
from serving import metrics

OPEN_PATHS = ("/healthz", "/readyz", "/docs", "/docs/oauth2-redirect", "/openapi.json")
OPEN_PREFIXES = ("/scheduler/",)


def read_token(token_file: str | Path | None, env: str = "FORESIGHT_API_TOKEN") -> str | None:
    """The bearer token from a file (first line) or the environment; None disables auth."""
    if token_file:
        try:
            tok = Path(token_file).read_text().strip().splitlines()[0].strip()
        except (OSError, IndexError):
            raise ForesightError(f"cannot read a token from {token_file}") from None
        if not tok:
            raise ForesightError(f"token file {token_file} is empty")
        return tok
    return os.environ.get(env) or None


class ORJSONResponse(JSONResponse):
    """JSON through orjson (FastAPI's own class is deprecated); NaN becomes null."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


class _TooLarge(BaseException):
    """BaseException: FastAPI turns any Exception raised while it reads a body into a bare
    400, so an oversize chunked body would never reach the 413 below."""


class Guard:
    def __init__(self, app: Any, token: str | None = None,
                 max_body_bytes: int = 16 * 1024 * 1024) -> None:
        self.app, self.max_body = app, max_body_bytes
        self.expected = f"Bearer {token}".encode() if token else None

    async def _send_error(self, send: Any, status: int, error: str, extra: list | None = None
                          ) -> None:
        body = orjson.dumps({"error": error, "detail": None})
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode())] + (extra or [])
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        path = scope.get("path", "")
        status = [500]
        headers = dict(scope.get("headers") or [])

        async def _send(msg: dict) -> None:
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
            await send(msg)

        try:
            if self.expected is not None and path not in OPEN_PATHS \
                    and not path.startswith(OPEN_PREFIXES):
                if not hmac.compare_digest(headers.get(b"authorization", b""), self.expected):
                    await self._send_error(_send, 401, "missing or wrong bearer token",
                                           [(b"www-authenticate", b"Bearer")])
                    return
            length = headers.get(b"content-length")
            if length is not None and (not length.isdigit() or int(length) > self.max_body):
                await self._send_error(_send, 413, f"request body over {self.max_body} bytes")
                return
            seen = [0]

            async def _receive() -> dict:
                msg = await receive()
                if msg["type"] == "http.request":
                    seen[0] += len(msg.get("body", b""))
                    if seen[0] > self.max_body:
                        raise _TooLarge()
                return msg

            try:
                await self.app(scope, _receive, _send)
            except _TooLarge:
                await self._send_error(_send, 413, f"request body over {self.max_body} bytes")
        finally:
            route = scope.get("route")
            name = getattr(route, "path", None) or "unmatched"
            metrics.REQUESTS.labels(name, str(status[0])).inc()
            metrics.LATENCY.labels(name).observe(time.perf_counter() - t0)
