"""OpenAI-compatible routes (and llama-server's /health, /props, /slots,
/tokenize, /detokenize, /apply-template, /metrics)."""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import typing
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import anyio
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, create_model
from sse_starlette.sse import EventSourceResponse
from starlette.responses import JSONResponse, PlainTextResponse

from .._sampling import SamplingParams
from ..chat.reasoning import check_reasoning_budget, check_reasoning_format
from . import work
from .errors import APIError, bad_request, error_body, public_error
from .runner import Cancelled
from .security import check_messages_media

router = APIRouter()
logger = logging.getLogger("llamapy.server")


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


def _sampling_fields() -> Any:
    """A body's sampling fields: SamplingParams' own, with its types and defaults (one
    declaration; llama-server's "mirostat" as the alias of mirostat_mode), less those a
    client does not set this way: grammar (an object), logit_bias (typed for JSON in
    Sampling), tfs_z (gone from llama.cpp)."""
    hints = typing.get_type_hints(SamplingParams)
    fields: Dict[str, Any] = {}
    for f in dataclasses.fields(SamplingParams):
        if f.name not in ("grammar", "logit_bias", "tfs_z"):
            fields[f.name] = (hints[f.name], Field(f.default, alias="mirostat") if f.name == "mirostat_mode"
                              else f.default)
    return create_model("SamplingFields", __base__=_Body, **fields)


class Sampling(_sampling_fields()):  # type: ignore[misc]
    model: Optional[str] = None
    stream: bool = False
    stream_options: Optional[Dict[str, Any]] = None
    max_tokens: Optional[int] = None
    stop: Optional[Union[str, List[str]]] = None
    seed: Optional[int] = None
    logit_bias: Optional[Dict[str, float]] = None
    n: int = 1
    # llama-server's extensions that pin the output's shape: GBNF text, or a JSON schema
    grammar: Optional[str] = None
    json_schema: Optional[Dict[str, Any]] = None


class ChatBody(Sampling):
    messages: List[Dict[str, Any]] = Field(min_length=1)
    max_completion_tokens: Optional[int] = None
    logprobs: Optional[bool] = None
    top_logprobs: Optional[int] = None
    tools: Optional[List[Dict[str, Any]]] = None
    tool_choice: Optional[Union[str, Dict[str, Any]]] = None
    response_format: Optional[Dict[str, Any]] = None
    chat_template_kwargs: Optional[Dict[str, Any]] = None
    reasoning_format: Optional[str] = None
    reasoning_budget: Optional[int] = None


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


def _state(request: Request) -> Any:
    return request.app.state.server


# ------------------------------------------------------------------ request checks
# One check per field, shared by the OpenAI and Ollama routes: a malformed
# value is a 400 naming the field before any work, never a KeyError (500) or
# a library message about its internals.


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


def check_sampling(kw: Dict[str, Any], field: str = "") -> None:
    """The sampling options under the library's names (SamplingParams' fields),
    checked by SamplingParams itself (its checks are the library's only ones).
    ``field`` prefixes the names
    (Ollama's "options.")."""
    try:
        SamplingParams(**{k: v for k, v in kw.items() if k in SamplingParams.names()})
    except (TypeError, ValueError) as e:
        raise bad_request(f"{field}{e}" if field else str(e)) from None


def sampling_params(body: Sampling) -> Dict[str, Any]:
    """The request's sampling options under the library's names (SamplingParams'
    fields the body has), checked here so a bad value is a 400 naming it."""
    if body.n != 1:
        raise bad_request("n: only n=1 is supported")
    kw = {n: getattr(body, n) for n in SamplingParams.names() if n in type(body).model_fields and n != "logit_bias"}
    kw["logit_bias"] = _logit_bias(body.logit_bias)
    check_sampling(kw)
    return dict(kw, stop=body.stop or [], seed=body.seed, stream=body.stream)


