"""OpenAI's Responses API: ``POST /v1/responses``, ``GET`` and ``DELETE
/v1/responses/{id}``, for agents that speak it (the openai SDK's
``client.responses``, Codex-style tools).

Thin over the library, like every route: the input items become chat
messages (``instructions`` as the system message; message items with
input_text / input_image / output_text parts; ``function_call`` items as the
assistant's tool calls, ``function_call_output`` items as tool messages;
``reasoning`` items as the assistant's ``reasoning_content``), run through
``create_chat_completion`` on a slot, and the reply comes back as output
items: ``reasoning``, ``message`` (output_text), ``function_call``. Streams
send the Responses event types (response.created, response.output_item.added,
response.output_text.delta, response.function_call_arguments.delta,
response.reasoning_text.delta, ... response.completed), each with its
sequence_number.

``previous_response_id`` continues a conversation from a bounded in-memory
store (the last ``STORE_MAX`` stored responses, least recently used first
out); ``store: false`` keeps nothing. The store lives in the server process:
a restart forgets it, and a response id from elsewhere is a 404.
"""
from __future__ import annotations

import collections
import json
import threading
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple, Union

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette.sse import EventSourceResponse, ServerSentEvent

from . import work
from .errors import APIError, bad_request, public_error
from .openai_routes import (_state, check_messages, check_response_format, check_template_kwargs, check_tools,
                            reasoning_format, sampling_params, Sampling)
from .runner import Cancelled
from .security import check_messages_media

router = APIRouter()

STORE_MAX = 256  # stored responses kept for previous_response_id and GET


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class ResponsesBody(_Body):
    model: Optional[str] = None
    input: Union[str, List[Dict[str, Any]]] = Field(default="")
    instructions: Optional[str] = None
    tools: Optional[List[Dict[str, Any]]] = None
    tool_choice: Optional[Union[str, Dict[str, Any]]] = None
    max_output_tokens: Optional[int] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    stream: bool = False
    store: bool = True
    previous_response_id: Optional[str] = None
    text: Optional[Dict[str, Any]] = None
    reasoning: Optional[Dict[str, Any]] = None
    metadata: Optional[Dict[str, Any]] = None
    parallel_tool_calls: Optional[bool] = None
    chat_template_kwargs: Optional[Dict[str, Any]] = None


class ResponseStore:
    """The stored responses and the conversation each one ends (its chat
    messages, the reply included), bounded, least recently used out first."""

    def __init__(self, limit: int = STORE_MAX) -> None:
        self.limit = limit
        self._items: "collections.OrderedDict[str, Tuple[Dict[str, Any], List[Dict[str, Any]]]]" = \
            collections.OrderedDict()
        self._lock = threading.Lock()

    def put(self, response: Dict[str, Any], messages: List[Dict[str, Any]]) -> None:
        with self._lock:
            self._items[response["id"]] = (response, messages)
            self._items.move_to_end(response["id"])
            while len(self._items) > self.limit:
                self._items.popitem(last=False)

    def get(self, rid: str) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
        with self._lock:
            if rid not in self._items:
                raise APIError(404, f"no stored response with id {rid!r} (this server keeps the last {self.limit} "
                                    "responses stored with store=true, in memory)", "not_found")
            self._items.move_to_end(rid)
            return self._items[rid]

    def delete(self, rid: str) -> None:
        self.get(rid)
        with self._lock:
            self._items.pop(rid, None)


def _store(request: Request) -> ResponseStore:
    app_state = request.app.state
    if not hasattr(app_state, "responses"):
        app_state.responses = ResponseStore()
    return app_state.responses


# ---------------------------------------------------------------------------
# Request: input items -> chat messages
# ---------------------------------------------------------------------------

