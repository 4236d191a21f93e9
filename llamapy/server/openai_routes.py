"""OpenAI-compatible routes (and llama-server's /health, /props, /slots,
/tokenize, /detokenize, /apply-template, /metrics)."""
from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, List, Optional, Union

import anyio
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette.sse import EventSourceResponse
from starlette.responses import JSONResponse, PlainTextResponse

from .._sampling import SamplingParams
from . import work
from .errors import APIError, bad_request, error_body
from .runner import Cancelled
from .security import check_messages_media

router = APIRouter()


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class Sampling(_Body):
    model: Optional[str] = None
    stream: bool = False
    stream_options: Optional[Dict[str, Any]] = None
    max_tokens: Optional[int] = None
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    typical_p: float = 1.0
    stop: Optional[Union[str, List[str]]] = None
    seed: Optional[int] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_penalty: float = 1.0
    mirostat_mode: int = Field(0, alias="mirostat")
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    logit_bias: Optional[Dict[str, float]] = None
    n: int = 1


class ChatBody(Sampling):
    messages: List[Dict[str, Any]] = Field(min_length=1)
    max_completion_tokens: Optional[int] = None
    logprobs: Optional[bool] = None
    top_logprobs: Optional[int] = None
    tools: Optional[List[Dict[str, Any]]] = None
    tool_choice: Optional[Union[str, Dict[str, Any]]] = None
    response_format: Optional[Dict[str, Any]] = None
    chat_template_kwargs: Optional[Dict[str, Any]] = None


class CompletionBody(Sampling):
    prompt: Union[str, List[int]]
    suffix: Optional[str] = None
    echo: bool = False
    logprobs: Optional[int] = None


class EmbeddingBody(_Body):
    input: Union[str, List[str]]
    model: Optional[str] = None
    encoding_format: Optional[str] = None


class TokenizeBody(_Body):
    content: str
    add_special: bool = True
    with_pieces: bool = False


class DetokenizeBody(_Body):
    tokens: List[int]


class TemplateBody(_Body):
    messages: List[Dict[str, Any]] = Field(min_length=1)
    tools: Optional[List[Dict[str, Any]]] = None
    chat_template_kwargs: Optional[Dict[str, Any]] = None


_RESERVED_TEMPLATE_VARS = {"messages", "add_generation_prompt", "tools", "bos_token", "eos_token"}


def _state(request: Request) -> Any:
    return request.app.state.server


def _logit_bias(bias: Optional[Dict[str, float]]) -> Optional[Dict[int, float]]:
    if not bias:
        return None
    out = {}
    for k, v in bias.items():
        try:
            out[int(k)] = v
        except ValueError:
            raise bad_request(f"logit_bias: key {k!r} is not a token id") from None
    return out


def sampling_params(body: Sampling) -> Dict[str, Any]:
    """The request's sampling options under the library's names (SamplingParams'
    fields the body has), checked here so a bad value is a 400 naming it."""
    if body.n != 1:
        raise bad_request("n: only n=1 is supported")
    kw = {n: getattr(body, n) for n in SamplingParams.names() if n in type(body).model_fields and n != "logit_bias"}
    kw["logit_bias"] = _logit_bias(body.logit_bias)
    try:
        SamplingParams(**kw)
    except (TypeError, ValueError) as e:
        raise bad_request(str(e)) from None
    return dict(kw, stop=body.stop or [], seed=body.seed, stream=body.stream)


def _include_usage(body: Sampling) -> bool:
    return bool(body.stream_options and body.stream_options.get("include_usage"))


def _sse(state: Any, job: Any, include_usage: bool) -> EventSourceResponse:
    # On SIGTERM sse-starlette sets this event and gives the stream a grace
    # period: the job is cancelled, and the client gets an error event and
    # [DONE] instead of a cut connection.
    shutdown = anyio.Event()

    async def events() -> Any:
        usage = None

        async def watch() -> None:
            await shutdown.wait()
            job.cancel("shutdown")

        watcher = asyncio.ensure_future(watch())
        try:
            async for chunk in state.stream(job):
                if "usage" in chunk:
                    chunk = dict(chunk)
                    usage = chunk.pop("usage")
                    if include_usage:
                        chunk["usage"] = None
                elif include_usage:
                    chunk = {**chunk, "usage": None}
                yield json.dumps(chunk)
            if include_usage and usage is not None:
                yield json.dumps({**{k: chunk[k] for k in ("id", "object", "created", "model")},
                                  "choices": [], "usage": usage})
        except (Cancelled, APIError, ValueError, RuntimeError) as e:  # mid-stream: an error event, then the end
            err = state.cancel_error(job, e) if isinstance(e, Cancelled) else e
            status = err.status if isinstance(err, APIError) else 400 if isinstance(err, ValueError) else 500
            yield json.dumps(error_body(status, getattr(err, "message", str(err)), getattr(err, "code", None)))
        finally:
            watcher.cancel()
        yield "[DONE]"

    return EventSourceResponse(events(), sep="\n", shutdown_event=shutdown, shutdown_grace_period=3.0)


