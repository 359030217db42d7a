"""`Guard`: the ASGI layer in front of the app that every request passes.

- **API key** (when ``--api-key`` is set): ``/v1/*`` (except ``/v1/info``, which the page reads first) and
  ``/metrics`` need ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``; otherwise 401. So do POSTs to the
  Hugging Face inference API's paths (``POST /``, ``/embed``, ...). The page, the health checks and the docs
  stay open.
- **Body size**: a body over ``--max-body-bytes`` gets 413 before any of it is parsed (a declared
  Content-Length over the limit is refused without reading; a chunked body is counted as it arrives).
- **Metrics**: every response's status and latency (to its last byte, so streams count whole) per path.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from attnlab.serving.errors import error_response
from attnlab.serving.metrics import Metrics

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]

OPEN_PATHS = ("/v1/info",)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


class Guard:
    def __init__(
        self,
        app: Any,
        metrics: Metrics,
        max_body_bytes: int,
        api_key: str | None,
        known_paths: Collection[str],
        keyed_posts: Collection[str] = (),
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.api_key = api_key
        self.known_paths = set(known_paths)
        self.keyed_posts = set(keyed_posts)  # paths whose POSTs need the key (GET / is the page)

    def _authorised(self, scope: Scope) -> bool:
        given = _header(scope, b"x-api-key")
        auth = _header(scope, b"authorization")
        if given is None and auth is not None and auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        return given is not None and hmac.compare_digest(given.encode(), self.api_key.encode())

    def _needs_key(self, path: str, method: str) -> bool:
        return self.api_key is not None and (
            (path.startswith("/v1/") and path not in OPEN_PATHS)
            or path == "/metrics"
            or (method == "POST" and (path in self.keyed_posts or path.startswith("/pipeline/")))
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        label = path if path in self.known_paths else "other"
        started = time.perf_counter()
        status = 500

        async def send_tracked(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.metrics.in_flight += 1
        try:
            if self._needs_key(path, scope.get("method", "GET")) and not self._authorised(scope):
                response = error_response(
                    401, "this server needs an API key: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'",
                    headers={"WWW-Authenticate": "Bearer"},
                )  # fmt: skip
                await response(scope, receive, send_tracked)
                return
            body = await self._read_body(scope, receive)
            if body is None:
                response = error_response(
                    413, f"the request body is over {self.max_body_bytes:,} bytes (--max-body-bytes)"
                )
                await response(scope, receive, send_tracked)
                return
            sent = False

            async def replay() -> dict:
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()  # after the body: wait for the client to disconnect

            await self.app(scope, replay, send_tracked)
        finally:
            self.metrics.in_flight -= 1
            self.metrics.request(label, status, time.perf_counter() - started)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body, or None when it is over the limit."""
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            return None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)
