"""Serving a model over HTTP (``attnlab serve``): a FastAPI app with dynamic batching, limits, metrics and a
web page with an attention view.

Modules: `schemas` (request bodies), `service` (what a model directory serves; batches through the
library's pipelines), `batching` (the dynamic batcher: an asyncio queue and one model thread), `limits`
(API key, body size, request metrics), `errors` (one JSON error shape), `metrics` (Prometheus text),
`settings`, `app` (routes), `server` (uvicorn, foreground or on a thread), ``static/`` (the page:
``index.html``, ``app.js``, ``style.css``, ``attention.js``; plain files, no CDN, no build step).

FastAPI and uvicorn are the optional extra ``attnlab[serve]``; importing this package does not need them,
`create_app` does.
"""

from __future__ import annotations

from typing import Any


def create_app(*args: Any, **kwargs: Any) -> Any:
    from attnlab.serving.app import create_app as build

    return build(*args, **kwargs)


def load_service(*args: Any, **kwargs: Any) -> Any:
    from attnlab.serving.service import load_service as load

    return load(*args, **kwargs)


__all__ = ["create_app", "load_service"]
