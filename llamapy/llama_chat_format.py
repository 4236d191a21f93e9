"""llama-cpp-python's ``llama_cpp.llama_chat_format``, for code that imports it.

The named formatters (``format_chatml``, ``format_llama2``, ... and
``format``, llama-cpp-python's name for vicuna's) return the prompts
llama-cpp-python 0.3.36 returns, byte for byte (llamapy/chat/named_formats.py),
except that messages it leaves out are kept. ``Jinja2ChatFormatter`` and
``hf_tokenizer_config_to_chat_formatter`` render templates with the variables
llama-cpp-python passes them, in llamapy's bounded sandbox (template.py).
The handler registry, ``chat_formatter_to_chat_completion_handler``,
``guess_chat_format_from_gguf_metadata`` and the template constants are here too.

The multimodal handlers (``Llava15ChatHandler``, ``MTMDChatHandler`` and their
subclasses, plus llamapy's ``Gemma3ChatHandler`` and ``SmolVLMChatHandler``) are
``llamapy.multimodal.handlers``'s, re-exported here.

Not here: the functionary handlers (they need functionary's Hugging Face
tokenizer). llamapy's own chat code is ``llamapy.chat``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Protocol, Union

from .chat import completion as _completion
from .chat.completion import (ChatRequest, FormatHandler, Prompt, get_chat_completion_handler as _get_handler,
                              normalize_messages, register_chat_completion_handler as _register_handler, stop_list)
from .chat.formats import FORMATS, ChatFormat
from .chat.named_formats import (CHATML_BOS_TOKEN, CHATML_CHAT_TEMPLATE, CHATML_EOS_TOKEN,  # noqa: F401
                                  LLAMA3_INSTRUCT_CHAT_TEMPLATE, MISTRAL_INSTRUCT_BOS_TOKEN,
                                  MISTRAL_INSTRUCT_CHAT_TEMPLATE, MISTRAL_INSTRUCT_EOS_TOKEN,
                                  MIXTRAL_INSTRUCT_CHAT_TEMPLATE, NAMED_FORMATS,
                                  guess_chat_format_from_gguf_metadata)
from .chat.template import ChatTemplate
from .llama_cache import StoppingCriteriaList
from .multimodal.handlers import (Gemma3ChatHandler, Gemma4ChatHandler, Llama3VisionAlpha,  # noqa: F401
                                  Llama3VisionAlphaChatHandler, Llava15ChatHandler, Llava16ChatHandler,
                                  MiniCPMv26ChatHandler, MoondreamChatHandler, MTMDChatHandler,
                                  NanoLlavaChatHandler, ObsidianChatHandler, Qwen25VLChatHandler,
                                  SmolVLMChatHandler)

__all__ = [
    "CHATML_BOS_TOKEN", "CHATML_CHAT_TEMPLATE", "CHATML_EOS_TOKEN", "LLAMA3_INSTRUCT_CHAT_TEMPLATE",
    "MISTRAL_INSTRUCT_BOS_TOKEN", "MISTRAL_INSTRUCT_CHAT_TEMPLATE", "MISTRAL_INSTRUCT_EOS_TOKEN",
    "MIXTRAL_INSTRUCT_CHAT_TEMPLATE", "ChatFormatter", "ChatFormatterResponse", "Jinja2ChatFormatter",
    "LlamaChatCompletionHandler", "LlamaChatCompletionHandlerNotFoundException", "LlamaChatCompletionHandlerRegistry",
    "chat_formatter_to_chat_completion_handler", "chatml_function_calling", "get_chat_completion_handler",
    "guess_chat_format_from_gguf_metadata", "hf_autotokenizer_to_chat_completion_handler",
    "hf_autotokenizer_to_chat_formatter", "hf_tokenizer_config_to_chat_completion_handler",
    "hf_tokenizer_config_to_chat_formatter", "register_chat_completion_handler", "register_chat_format",
    "format", "format_alpaca", "format_baichuan", "format_baichuan2", "format_chatglm3", "format_chatml",
    "format_gemma", "format_intel", "format_llama2", "format_llama3", "format_mistral_instruct", "format_mistrallite",
    "format_oasst_llama", "format_open_orca", "format_openbuddy", "format_openchat", "format_phi3", "format_phind",
    "format_pygmalion", "format_qwen", "format_redpajama_incite", "format_saiga", "format_snoozy", "format_vicuna",
    "format_zephyr",
    "Gemma3ChatHandler", "Gemma4ChatHandler", "Llama3VisionAlpha", "Llama3VisionAlphaChatHandler",
    "Llava15ChatHandler", "Llava16ChatHandler", "MTMDChatHandler", "MiniCPMv26ChatHandler", "MoondreamChatHandler",
    "NanoLlavaChatHandler", "ObsidianChatHandler", "Qwen25VLChatHandler", "SmolVLMChatHandler",
]

# --- protocols and responses ------------------------------------------------------------------------------------
class LlamaChatCompletionHandler(Protocol):
    """``handler(*, llama, messages, functions, function_call, tools, tool_choice,
    temperature, ..., **kwargs)`` -> a chat completion, or an iterator of chunks
    with ``stream=True``."""

    def __call__(self, *, llama: Any, messages: List[Dict[str, Any]], **kwargs: Any) -> Any: ...


class LlamaChatCompletionHandlerNotFoundException(ValueError):
    """No handler has that name (a ValueError too, as llamapy's own lookups raise)."""


@dataclass
class ChatFormatterResponse:
    """A formatted prompt and what stops it. ``added_special``: the prompt
    already holds the special tokens (BOS), so tokenizing adds none."""

    prompt: str
    stop: Optional[Union[str, List[str]]] = None
    stopping_criteria: Any = None
    added_special: bool = False


class ChatFormatter(Protocol):
    """``formatter(*, messages, **kwargs) -> ChatFormatterResponse``."""

    def __call__(self, *, messages: List[Dict[str, Any]], **kwargs: Any) -> ChatFormatterResponse: ...


# --- Jinja formatters -------------------------------------------------------------------------------------------
def _stop_on_ids(ids: Any) -> Any:
    return StoppingCriteriaList([lambda tokens, logits: len(tokens) > 0 and int(tokens[-1]) in ids])


class Jinja2ChatFormatter:
    """A chat formatter from a Jinja template. The template sees what
    llama-cpp-python gives it: the messages as passed, ``bos_token``,
    ``eos_token``, ``add_generation_prompt``, ``functions``, ``function_call``,
    ``tools``, ``tool_choice``, ``raise_exception``, ``strftime_now`` and the
    call's keyword arguments; it renders in llamapy's sandbox (bounded time
    and size; ``raise_exception`` raises a ValueError)."""

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
        variables = dict(messages=messages, eos_token=self.eos_token, bos_token=self.bos_token,
                         add_generation_prompt=self.add_generation_prompt, functions=functions,
                         function_call=function_call, tools=tools, tool_choice=tool_choice)
        clash = set(variables) & set(kwargs)
        if clash:  # llama-cpp-python fails the same way (a keyword given twice)
            raise TypeError(f"template variables given twice: {sorted(clash)}")
        prompt = self._compiled.render_variables({**kwargs, **variables})
        criteria = _stop_on_ids(self.stop_token_ids) if self.stop_token_ids is not None else None
        return ChatFormatterResponse(prompt=prompt, stop=[self.eos_token], stopping_criteria=criteria,
                                     added_special=True)

    def to_chat_handler(self) -> LlamaChatCompletionHandler:
        return chat_formatter_to_chat_completion_handler(self)


def _token_text(config: Dict[str, Any], key: str) -> str:
    """A tokenizer_config token: a str, or an AddedToken dict (its content); absent or null is ""."""
    token = config.get(key)
    if isinstance(token, dict):
        token = token.get("content", "")
    if token is not None and not isinstance(token, str):
        raise TypeError(f"tokenizer_config[{key!r}] must be a str or an AddedToken dict, not {type(token).__name__}")
    return token or ""


def hf_tokenizer_config_to_chat_formatter(tokenizer_config: Dict[str, Any],
                                          add_generation_prompt: bool = True) -> ChatFormatter:
    """A formatter from a Hugging Face ``tokenizer_config.json`` (as a dict),
    rendering as llama-cpp-python does: the generation prompt is an empty
    assistant message added to the conversation (the template is not given
    ``add_generation_prompt``), ``tojson`` is Jinja's own, and the stop
    strings are the EOS and BOS texts."""
    if not isinstance(tokenizer_config, dict):
        raise TypeError("tokenizer_config must be a dict (the parsed tokenizer_config.json)")
    source = tokenizer_config.get("chat_template")
    if not isinstance(source, str):
        raise ValueError("tokenizer_config has no 'chat_template' string")
    bos_token, eos_token = _token_text(tokenizer_config, "bos_token"), _token_text(tokenizer_config, "eos_token")
    template = ChatTemplate(source, dialect="jinja")

    def format_tokenizer_config(messages: List[Dict[str, Any]], **kwargs: Any) -> ChatFormatterResponse:
        if add_generation_prompt:
            messages = [*messages, {"role": "assistant", "content": ""}]
        prompt = template.render_variables({**kwargs, "messages": messages, "bos_token": bos_token,
                                            "eos_token": eos_token})
        return ChatFormatterResponse(prompt=prompt, stop=[eos_token, bos_token], added_special=True)

    return format_tokenizer_config


def hf_tokenizer_config_to_chat_completion_handler(tokenizer_config: Dict[str, Any],
                                                   add_generation_prompt: bool = True) -> LlamaChatCompletionHandler:
    return chat_formatter_to_chat_completion_handler(
        hf_tokenizer_config_to_chat_formatter(tokenizer_config, add_generation_prompt=add_generation_prompt))


def hf_autotokenizer_to_chat_formatter(pretrained_model_name_or_path: Any) -> ChatFormatter:
    """A formatter that renders with ``transformers``' own
    ``apply_chat_template`` (needs the transformers package and the tokenizer files)."""
    try:
        from transformers import AutoTokenizer  # type: ignore[import-not-found]
    except ImportError as e:
        raise ImportError("hf_autotokenizer_to_chat_formatter needs transformers: pip install transformers") from e
    tokenizer = AutoTokenizer.from_pretrained(pretrained_model_name_or_path)

    def format_autotokenizer(messages: List[Dict[str, Any]], **kwargs: Any) -> ChatFormatterResponse:
        tokenizer.use_default_system_prompt = False
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
        return ChatFormatterResponse(prompt=prompt, stop=tokenizer.eos_token, added_special=True)

    return format_autotokenizer


def hf_autotokenizer_to_chat_completion_handler(pretrained_model_name_or_path: Any) -> LlamaChatCompletionHandler:
    return chat_formatter_to_chat_completion_handler(hf_autotokenizer_to_chat_formatter(pretrained_model_name_or_path))


# --- formatters as chat handlers --------------------------------------------------------------------------------
class _FormatterHandler(FormatHandler):
    """A chat handler around a llama-cpp-python chat formatter: llamapy's
    handler (sampling, grammars, tools, responses) with the formatter's prompt."""

    def __init__(self, formatter: ChatFormatter) -> None:
        super().__init__(ChatFormat(getattr(formatter, "__name__", "formatter"), lambda *a, **k: "", native_tools=True))
        self.formatter = formatter

    def prompt(self, llama: Any, req: ChatRequest, tools: Optional[List[Dict[str, Any]]]) -> Prompt:
        result = self.formatter(messages=req.messages, functions=req.functions, function_call=req.function_call,
                                tools=tools, tool_choice=req.tool_choice, **req.template_kwargs)
        # As llama-cpp-python: BOS is added unless the formatter says the prompt
        # has its special tokens; a BOS written into the prompt and added again
        # is kept once (llama.cpp warns about two, which no model expects).
        tokens = list(llama.tokenize(result.prompt.encode("utf-8"), add_bos=not result.added_special, special=True))
        bos = llama.token_bos()
        if len(tokens) >= 2 and tokens[0] == tokens[1] == bos:
            tokens.pop(0)
        extra = [result.stop] if isinstance(result.stop, str) else list(result.stop or [])
        return Prompt(tokens, stop_list(req.stop, extra), result.stopping_criteria)


def chat_formatter_to_chat_completion_handler(chat_formatter: ChatFormatter) -> LlamaChatCompletionHandler:
    return _FormatterHandler(chat_formatter)


class LlamaChatCompletionHandlerRegistry:
    """The one registry of chat handlers by ``chat_format`` name (every
    instance is the same registry, as in llama-cpp-python): llamapy's named
    formats and every registered handler."""

    _instance: Optional["LlamaChatCompletionHandlerRegistry"] = None

    def __new__(cls) -> "LlamaChatCompletionHandlerRegistry":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def register_chat_completion_handler(self, name: str, chat_handler: LlamaChatCompletionHandler,
                                         overwrite: bool = False) -> None:
        _register_handler(name, chat_handler, overwrite=overwrite)

    def unregister_chat_handler(self, name: str) -> None:
        if name in _completion._user_handlers:
            del _completion._user_handlers[name]
        elif name in FORMATS:
            del FORMATS[name]
        else:
            raise ValueError(f"No formatter registered under the name '{name}'.")

    def get_chat_completion_handler_by_name(self, name: str) -> LlamaChatCompletionHandler:
        try:
            return _get_handler(name)
        except ValueError as e:
            raise LlamaChatCompletionHandlerNotFoundException(str(e)) from None


def get_chat_completion_handler(name: str) -> LlamaChatCompletionHandler:
    return LlamaChatCompletionHandlerRegistry().get_chat_completion_handler_by_name(name)


def register_chat_completion_handler(name: str) -> Callable[[LlamaChatCompletionHandler], LlamaChatCompletionHandler]:
    """Decorator: register a chat handler under a ``chat_format`` name (a
    name already taken raises ValueError, as in llama-cpp-python)."""
    def add(handler: LlamaChatCompletionHandler) -> LlamaChatCompletionHandler:
        LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(name, handler)
        return handler

    return add


def register_chat_format(name: str) -> Callable[[ChatFormatter], ChatFormatter]:
    """Decorator: register a chat formatter (``(messages, **kwargs) ->
    ChatFormatterResponse``) under a ``chat_format`` name."""
    def add(formatter: ChatFormatter) -> ChatFormatter:
        LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(
            name, chat_formatter_to_chat_completion_handler(formatter))
        return formatter

    return add


# --- the named formatters ---------------------------------------------------------------------------------------
def _named_formatter(function_name: str, format_name: str) -> ChatFormatter:
    def formatter(messages: List[Dict[str, Any]], **kwargs: Any) -> ChatFormatterResponse:
        msgs = normalize_messages(messages, tools_as_text=True)
        spec = NAMED_FORMATS.get(format_name)
        if spec is not None:
            return ChatFormatterResponse(prompt=spec.render(msgs), stop=spec.stop)
        fmt = FORMATS[format_name]  # llamapy's own (phi-3)
        return ChatFormatterResponse(prompt=fmt.render(msgs), stop=list(fmt.stop))

    formatter.__name__ = formatter.__qualname__ = function_name
    formatter.__doc__ = f"The prompt of chat format {format_name!r} for ``messages`` (keyword arguments are ignored)."
    return formatter


format_llama2 = _named_formatter("format_llama2", "llama-2")
format_llama3 = _named_formatter("format_llama3", "llama-3")
format_alpaca = _named_formatter("format_alpaca", "alpaca")
format_qwen = _named_formatter("format_qwen", "qwen")
format_vicuna = _named_formatter("format_vicuna", "vicuna")
format = _named_formatter("format", "vicuna")  # llama-cpp-python's name for vicuna's formatter
format_oasst_llama = _named_formatter("format_oasst_llama", "oasst_llama")
format_baichuan2 = _named_formatter("format_baichuan2", "baichuan-2")
format_baichuan = _named_formatter("format_baichuan", "baichuan")
format_openbuddy = _named_formatter("format_openbuddy", "openbuddy")
format_redpajama_incite = _named_formatter("format_redpajama_incite", "redpajama-incite")
format_snoozy = _named_formatter("format_snoozy", "snoozy")
format_phind = _named_formatter("format_phind", "phind")
format_intel = _named_formatter("format_intel", "intel")
format_open_orca = _named_formatter("format_open_orca", "open-orca")
format_mistrallite = _named_formatter("format_mistrallite", "mistrallite")
format_zephyr = _named_formatter("format_zephyr", "zephyr")
format_pygmalion = _named_formatter("format_pygmalion", "pygmalion")
format_chatml = _named_formatter("format_chatml", "chatml")
format_mistral_instruct = _named_formatter("format_mistral_instruct", "mistral-instruct")
format_chatglm3 = _named_formatter("format_chatglm3", "chatglm3")
format_openchat = _named_formatter("format_openchat", "openchat")
format_saiga = _named_formatter("format_saiga", "saiga")
format_gemma = _named_formatter("format_gemma", "gemma")
format_phi3 = _named_formatter("format_phi3", "phi-3")  # llamapy's phi-3 (llama-cpp-python has none)

# llama-cpp-python's ChatML-with-tools handler; llamapy's "chatml-function-calling" handler does that job.
chatml_function_calling: LlamaChatCompletionHandler = FormatHandler(FORMATS["chatml-function-calling"])
