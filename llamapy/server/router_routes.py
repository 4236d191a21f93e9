"""Router mode's HTTP face: the model list and load/unload endpoints, and
the proxy that sends each OpenAI / Ollama request to the child of the model
its ``model`` field names (streams, SSE or NDJSON, passed through chunk by
chunk with httpx).

``?autoload=true|false`` on any request overrides ``--no-models-autoload``
for that request. Ollama's ``keep_alive`` (on /api/chat, /api/generate,
/api/embed) unloads the model once idle for that long (0: at once; negative:
never); without a prompt such a request only loads or unloads, as in Ollama.
OpenAI requests leave a model's keep_alive as it is (loaded until evicted). A request's model counts as in use (never evicted) from
the moment the request arrives until its response has been sent in full.
A child that dies mid-stream (its status line long sent) ends the stream as
the single-model server ends one that fails midway: an error event and
[DONE] (SSE), or an error line (NDJSON).
Not here: the model states and the room-making (router.py).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import time
from typing import Any, AsyncIterator, Callable, Dict, Optional

from fastapi import FastAPI, Request
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from . import errors, security
from .config import ConfigError, Settings, _bool
from .router import ModelSlot, Router

logger = logging.getLogger("llamapy.server.router")

# Child routes reached through the router, by the request's "model" field.
PROXY_POST = ("/v1/chat/completions", "/chat/completions", "/v1/completions", "/completions", "/v1/embeddings",
              "/embeddings", "/infill", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses", "/tokenize",
              "/detokenize", "/apply-template", "/api/chat", "/api/generate", "/api/embed", "/api/embeddings",
              "/api/show", "/v1/rerank", "/rerank", "/v1/reranking", "/reranking")
PROXY_GET = ("/props", "/slots", "/metrics")  # ?model=NAME
OLLAMA_KEEP_ALIVE = ("/api/chat", "/api/generate", "/api/embed", "/api/embeddings")  # requests that may carry keep_alive
_PASS_HEADERS = ("content-type", "cache-control", "retry-after", "x-accel-buffering")


def _autoload(request: Request) -> Optional[bool]:
    raw = request.query_params.get("autoload")
    if raw is None:
        return None
    try:
        return _bool(raw)
    except ConfigError:
        raise errors.bad_request(f"autoload: expected true or false, not {raw!r}") from None


async def _json_body(request: Request) -> "tuple[bytes, Dict[str, Any]]":
    raw = await request.body()
    try:
        body = json.loads(raw or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise errors.bad_request(f"the body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise errors.bad_request("the body must be a JSON object")
    return raw, body


class Proxy:
    def __init__(self, router: Router) -> None:
        import httpx

        self.router = router
        t = float(router.settings.timeout or 600)
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(t, connect=10.0), headers={
            "Authorization": f"Bearer {router.key}"})

    async def forward(self, request: Request, slot: ModelSlot, body: Optional[bytes],
                      on_done: Optional[Callable[[], None]] = None) -> Response:
        """Sends the request to the slot's child (slot.in_flight already
        counts it) and streams the answer back; releases the slot once the
        answer is sent or the client has gone."""
        import httpx

        released = [False]

        def release() -> None:
            if not released[0]:
                released[0] = True
                slot.in_flight -= 1
                slot.last_used = time.monotonic()
                if on_done is not None:
                    on_done()

        try:
            await self.router.ensure_loaded(slot, _autoload(request))
            proc = slot.proc
            query = [(k, v) for k, v in request.query_params.multi_items() if k != "autoload"]
            headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "accept")}
            req = self.client.build_request(request.method, slot.url + request.url.path, params=query,
                                            content=body, headers=headers)
            try:
                upstream = await self.client.send(req, stream=True)
            except httpx.HTTPError as e:
                raise errors.APIError(503, f"model {slot.name!r}'s server did not answer ({type(e).__name__}: "
                                      f"{e}); GET /models tells its state", "model_unavailable") from None
        except BaseException:
            release()
            raise

        fmt = _stream_format(upstream.headers.get("content-type", ""))

        async def chunks() -> AsyncIterator[bytes]:
            held = b""  # the start of an event (line) not yet complete: a cut stream ends between events
            try:
                async for chunk in upstream.aiter_raw():
                    if fmt is None:
                        yield chunk
                        continue
                    held += chunk
                    end = _complete_part(held, fmt)
                    if end:
                        yield held[:end]
                        held = held[end:]
                if held:
                    yield held
            except httpx.HTTPError as e:
                logger.warning("model %s: the stream broke off: %s", slot.name, e)
                if fmt is not None:  # the status line went out with the first chunk: say so in the stream
                    yield _stream_error(fmt, await self._broken_off(slot, proc, e), request.url.path)
            finally:
                await upstream.aclose()
                release()

        async def close() -> None:
            await upstream.aclose()
            release()

        out_headers = {k: v for k, v in upstream.headers.items() if k.lower() in _PASS_HEADERS}
        return StreamingResponse(chunks(), status_code=upstream.status_code, headers=out_headers,
                                 background=BackgroundTask(close))

    async def _broken_off(self, slot: ModelSlot, proc: Any, e: Exception) -> str:
        """Why a child's stream broke off: its exit (waited for a moment: the
        connection closes as the process dies), else the connection error."""
        import asyncio

        if proc is not None:
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), 2.0)
            except asyncio.TimeoutError:
                pass
        if proc is not None and proc.returncode is not None:
            why = self.router.exit_reason(slot, proc.returncode, loading=False)
        else:
            why = f"the connection broke ({type(e).__name__}: {e})"
        return f"model {slot.name!r} stopped mid-stream: {why}; the answer is incomplete"


def _stream_format(content_type: str) -> Optional[str]:
    """"sse" or "ndjson" for the child's streamed answers, None for others."""
    return {"text/event-stream": "sse", "application/x-ndjson": "ndjson"}.get(
        content_type.split(";")[0].strip().lower())


