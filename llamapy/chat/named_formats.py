"""The named chat formats of llama-cpp-python (``chat_format="chatml"``, ...),
rendered byte for byte as llama-cpp-python 0.3.36 renders them.

Those formats are not the models' documented templates: they follow
FastChat-style "conversation" helpers, quirks included (zephyr writes two
newlines after ``<|user|>``, alpaca writes no response header, an empty
message becomes an open turn header, the first system message moves to the
top). Prompts written for llama-cpp-python, and their token counts, only stay
the same if those quirks are kept, so they are: every format's spec below
states the text it writes, checked against prompts recorded from
llama-cpp-python (tests/data/chat_format_fixtures.json).

The one deliberate difference: llama-cpp-python silently leaves some messages
out (gemma's, mistral-instruct's and the fixed-system formats' system
messages, system messages after the first, tool and other roles, saiga's
assistant messages, open-orca's every message, content given as a list of
parts). llamapy keeps them:

- a system message the format has no place for is put at the head of the next
  user message (``"{system}\\n\\n{user}"``, as Gemma's own template does), or
  becomes a user message where none follows;
- a message with another role (``tool``, ``ipython``, ...) gets a turn header
  with its role name where the format names roles in its headers (chatml,
  qwen, llama-3), and is a user turn elsewhere. The chat handler turns tool
  results into ``<tool_response>`` user turns before they get here;
- text content parts are joined; saiga's assistant is its ``bot``; open-orca's
  ``user``/``assistant`` are its ``User``/``Assistant``.

Where no message is dropped the prompt is llama-cpp-python's exactly.
Messages reach ``render`` normalized (``completion.normalize_messages``):
content is a str or None, roles are lower-case strings.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

Message = Dict[str, Any]
Turn = Tuple[str, Optional[str]]  # (the text before the content, the content; None or "" = an open header)

_VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. "
                  "The assistant gives helpful, detailed, and polite answers to the user's questions.")
_OPENBUDDY_SYSTEM = (
    "You are a helpful, respectful and honest INTP-T AI Assistant named Buddy. You are talking to a human User.\n"
    "Always answer as helpfully and logically as possible, while being safe. Your answers should not include any "
    "harmful, political, religious, unethical, racist, sexist, toxic, dangerous, or illegal content. Please ensure "
    "that your responses are socially unbiased and positive in nature.\n"
    "If a question does not make any sense, or is not factually coherent, explain why instead of answering something "
    "not correct. If you don't know the answer to a question, please don't share false information.\n"
    "You can speak fluently in many languages, for example: English, Chinese.\n"
    "You cannot access the internet, but you have vast knowledge, cutoff: 2021-09.\n"
    "You are trained by OpenBuddy team, (https://openbuddy.ai, https://github.com/OpenBuddy/OpenBuddy), you are based "
    "on LLaMA and Falcon transformers model, not related to GPT or OpenAI.\n\n")
_SNOOZY_SYSTEM = ("The prompt below is a question to answer, a task to complete, or a conversation to respond to; "
                  "decide which and write an appropriate response.")
_OPEN_ORCA_SYSTEM = (
    "You are a helpful assistant. Please answer truthfully and write out your thinking step by step to be sure you "
    "get the right answer. If you make a mistake or encounter an error in your thinking, say so out loud and attempt "
    "to correct it. If you don't know or aren't sure about something, say so clearly. You will act as a professional "
    "logician, mathematician, and physicist. You will also act as the most appropriate type of expert to answer any "
    "particular question or solve the relevant problem; state which expert type your are, if so. Also think of any "
    "particular named expert that would be ideal to answer the relevant question or solve the relevant problem; name "
    "and act as them, if appropriate.")


# ------------------------------------------------------------------ layouts
# How a list of turns becomes text. ``head`` is the system block (already
# filled in), each turn is (tag, content); an empty content is an open header.
def _plain(head: str, turns: Sequence[Turn], sep: str) -> str:
    """tag + content + sep per turn; an open turn is its tag alone."""
    return head + "".join(tag + c + sep if c else tag for tag, c in turns)


def _colon(head: str, turns: Sequence[Turn], sep: str, sep2: Optional[str] = None, open_tail: str = ":") -> str:
    """``head sep`` then ``tag: content`` turns; separators alternate between
    sep and sep2 by the turn's index (user/assistant pairs)."""
    seps = (sep, sep if sep2 is None else sep2)
    out = [head, sep]
    for i, (tag, c) in enumerate(turns):
        out.append(f"{tag}: {c}{seps[i % 2]}" if c else tag + open_tail)
    return "".join(out)


