"""Every error the server returns is one JSON object::

    {"status": 422, "error": "invalid_request", "message": "field 'top_k': ...", "field": "top_k"}

(``field`` when one field is at fault; ``endpoints`` when the path is not one this model serves). This module
turns FastAPI's validation errors, HTTP errors and the service's `RequestError` into that shape.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

ERROR_NAMES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    422: "invalid_request",
    500: "internal_error",
    503: "unavailable",
    504: "timeout",
}


def error_body(status: int, message: str, **extra: Any) -> dict[str, Any]:
    body = {"status": status, "error": ERROR_NAMES.get(status, "error"), "message": message}
    body.update({k: v for k, v in extra.items() if v is not None})
    return body


def error_response(status: int, message: str, headers: dict[str, str] | None = None, **extra: Any):
    return JSONResponse(error_body(status, message, **extra), status_code=status, headers=headers)


def _describe(err: dict[str, Any]) -> tuple[str, str | None]:
    """One validation error as (message, field)."""
    loc = [str(x) for x in err.get("loc", ()) if x != "body"]
    kind = err.get("type", "")
    if kind == "json_invalid":
        where = err.get("ctx", {}).get("error", "")
        return f"the body is not valid JSON ({where})", None
    field = ".".join(loc) or None
    if kind == "missing":
        return f"field '{field}' is required", field
    if kind == "extra_forbidden":
        return f"unknown field '{field}'", field
    if not loc and kind in ("model_attributes_type", "dict_type", "model_type"):
        return "the body must be a JSON object", None
    return (f"field '{field}': {err.get('msg', 'invalid')}" if field else err.get("msg", "invalid")), field


async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = list(exc.errors())
    message, field = _describe(errors[0]) if errors else ("invalid request", None)
    details = [_describe(e)[0] for e in errors]
    return error_response(422, message, field=field, details=details if len(details) > 1 else None)


async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
    status = exc.status_code
    if status == 404:
        service = getattr(request.app.state, "service", None)
        endpoints = [f"/v1/{e}" for e in service.endpoints] if service is not None else None
        path = request.url.path
        name = path[len("/v1/") :] if path.startswith("/v1/") else None
        if service is not None and name:
            message = service.describe_missing(name)
        else:
            message = f"no such path {path}"
        return error_response(404, message, endpoints=endpoints)
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    return error_response(status, detail, headers=getattr(exc, "headers", None))
