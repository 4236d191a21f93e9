"""Named chat formats (the ``chat_format=`` values llama-cpp-python users
pass) and the choice of format for a model.

A format turns OpenAI-shaped messages into prompt text and names the strings
that end the assistant's turn. llama-cpp-python's named formats are rendered
as it renders them (``named_formats.py``); llamapy's own (``phi-3``) are a
``Turns`` table row: one wrapper per role, with ``{}`` for the content and
``{bos}``, ``{eos}``, ``{role}`` for those texts. Models with a Jinja template
in their GGUF use ``JinjaFormat`` instead (``template.py``).

Not here: tokenization, tools, generation (``completion.py``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .. import _engine
from . import harmony
from .named_formats import NAMED_FORMATS, stop_strings
from .reasoning import template_syntax
from .template import compile_template

logger = logging.getLogger("llamapy")

Message = Dict[str, Any]

# Texts that end a turn in common templates; those a template contains are its stop strings.
END_OF_TURN_MARKERS = ("<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|im_end|>", "<|end|>", "<|endoftext|>",
                       "<|end_of_text|>", "<\uff5cend\u2581of\u2581sentence\uff5c>", "<|END_OF_TURN_TOKEN|>",
                       "<|return|>", "<end_of_utterance>")


@dataclass(frozen=True)
class ChatFormat:
    """How messages become a prompt for one family of models.

    ``render(messages, *, add_generation_prompt, tools, bos_token, eos_token, **extra) -> str``;
    ``native_tools``: the prompt shows ``tools`` itself (otherwise llamapy
    describes them in the system message); ``reasoning``: the syntax the
    model's replies put their reasoning in (``reasoning.template_syntax``)."""

    name: str
    render: Callable[..., str]
    stop: Tuple[str, ...] = ()
    native_tools: bool = False
    reasoning: Optional[str] = None


@dataclass(frozen=True)
class Turns:
    """A prompt made of one wrapped block per message.

    ``role`` is the default wrapper (``{role}`` is the message's role, after
    ``names``); ``system``/``user``/``assistant``/``tool`` override it. With
    ``merge`` set, a leading system message is not a block of its own but is
    put into the first user message (``merge`` holds ``{}`` for it, followed
    by that message's content)."""

    role: Optional[str] = None
    system: Optional[str] = None
    user: Optional[str] = None
    assistant: Optional[str] = None
    tool: Optional[str] = None
    generation: str = ""
    prefix: str = ""
    merge: Optional[str] = None
    default_system: str = ""
    names: Mapping[str, str] = field(default_factory=dict)
    strip: bool = False

    def _wrapper(self, role: str) -> str:
        w = {"system": self.system, "user": self.user, "assistant": self.assistant, "tool": self.tool}.get(role)
        w = w if w is not None else self.role
        if w is None:
            raise ValueError(f"this chat format has no place for messages with role {role!r}")
        return w

    def __call__(self, messages: Sequence[Message], *, add_generation_prompt: bool = True, bos_token: str = "",
                 eos_token: str = "", **_: Any) -> str:
        def fill(wrapper: str, content: str = "", role: str = "") -> str:
            w = wrapper.replace("{bos}", bos_token).replace("{eos}", eos_token).replace("{role}", role)
            head, _, tail = w.partition("{}")
            return head + content + tail

        msgs = list(messages)
        if self.default_system and not any(m["role"] == "system" for m in msgs):
            msgs.insert(0, {"role": "system", "content": self.default_system})
        pending_system = None
        if self.merge is not None and msgs and msgs[0]["role"] == "system":
            pending_system = _text(msgs.pop(0), self.strip)
            if not any(m["role"] == "user" for m in msgs):
                msgs.insert(0, {"role": "user", "content": ""})
        out = [fill(self.prefix)]
        for m in msgs:
            content = _text(m, self.strip)
            if pending_system is not None and m["role"] == "user":
                content = fill(self.merge, pending_system) + content  # type: ignore[arg-type]
                pending_system = None
            out.append(fill(self._wrapper(m["role"]), content, self.names.get(m["role"], m["role"])))
        if add_generation_prompt:
            out.append(fill(self.generation))
        return "".join(out)


def _text(message: Message, strip: bool) -> str:
    content = message.get("content")
    text = "" if content is None else str(content)
    return text.strip() if strip else text