def request_grammar(body: Sampling, other: Optional[str] = None) -> Optional[Any]:
    """The request's ``grammar`` (GBNF) or ``json_schema`` as a LlamaGrammar, compiled here so
    that a bad one is a 400 naming the field; ``other``: a field of the request that shapes the
    output too (tools, response_format), which cannot be combined with either."""
    from ..grammar import LlamaGrammar

    given = [f for f in ("grammar", "json_schema") if getattr(body, f) is not None]
    if not given:
        return None
    if len(given) == 2:
        raise bad_request("grammar: give either grammar or json_schema, not both")
    if other is not None:
        raise bad_request(f"{given[0]}: cannot be combined with {other}, which constrains the output too")
    try:
        if body.grammar is not None:
            if not body.grammar.strip():
                raise ValueError("the grammar is empty")
            return LlamaGrammar.from_string(body.grammar, verbose=False)
        return LlamaGrammar.from_json_schema(body.json_schema, verbose=False)
    except (ValueError, RecursionError) as e:  # GrammarError is a ValueError
        raise bad_request(f"{given[0]}: {e}") from None


def check_stop(stop: Any, field: str = "stop") -> List[str]:
    """stop as a list of strings (a string alone is one stop)."""
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if not isinstance(stop, list) or not all(isinstance(x, str) for x in stop):
        raise bad_request(f"{field} must be a string or a list of strings")
    return stop


def _functions(items: Any, field: str, kind: str, needs: str) -> Iterator[Tuple[str, Dict[str, Any], Dict[str, Any]]]:
    """The shape a tool list and a tool-call list share: a list of {"type": "function",
    "function": {"name": ..., ...}}. Yields (where, item, function) for each, checked."""
    if not isinstance(items, list):
        raise bad_request(f"{field} must be a list of {kind}")
    for i, item in enumerate(items):
        where = f"{field}[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"{where} must be an object")
        if item.get("type", "function") != "function":
            raise bad_request(f"{where}.type must be 'function'")
        fn = item.get("function")
        if not isinstance(fn, dict):
            raise bad_request(f"{where}.function must be an object with {needs}")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise bad_request(f"{where}.function.name must be a non-empty string")
        yield where, item, fn


def check_tools(tools: Any, field: str = "tools") -> None:
    """OpenAI's (and Ollama's) tool list: {"type": "function", "function": {"name", "parameters"}}."""
    if tools is None:
        return
    for where, _, fn in _functions(tools, field, "tools", "a name"):
        if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
            raise bad_request(f"{where}.function.parameters must be a JSON schema object")


def _check_tool_calls(calls: Any, where: str) -> None:
    for at, c, fn in _functions(calls, where, "tool calls", "a name and arguments"):
        if c.get("id") is not None and not isinstance(c["id"], str):
            raise bad_request(f"{at}.id must be a string")
        if fn.get("arguments") is not None and not isinstance(fn["arguments"], (str, dict)):
            raise bad_request(f"{at}.function.arguments must be a JSON string (or an object)")


def check_messages(messages: Any, field: str = "messages") -> None:
    """OpenAI-shaped messages: a role, content (a string, null or a list of
    parts), well-formed tool_calls. Image sources are security.py's check."""
    for i, m in enumerate(messages):
        where = f"{field}[{i}]"
        if not isinstance(m, dict):
            raise bad_request(f"{where} must be an object")
        if not isinstance(m.get("role"), str):
            raise bad_request(f"{where}.role: a string is required")
        content = m.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, (dict, str)):
                    raise bad_request(f"{where}.content[{j}] must be a content part object")
                if isinstance(part, dict) and part.get("type") == "text" and not isinstance(part.get("text"), str):
                    raise bad_request(f"{where}.content[{j}].text must be a string")
        elif content is not None and not isinstance(content, str):
            raise bad_request(f"{where}.content must be a string, a list of content parts or null")
        for key in ("name", "tool_call_id"):
            if m.get(key) is not None and not isinstance(m[key], str):
                raise bad_request(f"{where}.{key} must be a string")
        if m.get("tool_calls") is not None:
            _check_tool_calls(m["tool_calls"], f"{where}.tool_calls")