def _complete_part(buf: bytes, fmt: str) -> int:
    """The length of buf's complete events (SSE: each ends with a blank line) or lines (NDJSON)."""
    end = 0
    for sep in ((b"\n\n", b"\r\n\r\n") if fmt == "sse" else (b"\n",)):
        i = buf.rfind(sep)
        if i >= 0:
            end = max(end, i + len(sep))
    return end


def _stream_error(fmt: str, message: str, path: str = "") -> bytes:
    """The end the single-model server gives a stream that fails midway: an
    error event and [DONE] (openai_routes._sse), Anthropic's error event
    (anthropic_routes), or an error line (the Ollama NDJSON streams of
    ollama_routes)."""
    if fmt == "sse" and path.startswith(errors.ANTHROPIC_PREFIX):
        return f"event: error\ndata: {json.dumps(errors.error_body(503, message, None, path))}\n\n".encode()
    if fmt == "sse":
        event = json.dumps(errors.error_body(503, message, "model_unavailable"))
        return f"data: {event}\n\ndata: [DONE]\n\n".encode()
    return (json.dumps({"error": message}) + "\n").encode()


def _card(slot: ModelSlot) -> Dict[str, Any]:
    return slot.describe()


def _ollama_entry(slot: ModelSlot) -> Dict[str, Any]:
    path = slot.entry.path or ""
    try:
        st = os.stat(path)
        size, mtime = st.st_size, st.st_mtime
    except OSError:
        size, mtime = 0, 0.0
    return {"name": slot.name, "model": slot.name, "size": size, "digest": "",
            "modified_at": _dt.datetime.fromtimestamp(mtime, _dt.timezone.utc).isoformat(),
            "details": {"format": "gguf", "family": "", "parameter_size": "", "quantization_level": ""},
            "status": slot.state}


