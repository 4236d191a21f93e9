"""Seven reasoning models' chat templates (gpt-oss, Qwen3, Qwen3-Coder,
DeepSeek-V3.1, GLM-4.6, Qwen3.5, Gemma 4) render through llamapy's chat path exactly as
transformers' ``apply_chat_template`` renders them.

The expected prompts were recorded once with transformers 5 by
tools/record_chat_templates.py (tests/data/chat_templates/transformers_renders.json);
the templates are read from the llama.cpp tree in llama-cpp-python's sdist
(the ``llama_cpp_sdist`` fixture), checked against the recorded SHA-256.
llamapy gets each conversation as an OpenAI client sends it (arguments as a
JSON string, reasoning as ``reasoning_content``), through FormatHandler's
rendering (message normalization, template variables, the sandbox).
"""
from __future__ import annotations

import copy
import datetime
import hashlib
import json
from pathlib import Path

import pytest

from llamapy.chat import template as template_module
from llamapy.chat.completion import ChatRequest, FormatHandler, normalize_messages
from llamapy.chat.formats import format_from_template
from llamapy.chat.template import ChatTemplateError
from llamapy.chat.tools import tools_system_prompt

# DeepSeek-V3.1's template has no place for a tool list (it writes the calls of
# the history, not the tools): llamapy, by design, describes the tools in the
# system message for such templates and writes the tool history as text there
# (completion.normalize_messages), where transformers renders the history alone.
TOOLS_AS_TEXT = {"deepseek-ai-DeepSeek-V3.1.jinja"}

RECORD = json.loads((Path(__file__).parent / "data" / "chat_templates" / "transformers_renders.json")
                    .read_text(encoding="utf-8"))
CASES = [(name, case) for name in RECORD["templates"] for case in RECORD["conversations"]]


class TokenTexts:
    """The two token texts a chat handler asks a model for (BOS, EOS)."""

    def __init__(self, bos: str, eos: str) -> None:
        self.texts = [bos, eos]

    def token_bos(self) -> int:
        return 0 if self.texts[0] else -1

    def token_eos(self) -> int:
        return 1

    def detokenize(self, tokens, special: bool = False) -> bytes:
        return "".join(self.texts[t] for t in tokens).encode("utf-8")


@pytest.fixture(scope="module")
def sources(llama_cpp_sdist):
    folder = Path(llama_cpp_sdist) / "vendor" / "llama.cpp" / "models" / "templates"
    out = {}
    for name, info in RECORD["templates"].items():
        text = (folder / name).read_text(encoding="utf-8")
        assert hashlib.sha256(text.encode("utf-8")).hexdigest() == info["sha256"], f"{name} is not the recorded one"
        out[name] = text
    return out


@pytest.fixture
def frozen_date(monkeypatch):
    """strftime_now's clock at the recorded date (gpt-oss prints the date)."""
    day = datetime.datetime.strptime(RECORD["date"], "%Y-%m-%d")

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return day

    monkeypatch.setattr(template_module, "datetime", Frozen)


def render(source: str, name: str, case: str, messages=None) -> str:
    info, conv = RECORD["templates"][name], RECORD["conversations"][case]
    kwargs = info["kwargs"] if case == "unicode_and_kwargs" else {}
    handler = FormatHandler(format_from_template(source, eos_token=info["eos_token"]))
    req = ChatRequest(messages=copy.deepcopy(messages or conv["messages"]), tools=conv.get("tools"),
                      template_kwargs=dict(kwargs))
    if conv.get("add_generation_prompt", True):
        return handler.render_text(TokenTexts(info["bos_token"], info["eos_token"]), req, req.tools)
    # render_text always asks for a generation prompt: the same steps without it.
    msgs = normalize_messages(req.messages, tools_as_text=False)
    return handler.format.render(msgs, add_generation_prompt=False, tools=req.tools, bos_token=info["bos_token"],
                                 eos_token=info["eos_token"], **kwargs)


@pytest.mark.parametrize("name,case", CASES)
def test_render_equals_transformers(sources, frozen_date, name, case):
    expected = RECORD["renders"][name][case]
    if name in TOOLS_AS_TEXT and RECORD["conversations"][case].get("tools"):
        out = render(sources[name], name, case)
        assert tools_system_prompt(RECORD["conversations"][case]["tools"]) in out
        assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in out
        assert out.endswith("<\uff5cAssistant\uff5c><think></think>")
    elif isinstance(expected, dict):
        with pytest.raises(ChatTemplateError):
            render(sources[name], name, case)
    else:
        assert render(sources[name], name, case) == expected


@pytest.mark.parametrize("name", sorted(set(RECORD["templates"]) - TOOLS_AS_TEXT))
def test_null_content_of_a_tool_call_renders_as_empty(sources, frozen_date, name):
    # OpenAI clients send "content": null with tool calls; transformers 5 leaves the key
    # out (Qwen3's template then fails). llamapy renders these templates as with "".
    messages = copy.deepcopy(RECORD["conversations"]["tool_call"]["messages"])
    call = next(m for m in messages if m.get("tool_calls"))
    call["content"] = None
    assert render(sources[name], name, "tool_call", messages) == RECORD["renders"][name]["tool_call"]


def test_thinking_is_an_alias_of_reasoning_content(sources, frozen_date):
    # gpt-oss's template reads "thinking"; a client may send either name (or "reasoning").
    name = "openai-gpt-oss-120b.jinja"
    for key in ("thinking", "reasoning"):
        messages = copy.deepcopy(RECORD["conversations"]["tool_call"]["messages"])
        call = next(m for m in messages if m.get("tool_calls"))
        call[key] = call.pop("reasoning_content")
        out = render(sources[name], name, "tool_call", messages)
        assert out == RECORD["renders"][name]["tool_call"]
        assert "<|channel|>analysis<|message|>The user wants the weather" in out


def test_the_generation_prompt_decides_the_reply_syntax(sources, frozen_date):
    from llamapy.chat.reasoning import reply_syntax

    syntax = {name: format_from_template(src).reasoning for name, src in sources.items()}
    assert syntax == {"openai-gpt-oss-120b.jinja": "harmony", "Qwen-Qwen3-0.6B.jinja": "think",
                      "Qwen3-Coder.jinja": None, "deepseek-ai-DeepSeek-V3.1.jinja": "think",
                      "GLM-4.6.jinja": "think", "Qwen3.5-4B.jinja": "think", "google-gemma-4-31B-it.jinja": "gemma4"}
    # DeepSeek-V3.1 with thinking=True opens <think> in the prompt; without, it closes it.
    v31 = RECORD["renders"]["deepseek-ai-DeepSeek-V3.1.jinja"]
    assert reply_syntax("think", v31["unicode_and_kwargs"]) == "think-open"
    assert reply_syntax("think", v31["system_user"]) == "think-closed"  # the reply is content
    assert reply_syntax("harmony", RECORD["renders"]["openai-gpt-oss-120b.jinja"]["system_user"]) == "harmony"


def test_harmony_stop_strings_leave_end_of_message_alone(sources):
    fmt = format_from_template(sources["openai-gpt-oss-120b.jinja"], eos_token="<|return|>")
    assert fmt.stop == ("<|return|>", "<|call|>")
    assert format_from_template(sources["openai-gpt-oss-120b.jinja"], eos_token="<|end|>").stop == \
        ("<|return|>", "<|call|>")
    assert "<|im_end|>" in format_from_template(sources["Qwen-Qwen3-0.6B.jinja"]).stop
