"""Ollama's native API (/api/*), so that Ollama clients work unchanged:
NDJSON streaming (the default, as in Ollama), ``options``, ``format``
("json" or a JSON schema) and ``keep_alive``."""
from __future__ import annotations

import asyncio
import base64
import datetime as _dt
import json
import re
import time
from typing import Any, Dict, List, Optional, Union

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import StreamingResponse

from . import work
from .errors import APIError, bad_request
from .runner import Cancelled
from .security import check_messages_media

router = APIRouter()

OLLAMA_VERSION = "0.6.0"  # the API version these routes follow

_OPTION_MAP = {"num_predict": "max_tokens", "temperature": "temperature", "top_k": "top_k", "top_p": "top_p",
               "min_p": "min_p", "typical_p": "typical_p", "seed": "seed", "stop": "stop",
               "repeat_penalty": "repeat_penalty", "presence_penalty": "presence_penalty",
               "frequency_penalty": "frequency_penalty", "mirostat": "mirostat_mode", "mirostat_tau": "mirostat_tau",
               "mirostat_eta": "mirostat_eta"}
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


class EmbedBody(_Body):
    model: str = ""
    input: Union[str, List[str]]
    truncate: bool = True
    options: Optional[Dict[str, Any]] = None
    keep_alive: Optional[Union[str, int, float]] = None


class ShowBody(_Body):
    model: str = Field("", validation_alias="model")
    name: Optional[str] = None


_DURATION = re.compile(r"(-?\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_keep_alive(value: Any) -> Optional[float]:
    """Seconds to keep the model (None: forever, for a negative value), as
    Ollama reads keep_alive: a number of seconds or a Go duration string ("5m", "1h30m")."""
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
    return None if secs < 0 else secs


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _options(state: Any, options: Optional[Dict[str, Any]]) -> Dict[str, Any]:
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
    for key, kind in (("max_tokens", int), ("top_k", int), ("seed", int), ("mirostat_mode", int)):
        if key in out and (not isinstance(out[key], int) or isinstance(out[key], bool)):
            raise bad_request(f"options: {key} must be an integer")
    for key in ("temperature", "top_p", "min_p", "typical_p", "repeat_penalty", "presence_penalty",
                "frequency_penalty", "mirostat_tau", "mirostat_eta"):
        if key in out and (not isinstance(out[key], (int, float)) or isinstance(out[key], bool)):
            raise bad_request(f"options: {key} must be a number")
    if out.get("max_tokens") is not None and out["max_tokens"] < 0:
        out["max_tokens"] = None  # Ollama: -1 = until the context is full
    if isinstance(out.get("stop"), str):
        out["stop"] = [out["stop"]]
    state.check_limits(out.get("max_tokens"), None, "options.num_predict")
    return out


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
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m.get("role"), str):
            raise bad_request(f"messages[{i}].role: a string is required")
        images = m.get("images") or []
        msg = {k: v for k, v in m.items() if k != "images"}
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
                                               "arguments": json.dumps(c["function"].get("arguments", {}))}}
                                 for j, c in enumerate(msg["tool_calls"])]
        out.append(msg)
    # Content given as OpenAI parts gets the same image-source rules as /v1.
    return check_messages_media(out, media_path, has_projector)


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
    _record_keep_alive(state, body.keep_alive)
    if not body.messages:  # Ollama: an empty chat loads the model and answers done
        return {"model": body.model or state.model_name, "created_at": _now(),
                "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "load"}
    opts = _options(state, body.options)
    msgs = _messages(body.messages, bool(state.settings.mmproj), state.settings.media_path)
    params = dict(messages=msgs, tools=body.tools,
                  response_format=_format(body.format), model=state.model_name, stream=body.stream,
                  **{"temperature": 0.8, **opts})
    t0 = time.monotonic()
    job, _ = await state.start_job(work.chat_work(params, {}))
    name = body.model or state.model_name
    if not body.stream:
        r = await state.result(job, request)
        msg = r["choices"][0]["message"]
        out_msg: Dict[str, Any] = {"role": "assistant", "content": msg.get("content") or ""}
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
                if delta.get("content"):
                    yield {"model": name, "created_at": _now(),
                           "message": {"role": "assistant", "content": delta["content"]}, "done": False}
        except (Cancelled, APIError, ValueError) as e:
            err = state.cancel_error(job, e) if isinstance(e, Cancelled) else e
            yield {"error": getattr(err, "message", str(err))}
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
                      **{"temperature": 0.8, **opts})
        if fmt is not None:
            from ..chat.completion import response_format_grammar

            params["grammar"] = response_format_grammar(fmt)
        job, _ = await state.start_job(work.completion_work(params))
        text_of = lambda c: c["choices"][0].get("text") or ""  # noqa: E731
    else:
        msgs: List[Dict[str, Any]] = []
        if body.system:
            msgs.append({"role": "system", "content": body.system})
        msgs.append({"role": "user", "content": body.prompt, "images": body.images})
        msgs = _messages(msgs, bool(state.settings.mmproj), state.settings.media_path)
        params = dict(messages=msgs, response_format=fmt,
                      model=state.model_name, stream=body.stream, **{"temperature": 0.8, **opts})
        job, _ = await state.start_job(work.chat_work(params, {}))
        text_of = (lambda c: (c["choices"][0].get("delta") or {}).get("content") or "") if body.stream else \
            (lambda c: c["choices"][0]["message"].get("content") or "")
    if not body.stream:
        r = await state.result(job, request)
        return {"model": name, "created_at": _now(), "response": text_of(r), "done": True,
                "done_reason": r["choices"][0]["finish_reason"], **_durations(t0, job, r.get("usage"))}

    async def gen() -> Any:
        end = _StreamEnd()
        try:
            async for ch in _stream_choices(state, job, end):
                text = text_of({"choices": [ch]})
                if text:
                    yield {"model": name, "created_at": _now(), "response": text, "done": False}
        except (Cancelled, APIError, ValueError) as e:
            err = state.cancel_error(job, e) if isinstance(e, Cancelled) else e
            yield {"error": getattr(err, "message", str(err))}
            return
        yield {"model": name, "created_at": _now(), "response": "", "done": True, "done_reason": end.finish,
               **_durations(t0, job, end.usage)}

    return _ndjson(gen(), job)


