"""Gemma 4's replies through create_chat_completion, with its own chat template (from the
llama-cpp-python sdist): the thought channel (``<|channel>thought ... <channel|>``) becomes
reasoning_content, ``<|tool_call>call:NAME{...}<tool_call|>`` blocks in its value syntax become
OpenAI tool_calls, whole and streamed, and malformed calls stay text. Also the mechanism that
keeps the markers in the reply's text: they are control tokens in Gemma 4's vocabulary, which
detokenize to nothing unless shown (CompletionRequest.shown_special, llama-server's preserved
tokens).
Gemma 3 270M's vocabulary spells the replies (its tokenizer, not Gemma 4's); the model's choice
of tokens is scripted (Llama.generate yields the tokens of REPLY)."""
from __future__ import annotations

import json

import pytest

from chat_helpers import gemma_speaking, sdist_template

from llamapy.chat.reasoning import reply_splitter, split_reply, template_syntax
from llamapy.chat.tools import parse_tool_calls
from llamapy.llama import Llama

REAL_GENERATE = Llama.generate

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string"}, "days": {"type": "integer"}},
                                               "required": ["city"]}}}]
MSGS = [{"role": "user", "content": "Weather in Vienna for two days?"}]
THOUGHT = "<|channel>thought\nThe user wants Vienna; maybe <|tool_call>call:x{}<tool_call|> later.<channel|>"
CALL = '<|tool_call>call:get_weather{city:<|"|>1010 Wien, "AT"<|"|>,days:2}<tool_call|>'
REPLY = {"text": THOUGHT + "I will look it up." + CALL}


def calls_of(calls):
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("text,reasoning,content", [
    ("<|channel>thought\nFirst, 2+2.\n<channel|>It is 4.", "First, 2+2.", "It is 4."),
    ("It is 4.", "", "It is 4."),
    # a stray closing mark, and the empty block Gemma 4 may write at the end, are dropped
    ("It is 4.<channel|>", "", "It is 4."),
    ("<|channel>thought\nA<channel|>It is 4.<|channel>thought\n<channel|>", "A", "It is 4."),
    ("<|channel>thought\nnever closed", "never closed", ""),
])
def test_thought_channel_split_whole_and_streamed(text, reasoning, content):
    assert split_reply("gemma4", text) == (reasoning, content, [])
    for step in (1, 2, 5):
        splitter = reply_splitter("gemma4")
        pieces = [p for i in range(0, len(text), step) for p in splitter.push(text[i:i + step])] + splitter.finish()
        assert "".join(v for k, v in pieces if k == "reasoning") == reasoning
        assert "".join(v for k, v in pieces if k == "content") == content


def test_call_value_syntax():
    text = ('Sure.<|tool_call>call:get_weather{city:<|"|>Paris, "FR"<|"|>,days:3,opts:{metric:true,none:null,'
            'list:[1,-2.5e1,<|"|>a,b<|"|>,[]],<|"|>quoted key<|"|>:{}}}<tool_call|>'
            '<|tool_call>call:get_time{place:<|"|>Berlin<|"|>}<tool_call|>')
    content, calls = parse_tool_calls(text, ["get_weather", "get_time"])
    assert content == "Sure."
    assert calls_of(calls) == [
        ("get_weather", {"city": 'Paris, "FR"', "days": 3,
                         "opts": {"metric": True, "none": None, "list": [1, -25.0, "a,b", []], "quoted key": {}}}),
        ("get_time", {"place": "Berlin"})]
    # a reply cut where only the closing mark is missing still gives its call
    assert calls_of(parse_tool_calls('<|tool_call>call:f{a:1}', ["f"])[1]) == [("f", {"a": 1})]


@pytest.mark.parametrize("text", [
    '<|tool_call>call:f{a:<|"|>unterminated',   # string never closed
    '<|tool_call>call:f{a:1',                   # object never closed
    '<|tool_call>call:f{a 1}<tool_call|>',      # no colon
    '<|tool_call>call:{a:1}<tool_call|>',       # no name
    '<|tool_call>f{a:1}<tool_call|>',           # no call:
    '<|tool_call>call:f{a:1}junk<tool_call|>',  # text where the closing mark belongs
    '<|tool_call>call:f[1]<tool_call|>',        # arguments not an object
])
def test_malformed_calls_stay_text(text):
    assert parse_tool_calls(text, ["f"]) == (text, [])


