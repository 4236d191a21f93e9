"""Safe defaults: API keys compared in constant time, a body size limit,
and the image sources a request may name (no file reads outside --media-path,
no server-side fetches of remote URLs)."""
from __future__ import annotations

import hmac
import os
from typing import Any, Iterable, List, Optional, Sequence
from urllib.parse import unquote, urlparse

from .errors import APIError, error_body

PUBLIC_PATHS = {"/health", "/v1/health"}

DEFAULT_CORS_REGEX = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"


def load_keys(keys: Optional[Sequence[str]], key_file: Optional[str]) -> List[str]:
    out = [k for k in (keys or []) if k]
    if key_file:
        try:
            with open(key_file, encoding="utf-8") as f:
                out.extend(line.strip() for line in f if line.strip() and not line.startswith("#"))
        except OSError as e:
            raise ValueError(f"--api-key-file {key_file}: {e.strerror}") from None
        if not out:
            raise ValueError(f"--api-key-file {key_file}: the file holds no key")
    return out


def key_matches(given: str, keys: Iterable[str]) -> bool:
    ok = False
    for k in keys:  # every key is compared, so the time does not say which one matched
        ok |= hmac.compare_digest(given.encode("utf-8"), k.encode("utf-8"))
    return ok


def _send_json(send: Any, status: int, body: dict, headers: Sequence = ()) -> Any:
    import json

    data = json.dumps(body).encode()
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    hdrs.extend(headers)

    async def go() -> None:
        await send({"type": "http.response.start", "status": status, "headers": hdrs})
        await send({"type": "http.response.body", "body": data})

    return go()


class AuthMiddleware:
    """401 unless ``Authorization: Bearer KEY`` (or ``x-api-key``) is one of the keys."""

    def __init__(self, app: Any, keys: Sequence[str]) -> None:
        self.app, self.keys = app, list(keys)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.keys or scope["path"] in PUBLIC_PATHS or scope["method"] == "OPTIONS":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        auth = headers.get("authorization", "")
        given = auth[7:].strip() if auth.lower().startswith("bearer ") else headers.get("x-api-key", "")
        if given and key_matches(given, self.keys):
            return await self.app(scope, receive, send)
        msg = "invalid API key" if given else "no API key: send 'Authorization: Bearer KEY'"
        await _send_json(send, 401, error_body(401, msg, "invalid_api_key"),
                         [(b"www-authenticate", b"Bearer")])


class BodyLimitMiddleware:
    """413 for a body over ``limit`` bytes, by Content-Length or as it streams in."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for k, v in scope["headers"]:
            if k.lower() == b"content-length" and v.isdigit() and int(v) > self.limit:
                return await self._too_large(send)
        seen = 0
        started = False

        async def limited_receive() -> Any:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge()
            return msg

        async def tracking_send(msg: Any) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._too_large(send)

    async def _too_large(self, send: Any) -> None:
        await _send_json(send, 413, error_body(413, f"the request body is over the limit of {self.limit} bytes "
                                                    "(--max-body)", "request_too_large"))


class _TooLarge(Exception):
    pass


def check_image_url(url: Any, media_path: Optional[str]) -> str:
    """The image source to hand the library: a data: URI as it is, a file as
    its resolved path under --media-path (a relative path is relative to it).
    Raises 400/403 for a source the server must not read: a remote URL (no
    server-side fetches), or a file outside --media-path."""
    if not isinstance(url, str):
        raise APIError(400, "an image_url's url must be a string", "invalid_image_url")
    if url.startswith("data:"):
        return url
    parsed = urlparse(url)
    if parsed.scheme in ("http", "https"):
        raise APIError(400, "the server does not fetch remote image URLs; send the image as a data: URI",
                       "invalid_image_url")
    if parsed.scheme not in ("", "file"):
        raise APIError(400, f"unsupported image URL scheme {parsed.scheme!r}", "invalid_image_url")
    path = unquote(parsed.path) if parsed.scheme == "file" else url
    if not media_path:
        raise APIError(403, "image files are not readable through this server (start it with --media-path DIR)",
                       "media_path_forbidden")
    root = os.path.realpath(media_path)
    real = os.path.realpath(os.path.join(root, path) if not os.path.isabs(path) else path)
    if os.path.commonpath([root, real]) != root:
        raise APIError(403, f"image path {path!r} is outside --media-path", "media_path_forbidden")
    return real


def check_messages_media(messages: Any, media_path: Optional[str], has_projector: bool) -> Any:
    """``messages`` with every image source checked, and files given as
    their resolved paths (so the library reads exactly the file checked)."""
    out = []
    for i, m in enumerate(messages or []):
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list):
            out.append(m)
            continue
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "image_url":
                if not has_projector:
                    raise APIError(400, f"messages[{i}] has an image, but the server has no projector "
                                        "(start it with --mmproj FILE)", "images_not_supported")
                inner = part.get("image_url")
                url = check_image_url(inner.get("url") if isinstance(inner, dict) else inner, media_path)
                part = {**part, "image_url": {**(inner if isinstance(inner, dict) else {}), "url": url}}
            parts.append(part)
        out.append({**m, "content": parts})
    return out
