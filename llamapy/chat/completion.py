"""Chat completions: OpenAI-shaped chat on top of ``Llama.create_completion``.

``create_chat_completion`` picks a handler (``llama.chat_handler``, else
``llama.chat_format``, else the GGUF's chat template, else a format guessed
from the architecture) and calls it with llama-cpp-python's handler keywords,
so any such handler (a multimodal one, a user's) plugs in unchanged.

``FormatHandler`` is the handler for a ``ChatFormat``: it renders the prompt,
tokenizes it with exactly one BOS, adds the format's stop strings, builds
grammars for ``response_format`` and forced tool calls, runs one completion and
turns it into a ``chat.completion`` or a stream of ``chat.completion.chunk``s,
with reasoning (``reasoning_content``) and tool calls parsed out of the text.

Not here: the generation loop (``_completion.py``), the template sandbox
(``template.py``), tool-call syntaxes (``tools.py``), reasoning syntaxes
(``reasoning.py``, ``harmony.py``).
"""
from __future__ import annotations

import json
import logging
import weakref
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple, Union

from .. import grammar as _grammar
from .._log import emit
from .._sampling import SamplingParams
from . import harmony
from .formats import (ChatFormat, format_from_template, get_format, guess_format_name, template_names,
                      FORMATS)
from .named_formats import guess_chat_format_from_gguf_metadata
from .._completion import CompletionRequest, run_completion, stream_completion
from .reasoning import (SHOWN_TOKENS, check_reasoning_budget, check_reasoning_format, reply_splitter, reply_syntax,
                        split_reply, thinking_budget)
from .tools import ToolCallStream, call_as_text, make_call, new_call_id, parse_tool_calls, tool_schemas, \
    tools_system_prompt

logger = logging.getLogger("llamapy")

ChatHandler = Callable[..., Any]

# Handlers registered by users (register_chat_completion_handler); built-in formats live in formats.FORMATS.
_user_handlers: Dict[str, ChatHandler] = {}
_logged_guess: "weakref.WeakSet[Any]" = weakref.WeakSet()

_MULTIMODAL_PARTS = ("image_url", "image", "input_image", "input_audio", "audio", "video", "video_url")


# ------------------------------------------------------------------ requests
# llama-cpp-python's chat default (create_chat_completion and its handlers),
# where completions default to SamplingParams' 0.8.
CHAT_TEMPERATURE = 0.2


@dataclass
class ChatRequest:
    """One create_chat_completion call's arguments, checked once."""

    messages: List[Dict[str, Any]]
    functions: Optional[List[Dict[str, Any]]] = None
    function_call: Any = None
    tools: Optional[List[Dict[str, Any]]] = None
    tool_choice: Any = None
    stream: bool = False
    stop: Any = field(default_factory=list)
    seed: Optional[int] = None
    response_format: Optional[Dict[str, Any]] = None
    max_tokens: Optional[int] = None
    model: Optional[str] = None
    logits_processor: Any = None
    logprobs: Optional[bool] = None
    top_logprobs: Optional[int] = None
    reasoning_format: str = "auto"  # "auto" / "deepseek": reasoning into reasoning_content; "none": left in content
    reasoning_budget: Optional[int] = None  # tokens of thinking before the answer is forced (None: no limit)
    template_kwargs: Dict[str, Any] = field(default_factory=dict)  # extra variables for Jinja templates
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=CHAT_TEMPERATURE))

    @classmethod
    def of(cls, messages: Any, kwargs: Dict[str, Any]) -> "ChatRequest":
        """From a chat handler's keywords: the sampling options gathered (and
        checked) into a SamplingParams, the request's own fields, and the rest as
        variables for the template."""
        kw = dict(kwargs)
        sampling = SamplingParams.take(kw, temperature=CHAT_TEMPERATURE)
        extra = {k: kw.pop(k) for k in list(kw) if k not in _REQUEST_FIELDS}
        return cls(messages=list(messages), template_kwargs=extra, sampling=sampling, **kw)

    def __post_init__(self) -> None:
        if not isinstance(self.messages, (list, tuple)) or not self.messages:
            raise ValueError("messages must be a non-empty list of message dicts")
        if self.functions and not self.tools:  # llama-cpp-python's legacy spelling
            self.tools = [{"type": "function", "function": f} for f in self.functions]
        if self.function_call is not None and self.tool_choice is None:
            fc = self.function_call
            self.tool_choice = fc if isinstance(fc, str) else {"type": "function", "function": {"name": fc["name"]}}
        check_reasoning_format(self.reasoning_format)
        self.reasoning_budget = check_reasoning_budget(self.reasoning_budget)

    def tool_mode(self) -> Tuple[str, Optional[Dict[str, Any]]]:
        """("none" | "auto" | "required" | "forced", the forced tool)."""
        choice = self.tool_choice
        if not self.tools or choice == "none":
            return "none", None
        if choice is None or choice == "auto":
            return "auto", None
        if choice == "required":
            return "required", None
        if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
            name = choice["function"].get("name")
            for tool in self.tools:
                if tool.get("function", {}).get("name") == name:
                    return "forced", tool
            raise ValueError(f"tool_choice names {name!r}, which is not among the tools given")
        raise ValueError(f"tool_choice must be 'none', 'auto', 'required' or a named function, not {choice!r}")

    def completion_kwargs(self) -> Dict[str, Any]:
        """create_completion's keywords for this request (the prompt and stop strings aside)."""
        kw = self.sampling.as_kwargs()
        kw.update(stream=self.stream, seed=self.seed, max_tokens=self.max_tokens, model=self.model,
                  logits_processor=self.logits_processor)
        kw["logprobs"] = (self.top_logprobs or 0) if self.logprobs else None
        return kw


