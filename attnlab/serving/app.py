"""The FastAPI application: ``create_app(service, settings)``.

Routes (only the ``/v1/`` endpoints the model serves are registered, so the OpenAPI docs at ``/docs`` and
``/openapi.json`` list exactly those; any other ``/v1/`` path is a 404 naming the ones it has):

- ``POST /v1/<endpoint>``: JSON in (`attnlab.serving.schemas`), JSON out; ``/v1/generate`` with
  ``"stream": true`` answers with server-sent events (``data: {"token", "text"}`` per new piece of text,
  then ``event: done`` with the whole answer, or ``event: error``);
- ``GET /v1/info``: the model and its endpoints (what the page builds its panels from);
- ``GET /health`` (the process answers), ``GET /ready`` (the model is loaded and warmed up; 503 before and
  during shutdown), ``GET /metrics`` (Prometheus text);
- ``GET /``: the web page, with its scripts and styles under ``/static/`` (all served from the package).

Data flow of a request: `limits.Guard` (API key, body size, metrics) -> FastAPI validation (422 naming the
field) -> `ModelService.prepare` on the event loop (mask present, tokens counted, 422 over the limit) ->
`DynamicBatcher.submit` (503 when the queue is full) -> a batch on the model thread
(`ModelService.run_batch`) -> JSON; a request not answered within ``timeout_s`` gets 504.
"""

import asyncio
import json
import logging
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from attnlab import __version__
from attnlab.serving.batching import DynamicBatcher, QueueFull
from attnlab.serving.continuous import ContinuousBatcher
from attnlab.serving.errors import error_response, http_error, validation_error
from attnlab.serving.hf_api import add_hf_routes, hf_paths
from attnlab.serving.limits import Guard
from attnlab.serving.metrics import Metrics
from attnlab.serving.openai_api import add_openai_routes, openai_paths
from attnlab.serving.schemas import REQUESTS
from attnlab.serving.service import ModelService, Prepared, RequestError
from attnlab.serving.settings import ServeSettings

STATIC = Path(__file__).parent / "static"
RETRY_AFTER_S = "1"
log = logging.getLogger("attnlab.serving")


def _failure(error: BaseException, timeout_s: float) -> JSONResponse:
    """The JSON error for what a request raised."""
    if isinstance(error, (asyncio.TimeoutError, TimeoutError)):
        return error_response(504, f"the request took longer than {timeout_s:g} s (--timeout-s)")
    if isinstance(error, QueueFull):
        return error_response(
            503, f"the server is busy: {error}; retry later", headers={"Retry-After": RETRY_AFTER_S}
        )
    if isinstance(error, RequestError):
        return error_response(error.status, str(error), field=error.field)
    if isinstance(error, ValueError):  # the pipeline refused this input (its message says why)
        return error_response(422, str(error))
    log.exception("request failed", exc_info=error)
    return error_response(500, f"internal error: {type(error).__name__}: {error}")


def add_docs(app: FastAPI) -> None:
    """Swagger UI at ``/docs`` with its script and stylesheet from the ``swagger-ui-bundle-v2`` package
    (FastAPI's own ``/docs`` loads them from a CDN: a blank page offline); without that package, FastAPI's."""
    from fastapi.openapi.docs import get_swagger_ui_html

    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        prefix = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5"
    else:
        app.mount("/docs-assets", StaticFiles(directory=swagger_ui_path), name="docs-assets")
        prefix = "/docs-assets"

    @app.get("/docs", include_in_schema=False)
    async def docs() -> Any:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url,
            title=f"{app.title}: API",
            swagger_js_url=f"{prefix}/swagger-ui-bundle.js",
            swagger_css_url=f"{prefix}/swagger-ui.css",
            swagger_favicon_url="/static/favicon.svg",
        )


def create_app(service: ModelService, settings: ServeSettings | None = None) -> FastAPI:
    """The application over ``service``: the model's ``/v1/`` endpoints, the status routes, the page."""
    settings = settings or ServeSettings()
    metrics = Metrics()
    # requests the server is handling that are not (or no longer) in the batcher: on their way to it, or
    # writing their answers (a client about to send its next request)
    batcher = DynamicBatcher(
        service.run_batch,
        settings.limits(),
        metrics,
        incoming=lambda: metrics.in_flight - batcher.depth() - batcher.running - batcher.generating(),
    )
    if service.kind == "gpt" and settings.continuous:  # generation joins one running decode batch
        limits = settings.limits()
        batcher.continuous = ContinuousBatcher(
            service, batcher.executor, limits.max_batch_size, limits.max_queue, metrics
        )
    app = FastAPI(
        title=f"attnlab: {service.directory.name}",
        version=__version__,
        description=f"{service.architecture} served by attnlab. Endpoints: {', '.join(service.endpoints)}.",
        lifespan=_lifespan(service, settings, batcher),
        docs_url=None,  # served below from the package, not from a CDN
        redoc_url=None,
    )
    app.state.service, app.state.settings, app.state.metrics, app.state.batcher = (
        service, settings, metrics, batcher,
    )  # fmt: skip
    app.state.ready = False
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(HTTPException, http_error)
    add_model_routes(app, service, batcher, settings)
    add_openai_routes(app, service, batcher, settings, _failure, metrics)
    add_hf_routes(app, service, batcher, settings, _failure, metrics)
    add_status_routes(app, service, batcher, settings, metrics)
    add_page(app)
    known = [f"/v1/{e}" for e in service.endpoints] + ["/v1/info", "/health", "/ready", "/metrics", "/"]
    known += openai_paths(service) + hf_paths(service)
    app.add_middleware(
        Guard, metrics=metrics, max_body_bytes=settings.max_body_bytes, api_key=settings.api_key,
        known_paths=known, keyed_posts=hf_paths(service),
    )  # fmt: skip
    return app