def check_response_format(fmt: Optional[Dict[str, Any]], field: str = "response_format") -> None:
    if fmt is None:
        return
    if fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise bad_request(f"{field}.type must be 'text', 'json_object' or 'json_schema'")
    if fmt.get("schema") is not None and not isinstance(fmt["schema"], dict):
        raise bad_request(f"{field}.schema must be a JSON schema object")
    if fmt["type"] == "json_schema":
        js = fmt.get("json_schema")
        if not isinstance(js, dict):
            raise bad_request(f"{field}.json_schema must be an object with a schema")
        if js.get("schema") is not None and not isinstance(js["schema"], dict):
            raise bad_request(f"{field}.json_schema.schema must be a JSON schema object")


@functools.lru_cache(maxsize=1)
def _library_keywords() -> frozenset:
    """Every keyword of the library's chat and completion calls (and a chat
    request's fields): a chat handler takes these as arguments, not as
    template variables, and some take code or objects (logits_processor,
    stopping_criteria, grammar)."""
    import dataclasses
    import inspect

    from ..chat.completion import ChatRequest
    from ..llama import Llama

    names = {f.name for f in dataclasses.fields(ChatRequest)}
    for fn in (Llama.create_chat_completion, Llama.create_completion):
        names |= set(inspect.signature(fn).parameters)
    return frozenset(names - {"self", "template_kwargs"}) | {"llama"}


# What the server's templates get from the server itself (the multimodal handlers' too).
_RESERVED_TEMPLATE_VARS = {"messages", "add_generation_prompt", "tools", "bos_token", "eos_token", "tool_choice",
                           "functions", "function_call", "raise_exception", "strftime_now"}


def check_template_kwargs(kwargs: Optional[Dict[str, Any]], field: str = "chat_template_kwargs") -> Dict[str, Any]:
    """chat_template_kwargs: variables for the chat template, nothing else. A
    name the library takes as a keyword would reach the call (work.py passes
    them to the handler), so those are refused with the variables the server
    sets itself."""
    kwargs = kwargs or {}
    for key in kwargs:
        if key in _RESERVED_TEMPLATE_VARS:
            raise bad_request(f"{field}.{key}: the server sets this template variable itself")
        if key in _library_keywords():
            raise bad_request(f"{field}.{key}: {field} holds chat template variables only; {key!r} is a keyword "
                              "of the library's chat API, not a template variable")
    return kwargs


def reasoning_format(state: Any, value: Optional[str], field: str = "reasoning_format") -> str:
    """The request's reasoning_format, else the server's (--reasoning-format)."""
    try:
        return check_reasoning_format(state.settings.reasoning_format if value is None else value)
    except ValueError as e:
        raise bad_request(f"{field}: {e}") from None


def reasoning_budget(state: Any, value: Optional[int], field: str = "reasoning_budget") -> Optional[int]:
    """The request's reasoning budget, else the server's (--reasoning-budget); None: no limit."""
    try:
        return check_reasoning_budget(state.settings.reasoning_budget if value is None else value)
    except ValueError as e:
        raise bad_request(f"{field}: {e}") from None


def check_prompt_tokens(prompt: Any, n_vocab: int, field: str = "prompt") -> None:
    """A prompt given as token ids: at least one, each in the vocabulary."""
    if isinstance(prompt, list):
        if not prompt:
            raise bad_request(f"{field}: the list of token ids is empty")
        bad = next((t for t in prompt if not 0 <= t < n_vocab), None)
        if bad is not None:
            raise bad_request(f"{field}: {bad} is not a token id of this model (0 to {n_vocab - 1})")


def _include_usage(body: Sampling) -> bool:
    usage = (body.stream_options or {}).get("include_usage", False)
    if not isinstance(usage, bool):
        raise bad_request("stream_options.include_usage must be true or false")
    return usage


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
        except Exception as e:  # mid-stream: an error event, then the end (never a cut connection)
            err = state.cancel_error(job, e) if isinstance(e, Cancelled) else e
            status, message, code = public_error(err)
            if status == 500:
                logger.error("a stream failed: %s: %s", type(err).__name__, err, exc_info=err)
            yield json.dumps(error_body(status, message, code))
        finally:
            watcher.cancel()
        yield "[DONE]"

    return EventSourceResponse(events(), sep="\n", shutdown_event=shutdown, shutdown_grace_period=3.0)


