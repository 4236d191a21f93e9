"""llama-cpp-python's ``llama_cpp.llama_chat_format`` names, for code that imports them.

The subset kept: ``ChatFormatterResponse``, ``Jinja2ChatFormatter``,
``chat_formatter_to_chat_completion_handler``, ``hf_tokenizer_config_to_chat_formatter``,
``get_chat_completion_handler``, ``register_chat_completion_handler``,
``register_chat_format``, ``guess_chat_format_from_gguf_metadata`` and the
handler-not-found exception. llamapy's own chat code is ``llamapy.chat``;
multimodal handlers (``Llava15ChatHandler``, ...) are not here yet.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Union

from .chat.completion import (ChatRequest, FormatHandler, Prompt, get_chat_completion_handler as _get_handler,
                              normalize_messages, register_chat_completion_handler as _register_handler, stop_list,
                              tokenize_prompt, token_text)
from .chat.formats import ChatFormat, guess_chat_format_from_gguf_metadata
from .chat.template import ChatTemplate

__all__ = ["ChatFormatter", "ChatFormatterResponse", "Jinja2ChatFormatter", "LlamaChatCompletionHandler",
           "LlamaChatCompletionHandlerNotFoundException", "chat_formatter_to_chat_completion_handler",
           "get_chat_completion_handler", "guess_chat_format_from_gguf_metadata",
           "hf_tokenizer_config_to_chat_formatter", "register_chat_completion_handler", "register_chat_format"]

LlamaChatCompletionHandler = Callable[..., Any]  # handler(*, llama, messages, ...) -> ChatCompletion | Iterator[chunk]


class LlamaChatCompletionHandlerNotFoundException(ValueError):
    pass


@dataclass
class ChatFormatterResponse:
    """A formatted prompt and what stops it. ``added_special``: the prompt
    already holds the special tokens (BOS), so tokenizing adds none."""

    prompt: str
    stop: Optional[Union[str, List[str]]] = None
    stopping_criteria: Any = None
    added_special: bool = False


ChatFormatter = Callable[..., ChatFormatterResponse]  # formatter(*, messages, **kwargs)


class Jinja2ChatFormatter:
    """A chat formatter from a Jinja template (rendered in llamapy's sandbox)."""

    def __init__(self, template: str, eos_token: str, bos_token: str, add_generation_prompt: bool = True,
                 stop_token_ids: Optional[List[int]] = None) -> None:
        self.template = template
        self.eos_token = eos_token
        self.bos_token = bos_token
        self.add_generation_prompt = add_generation_prompt
        self.stop_token_ids = set(stop_token_ids) if stop_token_ids is not None else None
        self._compiled = ChatTemplate(template)

    def __call__(self, *, messages: List[Dict[str, Any]], functions: Any = None, function_call: Any = None,
                 tools: Any = None, tool_choice: Any = None, **kwargs: Any) -> ChatFormatterResponse:
        prompt = self._compiled.render(normalize_messages(messages, tools_as_text=False),
                                       add_generation_prompt=self.add_generation_prompt, tools=tools,
                                       bos_token=self.bos_token, eos_token=self.eos_token,
                                       functions=functions, function_call=function_call, tool_choice=tool_choice,
                                       **kwargs)
        criteria = None
        if self.stop_token_ids:
            from .llama_cache import StoppingCriteriaList

            ids = self.stop_token_ids
            criteria = StoppingCriteriaList([lambda tokens, logits: len(tokens) > 0 and int(tokens[-1]) in ids])
        return ChatFormatterResponse(prompt=prompt, stop=[self.eos_token], stopping_criteria=criteria,
                                     added_special=True)

    def to_chat_handler(self) -> LlamaChatCompletionHandler:
        return chat_formatter_to_chat_completion_handler(self)


class _FormatterHandler(FormatHandler):
    """A FormatHandler whose prompt comes from a llama-cpp-python chat formatter."""

    def __init__(self, formatter: ChatFormatter) -> None:
        super().__init__(ChatFormat(getattr(formatter, "__name__", "formatter"), lambda *a, **k: "", native_tools=True))
        self.formatter = formatter

    def prompt(self, llama: Any, req: ChatRequest, tools: Optional[List[Dict[str, Any]]]) -> Prompt:
        result = self.formatter(messages=req.messages, functions=req.functions, function_call=req.function_call,
                                tools=tools, tool_choice=req.tool_choice, **req.template_kwargs)
        if result.added_special:
            tokens = tokenize_prompt(llama, result.prompt, token_text(llama, llama.token_bos()))
        else:
            tokens = list(llama.tokenize(result.prompt.encode("utf-8"), add_bos=True, special=True))
        extra = [result.stop] if isinstance(result.stop, str) else list(result.stop or [])
        return Prompt(tokens, stop_list(req.stop, extra), result.stopping_criteria)


def chat_formatter_to_chat_completion_handler(formatter: ChatFormatter) -> LlamaChatCompletionHandler:
    return _FormatterHandler(formatter)


def hf_tokenizer_config_to_chat_formatter(tokenizer_config: Dict[str, Any],
                                          add_generation_prompt: bool = True) -> ChatFormatter:
    """A formatter from a Hugging Face ``tokenizer_config.json`` (as a dict)."""
    def text(token: Any) -> str:
        return token.get("content", "") if isinstance(token, dict) else (token or "")

    return Jinja2ChatFormatter(tokenizer_config["chat_template"], eos_token=text(tokenizer_config.get("eos_token")),
                               bos_token=text(tokenizer_config.get("bos_token")),
                               add_generation_prompt=add_generation_prompt)


def get_chat_completion_handler(name: str) -> LlamaChatCompletionHandler:
    try:
        return _get_handler(name)
    except ValueError as e:
        raise LlamaChatCompletionHandlerNotFoundException(str(e)) from None


def register_chat_completion_handler(name: str) -> Callable[[LlamaChatCompletionHandler], LlamaChatCompletionHandler]:
    """Decorator: register a chat handler under a ``chat_format`` name."""
    return _register_handler(name, overwrite=True)


def register_chat_format(name: str) -> Callable[[ChatFormatter], ChatFormatter]:
    """Decorator: register a chat formatter (``(messages, **kwargs) ->
    ChatFormatterResponse``) under a ``chat_format`` name."""
    def add(formatter: ChatFormatter) -> ChatFormatter:
        _register_handler(name, chat_formatter_to_chat_completion_handler(formatter), overwrite=True)
        return formatter

    return add
