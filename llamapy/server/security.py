"""Safe defaults: API keys compared in constant time, a body size limit,
the Host names and browser origins the server answers (DNS rebinding and
cross-site requests refused), and the image sources a request may name (no
file reads outside --media-path, no server-side fetches of remote URLs).

``install_middleware`` puts the checks on an app; the single-model server
and the router both use it, so both answer the same requests."""
from __future__ import annotations

import hmac
import ipaddress
import os
import socket
from typing import Any, Iterable, List, Optional, Sequence
from urllib.parse import unquote, urlparse

from starlette.middleware.cors import CORSMiddleware

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
        await _send_json(send, 401, error_body(401, msg, "invalid_api_key", scope["path"]),
                         [(b"www-authenticate", b"Bearer")])


class BodyLimitMiddleware:
    """413 for a body over ``limit`` bytes, by Content-Length or as it streams
    in (a chunked body has no Content-Length)."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for k, v in scope["headers"]:
            if k.lower() == b"content-length" and v.isdigit() and int(v) > self.limit:
                return await self._too_large(send, scope["path"])
        seen = 0
        started = answered = False

        async def limited_receive() -> Any:
            nonlocal seen, answered
            if answered:
                return {"type": "http.disconnect"}
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit and not answered:
                    # Answered here, not by raising: the app catches what its body read
                    # raises (FastAPI makes it a 400, a catch-all handler a 500). The app
                    # then reads on as if the client had gone, and its own answer is dropped.
                    if not started:
                        await self._too_large(send, scope["path"])
                        answered = True
                    return {"type": "http.disconnect"}
            return msg

        async def tracking_send(msg: Any) -> None:
            nonlocal started
            if answered:
                return
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except Exception:
            if not answered:  # after the 413, the app's complaint about the cut body is noise
                raise

    async def _too_large(self, send: Any, path: str) -> None:
        await _send_json(send, 413, error_body(413, f"the request body is over the limit of {self.limit} bytes "
                                                    "(--max-body)", "request_too_large", path))


def _header(scope: Any, name: bytes) -> Optional[str]:
    for k, v in scope["headers"]:
        if k.lower() == name:
            return v.decode("latin-1")
    return None


def _host_name(value: str) -> str:
    """The name in a Host header or an --allowed-hosts entry: lower case,
    without the port, the IPv6 brackets or a final dot."""
    v = value.strip().lower()
    if v.startswith("["):
        end = v.find("]")
        v = v[1:end] if end > 0 else v[1:]
    elif v.count(":") == 1:  # name:port (an IPv6 address without brackets has several colons)
        v = v.split(":")[0]
    return v.rstrip(".")


def _address(name: str) -> Any:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def _is_loopback(name: str) -> bool:
    if name == "localhost":
        return True
    ip = _address(name)
    if ip is not None and ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip is not None and ip.is_loopback


class HostGuard:
    """403 unless the request's Host names this server. DNS rebinding points a
    name the attacker owns at 127.0.0.1 (or the LAN address): the victim's
    browser then sends requests to the server from the attacker's page, same-
    origin as far as the browser knows, with the attacker's name as Host.

    Always accepted: loopback names (localhost, 127/8, [::1], any port) and
    the ``allowed`` names (--allowed-hosts; '*' accepts any Host). Bound to
    a non-loopback address, also that address and this machine's host name;
    bound to every interface (0.0.0.0, ::), any address literal (a rebinding
    attack needs a DNS name). A request without Host (HTTP/1.0) is not a
    browser's and passes."""

    def __init__(self, app: Any, bind_host: str, allowed: Sequence[str] = ()) -> None:
        self.app = app
        entries = [h.strip() for h in allowed if h.strip()]
        self.any_host = "*" in entries
        self.names = {_host_name(h) for h in entries if h != "*"}
        bind = _host_name(bind_host or "")
        bind_ip = _address(bind)
        self.any_address = bind == "" or (bind_ip is not None and bind_ip.is_unspecified)
        if not _is_loopback(bind):
            self.names |= {bind, socket.gethostname().lower()}
        self.names.discard("")

    def allows(self, host: str) -> bool:
        name = _host_name(host)
        if self.any_host or _is_loopback(name) or name in self.names:
            return True
        return self.any_address and _address(name) is not None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        host = _header(scope, b"host")
        if host is None or self.allows(host):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":  # no JSON answer on a socket: refuse the handshake
            return await send({"type": "websocket.close", "code": 1008})
        await _send_json(send, 403, error_body(
            403, f"host {host!r} is not allowed: this server answers requests addressed to its own names only "
                 "(a page on another name could be DNS rebinding); to accept it, start the server with "
                 "--allowed-hosts NAME (or '*')", "host_not_allowed", scope.get("path", "")))


class OriginGuard(CORSMiddleware):
    """CORS (preflights answered, allowed origins echoed), and 403 for any
    other request that carries an Origin CORS does not allow. A browser sends
    "simple" requests (a text/plain POST, a GET) from any page without a
    preflight, and CORS only hides the answer from the page: without this,
    any web site could load and unload models or run prompts. Requests
    without Origin (curl, SDKs) pass. The allowed origins are CORS's own
    (``is_allowed_origin``): one definition for both."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            origin = _header(scope, b"origin")
            preflight = scope["method"] == "OPTIONS" and _header(scope, b"access-control-request-method") is not None
            if origin is not None and not preflight and not self.is_allowed_origin(origin):
                return await _send_json(send, 403, error_body(
                    403, f"origin {origin!r} is not allowed: requests from web pages are accepted only from the "
                         "allowed origins (--cors-origins)", "origin_not_allowed", scope["path"]))
        await super().__call__(scope, receive, send)


def install_middleware(app: Any, settings: Any, keys: Sequence[str]) -> None:
    """The checks every request passes, outermost first: its Host, its Origin
    (with CORS: preflights are answered before the key check), the body
    limit (before any route reads), the API key. Starlette runs the
    middleware added last first."""
    app.add_middleware(AuthMiddleware, keys=keys)
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_body)
    origins = settings.cors_origins
    allowed = {"allow_origins": origins} if origins else {"allow_origin_regex": DEFAULT_CORS_REGEX}
    app.add_middleware(OriginGuard, allow_methods=["*"], allow_headers=["*"], **allowed)
    app.add_middleware(HostGuard, bind_host=settings.host, allowed=settings.allowed_hosts or ())


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
