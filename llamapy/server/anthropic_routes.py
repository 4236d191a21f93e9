"""Anthropic's Messages API: ``POST /v1/messages`` and
``POST /v1/messages/count_tokens``, for agents and coding tools that speak
it (Claude Code, the anthropic SDKs) against a local model.

Thin over the library, like every route: the request becomes OpenAI-shaped
chat messages (system, text and image parts, ``tool_use`` blocks as
assistant tool calls, ``tool_result`` blocks as tool messages, ``thinking``
blocks as the assistant's ``reasoning_content``), runs through
``create_chat_completion`` on a slot (the same chat template, tool-call
parsing and reasoning split), and the reply is turned back into content
blocks: ``thinking``, ``text``, ``tool_use``. Streams follow Anthropic's
event sequence: ``message_start``, per block ``content_block_start`` /
``content_block_delta`` (``text_delta``, ``thinking_delta``,
``input_json_delta``) / ``content_block_stop``, then ``message_delta`` with
``stop_reason`` and usage, and ``message_stop``. Errors have Anthropic's
shape (errors.py picks it by path).

A generation ended by one of the request's ``stop_sequences`` has
``stop_reason`` ``stop_sequence`` and that string as ``stop_sequence``.
Differences: thinking blocks carry an empty ``signature``.
``thinking.budget_tokens`` is the reasoning budget: past it, the template's
closing marker is written for the model and the answer follows.
"""
from __future__ import annotations

import json
import uuid
from typing import Any, Dict, List, Optional, Union

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette.sse import EventSourceResponse, ServerSentEvent

from . import work
from .errors import ANTHROPIC_PREFIX, bad_request, error_body, public_error
from .openai_routes import (_state, check_messages, check_stop, check_template_kwargs, check_tools, reasoning_budget,
                            reasoning_format, sampling_params, Sampling)
from .runner import Cancelled
from .security import check_messages_media

router = APIRouter()

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class MessagesBody(_Body):
    model: Optional[str] = None
    messages: List[Dict[str, Any]] = Field(min_length=1)
    system: Optional[Union[str, List[Dict[str, Any]]]] = None
    max_tokens: int
    stop_sequences: Optional[List[str]] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    top_k: Optional[int] = None
    stream: bool = False
    tools: Optional[List[Dict[str, Any]]] = None
    tool_choice: Optional[Dict[str, Any]] = None
    thinking: Optional[Dict[str, Any]] = None
    metadata: Optional[Dict[str, Any]] = None
    chat_template_kwargs: Optional[Dict[str, Any]] = None


class CountBody(_Body):
    model: Optional[str] = None
    messages: List[Dict[str, Any]] = Field(min_length=1)
    system: Optional[Union[str, List[Dict[str, Any]]]] = None
    tools: Optional[List[Dict[str, Any]]] = None
    tool_choice: Optional[Dict[str, Any]] = None
    thinking: Optional[Dict[str, Any]] = None


# ---------------------------------------------------------------------------
# Request: Anthropic's blocks -> OpenAI-shaped chat messages
# ---------------------------------------------------------------------------