@router.post("/v1/chat/completions")
@router.post("/chat/completions")
async def chat_completions(body: ChatBody, request: Request) -> Any:
    state = _state(request)
    state.require_ready()
    state.require_generator()
    if body.max_completion_tokens is not None:  # the newer name wins, as in OpenAI's API
        max_tokens = state.max_tokens(body.max_completion_tokens, "max_completion_tokens")
    else:
        max_tokens = state.max_tokens(body.max_tokens)
    state.check_n_probs(body.top_logprobs if body.logprobs else None)
    check_messages(body.messages)
    messages = check_messages_media(body.messages, state.settings.media_path, bool(state.settings.mmproj))
    check_tools(body.tools)
    check_response_format(body.response_format)
    template_kwargs = check_template_kwargs(body.chat_template_kwargs)
    include_usage = _include_usage(body)
    params = dict(messages=messages, tools=body.tools, tool_choice=body.tool_choice,
                  response_format=body.response_format, max_tokens=max_tokens, logprobs=body.logprobs,
                  top_logprobs=body.top_logprobs, model=state.model_name,
                  reasoning_format=reasoning_format(state, body.reasoning_format), **sampling_params(body))
    budget = reasoning_budget(state, body.reasoning_budget)
    if budget is not None:  # only then: a chat handler need not know the keyword
        params["reasoning_budget"] = budget
    other = "tools" if body.tools and body.tool_choice != "none" else \
        "response_format" if (body.response_format or {}).get("type") not in (None, "text") else None
    grammar = request_grammar(body, other)
    if grammar is not None:
        params["grammar"] = grammar
    job, _ = await state.start_job(state.cap_generation(work.chat_work(params, template_kwargs), params))
    if body.stream:
        return _sse(state, job, include_usage)
    return await state.result(job, request)


@router.post("/v1/completions")
@router.post("/completions")
async def completions(body: CompletionBody, request: Request) -> Any:
    state = _state(request)
    state.require_ready()
    state.require_generator()
    max_tokens = 16 if body.max_tokens is None else state.max_tokens(body.max_tokens)  # 16: OpenAI's default
    state.check_n_probs(body.logprobs)
    check_prompt_tokens(body.prompt, state.llama.n_vocab())
    include_usage = _include_usage(body)
    params = dict(prompt=body.prompt, suffix=body.suffix, echo=body.echo, logprobs=body.logprobs,
                  max_tokens=max_tokens, model=state.model_name, **sampling_params(body))
    grammar = request_grammar(body)
    if grammar is not None:
        params["grammar"] = grammar
    job, _ = await state.start_job(state.cap_generation(work.completion_work(params), params))
    if body.stream:
        return _sse(state, job, include_usage)
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
    r = await state.run_job(state.embedding_work(body.input))
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
    from ..gguf_file import model_file_bytes

    return model_file_bytes(path)  # every part of a split model


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
    check_messages(body.messages)
    check_tools(body.tools)
    template_kwargs = check_template_kwargs(body.chat_template_kwargs)
    prompt = await state.run_job(work.call_work(
        lambda llm: _render_template(llm, body.messages, body.tools, template_kwargs)))
    return {"prompt": prompt}


def _render_template(llama: Any, messages: List[Dict[str, Any]], tools: Any, template_kwargs: Dict[str, Any]) -> str:
    """The prompt text of ``messages``: work.render_chat, or, with --mmproj, the
    multimodal handler's own rendering (one media marker per image, as the
    prompt it builds has). Such a handler is a FormatHandler without a chat
    format, so work.render_chat's render_text fails on it (AttributeError)."""
    from ..chat.completion import ChatRequest, resolve_chat_handler
    from ..multimodal.handlers import MTMDChatHandler

    handler = resolve_chat_handler(llama, tools_requested=bool(tools))
    if not isinstance(handler, MTMDChatHandler):
        return work.render_chat(llama, messages, tools, template_kwargs)
    req = ChatRequest(messages=list(messages), tools=tools, template_kwargs=dict(template_kwargs))
    mode, _ = req.tool_mode()
    req.messages = handler._with_default_system(list(req.messages))  # as its prompt() does
    return handler.render(llama, req, req.tools if mode != "none" else None)