def _lines(head: str, turns: Sequence[Turn], sep: str) -> str:
    """ChatML-like: ``head sep\\n``, then ``tag\\ncontent sep\\n``; an open turn is ``tag\\n``."""
    out = [head + sep + "\n" if head else ""]
    out += [f"{tag}\n{c}{sep}\n" if c else tag + "\n" for tag, c in turns]
    return "".join(out)


def _glm(head: str, turns: Sequence[Turn], sep: str) -> str:
    """chatglm3: ``tag\\n content`` with no separator at all."""
    return head + "".join(f"{tag}\n {c}" if c else tag for tag, c in turns)


def _llama2(head: str, turns: Sequence[Turn], sep: str) -> str:
    """llama-2 as llama-cpp-python writes it: with a system block, the first
    turn's tag is left out; separators alternate " " and "</s>" by index."""
    seps = (" ", "</s>")
    out = [head, " "]
    for i, (tag, c) in enumerate(turns):
        if head and i == 0:
            out.append((c or "") + seps[0])
        elif c:
            out.append(f"{tag}{c} {seps[i % 2]}")
        else:
            out.append(tag + " ")
    return "".join(out)


# ------------------------------------------------------------------ specs
@dataclass(frozen=True)
class NamedFormat:
    """One llama-cpp-python named format.

    ``system``: the system block; ``{}`` is the first system message's text
    (``default`` where there is none or it is empty, for formats that have
    one). ``system_place``: "top" (the first system message becomes the
    block, later ones go into the next user turn), "turns" (system messages
    are turns like any other), "fold" (the block is fixed; every system
    message goes into the next user turn). ``open_turn``: the generation
    prompt, an open assistant turn (None: the format writes none)."""

    name: str
    layout: Callable[..., str]
    user: str
    assistant: str
    sep: str = ""
    sep2: Optional[str] = None
    system: str = "{}"
    default: str = ""
    system_place: str = "top"
    system_tag: Optional[str] = None        # the tag of system turns ("turns")
    named_role: Optional[str] = None        # a tag for any other role, "{role}" its name; None: a user turn
    open_turn: bool = True
    tail: str = ""                          # text after everything (with the generation prompt)
    stop: Optional[Union[str, List[str]]] = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # layout keywords

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
        msgs = _fold_systems(messages, keep_first=self.system_place == "top") \
            if self.system_place != "turns" else list(messages)
        head = self._head(messages)
        turns = [self._turn(m) for m in msgs if not (m["role"] == "system" and self.system_place == "top")]
        if add_generation_prompt and self.open_turn:
            turns.append((self.assistant, None))
        text = self.layout(head, turns, self.sep, **({"sep2": self.sep2} if self.sep2 is not None else {}),
                           **self.extra)
        return text + self.tail if add_generation_prompt else text

    def _head(self, messages: Sequence[Message]) -> str:
        if self.system_place != "top":
            return self.system.replace("{}", self.default)
        first = next((m for m in messages if m["role"] == "system"), None)
        text = (first.get("content") or "") if first is not None else ""
        if self.name == "llama-2":  # the block appears only with a system message
            return self.system.replace("{}", text) if text else ""
        return self.system.replace("{}", text or self.default)

    def _turn(self, m: Message) -> Turn:
        role, content = m["role"], m.get("content")
        if role == "user":
            return self.user, content
        if role == "assistant":
            return self.assistant, content
        if role == "system" and self.system_tag is not None:
            return self.system_tag, content
        if self.named_role is not None:
            return self.named_role.replace("{role}", role), content
        return self.user, content