def _text_of(blocks: Any, where: str) -> str:
    """The text of a string or of a list of text blocks."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise bad_request(f"{where} must be a string or a list of text blocks")
    out = []
    for i, b in enumerate(blocks):
        if not isinstance(b, dict) or b.get("type") != "text" or not isinstance(b.get("text"), str):
            raise bad_request(f"{where}[{i}] must be a text block ({{\"type\": \"text\", \"text\": ...}})")
        out.append(b["text"])
    return "\n".join(out)


def _image_part(block: Dict[str, Any], where: str) -> Dict[str, Any]:
    src = block.get("source")
    if not isinstance(src, dict):
        raise bad_request(f"{where}.source must be an object")
    if src.get("type") == "base64":
        if not isinstance(src.get("media_type"), str) or not isinstance(src.get("data"), str):
            raise bad_request(f"{where}.source needs media_type and data strings")
        url = f"data:{src['media_type']};base64,{src['data']}"
    elif src.get("type") == "url" and isinstance(src.get("url"), str):
        url = src["url"]
    else:
        raise bad_request(f"{where}.source.type must be \"base64\" or \"url\"")
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_result(block: Dict[str, Any], where: str) -> Dict[str, Any]:
    if not isinstance(block.get("tool_use_id"), str):
        raise bad_request(f"{where}.tool_use_id must be a string")
    content = block.get("content", "")
    if isinstance(content, list):  # text (and image) blocks: the text is what a tool message carries
        content = "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    elif not isinstance(content, str):
        raise bad_request(f"{where}.content must be a string or a list of blocks")
    if block.get("is_error"):
        content = f"Error: {content}"
    return {"role": "tool", "tool_call_id": block["tool_use_id"], "content": content}


def _user(content: Any, where: str) -> List[Dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    if not isinstance(content, list):
        raise bad_request(f"{where}.content must be a string or a list of content blocks")
    tools: List[Dict[str, Any]] = []
    parts: List[Dict[str, Any]] = []
    for i, b in enumerate(content):
        w = f"{where}.content[{i}]"
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text" and isinstance(b.get("text"), str):
            parts.append({"type": "text", "text": b["text"]})
        elif kind == "image":
            parts.append(_image_part(b, w))
        elif kind == "tool_result":
            tools.append(_tool_result(b, w))
        else:
            raise bad_request(f"{w}: a user message holds text, image and tool_result blocks, not {kind!r}")
    out = list(tools)  # the results answer the previous turn's calls: they come first
    if parts:
        simple = all(p["type"] == "text" for p in parts)
        out.append({"role": "user", "content": "\n".join(p["text"] for p in parts) if simple else parts})
    return out


def _assistant(content: Any, where: str) -> Dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    if not isinstance(content, list):
        raise bad_request(f"{where}.content must be a string or a list of content blocks")
    text, thinking, calls = [], [], []
    for i, b in enumerate(content):
        w = f"{where}.content[{i}]"
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text" and isinstance(b.get("text"), str):
            text.append(b["text"])
        elif kind == "thinking" and isinstance(b.get("thinking"), str):
            thinking.append(b["thinking"])
        elif kind == "redacted_thinking":
            continue  # opaque to a local model
        elif kind == "tool_use":
            if not isinstance(b.get("id"), str) or not isinstance(b.get("name"), str):
                raise bad_request(f"{w}: a tool_use block needs id and name strings")
            calls.append({"id": b["id"], "type": "function",
                          "function": {"name": b["name"], "arguments": json.dumps(b.get("input", {}))}})
        else:
            raise bad_request(f"{w}: an assistant message holds text, thinking and tool_use blocks, not {kind!r}")
    msg: Dict[str, Any] = {"role": "assistant", "content": "".join(text) if text or not calls else None}
    if thinking:
        msg["reasoning_content"] = "\n".join(thinking)
    if calls:
        msg["tool_calls"] = calls
    return msg


def chat_messages(body: Any) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    if body.system is not None:
        out.append({"role": "system", "content": _text_of(body.system, "system")})
    for i, m in enumerate(body.messages):
        where = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if role == "user":
            out += _user(m.get("content"), where)
        elif role == "assistant":
            out.append(_assistant(m.get("content"), where))
        else:
            raise bad_request(f"{where}.role must be \"user\" or \"assistant\" (the system prompt goes in system)")
    return out


def chat_tools(tools: Optional[List[Dict[str, Any]]]) -> Optional[List[Dict[str, Any]]]:
    if not tools:
        return None
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise bad_request(f"tools[{i}] needs a name")
        if "input_schema" not in t:
            # server tools (web search, bash, ...) run on Anthropic's side: there is nothing here to run them
            raise bad_request(f"tools[{i}] ({t['name']}): only client tools with an input_schema are supported")
        out.append({"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                                     "parameters": t["input_schema"]}})
    return out


def chat_tool_choice(choice: Optional[Dict[str, Any]]) -> Any:
    if choice is None:
        return None
    kind = choice.get("type")
    if kind == "auto":
        return "auto"
    if kind == "any":
        return "required"
    if kind == "none":
        return "none"
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise bad_request("tool_choice.type must be auto, any, none or tool (with a name)")


def template_kwargs(body: Any) -> Dict[str, Any]:
    kw = dict(check_template_kwargs(getattr(body, "chat_template_kwargs", None)))
    thinking = body.thinking
    if thinking is not None:
        kind = thinking.get("type") if isinstance(thinking, dict) else None
        if kind not in ("enabled", "disabled"):
            raise bad_request("thinking.type must be \"enabled\" or \"disabled\"")
        kw.setdefault("enable_thinking", kind == "enabled")
    return kw


# ---------------------------------------------------------------------------
# Reply: OpenAI-shaped chat completion -> Anthropic message
# ---------------------------------------------------------------------------

def _arguments(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return {"_raw": text}  # the model wrote arguments that are not JSON: kept, not dropped


def _usage(usage: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    usage = usage or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {"input_tokens": usage.get("prompt_tokens", 0), "output_tokens": usage.get("completion_tokens", 0),
            "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}


def _stop(finish: Any, stopped_by: Optional[str], stop_sequences: Optional[List[str]]) -> Dict[str, Any]:
    """stop_reason and stop_sequence: a request's own stop sequence is named (the chat
    format's end-of-turn strings are stops too, but they end the turn)."""
    if finish == "stop" and stopped_by is not None and stopped_by in (stop_sequences or []):
        return {"stop_reason": "stop_sequence", "stop_sequence": stopped_by}
    return {"stop_reason": _STOP_REASONS.get(finish, "end_turn"), "stop_sequence": None}


