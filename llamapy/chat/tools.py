"""Tools in chat: describing them to models whose format has no place for
them, finding the calls in what a model wrote, and streaming around them.

Calls are recognized in the syntaxes models are trained on:
- Hermes / Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (one block per call);
- Qwen3-Coder / Qwen3.5 XML: ``<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...
  </function></tool_call>``; a value is text, read as the tool's schema types it (a string stays
  a string; numbers, booleans, objects and arrays are parsed as JSON; without a schema, text
  that is valid JSON other than a plain string is parsed);
- Mistral: ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]``, and Mistral Small 3.2 /
  Devstral's ``[TOOL_CALLS]NAME[ARGS]{...}`` (``[CALL_ID]ID`` before ``[ARGS]`` optional), one per call;
- GLM-4.5 / 4.6: ``<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...</tool_call>``,
  values typed by the tool's schema as in the XML syntax;
- Llama 3.1: ``{"name": ..., "parameters": {...}}``, optionally after ``<|python_tag|>``;
- DeepSeek R1: ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME ```json ARGS ``` <｜tool▁call▁end｜>``;
- Gemma 4: ``<|tool_call>call:NAME{key:VALUE,...}<tool_call|>``, its own value syntax (strings
  between ``<|"|>`` marks, bare keys, JSON numbers, booleans and null, ``{}`` and ``[]``), as
  its chat template writes the calls of the history;
- bare JSON (an object, or a list of objects, naming a declared tool).
A value cut short (the reply ended at max_tokens) is kept as written; a call whose markup is
cut (a tag left open) or whose JSON does not parse is no call, and the text stays content.
Control tokens such as ``[TOOL_CALLS]`` may be missing from the text (they
detokenize to nothing), so the bare forms are accepted whenever tools were
offered and the named tool exists.

Not here: grammars that force a call (``completion.py`` builds them).
"""
from __future__ import annotations

import json
import re
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

ToolCall = Dict[str, Any]  # OpenAI shape: {"id", "type": "function", "function": {"name", "arguments"}}

_DECODER = json.JSONDecoder()
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_DEEPSEEK = re.compile(r"<\uff5ctool\u2581call\u2581begin\uff5c>\s*(?:function)?\s*<\uff5ctool\u2581sep\uff5c>\s*"
                       r"([^\n]+?)\s*\n\s*```(?:json)?\s*(.*?)\s*```", re.S)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)
# Openings of explicit call syntaxes; text from the first one on is held back while streaming.
GEMMA4_CALL, GEMMA4_CALL_END, GEMMA4_QUOTE = "<|tool_call>", "<tool_call|>", '<|"|>'
CALL_MARKERS = ("<tool_call>", "[TOOL_CALLS]", "<|python_tag|>", "<\uff5ctool\u2581calls\u2581begin\uff5c>",
                "<\uff5ctool\u2581call\u2581begin\uff5c>", GEMMA4_CALL)


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def make_call(name: str, arguments: Any, call_id: Optional[str] = None) -> ToolCall:
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    return {"id": call_id or new_call_id(), "type": "function", "function": {"name": name, "arguments": arguments}}


def _json_values(text: str) -> List[Any]:
    """All JSON values in ``text``, one after another (separated by spaces, commas or semicolons)."""
    values, i, text = [], 0, text.strip()
    while i < len(text):
        while i < len(text) and text[i] in " \t\r\n,;":
            i += 1
        if i >= len(text):
            break
        value, i = _DECODER.raw_decode(text, i)
        values.append(value)
    return values


_MISTRAL_NAMED = re.compile(r"\s*([^\s\[\]{}]+)\s*(?:\[CALL_ID\]\s*([^\s\[]*)\s*)?\[ARGS\]\s*")