def _parts(content: Any, where: str) -> Any:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{where}.content must be a string or a list of content parts")
    parts = []
    for i, p in enumerate(content):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(p.get("text"), str):
            parts.append({"type": "text", "text": p["text"]})
        elif kind == "input_image" and isinstance(p.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": p["image_url"]}})
        else:
            raise bad_request(f"{where}.content[{i}]: parts are input_text, output_text or input_image (with an "
                              f"image_url), not {kind!r}")
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def input_messages(items: Union[str, List[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}] if items else []
    out: List[Dict[str, Any]] = []

    def assistant() -> Dict[str, Any]:
        # consecutive reasoning, message and function_call items are one assistant turn
        if not out or out[-1]["role"] != "assistant":
            out.append({"role": "assistant", "content": None})
        return out[-1]

    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"{where} must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise bad_request(f"{where}.role must be user, assistant, system or developer")
            content = _parts(item.get("content"), where)
            if role == "assistant":
                turn = assistant()
                text = content if isinstance(content, str) else "".join(
                    p.get("text", "") for p in content if p.get("type") == "text")
                turn["content"] = (turn["content"] or "") + text
            else:
                out.append({"role": "system" if role == "developer" else role, "content": content})
        elif kind == "function_call":
            if not isinstance(item.get("call_id"), str) or not isinstance(item.get("name"), str):
                raise bad_request(f"{where}: a function_call item needs call_id and name strings")
            turn = assistant()
            turn.setdefault("tool_calls", []).append(
                {"id": item["call_id"], "type": "function",
                 "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"}})
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise bad_request(f"{where}: a function_call_output item needs a call_id string")
            output = item.get("output", "")
            out.append({"role": "tool", "tool_call_id": item["call_id"],
                        "content": output if isinstance(output, str) else json.dumps(output)})
        elif kind == "reasoning":
            texts = [p.get("text", "") for p in (item.get("content") or item.get("summary") or [])
                     if isinstance(p, dict)]
            turn = assistant()
            turn["reasoning_content"] = (turn.get("reasoning_content") or "") + "\n".join(texts)
        else:
            raise bad_request(f"{where}.type {kind!r} is not supported (message, function_call, "
                              "function_call_output, reasoning)")
    return out


def chat_tools(tools: Optional[List[Dict[str, Any]]]) -> Optional[List[Dict[str, Any]]]:
    if not tools:
        return None
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(t.get("name"), str):
            raise bad_request(f"tools[{i}]: only function tools ({{\"type\": \"function\", \"name\": ...}}) run "
                              "here (built-in tools such as web_search run on OpenAI's side)")
        out.append({"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                                     "parameters": t.get("parameters") or {"type": "object"}}})
    return out


def chat_tool_choice(choice: Any) -> Any:
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise bad_request("tool_choice must be auto, none, required or {\"type\": \"function\", \"name\": ...}")


def response_format(text: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    fmt = (text or {}).get("format")
    if fmt is None or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name", "response"),
                                                       "schema": fmt.get("schema") or {},
                                                       "strict": fmt.get("strict", False)}}
    raise bad_request("text.format.type must be text, json_object or json_schema")


# ---------------------------------------------------------------------------
# Reply: chat completion -> output items
# ---------------------------------------------------------------------------

def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def _usage(usage: Optional[Dict[str, Any]], reasoning_tokens: int = 0) -> Dict[str, Any]:
    usage = usage or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {"input_tokens": usage.get("prompt_tokens", 0), "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": usage.get("completion_tokens", 0),
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": usage.get("total_tokens", 0)}


def _message_item(text: str) -> Dict[str, Any]:
    return {"type": "message", "id": _new_id("msg"), "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def _reasoning_item(text: str) -> Dict[str, Any]:
    return {"type": "reasoning", "id": _new_id("rs"), "summary": [],
            "content": [{"type": "reasoning_text", "text": text}]}


def _call_item(call: Dict[str, Any]) -> Dict[str, Any]:
    return {"type": "function_call", "id": _new_id("fc"), "call_id": call["id"], "name": call["function"]["name"],
            "arguments": call["function"].get("arguments", ""), "status": "completed"}


def output_items(message: Dict[str, Any]) -> List[Dict[str, Any]]:
    items = []
    if message.get("reasoning_content"):
        items.append(_reasoning_item(message["reasoning_content"]))
    if message.get("content"):
        items.append(_message_item(message["content"]))
    items += [_call_item(c) for c in message.get("tool_calls") or []]
    return items


def _envelope(rid: str, body: ResponsesBody, model: str, status: str, created: int) -> Dict[str, Any]:
    return {"id": rid, "object": "response", "created_at": created, "status": status, "model": model,
            "output": [], "error": None, "incomplete_details": None, "instructions": body.instructions,
            "max_output_tokens": body.max_output_tokens, "previous_response_id": body.previous_response_id,
            "temperature": body.temperature, "top_p": body.top_p, "tools": body.tools or [],
            "tool_choice": body.tool_choice or "auto", "parallel_tool_calls": body.parallel_tool_calls is not False,
            "text": body.text or {"format": {"type": "text"}}, "reasoning": body.reasoning, "store": body.store,
            "metadata": body.metadata or {}, "usage": None}


def _finish(resp: Dict[str, Any], finish: Optional[str], usage: Optional[Dict[str, Any]], llama: Any) -> None:
    if finish == "length":
        resp["status"], resp["incomplete_details"] = "incomplete", {"reason": "max_output_tokens"}
    else:
        resp["status"] = "completed"
    # the reasoning's tokens: its text tokenized again (the markers around it are not counted)
    reasoning = "".join(p["text"] for it in resp["output"] if it["type"] == "reasoning" for p in it["content"])
    n = len(llama.tokenize(reasoning.encode("utf-8"), add_bos=False, special=False)) if reasoning else 0
    resp["usage"] = _usage(usage, n)


def _reply_message(items: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The output items as the assistant message the next turn's history holds."""
    msg: Dict[str, Any] = {"role": "assistant", "content": None}
    for it in items:
        if it["type"] == "reasoning":
            msg["reasoning_content"] = "".join(p["text"] for p in it["content"])
        elif it["type"] == "message":
            msg["content"] = "".join(p["text"] for p in it["content"])
        elif it["type"] == "function_call":
            msg.setdefault("tool_calls", []).append(
                {"id": it["call_id"], "type": "function", "function": {"name": it["name"],
                                                                      "arguments": it["arguments"]}})
    return msg


# ---------------------------------------------------------------------------
# Routes
# ---------------------------------------------------------------------------

def _conversation(request: Request, body: ResponsesBody) -> List[Dict[str, Any]]:
    history: List[Dict[str, Any]] = []
    if body.previous_response_id is not None:
        _, history = _store(request).get(body.previous_response_id)
        history = [m for m in history if m["role"] != "system"]  # this request's instructions replace them
    messages = ([{"role": "system", "content": body.instructions}] if body.instructions else []) + history + \
        input_messages(body.input)
    if not any(m["role"] != "system" for m in messages):
        raise bad_request("input is empty: give a string or at least one input item")
    return messages


def _params(state: Any, body: ResponsesBody, messages: List[Dict[str, Any]]) -> Dict[str, Any]:
    max_tokens = state.max_tokens(body.max_output_tokens, "max_output_tokens")
    check_messages(messages)
    messages = check_messages_media(messages, state.settings.media_path, bool(state.settings.mmproj))
    tools = chat_tools(body.tools)
    check_tools(tools)
    fmt = response_format(body.text)
    check_response_format(fmt)
    sampling = Sampling.model_validate({k: v for k, v in (("temperature", body.temperature), ("top_p", body.top_p))
                                        if v is not None})
    return dict(messages=messages, tools=tools, tool_choice=chat_tool_choice(body.tool_choice),
                response_format=fmt, max_tokens=max_tokens, model=state.model_name,
                reasoning_format=reasoning_format(state, None), **dict(sampling_params(sampling), stream=body.stream))


def _template_kwargs(body: ResponsesBody) -> Dict[str, Any]:
    kw = dict(check_template_kwargs(body.chat_template_kwargs))
    effort = (body.reasoning or {}).get("effort")
    if effort is not None:
        if effort not in ("minimal", "low", "medium", "high"):
            raise bad_request("reasoning.effort must be minimal, low, medium or high")
        kw.setdefault("reasoning_effort", "low" if effort == "minimal" else effort)
    return kw


@router.post("/v1/responses")
async def create_response(body: ResponsesBody, request: Request) -> Any:
    state = _state(request)
    state.require_ready()
    state.require_generator()
    messages = _conversation(request, body)
    params = _params(state, body, messages)
    kw = _template_kwargs(body)
    job, _ = await state.start_job(state.cap_generation(work.chat_work(params, kw), params))
    rid, created = _new_id("resp"), int(time.time())
    store = _store(request)

    def keep(resp: Dict[str, Any]) -> None:
        if body.store:
            store.put(resp, messages + [_reply_message(resp["output"])])

    if not body.stream:
        result = await state.result(job, request)
        resp = _envelope(rid, body, state.model_name, "completed", created)
        choice = result["choices"][0]
        resp["output"] = output_items(choice["message"])
        _finish(resp, choice.get("finish_reason"), result.get("usage"), state.llama)
        keep(resp)
        return resp

    async def events() -> Any:
        stream = _ResponseStream(_envelope(rid, body, state.model_name, "in_progress", created))
        yield stream.event("response.created", response=stream.snapshot())
        yield stream.event("response.in_progress", response=stream.snapshot())
        finish, usage = None, None
        try:
            async for chunk in state.stream(job):
                for choice in chunk.get("choices") or []:
                    for ev in stream.delta(choice.get("delta") or {}):
                        yield ev
                    finish = choice.get("finish_reason") or finish
                usage = chunk.get("usage") or usage
        except Exception as e:  # mid-stream: an error event (never a cut connection)
            err = state.cancel_error(job, e) if isinstance(e, Cancelled) else e
            status, message, code = public_error(err)
            yield stream.event("error", code=str(code), message=message, param=None)
            return
        for ev in stream.close_item():
            yield ev
        resp = stream.resp
        _finish(resp, finish, usage, state.llama)
        keep(resp)
        yield stream.event("response.incomplete" if resp["status"] == "incomplete" else "response.completed",
                           response=stream.snapshot())

    return EventSourceResponse(state.until_done(job, events()), sep="\n")


class _ResponseStream:
    """Turns the chat stream's deltas into the Responses stream events: one
    output item per kind of delta in a row (reasoning, message text, each
    function call), opened and closed with its added / done events."""

    def __init__(self, resp: Dict[str, Any]) -> None:
        self.resp = resp
        self.seq = 0
        self.key: Optional[tuple] = None
        self.item: Optional[Dict[str, Any]] = None

    def snapshot(self) -> Dict[str, Any]:
        return json.loads(json.dumps(self.resp))

    def event(self, kind: str, **data: Any) -> ServerSentEvent:
        payload = {"type": kind, "sequence_number": self.seq, **data}
        self.seq += 1
        return ServerSentEvent(data=json.dumps(payload), event=kind)

    @property
    def index(self) -> int:
        return len(self.resp["output"]) - 1

    def _open(self, key: tuple, item: Dict[str, Any]) -> List[ServerSentEvent]:
        evs = self.close_item()
        self.key, self.item = key, item
        self.resp["output"].append(item)
        evs.append(self.event("response.output_item.added", output_index=self.index,
                              item={**item, "status": "in_progress"}))
        if item["type"] in ("message", "reasoning"):
            part = item["content"][0]
            evs.append(self.event("response.content_part.added", item_id=item["id"], output_index=self.index,
                                  content_index=0, part={**part, "text": ""}))
        return evs

    def close_item(self) -> List[ServerSentEvent]:
        if self.item is None:
            return []
        item, evs = self.item, []
        if item["type"] in ("message", "reasoning"):
            part = item["content"][0]
            done = "response.output_text.done" if item["type"] == "message" else "response.reasoning_text.done"
            evs.append(self.event(done, item_id=item["id"], output_index=self.index, content_index=0,
                                  text=part["text"]))
            evs.append(self.event("response.content_part.done", item_id=item["id"], output_index=self.index,
                                  content_index=0, part=part))
        else:
            evs.append(self.event("response.function_call_arguments.done", item_id=item["id"],
                                  output_index=self.index, arguments=item["arguments"]))
        evs.append(self.event("response.output_item.done", output_index=self.index, item=item))
        self.key, self.item = None, None
        return evs

    def delta(self, d: Dict[str, Any]) -> List[ServerSentEvent]:
        evs: List[ServerSentEvent] = []
        if d.get("reasoning_content"):
            if self.key != ("reasoning",):
                evs += self._open(("reasoning",), _reasoning_item(""))
            self.item["content"][0]["text"] += d["reasoning_content"]  # type: ignore[index]
            evs.append(self.event("response.reasoning_text.delta", item_id=self.item["id"],  # type: ignore[index]
                                  output_index=self.index, content_index=0, delta=d["reasoning_content"]))
        if d.get("content"):
            if self.key != ("message",):
                evs += self._open(("message",), _message_item(""))
            self.item["content"][0]["text"] += d["content"]  # type: ignore[index]
            evs.append(self.event("response.output_text.delta", item_id=self.item["id"],  # type: ignore[index]
                                  output_index=self.index, content_index=0, delta=d["content"]))
        for call in d.get("tool_calls") or []:
            key = ("call", call.get("index", 0))
            fn = call.get("function") or {}
            if self.key != key:
                evs += self._open(key, _call_item({"id": call.get("id") or _new_id("call"),
                                                   "function": {"name": fn.get("name", ""), "arguments": ""}}))
            if fn.get("arguments"):
                self.item["arguments"] += fn["arguments"]  # type: ignore[index]
                evs.append(self.event("response.function_call_arguments.delta",
                                      item_id=self.item["id"], output_index=self.index,  # type: ignore[index]
                                      delta=fn["arguments"]))
        return evs


@router.get("/v1/responses/{rid}")
async def get_response(rid: str, request: Request) -> Any:
    resp, _ = _store(request).get(rid)
    return resp


@router.delete("/v1/responses/{rid}")
async def delete_response(rid: str, request: Request) -> Any:
    _store(request).delete(rid)
    return {"id": rid, "object": "response.deleted", "deleted": True}