def to_message(result: Dict[str, Any], model: str, stop: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    choice = result["choices"][0]
    msg = choice["message"]
    content: List[Dict[str, Any]] = []
    if msg.get("reasoning_content"):
        content.append({"type": "thinking", "thinking": msg["reasoning_content"], "signature": ""})
    if msg.get("content"):
        content.append({"type": "text", "text": msg["content"]})
    for call in msg.get("tool_calls") or []:
        content.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                        "input": _arguments(call["function"].get("arguments", ""))})
    return {"id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant", "model": model,
            "content": content, **(stop or _stop(choice.get("finish_reason"), None, None)),
            "usage": _usage(result.get("usage"))}


class _StreamBlocks:
    """Turns the chat stream's deltas into Anthropic's block events: a new
    block starts when the kind of delta changes (thinking, text, each tool
    call); the open one stops first."""

    def __init__(self) -> None:
        self.index = -1
        self.open: Optional[tuple] = None  # ("text",) / ("thinking",) / ("tool", call index)
        self.events: List[ServerSentEvent] = []

    def _emit(self, kind: str, data: Dict[str, Any]) -> None:
        self.events.append(ServerSentEvent(data=json.dumps({"type": kind, **data}), event=kind))

    def _start(self, key: tuple, block: Dict[str, Any]) -> None:
        self.stop()
        self.index += 1
        self.open = key
        self._emit("content_block_start", {"index": self.index, "content_block": block})

    def stop(self) -> None:
        if self.open is not None:
            self._emit("content_block_stop", {"index": self.index})
            self.open = None

    def delta(self, d: Dict[str, Any]) -> None:
        if d.get("reasoning_content"):
            if self.open != ("thinking",):
                self._start(("thinking",), {"type": "thinking", "thinking": "", "signature": ""})
            self._emit("content_block_delta", {"index": self.index,
                                               "delta": {"type": "thinking_delta", "thinking": d["reasoning_content"]}})
        if d.get("content"):
            if self.open != ("text",):
                self._start(("text",), {"type": "text", "text": ""})
            self._emit("content_block_delta", {"index": self.index,
                                               "delta": {"type": "text_delta", "text": d["content"]}})
        for call in d.get("tool_calls") or []:
            key = ("tool", call.get("index", 0))
            fn = call.get("function") or {}
            if self.open != key:
                self._start(key, {"type": "tool_use", "id": call.get("id") or "toolu_" + uuid.uuid4().hex[:24],
                                  "name": fn.get("name", ""), "input": {}})
            if fn.get("arguments"):
                self._emit("content_block_delta", {"index": self.index,
                                                   "delta": {"type": "input_json_delta",
                                                             "partial_json": fn["arguments"]}})

    def take(self) -> List[ServerSentEvent]:
        out, self.events = self.events, []
        return out


def _event(kind: str, data: Dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps({"type": kind, **data}), event=kind)


# ---------------------------------------------------------------------------
# Routes
# ---------------------------------------------------------------------------