@dataclass(frozen=True)
class JinjaFormat:
    """Render with a Jinja chat template (sandboxed, see template.py)."""

    source: str

    def __call__(self, messages: Sequence[Message], **kwargs: Any) -> str:
        return compile_template(self.source).render(messages, **kwargs)


def format_from_template(source: str, name: str = "chat_template.default", eos_token: str = "") -> ChatFormat:
    """A ChatFormat for a Jinja template: its stop strings are the end-of-turn
    markers it contains plus the EOS text; a harmony template's are
    ``<|return|>`` and ``<|call|>`` (its ``<|end|>`` ends a message, not the reply)."""
    reasoning = template_syntax(source)
    if reasoning == "harmony":
        stop = list(harmony.STOP)
    else:
        stop = [m for m in END_OF_TURN_MARKERS if m in source]
    if eos_token and eos_token not in stop and not (reasoning == "harmony" and eos_token == harmony.END):
        stop.append(eos_token)
    return ChatFormat(name, JinjaFormat(source), tuple(stop), native_tools="tools" in source, reasoning=reasoning)


# The chat handler's stop strings where they are not llama-cpp-python's: the
# end-of-turn markers themselves (llama-cpp-python stops at "<end_of_turn>\n",
# and relies on end-of-generation tokens for <|eom_id|> and <|im_end|>), so a
# turn also ends where its marker arrives as text.
_HANDLER_STOP = {"gemma": ("<end_of_turn>",), "llama-3": ("<|eot_id|>", "<|eom_id|>"),
                 "qwen": ("<|im_end|>", "<|endoftext|>")}


def _named(spec: Any) -> ChatFormat:
    """A ChatFormat for one of llama-cpp-python's named formats (named_formats.py)."""
    def render(messages: Sequence[Message], *, add_generation_prompt: bool = True, **_: Any) -> str:
        return spec.render(messages, add_generation_prompt)

    return ChatFormat(spec.name, render, _HANDLER_STOP.get(spec.name, stop_strings(spec.stop)))


_CHATML = Turns(role="<|im_start|>{role}\n{}<|im_end|>\n", generation="<|im_start|>assistant\n")

FORMATS: Dict[str, ChatFormat] = {name: _named(spec) for name, spec in NAMED_FORMATS.items()}
FORMATS.update({f.name: f for f in [
    # Not a llama-cpp-python format (it has none for Phi-3): Phi-3's own template.
    ChatFormat("phi-3", Turns(role="<|{role}|>\n{}<|end|>\n", generation="<|assistant|>\n"), ("<|end|>",)),
    # llama-cpp-python's name for ChatML with function calling; llamapy describes
    # tools in the system message and parses <tool_call> blocks (as for any format).
    ChatFormat("chatml-function-calling", _CHATML, ("<|im_end|>",)),
]})

# Formats guessed from general.architecture when a model has no chat template.
# The architectures the engine runs declare theirs (model/<arch>.cpp:
# _engine.architectures()); these are families it does not run, whose
# tokenizers still load (vocab_only).
_OTHER_ARCH_FORMATS = {"gemma": "gemma", "gemma3n": "gemma", "qwen": "qwen", "qwen2moe": "qwen", "qwen3moe": "qwen",
                       "chatglm": "chatglm3", "baichuan": "baichuan-2"}
FALLBACK_FORMAT = "llama-2"  # llama-cpp-python's last resort


def get_format(name: str) -> ChatFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown chat format {name!r}; known formats: {', '.join(sorted(FORMATS))}") from None


def guess_format_name(metadata: Mapping[str, Any]) -> str:
    """The named format for a model without a chat template, from its architecture."""
    arch = str(metadata.get("general.architecture", ""))
    engine_arch = _engine.architectures().get(arch)
    if engine_arch is not None:
        return engine_arch["chat_format"] or FALLBACK_FORMAT
    return _OTHER_ARCH_FORMATS.get(arch, FALLBACK_FORMAT)


def template_names(metadata: Mapping[str, Any]) -> List[str]:
    """Chat formats a GGUF offers: ``chat_template.default`` and ``chat_template.<name>``."""
    names = ["chat_template.default"] if isinstance(metadata.get("tokenizer.chat_template"), str) else []
    names += [k[len("tokenizer."):] for k in metadata if k.startswith("tokenizer.chat_template.")]
    return names