def test_the_template_is_told_apart():
    assert template_syntax("{{ '<|turn>model\\n<|channel>thought\\n<channel|>' }}") == "gemma4"
    assert template_syntax("<|channel|>analysis") == "harmony"


@pytest.fixture(scope="module")
def llm(gemma_path, llama_cpp_sdist):
    with gemma_speaking(gemma_path, sdist_template(llama_cpp_sdist, "google-gemma-4-31B-it.jinja"), REPLY, n_ctx=4096) as m:
        yield m


@pytest.fixture(autouse=True)
def reset():
    REPLY["text"] = THOUGHT + "I will look it up." + CALL


@pytest.mark.model
def test_reasoning_and_call_whole(llm):
    out = llm.create_chat_completion(messages=MSGS, tools=TOOLS, max_tokens=300)
    msg = out["choices"][0]["message"]
    # the call-like text inside the thought is thinking, not a call
    assert msg["reasoning_content"] == "The user wants Vienna; maybe <|tool_call>call:x{}<tool_call|> later."
    assert msg["content"] == "I will look it up."
    assert calls_of(msg["tool_calls"]) == [("get_weather", {"city": '1010 Wien, "AT"', "days": 2})]
    assert out["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.model
def test_reasoning_and_call_streamed(llm):
    whole = llm.create_chat_completion(messages=MSGS, tools=TOOLS, max_tokens=300)["choices"][0]["message"]
    reasoning, content, args, names, finish = "", "", "", [], None
    for chunk in llm.create_chat_completion(messages=MSGS, tools=TOOLS, max_tokens=300, stream=True):
        d = chunk["choices"][0]["delta"]
        reasoning += d.get("reasoning_content") or ""
        content += d.get("content") or ""
        for c in d.get("tool_calls") or []:
            if c.get("function", {}).get("name"):
                names.append(c["function"]["name"])
            args += c.get("function", {}).get("arguments") or ""
        finish = chunk["choices"][0]["finish_reason"] or finish
    assert reasoning == whole["reasoning_content"] and content.strip() == whole["content"]
    assert names == ["get_weather"] and json.loads(args) == json.loads(whole["tool_calls"][0]["function"]["arguments"])
    assert finish == "tool_calls"


@pytest.mark.model
def test_plain_answer_and_reasoning_format_none(llm):
    REPLY["text"] = "It is cold in Vienna.<channel|>"
    msg = llm.create_chat_completion(messages=MSGS, max_tokens=100)["choices"][0]["message"]
    assert msg["content"] == "It is cold in Vienna." and not msg.get("tool_calls") and not msg.get("reasoning_content")
    REPLY["text"] = THOUGHT + "Cold."
    msg = llm.create_chat_completion(messages=MSGS, max_tokens=300, reasoning_format="none")["choices"][0]["message"]
    assert msg["content"] == THOUGHT + "Cold."


@pytest.mark.model
def test_shown_control_tokens(gemma_path, monkeypatch):
    """A control token detokenizes to nothing unless the request shows it (Gemma 4's markers are
    control tokens of its vocabulary; Gemma 3's <start_of_turn> stands in for them here)."""
    from llamapy._completion import CompletionRequest, run_completion
    from llamapy.llama import Llama

    monkeypatch.setattr(Llama, "generate", REAL_GENERATE)  # the module's other tests script it
    llm = Llama(model_path=gemma_path, n_ctx=256, verbose=False)
    turn = llm.tokenize(b"<start_of_turn>", add_bos=False, special=True)
    assert len(turn) == 1
    texts = {}
    for shown in (frozenset(), frozenset(turn)):
        # logit_bias makes the choice: the control token
        req = CompletionRequest.of(llm.tokenize(b"Hi", add_bos=True), max_tokens=1, temperature=0.0,
                                   logit_bias={turn[0]: 100.0})
        req.shown_special = shown
        texts[shown] = run_completion(llm, req)["choices"][0]["text"]
    assert texts[frozenset()] == "" and texts[frozenset(turn)] == "<start_of_turn>"
    llm.close()