@router.post("/v1/chat/completions")
@router.post("/chat/completions")
async def chat_completions(body: ChatBody, request: Request) -> Any:
    state = _state(request)
    state.require_ready()
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    state.check_limits(max_tokens, body.top_logprobs if body.logprobs else None)
    messages = check_messages_media(body.messages, state.settings.media_path, bool(state.settings.mmproj))
    if body.response_format is not None and body.response_format.get("type") not in ("text", "json_object",
                                                                                      "json_schema"):
        raise bad_request("response_format.type must be 'text', 'json_object' or 'json_schema'")
    reserved = sorted(set(body.chat_template_kwargs or {}) & _RESERVED_TEMPLATE_VARS)
    if reserved:
        raise bad_request(f"chat_template_kwargs.{reserved[0]}: the server sets this template variable itself")
    params = dict(messages=messages, tools=body.tools, tool_choice=body.tool_choice,
                  response_format=body.response_format, max_tokens=max_tokens, logprobs=body.logprobs,
                  top_logprobs=body.top_logprobs, model=state.model_name, **sampling_params(body))
    job, _ = await state.start_job(work.chat_work(params, body.chat_template_kwargs or {}))
    if body.stream:
        return _sse(state, job, _include_usage(body))
    return await state.result(job, request)


@router.post("/v1/completions")
@router.post("/completions")
async def completions(body: CompletionBody, request: Request) -> Any:
    state = _state(request)
    state.require_ready()
    state.check_limits(body.max_tokens, body.logprobs)
    max_tokens = 16 if body.max_tokens is None else body.max_tokens  # OpenAI's default
    params = dict(prompt=body.prompt, suffix=body.suffix, echo=body.echo, logprobs=body.logprobs,
                  max_tokens=max_tokens, model=state.model_name, **sampling_params(body))
    job, _ = await state.start_job(work.completion_work(params))
    if body.stream:
        return _sse(state, job, _include_usage(body))
    return await state.result(job, request)


@router.post("/v1/embeddings")
@router.post("/embeddings")
async def embeddings(body: EmbeddingBody, request: Request) -> Any:
    state = _state(request)
    if not state.settings.embedding:
        raise APIError(501, "this server does not serve embeddings: start it with --embedding", "not_supported")
    if body.encoding_format not in (None, "float", "base64"):
        raise bad_request("encoding_format must be 'float' or 'base64'")
    if isinstance(body.input, list) and not body.input:
        raise bad_request("input: the list is empty")
    r = await state.run_job(work.embedding_work(body.input, state.model_name))
    if r["data"] and r["data"][0]["embedding"] and isinstance(r["data"][0]["embedding"][0], list):
        raise bad_request("this model's pooling type is 'none' (one vector per token), which the OpenAI "
                          "embeddings API cannot carry; start the server with --pooling mean (or cls, last)")
    if body.encoding_format == "base64":
        import base64

        import numpy as np

        for d in r["data"]:
            d["embedding"] = base64.b64encode(np.asarray(d["embedding"], dtype="<f4").tobytes()).decode("ascii")
    return r


def model_card(state: Any) -> Dict[str, Any]:
    llm = state.llama
    meta: Dict[str, Any] = {}
    if llm is not None:
        meta = {"n_ctx": state.request_limit() or llm.n_ctx(), "n_vocab": llm.n_vocab(), "n_embd": llm.n_embd(),
                "n_ctx_train": int(llm.metadata.get(f"{llm.metadata.get('general.architecture', '')}.context_length",
                                                    0) or 0),
                "architecture": llm.metadata.get("general.architecture"), "size": _file_size(state.model_path)}
    return {"id": state.model_name, "object": "model", "created": int(state.t_start), "owned_by": "llamapy",
            "meta": meta}


def _file_size(path: str) -> int:
    import os

    try:
        return os.path.getsize(path)
    except OSError:
        return 0


@router.get("/v1/models")
@router.get("/models")
async def models(request: Request) -> Any:
    state = _state(request)
    return {"object": "list", "data": [model_card(state)]}