@router.post("/api/embed")
async def api_embed(body: EmbedBody, request: Request) -> Any:
    state = request.app.state.server
    if not state.settings.embedding:
        raise APIError(501, "this server does not serve embeddings: start it with --embedding", "not_supported")
    state.require_ready()
    _record_keep_alive(state, body.keep_alive)
    t0 = time.monotonic()
    r = await state.run_job(work.embedding_work(body.input, state.model_name))
    return {"model": body.model or state.model_name, "embeddings": [d["embedding"] for d in r["data"]],
            "total_duration": int((time.monotonic() - t0) * 1e9), "load_duration": 0,
            "prompt_eval_count": r.get("usage", {}).get("prompt_tokens", 0)}


def _details(state: Any) -> Dict[str, Any]:
    llm = state.llama
    md = llm.metadata if llm is not None else {}
    arch = md.get("general.architecture", "")
    return {"parent_model": "", "format": "gguf", "family": arch, "families": [arch] if arch else None,
            "parameter_size": md.get("general.size_label", ""),
            "quantization_level": str(md.get("general.file_type", ""))}


def _entry(state: Any) -> Dict[str, Any]:
    import os

    path = state.model_path
    mtime = os.path.getmtime(path) if os.path.exists(path) else time.time()
    return {"name": state.model_name, "model": state.model_name,
            "modified_at": _dt.datetime.fromtimestamp(mtime, _dt.timezone.utc).isoformat(),
            "size": os.path.getsize(path) if os.path.exists(path) else 0, "digest": "", "details": _details(state)}


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
    caps = ["completion"] + (["vision"] if state.settings.mmproj else []) + \
        (["embedding"] if state.settings.embedding else []) + ["tools"]
    info = {k: v for k, v in md.items() if not k.startswith("tokenizer.ggml.") and k != "tokenizer.chat_template"}
    return {"modelfile": f"FROM {state.model_path}\n", "parameters": f"num_ctx {state.request_limit()}",
            "template": md.get("tokenizer.chat_template", ""), "details": _details(state), "model_info": info,
            "capabilities": caps, "modified_at": _entry(state)["modified_at"]}


@router.get("/api/version")
async def api_version() -> Any:
    return {"version": OLLAMA_VERSION}
