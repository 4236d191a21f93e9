"""Named chat formats (the ``chat_format=`` values llama-cpp-python users
pass) and the choice of format for a model.

A format turns OpenAI-shaped messages into prompt text and names the strings
that end the assistant's turn. Most are a ``Turns`` table row: one wrapper per
role, with ``{}`` for the content and ``{bos}``, ``{eos}``, ``{role}`` for
those texts; adding a format is one entry in ``FORMATS``. Models with a Jinja
template in their GGUF use ``JinjaFormat`` instead (``template.py``).

Not here: tokenization, tools, generation (``completion.py``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

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
    describes them in the system message)."""

    name: str
    render: Callable[..., str]
    stop: Tuple[str, ...] = ()
    native_tools: bool = False


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
    markers it contains plus the EOS text."""
    stop = [m for m in END_OF_TURN_MARKERS if m in source]
    if eos_token and eos_token not in stop:
        stop.append(eos_token)
    return ChatFormat(name, JinjaFormat(source), tuple(stop), native_tools="tools" in source)


_VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. "
                  "The assistant gives helpful, detailed, and polite answers to the user's questions.")
_CHATML = Turns(role="<|im_start|>{role}\n{}<|im_end|>\n", generation="<|im_start|>assistant\n")

FORMATS: Dict[str, ChatFormat] = {f.name: f for f in [
    ChatFormat("chatml", _CHATML, ("<|im_end|>",)),
    ChatFormat("qwen", Turns(role=_CHATML.role, generation=_CHATML.generation,
                             default_system="You are a helpful assistant."), ("<|im_end|>", "<|endoftext|>")),
    ChatFormat("llama-3", Turns(prefix="{bos}", role="<|start_header_id|>{role}<|end_header_id|>\n\n{}<|eot_id|>",
                                generation="<|start_header_id|>assistant<|end_header_id|>\n\n", strip=True),
               ("<|eot_id|>", "<|eom_id|>")),
    ChatFormat("llama-2", Turns(user="{bos}[INST] {} [/INST]", assistant=" {} {eos}",
                                merge="<<SYS>>\n{}\n<</SYS>>\n\n", strip=True), ("</s>",)),
    ChatFormat("mistral-instruct", Turns(prefix="{bos}", user="[INST] {} [/INST]", assistant="{}{eos}", merge="{}\n\n"),
               ("</s>",)),
    ChatFormat("gemma", Turns(prefix="{bos}", user="<start_of_turn>user\n{}<end_of_turn>\n",
                              assistant="<start_of_turn>model\n{}<end_of_turn>\n",
                              generation="<start_of_turn>model\n", merge="{}\n\n", strip=True), ("<end_of_turn>",)),
    ChatFormat("phi-3", Turns(role="<|{role}|>\n{}<|end|>\n", generation="<|assistant|>\n"), ("<|end|>",)),
    ChatFormat("zephyr", Turns(role="<|{role}|>\n{}{eos}\n", generation="<|assistant|>\n"), ("</s>",)),
    ChatFormat("openchat", Turns(prefix="{bos}", system="{}<|end_of_turn|>",
                                 user="GPT4 Correct User: {}<|end_of_turn|>",
                                 assistant="GPT4 Correct Assistant: {}<|end_of_turn|>",
                                 generation="GPT4 Correct Assistant:"), ("<|end_of_turn|>",)),
    ChatFormat("alpaca", Turns(system="{}\n\n", user="### Instruction:\n{}\n\n", assistant="### Response:\n{}\n\n",
                               generation="### Response:\n"), ("### Instruction:",)),
    ChatFormat("vicuna", Turns(system="{} ", user="USER: {} ", assistant="ASSISTANT: {}{eos}", generation="ASSISTANT:",
                               default_system=_VICUNA_SYSTEM), ("USER:",)),
    ChatFormat("oasst_llama", Turns(system="[INST] <<SYS>>\n{}\n<</SYS>>\n\n", user="<|prompter|>{}</s>",
                                    assistant="<|assistant|>{}</s>", generation="<|assistant|>"), ("</s>",)),
    ChatFormat("baichuan-2", Turns(system="{}", user="<reserved_106>{}", assistant="<reserved_107>{}",
                                   generation="<reserved_107>")),
    ChatFormat("baichuan", Turns(system="{}", user="<reserved_102>{}", assistant="<reserved_103>{}",
                                 generation="<reserved_103>")),
    ChatFormat("redpajama-incite", Turns(system="{}\n", user="<human>: {}\n", assistant="<bot>: {}\n",
                                         generation="<bot>:"), ("<human>",)),
    ChatFormat("snoozy", Turns(system="### Instruction:\n{}\n", user="### Prompt:\n{}\n",
                               assistant="### Response:\n{}\n", generation="### Response:\n",
                               default_system="The prompt below is a question to answer, a task to complete, or a "
                                              "conversation to respond to; decide which and write an appropriate "
                                              "response."), ("###",)),
    ChatFormat("phind", Turns(system="### System Prompt\n{}\n\n", user="### User Message\n{}\n\n",
                              assistant="### Assistant\n{}\n\n", generation="### Assistant\n",
                              default_system="You are an intelligent programming assistant."), ("### User Message",)),
    ChatFormat("intel", Turns(system="### System:\n{}\n", user="### User:\n{}\n", assistant="### Assistant:\n{}\n",
                              generation="### Assistant:\n"), ("### User:",)),
    ChatFormat("mistrallite", Turns(system="<|system|>{}</s>", user="<|prompter|>{}</s>",
                                    assistant="<|assistant|>{}</s>", generation="<|assistant|>"), ("</s>",)),
    ChatFormat("pygmalion", Turns(system="<|system|>{}\n", user="<|user|>{}\n", assistant="<|model|>{}\n",
                                  generation="<|model|>"), ("<|user|>",)),
    ChatFormat("chatglm3", Turns(prefix="[gMASK]sop", role="<|{role}|>\n {}", generation="<|assistant|>"),
               ("<|user|>", "<|observation|>")),
    ChatFormat("saiga", Turns(role="<s>{role}\n{}</s>", generation="<s>bot\n", names={"assistant": "bot"}), ("</s>",)),
    # llama-cpp-python's name for ChatML with function calling; llamapy describes
    # tools in the system message and parses <tool_call> blocks (as for any format).
    ChatFormat("chatml-function-calling", _CHATML, ("<|im_end|>",)),
]}

# Formats guessed from general.architecture when a model has no chat template.
_ARCH_FORMATS = {"gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "gemma3n": "gemma", "qwen": "qwen",
                 "qwen2": "qwen", "qwen2moe": "qwen", "qwen3": "qwen", "qwen3moe": "qwen", "phi3": "phi-3",
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
    return _ARCH_FORMATS.get(arch, FALLBACK_FORMAT)


def guess_chat_format_from_gguf_metadata(metadata: Mapping[str, Any]) -> Optional[str]:
    """llama-cpp-python's helper: a named format that matches the GGUF's chat
    template, judged by its turn markers, or None."""
    template = metadata.get("tokenizer.chat_template")
    if not isinstance(template, str):
        return None
    for marker, name in (("<|start_header_id|>", "llama-3"), ("<start_of_turn>", "gemma"),
                         ("<|im_start|>", "chatml"), ("[INST]", "mistral-instruct"), ("<|assistant|>", "phi-3")):
        if marker in template:
            return name
    return None


def template_names(metadata: Mapping[str, Any]) -> List[str]:
    """Chat formats a GGUF offers: ``chat_template.default`` and ``chat_template.<name>``."""
    names = ["chat_template.default"] if isinstance(metadata.get("tokenizer.chat_template"), str) else []
    names += [k[len("tokenizer."):] for k in metadata if k.startswith("tokenizer.chat_template.")]
    return names