def _fold_systems(messages: Sequence[Message], keep_first: bool) -> List[Message]:
    """System messages the format has no place for go to the head of the next
    user message; with none after them they become a user message. With
    ``keep_first`` the first system message stays (it is the format's block)."""
    out: List[Message] = []
    pending: List[str] = []
    first_seen = not keep_first
    for m in messages:
        if m["role"] == "system":
            if not first_seen:
                first_seen = True
                out.append(m)
            else:
                pending.append(m.get("content") or "")
            continue
        if pending and m["role"] == "user":
            m = dict(m, content="\n\n".join(pending + [m["content"]] if m.get("content") else pending))
            pending = []
        out.append(m)
    if pending:
        out.append({"role": "user", "content": "\n\n".join(pending)})
    return out


def _mistral_instruct(messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
    """``[INST] user`` and `` [/INST]assistant</s>``, then `` [/INST]``
    (llama-cpp-python's own layout, not Mistral's template)."""
    out = []
    for m in _fold_systems(messages, keep_first=False):
        content = m.get("content")
        if m["role"] == "assistant":
            if content is not None:
                out.append(" [/INST]" + content + "</s>")
        elif content is not None:  # user (and any other role, kept as a user turn)
            out.append("[INST] " + content)
    return "".join(out) + (" [/INST]" if add_generation_prompt else "")


def _saiga(messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
    """``<s>role\\ncontent</s>`` per message, the assistant as ``bot``, then
    ``<s>bot``; the whole prompt is stripped."""
    out = []
    for m in messages:
        role = {"assistant": "bot"}.get(m["role"], m["role"])
        content = m.get("content")
        out.append(f"<s>{role}\n{content}</s>" if content else f"<s>{role}\n")
    return ("".join(out) + ("<s>bot" if add_generation_prompt else "")).strip()


@dataclass(frozen=True)
class CustomFormat:
    """A named format whose layout is a function of its own."""

    name: str
    function: Callable[..., str]
    stop: Optional[Union[str, List[str]]] = None

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
        return self.function(messages, add_generation_prompt)


_IM = "<|im_start|>"
_L3 = "<|start_header_id|>{}<|end_header_id|>\n\n"

NAMED_FORMATS: Dict[str, Union[NamedFormat, CustomFormat]] = {f.name: f for f in [
    NamedFormat("llama-2", _llama2, "<s>[INST]", "[/INST]", system="[INST] <<SYS>>\n{}\n<</SYS>>",
                open_turn=False, tail="[/INST]"),
    NamedFormat("llama-3", _plain, _L3.format("user"), _L3.format("assistant"), "<|eot_id|>", system="",
                system_place="turns", system_tag=_L3.format("system"), named_role=_L3.format("{role}"),
                stop="<|eot_id|>"),
    NamedFormat("alpaca", _colon, "### Instruction", "### Response", "\n\n", sep2="</s>", open_turn=False),
    NamedFormat("qwen", _lines, _IM + "user", _IM + "assistant", "<|im_end|>", system=_IM + "system\n{}",
                default="You are a helpful assistant.", named_role=_IM + "{role}", stop="<|endoftext|>"),
    NamedFormat("vicuna", _colon, "USER", "ASSISTANT", " ", sep2="</s>", system="{}", default=_VICUNA_SYSTEM,
                system_place="fold"),
    NamedFormat("oasst_llama", _plain, "<|prompter|>", "<|assistant|>", "</s>",
                system="[INST] <<SYS>>\n{}\n<</SYS>>\n\n"),
    NamedFormat("baichuan-2", _plain, "<reserved_106>", "<reserved_107>"),
    NamedFormat("baichuan", _plain, "<reserved_102>", "<reserved_103>"),
    NamedFormat("openbuddy", _colon, "User", "Assistant", "\n", default=_OPENBUDDY_SYSTEM, system_place="fold"),
    NamedFormat("redpajama-incite", _colon, "<human>", "<bot>", "\n", stop="<human>"),
    NamedFormat("snoozy", _colon, "### Prompt", "### Response", "\n", default=_SNOOZY_SYSTEM, stop="###"),
    NamedFormat("phind", _colon, "### User Message", "### Assistant", "\n\n",
                system="### System Prompt\nYou are an intelligent programming assistant.", system_place="fold"),
    # llama-cpp-python writes this system block unfilled, braces and all; kept for identical prompts.
    NamedFormat("intel", _colon, "### User:", "### Assistant:", "\n", system="### System:\n{system_message}",
                system_place="fold"),
    NamedFormat("open-orca", _colon, "User", "Assistant", "<|end_of_turn|>\n", system=_OPEN_ORCA_SYSTEM,
                system_place="fold", stop="User", extra={"open_tail": ": "}),
    NamedFormat("mistrallite", _plain, "<|prompter|>", "</s>\n<|assistant|>", " ", system="<|system|>{}</s>"),
    NamedFormat("zephyr", _lines, "<|user|>\n", "<|assistant|>\n", "</s>", system="<|system|>\n{}", stop="</s>"),
    NamedFormat("pygmalion", _lines, "<|user|>", "<|model|>", "\n", system="<|system|>{}", stop="\n"),
    NamedFormat("chatml", _lines, _IM + "user", _IM + "assistant", "<|im_end|>", system=_IM + "system\n{}",
                named_role=_IM + "{role}", stop="<|im_end|>"),
    CustomFormat("mistral-instruct", _mistral_instruct, stop="</s>"),
    NamedFormat("chatglm3", _glm, "<|user|>", "<|assistant|>", "</s>", system="<|system|>\n{}", stop="</s>"),
    NamedFormat("openchat", _lines, "GPT4 Correct User: ", "<|end_of_turn|>GPT4 Correct Assistant: ",
                "<|end_of_turn|>", system="{}<|end_of_turn|>", stop="<|end_of_turn|>"),
    CustomFormat("saiga", _saiga),
    NamedFormat("gemma", _plain, "<start_of_turn>user\n", "<start_of_turn>model\n", "<end_of_turn>\n", system="",
                system_place="fold", stop="<end_of_turn>\n"),
]}


def stop_strings(stop: Optional[Union[str, List[str]]]) -> Tuple[str, ...]:
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(stop)


# --- templates of well-known models, as their tokenizer_config.json has them --------------------------------------
# guess_chat_format_from_gguf_metadata recognises a GGUF by these exact texts.
CHATML_CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
                        "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
                        "{{ '<|im_start|>assistant\n' }}{% endif %}")
CHATML_BOS_TOKEN = "<s>"
CHATML_EOS_TOKEN = "<|im_end|>"

_MISTRAL_HEAD = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
                 "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
                 "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
                 "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}")