def create_router_app(settings: Settings, environ: Optional[Dict[str, str]] = None) -> FastAPI:
    from .app import AccessLog

    keys = security.load_keys(settings.api_key, settings.api_key_file)
    router = Router(settings, environ)
    proxy: Dict[str, Proxy] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import asyncio

        proxy["p"] = Proxy(router)
        logger.info("llamapy router: %d models (%s); --models-max %d, memory margin %d MiB, autoload %s",
                    len(router.slots), ", ".join(router.slots), router.models_max, router.margin // (1024 * 1024),
                    "on" if router.autoload else "off")
        for slot in router.slots.values():
            if slot.entry.load_on_startup:
                asyncio.ensure_future(_load_quietly(slot))
        reaper = asyncio.ensure_future(router.reap_expired())
        yield
        reaper.cancel()
        await router.shutdown()
        await proxy["p"].client.aclose()

    async def _load_quietly(slot: ModelSlot) -> None:
        try:
            await router.load(slot)
        except errors.APIError as e:
            logger.warning("load-on-startup %s: %s", slot.name, e.message)

    app = FastAPI(title="llamapy router", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.router = router
    errors.install(app)

    @app.get("/health")
    @app.get("/v1/health")
    async def health() -> Any:
        return {"status": "ok"}

    @app.get("/models")
    @app.get("/v1/models")
    async def models() -> Any:
        return {"object": "list", "data": [_card(s) for s in router.slots.values()]}

    @app.get("/api/tags")
    async def api_tags() -> Any:
        return {"models": [_ollama_entry(s) for s in router.slots.values()]}

    @app.get("/api/ps")
    async def api_ps() -> Any:
        def expires_at(s: ModelSlot) -> str:
            left = 100 * 365 * 86400.0 if s.expires is None else max(0.0, s.expires - time.monotonic())
            return _dt.datetime.fromtimestamp(time.time() + left, _dt.timezone.utc).isoformat()

        return {"models": [{**_ollama_entry(s), "size_vram": 0, "expires_at": expires_at(s)}
                           for s in router.slots.values() if s.state == "loaded"]}

    @app.get("/api/version")
    async def api_version() -> Any:
        from .ollama_routes import OLLAMA_VERSION

        return {"version": OLLAMA_VERSION}

    @app.post("/models/load")
    async def load(request: Request) -> Any:
        _, body = await _json_body(request)
        slot = router.slot(body.get("model"))
        if slot.state == "failed" and not slot.entry.problem:
            slot.state, slot.load_failed = "unloaded", False  # an explicit load retries a failed one
        await router.ensure_loaded(slot, autoload=True)
        return {"success": True, **_card(slot)}

    @app.post("/models/unload")
    async def unload(request: Request) -> Any:
        _, body = await _json_body(request)
        slot = router.slot(body.get("model"))
        await router.unload(slot, reason="unloaded by POST /models/unload")
        return {"success": True, **_card(slot)}

    async def proxied_post(request: Request) -> Response:
        raw, body = await _json_body(request)
        name = body.get("model")
        if name is None and request.url.path == "/api/show":
            name = body.get("name")  # older Ollama clients
        slot = router.slot(name)
        path = request.url.path
        if path in OLLAMA_KEEP_ALIVE and body.get("keep_alive") is not None:
            from .ollama_routes import parse_keep_alive

            keep = parse_keep_alive(body["keep_alive"])
            if path != "/api/embed" and not body.get("prompt") and not body.get("messages"):
                return await _ollama_load_or_unload(request, slot, str(name), keep)
            on_done: Optional[Callable[[], None]] = lambda: router.keep_alive(slot, keep)  # noqa: E731
        else:
            on_done = None
        slot.in_flight += 1  # from here on the model is in use: never evicted
        return await proxy["p"].forward(request, slot, raw, on_done)

    async def _ollama_load_or_unload(request: Request, slot: ModelSlot, name: str, keep: Optional[float]) -> Any:
        """Ollama's requests without a prompt: keep_alive 0 unloads the model,
        any other value loads it and keeps it that long."""
        if keep == 0:
            if slot.in_flight:
                router.keep_alive(slot, 0)  # once its requests are done
            else:
                async with router.lock:
                    await router.unload(slot, reason="unloaded by keep_alive 0")
            reason = "unload"
        else:
            await router.ensure_loaded(slot, _autoload(request))
            router.keep_alive(slot, keep)
            reason = "load"
        out: Dict[str, Any] = {"model": name, "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(),
                               "done": True, "done_reason": reason}
        if request.url.path == "/api/chat":
            out["message"] = {"role": "assistant", "content": ""}
        else:
            out["response"] = ""
        return out

    async def proxied_get(request: Request) -> Response:
        slot = router.slot(request.query_params.get("model"))
        slot.in_flight += 1
        return await proxy["p"].forward(request, slot, None)

    for path in PROXY_POST:
        app.add_api_route(path, proxied_post, methods=["POST"])
    for path in PROXY_GET:
        app.add_api_route(path, proxied_get, methods=["GET"])

    # The single-model server's checks (Host, Origin, body limit, key): loading and
    # unloading models is state a web page must not change either.
    security.install_middleware(app, settings, keys)
    app.add_middleware(AccessLog)
    return app