def _mistral_named_calls(tail: str) -> List[ToolCall]:
    """``[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}`` blocks, one per call, at the head of ``tail``
    (ValueError if it is not made of them)."""
    calls, i = [], 0
    while i < len(tail):
        if not tail.startswith("[TOOL_CALLS]", i):
            raise ValueError("expected [TOOL_CALLS]")
        m = _MISTRAL_NAMED.match(tail, i + len("[TOOL_CALLS]"))
        if not m:
            raise ValueError("expected NAME[ARGS]")
        args, i = _DECODER.raw_decode(tail, m.end())
        calls.append(make_call(m.group(1), args))
        while i < len(tail) and tail[i].isspace():
            i += 1
    return calls


_GLM_NAME = re.compile(r"[\w.\-]+")
_GLM_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)(?:</arg_value>|$)", re.S)


def _glm_call(body: str, names: Any) -> ToolCall:
    """GLM-4.5/4.6's call: the name, then key / value tags (ValueError if a tag is cut)."""
    name = body.split("<arg_key>", 1)[0].strip()
    pairs = _GLM_PAIR.findall(body)
    # the bare name is ambiguous text, so it must be a declared tool's
    if not _GLM_NAME.fullmatch(name) or (names and name not in names) or len(pairs) != body.count("<arg_key>"):
        raise ValueError("malformed GLM call")
    props: Dict[str, Any] = {}
    if isinstance(names, dict) and isinstance(names.get(name), dict):
        props = names[name].get("properties") or {}
    return make_call(name, {k.strip(): _xml_value(v, props.get(k.strip())) for k, v in pairs})


_XML_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|$)", re.S)
_XML_PARAM = re.compile(r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|$)", re.S)


def _xml_value(text: str, schema: Any) -> Any:
    """A parameter's text as its schema types it. The model writes each value
    on lines of its own: one newline on each side belongs to the syntax."""
    if text.startswith("\n"):
        text = text[1:]
    if text.endswith("\n"):
        text = text[:-1]
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "string" or (isinstance(kind, list) and "string" in kind and len(kind) == 1):
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if kind is None and isinstance(value, str):
        return text  # a quoted string stays as the model wrote it
    return value


def _xml_calls(body: str, names: Any) -> List[ToolCall]:
    """The calls of one <tool_call> block in the XML syntax; [] if it has none."""
    calls = []
    for name, inner in _XML_FUNCTION.findall(body):
        name = name.strip()
        props: Dict[str, Any] = {}
        if isinstance(names, dict) and isinstance(names.get(name), dict):
            props = names[name].get("properties") or {}
        params = _XML_PARAM.findall(inner)
        if len(params) != inner.count("<parameter="):
            raise ValueError("a <parameter=...> tag is cut")
        args = {key.strip(): _xml_value(val, props.get(key.strip())) for key, val in params}
        calls.append(make_call(name, args))
    return calls


_G_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_G_WORDS = {"true": True, "false": False, "null": None}


def _gemma4_value(text: str, i: int) -> Tuple[Any, int]:
    """One value of Gemma 4's call syntax at ``text[i:]``: (value, index after it); ValueError if
    there is none."""
    while i < len(text) and text[i].isspace():
        i += 1
    if text.startswith(GEMMA4_QUOTE, i):
        end = text.find(GEMMA4_QUOTE, i + len(GEMMA4_QUOTE))
        if end < 0:
            raise ValueError("unterminated string")
        return text[i + len(GEMMA4_QUOTE):end], end + len(GEMMA4_QUOTE)
    if text.startswith("{", i) or text.startswith("[", i):
        close = "}" if text[i] == "{" else "]"
        obj: Any = {} if close == "}" else []
        i += 1
        while True:
            while i < len(text) and text[i].isspace():
                i += 1
            if text.startswith(close, i):
                return obj, i + 1
            if obj:
                if not text.startswith(",", i):
                    raise ValueError("expected , or " + close)
                i += 1
            if close == "]":
                value, i = _gemma4_value(text, i)
                obj.append(value)
                continue
            while i < len(text) and text[i].isspace():
                i += 1
            if text.startswith(GEMMA4_QUOTE, i):  # a key in string marks (the tool schemas' form)
                key, i = _gemma4_value(text, i)
            else:
                colon = text.find(":", i)
                if colon < 0 or any(c in text[i:colon] for c in "{}[],"):
                    raise ValueError("expected a key")
                key, i = text[i:colon].strip(), colon
            if not text.startswith(":", i):
                raise ValueError("expected :")
            obj[key], i = _gemma4_value(text, i + 1)
    for word, value in _G_WORDS.items():
        if text.startswith(word, i):
            return value, i + len(word)
    m = _G_NUMBER.match(text, i)
    if not m:
        raise ValueError("no value")
    return json.loads(m.group(0)), m.end()