@router.get("/health")
@router.get("/v1/health")
async def health(request: Request) -> Any:
    state = _state(request)
    st = state.runner.state
    if st == "ready":
        return {"status": "ok"}
    if st == "loading":
        return JSONResponse(error_body(503, "Loading model", "loading_model"), status_code=503)
    return JSONResponse(error_body(503, f"model unavailable: {state.runner.error or st}", "model_unavailable"),
                        status_code=503)


@router.get("/props")
async def props(request: Request) -> Any:
    state = _state(request)
    state.require_ready()
    llm = state.llama
    limits = state.runner.limits()
    n_req = limits["max_request_tokens"]
    return {"model_path": state.model_path, "model_alias": state.model_name, **limits,
            "n_ctx": n_req, "max_prompt_tokens": n_req - 1,
            "max_tokens_limit": state.max_tokens_limit(), "n_probs_max": state.settings.n_probs_max,
            "slots": state.runner.slot_info(),
            "modalities": {"vision": bool(state.settings.mmproj)}, "embedding": bool(state.settings.embedding),
            "chat_template": llm.metadata.get("tokenizer.chat_template", ""), "build_info": "llamapy"}


@router.get("/slots")
async def slots(request: Request) -> Any:
    state = _state(request)
    if not state.settings.slots:
        raise APIError(501, "the /slots endpoint is disabled (--no-slots)", "not_supported")
    state.require_ready()
    return state.runner.slot_info()


@router.get("/metrics")
async def metrics(request: Request) -> Any:
    state = _state(request)
    if not state.settings.metrics:
        raise APIError(501, "the /metrics endpoint is disabled: start the server with --metrics", "not_supported")
    s = state.runner.stats()
    lines = []
    for key, kind, helptext in (
            ("requests_total", "counter", "requests run on the slot"),
            ("requests_cancelled", "counter", "requests cancelled (disconnect, timeout, shutdown)"),
            ("requests_failed", "counter", "requests that failed"),
            ("queue_rejected_total", "counter", "requests refused with 503 because the queue was full"),
            ("prompt_tokens_total", "counter", "prompt tokens of finished requests"),
            ("tokens_predicted_total", "counter", "generated tokens of finished requests"),
            ("requests_context_full", "counter", "generations the shared KV pool ended (finish_reason length)"),
            ("waiting", "gauge", "requests waiting for a slot"),
            ("busy", "gauge", "slots running a request"),
            ("slots", "gauge", "slots (-np)"),
            ("kv_cells", "gauge", "KV cache cells (-c)"),
            ("kv_cells_used", "gauge", "KV cache cells in use (running requests and cached prefixes)"),
            ("batch_steps", "counter", "batched decode steps"),
            ("batch_rows", "counter", "rows (tokens) decoded in batched steps")):
        lines += [f"# HELP llamapy:{key} {helptext}", f"# TYPE llamapy:{key} {kind}",
                  f"llamapy:{key} {float(s[key])}"]
    lines += ["# HELP llamapy:slot_tokens_cached tokens a slot holds in the KV cache",
              "# TYPE llamapy:slot_tokens_cached gauge"]
    for info in state.runner.slot_info():
        lines.append(f'llamapy:slot_tokens_cached{{slot="{info["id"]}",state="{info["state"]}"}} '
                     f'{float(info["n_tokens_cached"])}')
    return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")


@router.post("/tokenize")
async def tokenize(body: TokenizeBody, request: Request) -> Any:
    state = _state(request)

    def fn(llm: Any) -> Any:
        toks = llm.tokenize(body.content.encode("utf-8"), add_bos=body.add_special, special=True)
        if not body.with_pieces:
            return {"tokens": toks}
        return {"tokens": [{"id": t, "piece": llm.detokenize([t], special=True).decode("utf-8", "replace")}
                           for t in toks]}

    return await state.run_job(work.call_work(fn))


@router.post("/detokenize")
async def detokenize(body: DetokenizeBody, request: Request) -> Any:
    state = _state(request)

    def fn(llm: Any) -> Any:
        bad = [t for t in body.tokens if not 0 <= t < llm.n_vocab()]
        if bad:
            raise bad_request(f"tokens: {bad[0]} is not a token id of this model (n_vocab {llm.n_vocab()})")
        return {"content": llm.detokenize(body.tokens, special=True).decode("utf-8", "replace")}

    return await state.run_job(work.call_work(fn))


@router.post("/apply-template")
async def apply_template(body: TemplateBody, request: Request) -> Any:
    state = _state(request)
    prompt = await state.run_job(work.call_work(
        lambda llm: work.render_chat(llm, body.messages, body.tools, body.chat_template_kwargs or {})))
    return {"prompt": prompt}

