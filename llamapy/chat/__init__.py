"""Chat for llamapy: Jinja chat templates (sandboxed), named chat formats,
chat handlers and tool calls, behind ``Llama.create_chat_completion``.

- ``template.py``   — the sandboxed Jinja renderer and its limits;
- ``formats.py``    — the named formats (``chat_format=``) and format guessing;
- ``named_formats.py`` — llama-cpp-python's named formats, rendered as it renders them;
- ``tools.py``      — tool prompts, tool-call parsing, streaming around calls;
- ``reasoning.py``  — reasoning in replies (``<think>`` tags) split from the answer;
- ``harmony.py``    — gpt-oss's harmony replies: channels and tool calls;
- ``completion.py`` — handlers, handler selection, chat responses and chunks;
- ``cli.py``        — ``python -m llamapy chat``.

llama-cpp-python's names (``Jinja2ChatFormatter``, ``register_chat_format``,
...) are in ``llamapy.llama_chat_format``.
"""
from .completion import (ChatRequest, FormatHandler, create_chat_completion, create_chat_completion_openai_v1,
                         get_chat_completion_handler, register_chat_completion_handler, resolve_chat_handler)
from .formats import FORMATS, ChatFormat, JinjaFormat, Turns, format_from_template, get_format
from .template import ChatTemplate, ChatTemplateError, ChatTemplateLimitError, ChatTemplateSecurityError, RenderLimits
from .tools import parse_tool_calls

__all__ = [
    "FORMATS", "ChatFormat", "ChatRequest", "ChatTemplate", "ChatTemplateError", "ChatTemplateLimitError",
    "ChatTemplateSecurityError", "FormatHandler", "JinjaFormat", "RenderLimits", "Turns",
    "create_chat_completion", "create_chat_completion_openai_v1", "format_from_template", "get_chat_completion_handler",
    "get_format", "parse_tool_calls", "register_chat_completion_handler", "resolve_chat_handler",
]
