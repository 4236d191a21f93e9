"""Ollama's native API (/api/*), so that Ollama clients work unchanged:
NDJSON streaming (the default, as in Ollama), ``options``, ``format``
("json" or a JSON schema), ``keep_alive`` and ``think`` (a reasoning
model's thinking comes back in ``thinking``, as Ollama returns it)."""
from __future__ import annotations

import asyncio
import base64
import datetime as _dt
import json
import logging
import math
import re
import time
from typing import Any, Callable, Dict, List, Optional, Union

from fastapi import APIRouter, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response, StreamingResponse

from ..gguf_file import model_file_bytes
from . import work
from .errors import APIError, bad_request, public_error
from .openai_routes import check_messages, check_sampling, check_stop, check_tools
from .runner import Cancelled
from .security import check_messages_media

logger = logging.getLogger("llamapy.server")


class _JSONBodyRoute(APIRoute):
    """A route that reads its body as JSON whatever the Content-Type says, as
    Ollama does: its docs' ``curl .../api/generate -d '{...}'`` sends
    application/x-www-form-urlencoded. A body that is not JSON stays a 400
    ("the body is not valid JSON")."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def as_json(request: Request) -> Response:
            if request.method == "POST":
                headers = [(k, v) for k, v in request.scope["headers"] if k.lower() != b"content-type"]
                request.scope["headers"] = headers + [(b"content-type", b"application/json")]
                request.__dict__.pop("_headers", None)  # Starlette caches the headers it has read
            return await handler(request)
        return as_json


router = APIRouter(route_class=_JSONBodyRoute)

OLLAMA_VERSION = "0.6.0"  # the API version these routes follow

_OPTION_MAP = {"num_predict": "max_tokens", "temperature": "temperature", "top_k": "top_k", "top_p": "top_p",
               "min_p": "min_p", "typical_p": "typical_p", "seed": "seed", "stop": "stop",
               "repeat_penalty": "repeat_penalty", "presence_penalty": "presence_penalty",
               "frequency_penalty": "frequency_penalty", "mirostat": "mirostat_mode", "mirostat_tau": "mirostat_tau",
               "mirostat_eta": "mirostat_eta"}
# Ollama's default temperature, for /api/chat too (where the library's chat default is 0.2).
OLLAMA_TEMPERATURE = 0.8
_INT_OPTIONS = {"num_predict", "top_k", "seed", "mirostat"}
_NUMBER_OPTIONS = set(_OPTION_MAP) - _INT_OPTIONS - {"stop"}
_OPTIONS_IGNORED = {"num_keep", "repeat_last_n", "penalize_newline", "numa", "num_batch", "num_gpu", "main_gpu",
                    "use_mmap", "num_thread", "low_vram", "vocab_only", "use_mlock", "tfs_z"}


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class ChatBody(_Body):
    model: str = ""
    messages: List[Dict[str, Any]] = Field(default_factory=list)
    tools: Optional[List[Dict[str, Any]]] = None
    format: Optional[Union[str, Dict[str, Any]]] = None
    options: Optional[Dict[str, Any]] = None
    stream: bool = True
    keep_alive: Optional[Union[str, int, float]] = None
    think: Optional[Union[bool, str]] = None


class GenerateBody(_Body):
    model: str = ""
    prompt: str = ""
    suffix: Optional[str] = None
    system: Optional[str] = None
    images: Optional[List[str]] = None
    format: Optional[Union[str, Dict[str, Any]]] = None
    options: Optional[Dict[str, Any]] = None
    stream: bool = True
    raw: bool = False
    keep_alive: Optional[Union[str, int, float]] = None
    template: Optional[str] = None
    context: Optional[List[int]] = None
    think: Optional[Union[bool, str]] = None


class EmbedBody(_Body):
    model: str = ""
    input: Union[str, List[str]]
    # Ollama cuts over-long inputs unless told false; here an input over the
    # model's limit is a 400 unless the client asks for the cut (true).
    truncate: Optional[bool] = None
    options: Optional[Dict[str, Any]] = None
    keep_alive: Optional[Union[str, int, float]] = None


class EmbeddingsBody(_Body):
    """The older /api/embeddings: one ``prompt``, one ``embedding``."""
    model: str = ""
    prompt: str = ""
    options: Optional[Dict[str, Any]] = None
    keep_alive: Optional[Union[str, int, float]] = None


class ShowBody(_Body):
    model: str = Field("", validation_alias="model")
    name: Optional[str] = None


_DURATION = re.compile(r"(-?\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
# Ollama's keep_alive is a Go time.Duration: int64 nanoseconds, about 292 years.
# Longer is not a duration Ollama takes (and far past what a date can say).
KEEP_ALIVE_MAX_S = (2 ** 63 - 1) / 1e9


def parse_keep_alive(value: Any) -> Optional[float]:
    """Seconds to keep the model (None: forever, for a negative value), as
    Ollama reads keep_alive: a number of seconds or a Go duration string
    ("5m", "1h30m"). NaN, infinities and durations over KEEP_ALIVE_MAX_S are
    400s here, so that no later use (/api/ps's expiry date) can fail on them."""
    if value is None:
        return 300.0
    if isinstance(value, bool):
        raise bad_request("keep_alive must be a duration string or a number of seconds")
    if isinstance(value, (int, float)):
        secs = float(value)
    else:
        text = value.strip()
        try:
            secs = float(text)
        except ValueError:
            pos, secs = 0, 0.0
            sign = -1.0 if text.startswith("-") else 1.0
            body = text.lstrip("+-")
            for m in _DURATION.finditer(body):
                if m.start() != pos:
                    break
                secs += float(m.group(1)) * _UNIT[m.group(2)]
                pos = m.end()
            if pos != len(body) or not body:
                raise bad_request(f"keep_alive: {value!r} is not a duration (such as '5m', '1h', '30s', 0, -1)") \
                    from None
            secs *= sign
    if not math.isfinite(secs):
        raise bad_request(f"keep_alive: {value!r} is not a finite duration")
    if secs > KEEP_ALIVE_MAX_S:
        raise bad_request(f"keep_alive: {value!r} is over the longest duration Ollama takes (about 292 years, "
                          f"{KEEP_ALIVE_MAX_S:.0f} s); a negative value keeps the model loaded for good")
    return None if secs < 0 else secs


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _options(state: Any, options: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """Ollama's options under the library's names, each checked by the check
    the OpenAI routes use for the same field. ``max_tokens`` is always set:
    num_predict -1 or -2 (Ollama's "until the context is full"), 0 or none
    is None, which --max-tokens-limit caps (ServerState.cap_generation)."""
    out: Dict[str, Any] = {}
    for key, value in (options or {}).items():
        if key in _OPTION_MAP:
            out[_OPTION_MAP[key]] = value
        elif key == "num_ctx":
            n_ctx = state.request_limit()
            if not isinstance(value, int) or value > n_ctx:
                raise bad_request(f"options.num_ctx is {value!r}; this server's context is {n_ctx} tokens "
                                  "(set it with -c at startup)")
        elif key not in _OPTIONS_IGNORED:
            raise bad_request(f"options.{key} is not a known option")
        if key in _INT_OPTIONS and (not isinstance(value, int) or isinstance(value, bool)):
            raise bad_request(f"options.{key} must be an integer")
        if key in _NUMBER_OPTIONS and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            raise bad_request(f"options.{key} must be a number")
    out["max_tokens"] = state.max_tokens(out.get("max_tokens"), "options.num_predict", unlimited=(-1, -2, 0))
    if "stop" in out:
        out["stop"] = check_stop(out["stop"], "options.stop")
    check_sampling(out, "options.")
    return out


_THINK_LEVELS = ("low", "medium", "high")


def _think(think: Any) -> Dict[str, Any]:
    """Ollama's ``think`` as the template variables reasoning templates read:
    true/false is ``enable_thinking`` (Qwen3, GLM, DeepSeek-V3.1), a level is
    gpt-oss's ``reasoning_effort``."""
    if think is None:
        return {}
    if isinstance(think, bool):
        return {"enable_thinking": think}
    if think in _THINK_LEVELS:
        return {"reasoning_effort": think}
    raise bad_request(f"think must be true, false or one of {', '.join(_THINK_LEVELS)}")


def _thinking(message: Dict[str, Any]) -> Dict[str, Any]:
    """A chat message's or delta's reasoning as Ollama's ``thinking`` field (or nothing)."""
    return {"thinking": message["reasoning_content"]} if message.get("reasoning_content") else {}


def _format(fmt: Any) -> Optional[Dict[str, Any]]:
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return {"type": "json_object"}
    if isinstance(fmt, dict):
        return {"type": "json_object", "schema": fmt}
    raise bad_request("format must be 'json' or a JSON schema object")


def _messages(messages: List[Dict[str, Any]], has_projector: bool,
              media_path: Optional[str] = None) -> List[Dict[str, Any]]:
    """Ollama messages (``images``: base64 strings) -> OpenAI-shaped ones."""
    # Ollama's tool calls are OpenAI's without "type" and "id", the arguments an object: the same check.
    check_messages(messages)
    out = []
    for i, m in enumerate(messages):
        images = m.get("images") or []
        msg = {k: v for k, v in m.items() if k != "images"}
        if not isinstance(images, list):
            raise bad_request(f"messages[{i}].images must be a list of base64 strings")
        if images:
            if not has_projector:
                raise bad_request(f"messages[{i}] has images, but the server has no projector (--mmproj)")
            parts: List[Dict[str, Any]] = [{"type": "text", "text": m.get("content") or ""}]
            for img in images:
                if not isinstance(img, str):
                    raise bad_request(f"messages[{i}].images: base64 strings are required")
                try:
                    base64.b64decode(img, validate=True)
                except ValueError:
                    raise bad_request(f"messages[{i}].images: not valid base64") from None
                parts.append({"type": "image_url", "image_url": {"url": "data:image/png;base64," + img}})
            msg["content"] = parts
        if msg.get("tool_calls"):
            msg["tool_calls"] = [{"id": f"call_{i}_{j}", "type": "function",
                                  "function": {"name": c["function"]["name"],
                                               "arguments": _arguments_json(c["function"].get("arguments"))}}
                                 for j, c in enumerate(msg["tool_calls"])]
        out.append(msg)
    # Content given as OpenAI parts gets the same image-source rules as /v1.
    return check_messages_media(out, media_path, has_projector)


def _arguments_json(args: Any) -> str:
    """A tool call's arguments as OpenAI's JSON string (Ollama sends an object)."""
    return args if isinstance(args, str) else json.dumps(args if args is not None else {})


def _durations(t0: float, job: Any, usage: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    now = time.monotonic()
    start = job.t_start or t0
    usage = usage or {}
    return {"total_duration": int((now - t0) * 1e9), "load_duration": 0,
            "prompt_eval_count": usage.get("prompt_tokens", 0), "prompt_eval_duration": 0,
            "eval_count": usage.get("completion_tokens", 0), "eval_duration": int((now - start) * 1e9)}


def _ndjson(gen: Any, job: Any) -> StreamingResponse:
    async def lines() -> Any:
        watcher = asyncio.ensure_future(_cancel_on_shutdown(job))
        try:
            async for obj in gen:
                yield json.dumps(obj) + "\n"
        finally:
            watcher.cancel()
    return StreamingResponse(lines(), media_type="application/x-ndjson")


async def _cancel_on_shutdown(job: Any) -> None:
    """Cancel the job when uvicorn is told to exit (SIGTERM), so that an open
    NDJSON stream ends with an error line instead of being cut after the
    graceful-shutdown timeout. sse-starlette's flag is the one place that
    learns of the signal (it wraps uvicorn's handler)."""
    from sse_starlette.sse import AppStatus

    while not AppStatus.should_exit:
        await asyncio.sleep(0.25)
    job.cancel("shutdown")


def _tool_calls(message: Dict[str, Any]) -> Optional[List[Dict[str, Any]]]:
    calls = message.get("tool_calls")
    if not calls:
        return None
    out = []
    for c in calls:
        args = c["function"].get("arguments") or "{}"
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except json.JSONDecodeError:
            args = {}
        out.append({"function": {"name": c["function"]["name"], "arguments": args}})
    return out


def _stream_error(state: Any, job: Any, e: Exception) -> str:
    """The error line's text for a stream that fails midway (as the OpenAI
    routes' error event says it): the stream ends with it, never cut."""
    err = state.cancel_error(job, e) if isinstance(e, Cancelled) else e
    status, message, _ = public_error(err)
    if status == 500:
        logger.error("a stream failed: %s: %s", type(err).__name__, err, exc_info=err)
    return message


def _record_keep_alive(state: Any, keep_alive: Any) -> None:
    secs = parse_keep_alive(keep_alive)
    # One model, loaded for the server's life: keep_alive is parsed and
    # reported by /api/ps; unloading comes with router mode (not built yet).
    state.keep_alive = secs
    state.keep_alive_set = time.time()


class _StreamEnd:
    """What the end of an OpenAI-shaped stream said: the finish reason and the usage."""

    def __init__(self) -> None:
        self.finish, self.usage = "stop", None


async def _stream_choices(state: Any, job: Any, end: _StreamEnd) -> Any:
    """The first choice of each chunk of job's OpenAI-shaped stream (what the
    Ollama streams are made of); the finish reason and usage go into end."""
    async for chunk in state.stream(job):
        if chunk.get("usage"):
            end.usage = chunk["usage"]
        if not chunk.get("choices"):
            continue
        ch = chunk["choices"][0]
        if ch.get("finish_reason"):
            end.finish = ch["finish_reason"]
        yield ch


@router.post("/api/chat")
async def api_chat(body: ChatBody, request: Request) -> Any:
    state = request.app.state.server
    state.require_ready()
    state.require_generator()
    _record_keep_alive(state, body.keep_alive)
    if not body.messages:  # Ollama: an empty chat loads the model and answers done
        return {"model": body.model or state.model_name, "created_at": _now(),
                "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "load"}
    opts = _options(state, body.options)
    msgs = _messages(body.messages, bool(state.settings.mmproj), state.settings.media_path)
    check_tools(body.tools)
    params = dict(messages=msgs, tools=body.tools,
                  response_format=_format(body.format), model=state.model_name, stream=body.stream,
                  reasoning_format=state.settings.reasoning_format, **{"temperature": OLLAMA_TEMPERATURE, **opts})
    t0 = time.monotonic()
    job, _ = await state.start_job(state.cap_generation(work.chat_work(params, _think(body.think)), params))
    name = body.model or state.model_name
    if not body.stream:
        r = await state.result(job, request)
        msg = r["choices"][0]["message"]
        out_msg: Dict[str, Any] = {"role": "assistant", "content": msg.get("content") or "", **_thinking(msg)}
        calls = _tool_calls(msg)
        if calls:
            out_msg["tool_calls"] = calls
        return {"model": name, "created_at": _now(), "message": out_msg, "done": True,
                "done_reason": r["choices"][0]["finish_reason"], **_durations(t0, job, r.get("usage"))}

    async def gen() -> Any:
        calls: List[Dict[str, Any]] = []
        end = _StreamEnd()
        try:
            async for ch in _stream_choices(state, job, end):
                delta = ch.get("delta") or {}
                for tc in delta.get("tool_calls") or []:
                    if tc.get("function", {}).get("name"):
                        calls.append({"function": {"name": tc["function"]["name"], "arguments": ""}})
                    if calls and tc.get("function", {}).get("arguments"):
                        calls[-1]["function"]["arguments"] += tc["function"]["arguments"]
                if delta.get("content") or delta.get("reasoning_content"):
                    yield {"model": name, "created_at": _now(), "done": False,
                           "message": {"role": "assistant", "content": delta.get("content") or "",
                                       **_thinking(delta)}}
        except Exception as e:
            yield {"error": _stream_error(state, job, e)}
            return
        last: Dict[str, Any] = {"role": "assistant", "content": ""}
        if calls:
            last["tool_calls"] = _tool_calls({"tool_calls": calls})
        yield {"model": name, "created_at": _now(), "message": last, "done": True, "done_reason": end.finish,
               **_durations(t0, job, end.usage)}

    return _ndjson(gen(), job)


@router.post("/api/generate")
async def api_generate(body: GenerateBody, request: Request) -> Any:
    state = request.app.state.server
    state.require_ready()
    state.require_generator()
    _record_keep_alive(state, body.keep_alive)
    name = body.model or state.model_name
    if not body.prompt and not body.images:  # Ollama: an empty prompt loads the model
        return {"model": name, "created_at": _now(), "response": "", "done": True, "done_reason": "load"}
    if body.context:
        raise APIError(501, "the deprecated 'context' field of /api/generate is not supported; use /api/chat",
                       "not_supported")
    if body.template:
        raise APIError(501, "a per-request 'template' is not supported; start the server with --chat-template",
                       "not_supported")
    opts = _options(state, body.options)
    t0 = time.monotonic()
    fmt = _format(body.format)
    if body.raw:
        if body.images:
            raise bad_request("raw mode with images is not supported")
        params = dict(prompt=body.prompt, suffix=body.suffix, model=state.model_name, stream=body.stream,
                      **{"temperature": OLLAMA_TEMPERATURE, **opts})
        if fmt is not None:
            from ..chat.completion import response_format_grammar

            params["grammar"] = response_format_grammar(fmt)
        job, _ = await state.start_job(state.cap_generation(work.completion_work(params), params))
        text_of = lambda c: c["choices"][0].get("text") or ""  # noqa: E731
    else:
        msgs: List[Dict[str, Any]] = []
        if body.system:
            msgs.append({"role": "system", "content": body.system})
        msgs.append({"role": "user", "content": body.prompt, "images": body.images})
        msgs = _messages(msgs, bool(state.settings.mmproj), state.settings.media_path)
        params = dict(messages=msgs, response_format=fmt, model=state.model_name, stream=body.stream,
                      reasoning_format=state.settings.reasoning_format,
                      **{"temperature": OLLAMA_TEMPERATURE, **opts})
        job, _ = await state.start_job(state.cap_generation(work.chat_work(params, _think(body.think)), params))
        text_of = (lambda c: (c["choices"][0].get("delta") or {}).get("content") or "") if body.stream else \
            (lambda c: c["choices"][0]["message"].get("content") or "")
    # The chat's reasoning (none in raw mode): Ollama's "thinking" field.
    thinking_of = (lambda c: _thinking(c["choices"][0].get("delta") or c["choices"][0].get("message") or {}))
    if not body.stream:
        r = await state.result(job, request)
        return {"model": name, "created_at": _now(), "response": text_of(r), **thinking_of(r), "done": True,
                "done_reason": r["choices"][0]["finish_reason"], **_durations(t0, job, r.get("usage"))}

    async def gen() -> Any:
        end = _StreamEnd()
        try:
            async for ch in _stream_choices(state, job, end):
                text, thinking = text_of({"choices": [ch]}), thinking_of({"choices": [ch]})
                if text or thinking:
                    yield {"model": name, "created_at": _now(), "response": text, **thinking, "done": False}
        except Exception as e:
            yield {"error": _stream_error(state, job, e)}
            return
        yield {"model": name, "created_at": _now(), "response": "", "done": True, "done_reason": end.finish,
               **_durations(t0, job, end.usage)}

    return _ndjson(gen(), job)


def _embedding_server(request: Request, keep_alive: Any) -> Any:
    """The server state of an embedding request: 501 unless it serves embeddings; keep_alive noted."""
    state = request.app.state.server
    if not state.settings.embedding:
        raise APIError(501, "this server does not serve embeddings: start it with --embedding", "not_supported")
    state.require_ready()
    _record_keep_alive(state, keep_alive)
    return state


@router.post("/api/embed")
async def api_embed(body: EmbedBody, request: Request) -> Any:
    state = _embedding_server(request, body.keep_alive)
    if isinstance(body.input, list) and not body.input:
        raise bad_request("input: the list is empty")
    t0 = time.monotonic()
    r = await state.run_job(state.embedding_work(body.input, "input", truncate=body.truncate is True))
    return {"model": body.model or state.model_name, "embeddings": [d["embedding"] for d in r["data"]],
            "total_duration": int((time.monotonic() - t0) * 1e9), "load_duration": 0,
            "prompt_eval_count": r.get("usage", {}).get("prompt_tokens", 0)}


@router.post("/api/embeddings")
async def api_embeddings(body: EmbeddingsBody, request: Request) -> Any:
    """Ollama's older embedding endpoint (still what some clients call)."""
    state = _embedding_server(request, body.keep_alive)
    if not body.prompt:  # as Ollama answers an empty prompt
        return {"embedding": []}
    r = await state.run_job(state.embedding_work(body.prompt, "prompt"))
    return {"embedding": r["data"][0]["embedding"]}


def _details(state: Any) -> Dict[str, Any]:
    llm = state.llama
    md = llm.metadata if llm is not None else {}
    arch = md.get("general.architecture", "")
    return {"parent_model": "", "format": "gguf", "family": arch, "families": [arch] if arch else None,
            "parameter_size": md.get("general.size_label", ""),
            "quantization_level": quantization_level(md.get("general.file_type"))}


def quantization_level(file_type: Any) -> str:
    """The name of a GGUF's general.file_type (llama.cpp's enum llama_ftype, whose
    table is llamapy.llama_cpp's LLAMA_FTYPE_*), as Ollama reports it: "Q4_K_M",
    "Q8_0", "F16". "" when the file does not say; "unknown" for a number not in the table."""
    if file_type is None or file_type == "":
        return ""
    try:
        value = int(file_type) & ~1024  # LLAMA_FTYPE_GUESSED: a flag on the type, not a type
    except (TypeError, ValueError):
        return "unknown"
    from .. import llama_cpp

    for name in llama_cpp.__all__:
        if name.startswith("LLAMA_FTYPE_") and name != "LLAMA_FTYPE_GUESSED" and getattr(llama_cpp, name) == value:
            return name[len("LLAMA_FTYPE_"):].replace("MOSTLY_", "").replace("ALL_", "")
    return "unknown"


def _entry(state: Any) -> Dict[str, Any]:
    import os

    path = state.model_path
    mtime = os.path.getmtime(path) if os.path.exists(path) else time.time()
    return {"name": state.model_name, "model": state.model_name,
            "modified_at": _dt.datetime.fromtimestamp(mtime, _dt.timezone.utc).isoformat(),
            "size": model_file_bytes(path), "digest": "", "details": _details(state)}


@router.get("/api/tags")
async def api_tags(request: Request) -> Any:
    state = request.app.state.server
    return {"models": [_entry(state)]}


@router.get("/api/ps")
async def api_ps(request: Request) -> Any:
    state = request.app.state.server
    if state.runner.state != "ready":
        return {"models": []}
    secs = getattr(state, "keep_alive", 300.0)
    since = getattr(state, "keep_alive_set", state.t_start)
    # A negative keep_alive (forever) is reported far in the future, as Ollama does.
    expires = since + secs if secs is not None else since + 100 * 365 * 86400
    return {"models": [{**_entry(state), "expires_at": _dt.datetime.fromtimestamp(expires, _dt.timezone.utc)
                        .isoformat(), "size_vram": 0, "context_length": state.request_limit()}]}


@router.post("/api/show")
async def api_show(body: ShowBody, request: Request) -> Any:
    state = request.app.state.server
    state.require_ready()
    llm = state.llama
    md = llm.metadata
    if bool(getattr(llm.model, "is_encoder", False)):  # embeddings only (require_generator)
        caps = ["embedding"] if state.settings.embedding else []
    else:
        caps = ["completion"] + (["vision"] if state.settings.mmproj else []) + \
            (["embedding"] if state.settings.embedding else []) + ["tools"]
    info = {k: v for k, v in md.items() if not k.startswith("tokenizer.ggml.") and k != "tokenizer.chat_template"}
    return {"modelfile": f"FROM {state.model_path}\n", "parameters": f"num_ctx {state.request_limit()}",
            "template": md.get("tokenizer.chat_template", ""), "details": _details(state), "model_info": info,
            "capabilities": caps, "modified_at": _entry(state)["modified_at"]}


@router.get("/api/version")
async def api_version() -> Any:
    return {"version": OLLAMA_VERSION}