def _gemma4_calls(text: str) -> List[ToolCall]:
    """The calls at the head of ``text`` (which starts with <|tool_call>), one block each; a block
    whose closing mark is missing counts only at the end of the text (a reply cut there)."""
    calls, i = [], 0
    while text.startswith(GEMMA4_CALL, i):
        i += len(GEMMA4_CALL)
        if not text.startswith("call:", i):
            raise ValueError("expected call:")
        brace = text.find("{", i)
        if brace < 0:
            raise ValueError("no arguments")
        name = text[i + len("call:"):brace].strip()
        args, i = _gemma4_value(text, brace)
        if not name or not isinstance(args, dict):
            raise ValueError("bad call")
        calls.append(make_call(name, args))
        if text.startswith(GEMMA4_CALL_END, i):
            i += len(GEMMA4_CALL_END)
        elif text[i:].strip():
            raise ValueError("expected " + GEMMA4_CALL_END)
        while i < len(text) and text[i].isspace():
            i += 1
    return calls


def _as_calls(value: Any, names: Optional[Sequence[str]], strict: bool) -> List[ToolCall]:
    """Calls described by a decoded JSON value; [] if it does not describe calls
    (``strict``: every call must name one of ``names``)."""
    items = value if isinstance(value, list) else [value]
    calls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return []
        if strict and (names is None or item["name"] not in names):
            return []
        args = item.get("arguments", item.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
        call_id = item.get("id") if isinstance(item.get("id"), str) else None
        calls.append(make_call(item["name"], args, call_id))
    return calls


def find_tool_calls(text: str, names: Optional[Sequence[str]] = None) -> Tuple[int, List[ToolCall]]:
    """(index where the calls begin, calls) in model output; (-1, []) if none.
    ``names``: the declared tools' names, or a dict of name -> parameters
    schema (``tool_schemas``), which the XML syntax uses to type values."""
    cut = min((i for i in (text.find(m) for m in CALL_MARKERS) if i >= 0), default=-1)
    if cut >= 0:
        tail = text[cut:]
        calls: List[ToolCall] = []
        try:
            if tail.startswith("<tool_call>"):
                for body in _HERMES.findall(tail):
                    if body.startswith("<function="):
                        calls += _xml_calls(body, names)
                    elif body[:1] in ("{", "["):
                        calls += _as_calls(_json_values(body)[0], names, strict=False)
                    else:
                        calls.append(_glm_call(body, names))
            elif tail.startswith("[TOOL_CALLS]") and tail[len("[TOOL_CALLS]"):].lstrip()[:1] not in ("[", "{"):
                calls = _mistral_named_calls(tail)
            elif tail.startswith(("[TOOL_CALLS]", "<|python_tag|>")):
                body = tail[len("[TOOL_CALLS]"):] if tail.startswith("[TOOL_CALLS]") else tail[len("<|python_tag|>"):]
                for value in _json_values(body):
                    calls += _as_calls(value, names, strict=False)
            elif tail.startswith(GEMMA4_CALL):
                calls = _gemma4_calls(tail)
            else:
                for name, args in _DEEPSEEK.findall(tail):
                    calls.append(make_call(name.strip(), json.loads(args)))
        except (ValueError, IndexError):
            calls = []
        return (cut, calls) if calls else (-1, [])
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    if body[:1] not in ("{", "["):
        return -1, []
    try:
        per_value = [_as_calls(v, names, strict=True) for v in _json_values(body)]
    except ValueError:
        return -1, []
    if not per_value or not all(per_value):
        return -1, []
    return 0, [c for calls in per_value for c in calls]


def parse_tool_calls(text: str, names: Optional[Sequence[str]] = None) -> Tuple[Optional[str], List[ToolCall]]:
    """Split model output into (content, tool calls). Content is the text
    before the calls (None if empty); with no calls found, it is all of ``text``."""
    cut, calls = find_tool_calls(text, names)
    if not calls:
        return text, []
    return (text[:cut].strip() or None), calls


class ToolCallStream:
    """Streams content while holding back text that may be a tool call.

    ``push(text)`` returns the text that is surely content (whitespace at its end
    waits for what follows). Output that
    starts (after spaces) with ``{`` or ``[`` is held to the end, as is
    everything from a call marker on; ``finish()`` parses what was held and
    returns (remaining content, calls)."""

    def __init__(self, names: Optional[Sequence[str]]) -> None:
        self.names = names
        self.released = ""   # content given out so far
        self.held = ""       # text not given out yet
        self.holding_all = False

    def push(self, text: str) -> str:
        self.held += text
        if self.holding_all:
            return ""
        if not self.released and self.held.lstrip()[:1] in ("", "{", "[", "`"):
            if self.held.lstrip()[:1] in ("{", "[", "`"):
                self.holding_all = True
            return ""
        # Whitespace at the end is held too: before a call it is dropped, as parse_tool_calls drops it.
        cut = min((i for i in (self.held.find(m) for m in CALL_MARKERS) if i >= 0), default=-1)
        if cut >= 0:
            self.holding_all = True
            out = self.held[:cut].rstrip()
        else:
            keep = partial_marker_len(self.held, CALL_MARKERS)
            out = self.held[: len(self.held) - keep].rstrip()
        self.held = self.held[len(out):]
        self.released += out
        return out

    def finish(self) -> Tuple[str, List[ToolCall]]:
        full = self.released + self.held
        cut, calls = find_tool_calls(full, self.names)
        if not calls:
            rest, self.held = self.held, ""
            return rest, []
        self.held = ""
        return full[len(self.released):max(cut, len(self.released))].rstrip(), calls


def partial_marker_len(text: str, markers: Sequence[str]) -> int:
    """Length of the longest suffix of ``text`` that begins one of ``markers``
    (what a stream holds back: the marker may be completed by the next piece)."""
    best = 0
    for m in markers:
        for n in range(min(len(m) - 1, len(text)), best, -1):
            if text.endswith(m[:n]):
                best = n
                break
    return best


def tool_names(tools: Optional[Sequence[Dict[str, Any]]]) -> List[str]:
    return [t["function"]["name"] for t in tools or [] if isinstance(t, dict) and "function" in t]


def tool_schemas(tools: Optional[Sequence[Dict[str, Any]]]) -> Dict[str, Any]:
    """The declared tools' parameters schemas by name (what find_tool_calls takes as ``names``)."""
    return {t["function"]["name"]: t["function"].get("parameters") or {}
            for t in tools or [] if isinstance(t, dict) and "function" in t}


def tools_system_prompt(tools: Sequence[Dict[str, Any]]) -> str:
    """Describes tools for formats that have no place for them, in the
    Hermes syntax that ``parse_tool_calls`` reads back."""
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return ("You can call functions to help with the user's request. They are described here, "
            "one JSON signature per line, between <tools> and </tools>:\n"
            f"<tools>\n{lines}\n</tools>\n"
            "To call a function, answer with one block per call, each holding a JSON object with the "
            "function's name and its arguments:\n"
            '<tool_call>\n{"name": "<function name>", "arguments": {<arguments as JSON>}}\n</tool_call>')


def call_as_text(call: Dict[str, Any]) -> str:
    """An assistant's earlier tool call, written back in the Hermes syntax."""
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    return "<tool_call>\n" + json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False) + \
        "\n</tool_call>"