_REQUEST_FIELDS = {f.name for f in fields(ChatRequest)} - {"template_kwargs", "sampling"}


# ------------------------------------------------------------------ messages
def message_text(content: Any) -> Optional[str]:
    """A message's content as text: text parts are concatenated; media parts
    need a multimodal chat handler."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, (list, tuple)):
        raise TypeError(f"message content must be a str, a list of content parts or None, not {type(content).__name__}")
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") == "text":
            texts.append(str(part.get("text", "")))
        elif isinstance(part, dict) and part.get("type") in _MULTIMODAL_PARTS:
            raise ValueError(f"a {part['type']!r} content part needs a multimodal chat handler "
                             "(pass chat_handler=...); this chat format reads text only")
        else:
            raise ValueError(f"unsupported message content part: {part!r}")
    return "".join(texts)


class _JsonObject(dict):
    """Tool-call arguments given to templates: a dict (for ``|tojson``,
    ``|items``) that is JSON text where a template prints it or adds it to a
    string (``{{ arguments }}``, ``'...' + arguments``)."""

    def __str__(self) -> str:
        return json.dumps(self, ensure_ascii=False)

    def __add__(self, other: Any) -> Any:
        return str(self) + other if isinstance(other, str) else NotImplemented

    def __radd__(self, other: Any) -> Any:
        return other + str(self) if isinstance(other, str) else NotImplemented


def _arguments_object(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except ValueError:
            return arguments
        return _JsonObject(value) if isinstance(value, dict) else arguments
    return _JsonObject(arguments) if isinstance(arguments, dict) else arguments


def _tool_calls(message: Dict[str, Any]) -> List[Dict[str, Any]]:
    """A message's tool calls (legacy ``function_call`` too), arguments as JSON objects."""
    calls = message.get("tool_calls") or []
    if not calls and message.get("function_call"):
        calls = [{"id": new_call_id(), "type": "function", "function": message["function_call"]}]
    return [dict(c, function=dict(c.get("function", {}), arguments=_arguments_object(c.get("function", {})
                                                                                     .get("arguments"))))
            for c in calls]


