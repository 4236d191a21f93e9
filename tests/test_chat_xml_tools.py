"""Qwen3-Coder's (and Qwen3.5's) XML tool calls through create_chat_completion,
with the model's own chat template (from the llama-cpp-python sdist): the
template describes the tools, the reply's <function=...> blocks become
OpenAI tool_calls typed by the tools' schemas, whole and streamed (as
argument deltas).
Gemma 3 270M's vocabulary spells the reply; the model's choice of tokens is
scripted (Llama.generate yields the tokens of REPLY)."""
from __future__ import annotations

import json

import pytest

from chat_helpers import gemma_speaking, sdist_template

pytestmark = pytest.mark.model

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string"}, "days": {"type": "integer"}},
                                               "required": ["city"]}}}]
CALL = ("I will look it up.\n<tool_call>\n<function=get_weather>\n<parameter=city>\n1010 Wien\n</parameter>\n"
        "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>")
REPLY = {"text": CALL}
MSGS = [{"role": "user", "content": "Weather in Vienna for two days?"}]


@pytest.fixture(scope="module")
def llm(gemma_path, llama_cpp_sdist):
    with gemma_speaking(gemma_path, sdist_template(llama_cpp_sdist, "Qwen3-Coder.jinja"), REPLY, n_ctx=2048) as m:
        yield m


@pytest.fixture(autouse=True)
def reset():
    REPLY["text"] = CALL


def test_xml_call_becomes_tool_calls(llm):
    r = llm.create_chat_completion(messages=MSGS, tools=TOOLS, max_tokens=200)
    msg = r["choices"][0]["message"]
    assert r["choices"][0]["finish_reason"] == "tool_calls"
    assert msg["content"] == "I will look it up."
    call = msg["tool_calls"][0]["function"]
    assert call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == {"city": "1010 Wien", "days": 2}  # a string stays a string


def test_streamed_xml_call(llm):
    whole = llm.create_chat_completion(messages=MSGS, tools=TOOLS, max_tokens=200)["choices"][0]["message"]
    content, args, names, finish = "", "", [], None
    for chunk in llm.create_chat_completion(messages=MSGS, tools=TOOLS, max_tokens=200, stream=True):
        d = chunk["choices"][0]["delta"]
        content += d.get("content") or ""
        for c in d.get("tool_calls") or []:
            if c.get("function", {}).get("name"):
                names.append(c["function"]["name"])
            args += c.get("function", {}).get("arguments") or ""
        finish = chunk["choices"][0]["finish_reason"] or finish
    assert content.strip() == whole["content"]
    assert names == ["get_weather"] and json.loads(args) == json.loads(whole["tool_calls"][0]["function"]["arguments"])
    assert finish == "tool_calls"


def test_plain_answer_is_content(llm):
    REPLY["text"] = "It is cold in Vienna."
    msg = llm.create_chat_completion(messages=MSGS, tools=TOOLS, max_tokens=200)["choices"][0]["message"]
    assert msg["content"] == "It is cold in Vienna." and not msg.get("tool_calls")


def test_template_describes_the_tools_and_renders_past_calls(llm):
    """The history's call goes back to the model in the template's XML."""
    from llamapy.chat.completion import ChatRequest, resolve_chat_handler

    history = MSGS + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                          "arguments": '{"city": "Vienna", "days": 2}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "cold"}]
    handler = resolve_chat_handler(llm, tools_requested=True)
    text = handler.render_text(llm, ChatRequest(messages=history, tools=TOOLS), TOOLS)
    assert "<function=get_weather>" in text and "<parameter=city>" in text and "get_weather" in text