_MISTRAL_TAIL = "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
MISTRAL_INSTRUCT_CHAT_TEMPLATE = _MISTRAL_HEAD + "{{ message['content'] + eos_token + ' ' }}" + _MISTRAL_TAIL
MISTRAL_INSTRUCT_BOS_TOKEN = "<s>"
MISTRAL_INSTRUCT_EOS_TOKEN = "</s>"
MIXTRAL_INSTRUCT_CHAT_TEMPLATE = _MISTRAL_HEAD + "{{ message['content'] + eos_token}}" + _MISTRAL_TAIL

LLAMA3_INSTRUCT_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")


def guess_chat_format_from_gguf_metadata(metadata: Dict[str, str]) -> Optional[str]:
    """The named format whose model's template the GGUF carries, recognised by
    exact text (ChatML, Mistral/Mixtral Instruct, Llama 3 Instruct), else None."""
    template = metadata.get("tokenizer.chat_template")
    if template is None:
        return None
    if template == CHATML_CHAT_TEMPLATE:
        return "chatml"
    if template in (MISTRAL_INSTRUCT_CHAT_TEMPLATE, MIXTRAL_INSTRUCT_CHAT_TEMPLATE):
        return "mistral-instruct"
    if template == LLAMA3_INSTRUCT_CHAT_TEMPLATE:
        return "llama-3"
    return None