def _lifespan(service: ModelService, settings: ServeSettings, batcher: DynamicBatcher) -> Any:
    """Start the batcher and warm the model up before ``/ready`` says so; drain the queue at shutdown."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        await asyncio.get_running_loop().run_in_executor(batcher.executor, service.warm_up)
        app.state.ready = True
        yield
        app.state.ready = False  # /ready says so while in-flight requests finish
        await batcher.drain(settings.graceful_s)

    return lifespan


def add_model_routes(
    app: FastAPI, service: ModelService, batcher: DynamicBatcher, settings: ServeSettings
) -> None:
    """``POST /v1/<endpoint>`` for each endpoint the model serves; ``/v1/generate`` may stream."""

    async def answer(prepared: Prepared) -> JSONResponse:
        try:
            result = await asyncio.wait_for(batcher.submit(prepared), settings.timeout_s)
            result = service.finish(prepared, result)  # fill-mask decodes its texts here (event loop)
        except Exception as error:  # noqa: BLE001 - every failure becomes a JSON error
            return _failure(error, settings.timeout_s)
        return JSONResponse(result)

    def add_endpoint(name: str, model: type) -> None:
        async def endpoint(body: model) -> Any:  # type: ignore[valid-type]
            if name == "generate" and body.stream:
                return await stream_generate(service, batcher, settings, body)
            try:
                prepared = service.prepare(name, body)
            except RequestError as error:
                return _failure(error, settings.timeout_s)
            return await answer(prepared)

        app.post(f"/v1/{name}", name=name, summary=f"{name} ({service.architecture})")(endpoint)

    for name in service.endpoints:
        add_endpoint(name, REQUESTS[name])


async def stream_generate(
    service: ModelService, batcher: DynamicBatcher, settings: ServeSettings, body: Any
) -> Any:
    """``/v1/generate`` with ``"stream": true``: server-sent events, one per new piece of text, then
    ``event: done`` with the whole answer (or ``event: error``)."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[dict | None] = asyncio.Queue()
    try:
        prepared = service.prepare(
            "generate", body, emit=lambda event: loop.call_soon_threadsafe(events.put_nowait, event)
        )
        if batcher.depth() >= batcher.limits.max_queue:
            raise QueueFull(f"{batcher.depth()} requests are waiting")
    except (RequestError, QueueFull) as error:
        return _failure(error, settings.timeout_s)
    task = asyncio.ensure_future(asyncio.wait_for(batcher.submit(prepared), settings.timeout_s))
    # the answer's end queued after its pieces (emitted before it), so the stream awaits one queue only
    task.add_done_callback(lambda _: events.put_nowait(None))

    async def sse():
        try:
            while (event := await events.get()) is not None:
                yield f"data: {json.dumps(event, ensure_ascii=False)}\n\n"
            try:
                result = task.result()
            except Exception as error:  # noqa: BLE001
                body = json.loads(_failure(error, settings.timeout_s).body)
                yield f"event: error\ndata: {json.dumps(body)}\n\n"
            else:
                yield f"event: done\ndata: {json.dumps(result, ensure_ascii=False)}\n\n"
        finally:
            if not task.done():  # the client went away: its request is skipped or its result dropped
                task.cancel()

    return StreamingResponse(sse(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def add_status_routes(
    app: FastAPI, service: ModelService, batcher: DynamicBatcher, settings: ServeSettings, metrics: Metrics
) -> None:
    """``/v1/info`` (the model, its endpoints and limits), ``/health``, ``/ready``, ``/metrics``."""

    @app.get("/v1/info", summary="the model and the endpoints it serves")
    async def info() -> dict:
        limits = batcher.limits
        return {
            **service.info(),
            "auth_required": settings.api_key is not None,
            "limits": {
                "max_body_bytes": settings.max_body_bytes, "timeout_s": settings.timeout_s,
                "max_batch_tokens": limits.max_batch_tokens, "max_wait_ms": limits.max_wait_ms,
                "max_batch_size": limits.max_batch_size, "max_queue": limits.max_queue,
            },
        }  # fmt: skip

    @app.get("/health", summary="the process answers")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/ready", summary="the model is loaded and accepts requests")
    async def ready() -> Any:
        if not app.state.ready:
            return error_response(503, "not ready (starting or shutting down)")
        return {"status": "ready", "queue_depth": batcher.depth()}

    @app.get("/metrics", summary="Prometheus metrics", response_class=PlainTextResponse)
    async def prometheus() -> PlainTextResponse:
        metrics.queue_depth(batcher.depth())
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


def add_page(app: FastAPI) -> None:
    """The web page at ``/``, its scripts and styles under ``/static/``, the API docs at ``/docs``."""

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    add_docs(app)
