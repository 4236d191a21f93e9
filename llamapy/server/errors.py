"""OpenAI-shaped errors: ``{"error": {"code", "message", "type"}}``, for
every failure, including the ASGI stack's own (404, 405, validation)."""
from __future__ import annotations

import logging
from typing import Any, Dict, Optional

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

logger = logging.getLogger("llamapy.server")

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
          501: "not_supported_error", 503: "unavailable_error", 504: "timeout_error"}


class APIError(Exception):
    def __init__(self, status: int, message: str, code: Optional[str] = None,
                 headers: Optional[Dict[str, str]] = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers
        self.code = code or _TYPES.get(status, "server_error")


def error_body(status: int, message: str, code: Optional[str] = None) -> Dict[str, Any]:
    return {"error": {"code": code or status, "message": message, "type": _TYPES.get(status, "server_error")}}


def error_response(status: int, message: str, code: Optional[str] = None,
                   headers: Optional[Dict[str, str]] = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, code), status_code=status, headers=headers)


def bad_request(message: str, code: str = "invalid_request_error") -> APIError:
    return APIError(400, message, code)


def _field(loc: Any) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


def validation_message(errors: Any) -> str:
    msgs = []
    for e in errors[:5]:
        if e.get("type") == "json_invalid":
            msgs.append(f"the body is not valid JSON: {e.get('msg', '')}"
                        f" (at character {e.get('loc', ['', '?'])[-1]})")
        else:
            msgs.append(f"{_field(e.get('loc', ()))}: {e.get('msg', 'invalid')}")
    return "; ".join(msgs)


def install(app: Any) -> None:
    from fastapi.exceptions import RequestValidationError

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.code, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(400, validation_message(exc.errors()), "invalid_request_error")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), None, getattr(exc, "headers", None))

    @app.exception_handler(ValueError)
    async def _value(request: Request, exc: ValueError) -> JSONResponse:
        return error_response(400, str(exc), "invalid_request_error")

    @app.exception_handler(Exception)
    async def _other(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("internal error on %s", request.url.path, exc_info=exc)
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}", "internal_error")

    @app.exception_handler(TypeError)
    async def _type(request: Request, exc: TypeError) -> JSONResponse:
        # llamapy raises TypeError for a value of the wrong type inside a request (a message's content ...)
        return error_response(400, str(exc), "invalid_request_error")

    @app.exception_handler(NotImplementedError)
    async def _not_impl(request: Request, exc: NotImplementedError) -> JSONResponse:
        return error_response(501, str(exc), "not_supported")