def normalize_messages(messages: Sequence[Dict[str, Any]], tools_as_text: bool) -> List[Dict[str, Any]]:
    """Copies of ``messages`` as templates expect them: text content,
    ``developer`` as ``system``, legacy function messages as tool messages,
    tool-call arguments as JSON objects. With ``tools_as_text``, tool calls
    and results become ordinary text (for formats with no place for them);
    consecutive tool results then share one user turn."""
    out: List[Dict[str, Any]] = []
    after_tool_result = False
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ValueError(f"each message must be a dict with a 'role', not {m!r}")
        msg = dict(m, role={"developer": "system", "function": "tool"}.get(m["role"], m["role"]),
                   content=message_text(m.get("content")))
        msg.pop("function_call", None)
        calls = _tool_calls(m)
        if calls and tools_as_text:
            msg.pop("tool_calls", None)
            msg["content"] = "\n".join([msg["content"]] * bool(msg["content"]) + [call_as_text(c) for c in calls])
        elif calls:
            msg["tool_calls"] = calls
        if tools_as_text and msg["role"] == "tool":
            response = f"<tool_response>\n{msg['content'] or ''}\n</tool_response>"
            if after_tool_result:
                out[-1]["content"] += "\n" + response
                continue
            msg = {"role": "user", "content": response}
        after_tool_result = tools_as_text and m["role"] in ("tool", "function")
        out.append(msg)
    return out


def _has_tool_parts(message: Dict[str, Any]) -> bool:
    return bool(message.get("tool_calls") or message.get("function_call")) or \
        message.get("role") in ("tool", "function")