def _params(state: Any, body: MessagesBody) -> Dict[str, Any]:
    max_tokens = state.max_tokens(body.max_tokens)
    if body.max_tokens < 1:
        raise bad_request("max_tokens must be at least 1")
    messages = chat_messages(body)
    check_messages(messages)
    messages = check_messages_media(messages, state.settings.media_path, bool(state.settings.mmproj))
    tools = chat_tools(body.tools)
    check_tools(tools)
    sampling = Sampling.model_validate({k: v for k, v in (("temperature", body.temperature), ("top_p", body.top_p),
                                                           ("top_k", body.top_k)) if v is not None})
    params = dict(messages=messages, tools=tools, tool_choice=chat_tool_choice(body.tool_choice),
                  max_tokens=max_tokens, model=state.model_name, reasoning_format=reasoning_format(state, None),
                  **dict(sampling_params(sampling), stop=check_stop(body.stop_sequences, "stop_sequences"),
                         stream=body.stream))
    # thinking.budget_tokens is the reasoning budget (the server's --reasoning-budget otherwise)
    given = (body.thinking or {}).get("budget_tokens") if (body.thinking or {}).get("type") == "enabled" else None
    budget = reasoning_budget(state, given, "thinking.budget_tokens")
    if budget is not None:
        params["reasoning_budget"] = budget
    return params


@router.post("/v1/messages")
async def messages(body: MessagesBody, request: Request) -> Any:
    state = _state(request)
    state.require_ready()
    state.require_generator()
    params = _params(state, body)
    kw = template_kwargs(body)
    job, meta = await state.start_job(state.cap_generation(work.chat_work(params, kw), params))
    if not body.stream:
        result = await state.result(job, request)
        return to_message(result, state.model_name,
                          _stop(result["choices"][0].get("finish_reason"), job.stop_sequence, body.stop_sequences))

    async def events() -> Any:
        msg_id = "msg_" + uuid.uuid4().hex[:24]
        start = {"id": msg_id, "type": "message", "role": "assistant", "model": state.model_name, "content": [],
                 "stop_reason": None, "stop_sequence": None,
                 "usage": {"input_tokens": getattr(meta, "n_prompt", None) or 0, "output_tokens": 0}}
        yield _event("message_start", {"message": start})
        yield _event("ping", {})
        blocks = _StreamBlocks()
        finish, usage = None, None
        try:
            async for chunk in state.stream(job):
                for choice in chunk.get("choices") or []:
                    blocks.delta(choice.get("delta") or {})
                    finish = choice.get("finish_reason") or finish
                usage = chunk.get("usage") or usage
                for ev in blocks.take():
                    yield ev
        except Exception as e:  # mid-stream: Anthropic's error event (never a cut connection)
            err = state.cancel_error(job, e) if isinstance(e, Cancelled) else e
            status, message, _ = public_error(err)
            yield _event("error", error_body(status, message, None, ANTHROPIC_PREFIX))
            return
        blocks.stop()
        for ev in blocks.take():
            yield ev
        u = _usage(usage)
        yield _event("message_delta", {"delta": _stop(finish, job.stop_sequence, body.stop_sequences),
                                       "usage": {"output_tokens": u["output_tokens"],
                                                 "input_tokens": u["input_tokens"],
                                                 "cache_read_input_tokens": u["cache_read_input_tokens"]}})
        yield _event("message_stop", {})

    return EventSourceResponse(state.until_done(job, events()), sep="\n")


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountBody, request: Request) -> Any:
    """The prompt's token count as the chat template renders it (tools included)."""
    state = _state(request)
    state.require_ready()
    messages = chat_messages(body)
    check_messages(messages)
    tools = chat_tools(body.tools)
    check_tools(tools)
    kw = template_kwargs(body)
    params = dict(messages=messages, tools=tools, tool_choice=chat_tool_choice(body.tool_choice), max_tokens=None)

    def count(llama: Any) -> Dict[str, Any]:
        tokens = work.chat_work(params, kw).prepare(llama, llama.n_ctx())  # type: ignore[attr-defined]
        if tokens is None:
            raise bad_request("this model's chat handler (images) cannot count tokens before it runs")
        return {"input_tokens": len(tokens)}

    return await state.run_job(work.call_work(count))
