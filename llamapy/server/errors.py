"""OpenAI-shaped errors: ``{"error": {"code", "message", "type"}}``, for
every failure, including the ASGI stack's own (404, 405, validation); on
Anthropic's routes (``/v1/messages...``) Anthropic's shape instead,
``{"type": "error", "error": {"type", "message"}}``."""
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


_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                    503: "overloaded_error", 529: "overloaded_error"}
ANTHROPIC_PREFIX = "/v1/messages"


def error_body(status: int, message: str, code: Optional[str] = None, path: str = "") -> Dict[str, Any]:
    """The error object for a request to ``path`` (OpenAI's shape unless the path is Anthropic's)."""
    if path.startswith(ANTHROPIC_PREFIX):
        return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": message}}
    return {"error": {"code": code or status, "message": message, "type": _TYPES.get(status, "server_error")}}


def error_response(status: int, message: str, code: Optional[str] = None,
                   headers: Optional[Dict[str, str]] = None, path: str = "") -> JSONResponse:
    return JSONResponse(error_body(status, message, code, path), status_code=status, headers=headers)


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


# pybind11's words for arguments of the wrong type or range: the engine was
# handed a request value the server failed to check. Its text is a dump of
# C++ signatures, which says nothing to the client.
_BINDING_ERRORS = ("incompatible function arguments", "incompatible constructor arguments")

INTERNAL_MESSAGE = "internal error: the server could not answer this request (its log has the details)"


def public_error(exc: BaseException) -> "tuple[int, str, str]":
    """(status, message, code) a client is told for ``exc``: the HTTP answer of
    a route, or the error event that ends a stream. Request errors are 400s
    with the library's own message (it names the value); anything else is a
    500 whose message carries nothing from inside the server."""
    if isinstance(exc, APIError):
        return exc.status, exc.message, exc.code
    if isinstance(exc, UnicodeError):
        # A JSON string may hold a lone surrogate ("\ud800"), which no UTF-8 text has.
        return 400, ("the request has text that is not valid Unicode (a lone surrogate such as \\ud800); "
                     "send UTF-8 text"), "invalid_request_error"
    if isinstance(exc, (ValueError, TypeError)):  # llamapy's checks of request values
        text = str(exc)
        if any(b in text for b in _BINDING_ERRORS):
            logger.warning("a request value reached the engine unchecked: %s", text)
            return 400, "a request value has a type or range the engine cannot take", "invalid_request_error"
        return 400, text, "invalid_request_error"
    if isinstance(exc, NotImplementedError):
        return 501, str(exc), "not_supported"
    return 500, INTERNAL_MESSAGE, "internal_error"


def install(app: Any) -> None:
    from fastapi.exceptions import RequestValidationError

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.code, exc.headers, request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(400, validation_message(exc.errors()), "invalid_request_error", None, request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), None, getattr(exc, "headers", None), request.url.path)

    async def _public(request: Request, exc: Exception) -> JSONResponse:
        status, message, code = public_error(exc)
        if status == 500:
            logger.exception("internal error on %s", request.url.path, exc_info=exc)
        return error_response(status, message, code, None, request.url.path)

    # ValueError and TypeError: llamapy raises them for a request value it cannot take (a message's content ...).
    for kind in (ValueError, TypeError, NotImplementedError, Exception):
        app.add_exception_handler(kind, _public)