def _with_tools_prompt(messages: List[Dict[str, Any]], tools: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    prompt = tools_system_prompt(tools)
    if messages and messages[0]["role"] == "system":
        first = dict(messages[0], content=(messages[0]["content"] or "") + "\n\n" + prompt)
        return [first] + messages[1:]
    return [{"role": "system", "content": prompt}] + messages


# ------------------------------------------------------------------ prompt
def token_text(llama: Any, token: int) -> str:
    """The text of a special token (BOS, EOS) as templates print it."""
    if token is None or token < 0:
        return ""
    gguf = getattr(llama, "_gguf", None)
    tokens = gguf.metadata.get("tokenizer.ggml.tokens") if gguf is not None else None
    if tokens is not None and token < len(tokens):
        return str(tokens[token])
    return llama.detokenize([token], special=True).decode("utf-8", errors="replace")


def tokenize_prompt(llama: Any, prompt: str, bos_text: str) -> List[int]:
    """Tokenize a rendered prompt, control-token texts included. When the
    template already wrote the BOS text, the tokenizer does not add another."""
    written = bool(bos_text) and prompt.startswith(bos_text)
    tokens = list(llama.tokenize(prompt.encode("utf-8"), add_bos=not written, special=True))
    bos = llama.token_bos()
    while len(tokens) >= 2 and tokens[0] == bos and tokens[1] == bos:
        tokens.pop(0)
    return tokens


def stop_list(user_stop: Any, extra: Sequence[str]) -> List[str]:
    stop = [user_stop] if isinstance(user_stop, str) else list(user_stop or [])
    for s in extra:
        if s and s not in stop:
            stop.append(s)
    return stop


# ------------------------------------------------------------------ grammars
def json_grammar(schema: Any) -> Any:
    """A grammar for JSON matching ``schema``. A tool's parameter schema the
    converter cannot handle falls back to any JSON object (with a warning),
    as in llama-cpp-python."""
    grammar = _grammar
    try:
        return grammar.LlamaGrammar.from_json_schema(json.dumps(schema))
    except (ValueError, TypeError, KeyError, NotImplementedError) as e:
        logger.warning("llamapy: the JSON schema cannot be turned into a grammar (%s); allowing any JSON object", e)
        return grammar.LlamaGrammar.from_string(grammar.JSON_GBNF)


def response_format_grammar(response_format: Optional[Dict[str, Any]]) -> Any:
    """The grammar for ``response_format`` (json_object, with or without
    ``schema``; json_schema), or None for text."""
    if not response_format or response_format.get("type") == "text":
        return None
    return _grammar.grammar_for_response_format(response_format)


def _required_call_schema(tools: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    options = [{"type": "object", "properties": {"name": {"const": t["function"]["name"]},
                                                 "arguments": t["function"].get("parameters") or {"type": "object"}},
                "required": ["name", "arguments"]} for t in tools]
    return options[0] if len(options) == 1 else {"anyOf": options}


# ------------------------------------------------------------------ responses
def chat_logprobs(logprobs: Optional[Dict[str, list]], n_top: int) -> Optional[Dict[str, Any]]:
    """Completion logprobs (tokens, token_logprobs, top_logprobs) in the chat shape."""
    if not logprobs:
        return None
    content = []
    for tok, lp, top in zip(logprobs["tokens"], logprobs["token_logprobs"], logprobs["top_logprobs"]):
        best = sorted((top or {}).items(), key=lambda kv: -kv[1])[:n_top]
        content.append({"token": tok, "logprob": lp, "bytes": list(tok.encode("utf-8")),
                        "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode("utf-8"))}
                                         for t, v in best]})
    return {"content": content, "refusal": None}


def _finish_calls(mode: str, text: str, names: Dict[str, Any], forced: Optional[Dict[str, Any]]
                  ) -> Tuple[Optional[str], List[Dict[str, Any]]]:
    if mode == "forced":
        return None, [make_call(forced["function"]["name"], text)]  # type: ignore[index]
    if mode == "required":
        try:
            value = json.loads(text)
            return None, [make_call(value["name"], value.get("arguments", {}))]
        except (ValueError, KeyError, TypeError):
            return text, []
    if mode == "auto":
        return parse_tool_calls(text, names)
    return text, []


def _reply_parts(mode: str, syntax: Optional[str], text: str, names: Dict[str, Any], forced: Optional[Dict[str, Any]]
                 ) -> Tuple[str, Optional[str], List[Dict[str, Any]]]:
    """A whole reply as (reasoning, content, tool calls): the reasoning syntax
    first (harmony gives its own calls), then calls written in the content."""
    reasoning, content, calls = split_reply(syntax, text)
    if syntax == "harmony":
        return reasoning, (content or None) if calls else content, calls
    content_or_none, calls = _finish_calls(mode, content, names, forced)
    return reasoning, content_or_none, calls


def _message(content: Optional[str], calls: List[Dict[str, Any]], legacy: bool, reasoning: str = ""
             ) -> Dict[str, Any]:
    message: Dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
        if legacy and len(calls) == 1:
            message["function_call"] = dict(calls[0]["function"])
    return message


def _chunk(head: Dict[str, Any], delta: Dict[str, Any], finish: Optional[str] = None,
           logprobs: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    return {**head, "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}


def _call_deltas(calls: List[Dict[str, Any]], first: int = 0) -> Dict[str, Any]:
    return {"tool_calls": [{"index": first + i, "id": c["id"], "type": "function",
                            "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}}
                           for i, c in enumerate(calls)]}


def _stream_chat(chunks: Iterator[Dict[str, Any]], mode: str, names: Dict[str, Any], forced: Optional[Dict[str, Any]],
                 legacy: bool, n_top: int, syntax: Optional[str] = None) -> Iterator[Dict[str, Any]]:
    """Completion chunks -> chat chunks: the role first, reasoning, content (or
    tool call argument) deltas, then a last chunk with finish_reason and usage."""
    head: Dict[str, Any] = {}
    splitter = reply_splitter(syntax)
    held = ToolCallStream(names) if mode == "auto" and syntax != "harmony" else None
    syntax_calls: List[Dict[str, Any]] = []  # harmony's calls, each streamed as its message ends

    def deltas(pieces: List[Tuple[str, Any]]) -> List[Dict[str, Any]]:
        out = []
        for kind, value in pieces:
            if kind == "reasoning":
                out.append({"reasoning_content": value})
            elif kind == "call":
                out.append(_call_deltas([value], len(syntax_calls)))
                syntax_calls.append(value)
            else:
                text = held.push(value) if held is not None else value
                if text:
                    out.append({"content": text})
        return out

    texts: List[str] = []
    finish, usage = "stop", None
    call_id = new_call_id()
    for chunk in chunks:
        choice = chunk["choices"][0]
        if not head:
            head = {"id": "chat" + chunk["id"], "created": chunk["created"], "model": chunk["model"]}
            yield _chunk(head, {"role": "assistant", "content": None if mode in ("forced", "required") else ""})
            if mode == "forced":
                name = forced["function"]["name"]  # type: ignore[index]
                yield _chunk(head, {"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                                    "function": {"name": name, "arguments": ""}}]})
        if choice["finish_reason"] is not None:
            finish, usage = choice["finish_reason"], chunk.get("usage")
            continue
        text, lp = choice["text"], chat_logprobs(choice["logprobs"], n_top)
        texts.append(text)
        if mode == "forced":
            if text or lp:
                yield _chunk(head, {"tool_calls": [{"index": 0, "function": {"arguments": text}}]}, logprobs=lp)
            continue
        if mode == "required":
            continue
        step = deltas(splitter.push(text)) or ([{"content": ""}] if lp else [])
        for i, delta in enumerate(step):
            yield _chunk(head, delta, logprobs=lp if i == 0 else None)
    for delta in deltas(splitter.finish()):
        yield _chunk(head, delta)
    calls: List[Dict[str, Any]] = []
    if held is not None:
        rest, calls = held.finish()
        if rest:
            yield _chunk(head, {"content": rest})
    elif mode == "required":
        content, calls = _finish_calls(mode, "".join(texts), names, forced)
        if not calls and content:
            yield _chunk(head, {"content": content})
    if calls:
        yield _chunk(head, _call_deltas(calls))
    if (calls or syntax_calls or mode == "forced") and finish == "stop":
        finish = "tool_calls"
    last = _chunk(head, {}, finish)
    if usage is not None:
        last["usage"] = usage
    yield last


# ------------------------------------------------------------------ handler
def shown_tokens(llama: Any, syntax: Optional[str]) -> FrozenSet[int]:
    """The ids of the control tokens a reply of ``syntax`` shows (reasoning.SHOWN_TOKENS):
    each marker that is one token of this vocabulary."""
    marks = SHOWN_TOKENS.get(syntax or "", ())
    if not marks or not hasattr(llama, "tokenize"):
        return frozenset()
    ids = (llama.tokenize(m.encode("utf-8"), add_bos=False, special=True) for m in marks)
    return frozenset(int(t[0]) for t in ids if len(t) == 1)


@dataclass
class Prompt:
    tokens: List[int]
    stop: List[str]
    stopping_criteria: Any = None
    reply: Optional[str] = None  # the reply's reasoning syntax (reasoning.reply_syntax), None: plain text


class FormatHandler:
    """The chat handler for a ChatFormat (llama-cpp-python's handler signature)."""

    def __init__(self, fmt: ChatFormat) -> None:
        self.format = fmt

    def __repr__(self) -> str:
        return f"FormatHandler({self.format.name!r})"

    def __call__(self, *, llama: Any, messages: List[Dict[str, Any]], **kwargs: Any) -> Any:
        req = ChatRequest.of(messages, kwargs)
        mode, forced = req.tool_mode()
        tools = req.tools if mode != "none" else None
        prompt = self.prompt(llama, req, tools)
        kw = req.completion_kwargs()
        kw["stop"] = prompt.stop
        if prompt.stopping_criteria is not None:
            kw["stopping_criteria"] = prompt.stopping_criteria
        if mode == "forced":
            kw["grammar"] = json_grammar(forced["function"].get("parameters") or {"type": "object"})  # type: ignore
        elif mode == "required":
            kw["grammar"] = json_grammar(_required_call_schema(tools))  # type: ignore[arg-type]
        elif req.response_format:
            kw["grammar"] = response_format_grammar(req.response_format) or req.sampling.grammar
        # A grammar decides the shape of the text; "none" leaves the reasoning in it.
        syntax = prompt.reply if req.reasoning_format != "none" and kw.get("grammar") is None else None
        budget = thinking_budget(prompt.reply, req.reasoning_budget) if kw.get("grammar") is None else None
        shown = shown_tokens(llama, prompt.reply)
        if budget is not None or shown:
            creq = CompletionRequest.of(prompt.tokens, **{k: v for k, v in kw.items() if k != "stream"})
            creq.thinking, creq.shown_special = budget, shown
            result = stream_completion(llama, creq) if req.stream else run_completion(llama, creq)
        else:
            result = llama.create_completion(prompt.tokens, **kw)
        names, legacy, n_top = tool_schemas(tools), bool(req.functions), req.top_logprobs or 0
        if req.stream:
            return _stream_chat(result, mode, names, forced, legacy, n_top, syntax)
        choice = result["choices"][0]
        reasoning, content, calls = _reply_parts(mode, syntax, choice["text"], names, forced)
        finish = "tool_calls" if calls and choice["finish_reason"] == "stop" else choice["finish_reason"]
        return {"id": "chat" + result["id"], "object": "chat.completion", "created": result["created"],
                "model": result["model"],
                "choices": [{"index": 0, "message": _message(content, calls, legacy, reasoning),
                             "logprobs": chat_logprobs(choice["logprobs"], n_top), "finish_reason": finish}],
                "usage": result["usage"]}

    def render_text(self, llama: Any, req: ChatRequest, tools: Optional[List[Dict[str, Any]]]) -> str:
        """The prompt text the format renders (the server's /apply-template)."""
        fmt = self.format
        tools_as_text = not fmt.native_tools and (bool(tools) or any(_has_tool_parts(m) for m in req.messages))
        msgs = normalize_messages(req.messages, tools_as_text)
        if tools_as_text and tools:
            msgs = _with_tools_prompt(msgs, tools)
        bos_text, eos_text = token_text(llama, llama.token_bos()), token_text(llama, llama.token_eos())
        return fmt.render(msgs, add_generation_prompt=True, tools=tools if fmt.native_tools else None,
                          bos_token=bos_text, eos_token=eos_text, **req.template_kwargs)

    def prompt(self, llama: Any, req: ChatRequest, tools: Optional[List[Dict[str, Any]]]) -> "Prompt":
        """The prompt's tokens and the stop strings (the request's, the format's, EOS)."""
        text = self.render_text(llama, req, tools)
        bos_text, eos_text = token_text(llama, llama.token_bos()), token_text(llama, llama.token_eos())
        # A harmony model's <|end|> ends one message of the reply, whatever its EOS is.
        ends_message = self.format.reasoning == "harmony" and eos_text == harmony.END
        stop = self.format.stop + (() if ends_message else (eos_text,))
        return Prompt(tokenize_prompt(llama, text, bos_text), stop_list(req.stop, stop),
                      reply=reply_syntax(self.format.reasoning, text))


# ------------------------------------------------------------------ selection
def register_chat_completion_handler(name: str, handler: Optional[ChatHandler] = None, overwrite: bool = False) -> Any:
    """Register a handler under a ``chat_format`` name; usable as a decorator."""
    def add(h: ChatHandler) -> ChatHandler:
        if not overwrite and (name in _user_handlers or name in FORMATS):
            raise ValueError(f"a chat handler named {name!r} exists; pass overwrite=True to replace it")
        _user_handlers[name] = h
        return h

    return add(handler) if handler is not None else add


# Chat formats that need a projector file, with the handler class that takes
# one: multimodal/handlers.py registers its formats here, so that asking for
# one without a projector names the way to give it.
PROJECTOR_CHAT_FORMATS: Dict[str, type] = {}


def register_projector_chat_format(name: str, handler_class: type) -> None:
    PROJECTOR_CHAT_FORMATS[name] = handler_class


def get_chat_completion_handler(name: str, metadata: Optional[Dict[str, Any]] = None,
                                eos_token: str = "") -> ChatHandler:
    """The handler for a ``chat_format`` name: a registered handler, a GGUF
    template (``chat_template.default``, ``chat_template.<name>``) or a named format."""
    if name in _user_handlers:
        return _user_handlers[name]
    metadata = metadata or {}
    if name.startswith("chat_template."):
        key = "tokenizer.chat_template" + ("" if name == "chat_template.default" else name[len("chat_template"):])
        if isinstance(metadata.get(key), str):
            return FormatHandler(format_from_template(metadata[key], name, eos_token))
    if name in FORMATS:
        return FormatHandler(FORMATS[name])
    if name in PROJECTOR_CHAT_FORMATS:
        raise ValueError(f"chat format {name!r} is multimodal: it needs a projector file; load the model with "
                         f"Llama(..., chat_format={name!r}, mmproj=PATH) or pass "
                         f"chat_handler={PROJECTOR_CHAT_FORMATS[name].__name__}(clip_model_path=PATH)")
    known = sorted(set(FORMATS) | set(_user_handlers) | set(template_names(metadata)))
    raise ValueError(f"unknown chat format {name!r}; known formats: {', '.join(known)}")


def resolve_chat_handler(llama: Any, tools_requested: bool = False) -> ChatHandler:
    """``chat_handler``, else ``chat_format``, else the named format of a
    GGUF template llama-cpp-python recognises, else the GGUF's chat template
    (its ``tool_use`` variant when tools are requested), else a named format
    guessed from the architecture."""
    if getattr(llama, "chat_handler", None) is not None:
        return llama.chat_handler
    metadata = getattr(llama, "metadata", None) or {}
    eos = token_text(llama, llama.token_eos())
    if getattr(llama, "chat_format", None) is not None:
        return get_chat_completion_handler(llama.chat_format, metadata, eos)
    guessed = guess_chat_format_from_gguf_metadata(metadata)  # as llama-cpp-python: a known template's named format
    if guessed is not None:
        _say_guess(llama, "Guessed chat format: %s (the model's chat template is a known one)", guessed)
        return FormatHandler(get_format(guessed))
    for name in (["chat_template.tool_use"] if tools_requested else []) + ["chat_template.default"]:
        key = "tokenizer.chat_template" + ("" if name == "chat_template.default" else ".tool_use")
        if isinstance(metadata.get(key), str):
            return FormatHandler(format_from_template(metadata[key], name, eos))
    name = guess_format_name(metadata)
    _say_guess(llama, "the model has no chat template; using chat format %r (guessed from general.architecture %r)",
               name, metadata.get("general.architecture"))
    return FormatHandler(get_format(name))


def _say_guess(llama: Any, msg: str, *args: Any) -> None:
    """Once per Llama: on stderr with verbose=True (as llama-cpp-python), else logged."""
    try:
        first = llama not in _logged_guess
        _logged_guess.add(llama)
    except TypeError:
        first = True
    if first:
        emit(bool(getattr(llama, "verbose", False)), logging.INFO, msg, *args)


def create_chat_completion(llama: Any, messages: List[Dict[str, Any]], **kwargs: Any) -> Any:
    """A chat completion (``chat.completion`` dict, or an iterator of
    ``chat.completion.chunk`` dicts with ``stream=True``) for ``messages``;
    ``kwargs`` are Llama.create_chat_completion's, which declares them."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, (list, tuple)) or \
            not all(isinstance(m, dict) for m in messages):
        raise ValueError("messages must be a list of message dicts such as {'role': 'user', 'content': 'Hi'}")
    handler = resolve_chat_handler(llama, tools_requested=bool(kwargs.get("tools") or kwargs.get("functions")))
    if kwargs.get("reasoning_format", "auto") == "auto":
        kwargs.pop("reasoning_format", None)  # a handler of llama-cpp-python's kind need not know the keyword
    if kwargs.get("reasoning_budget", -1) in (None, -1):
        kwargs.pop("reasoning_budget", None)
    variables = kwargs.pop("chat_template_kwargs", None) or {}
    if not isinstance(variables, dict) or not all(isinstance(k, str) for k in variables):
        raise ValueError("chat_template_kwargs must be a dict of template variable names to values")
    clash = sorted(set(variables) & set(kwargs) | set(variables) & {"llama", "messages"})
    if clash:
        raise ValueError(f"chat_template_kwargs names {', '.join(clash)}, which are create_chat_completion's own "
                         "arguments")
    return handler(llama=llama, messages=messages, **kwargs, **variables)


def create_chat_completion_openai_v1(llama: Any, *args: Any, **kwargs: Any) -> Any:
    """create_chat_completion, returning the ``openai`` package's types."""
    try:
        from openai.types.chat import ChatCompletion, ChatCompletionChunk
    except ImportError as e:
        raise ImportError("create_chat_completion_openai_v1 needs the openai package: pip install openai") from e
    result = llama.create_chat_completion(*args, **kwargs)
    if kwargs.get("stream", False):
        return (ChatCompletionChunk(**chunk) for chunk in result)
    return ChatCompletion(**result)
