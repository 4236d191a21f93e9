"""Chat completions end to end on the Gemma 3 270M test model (no chat
template in its GGUF: ``chat_format="gemma"``, or Gemma 3's own template put
into the metadata)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.model

DATA = Path(__file__).parent / "data" / "chat_templates"
BOS, END_OF_TURN = 2, 106
CHAT = [{"role": "system", "content": "Answer in one short sentence."},
        {"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def llm(gemma_path):
    from llamapy.llama import Llama

    with Llama(gemma_path, n_ctx=512, n_threads=2, seed=7, verbose=False, chat_format="gemma") as model:
        yield model


def test_stream_and_whole_agree_with_usage(llm):
    whole = llm.create_chat_completion(CHAT, temperature=0.0, max_tokens=24)
    n_prompt = whole["usage"]["prompt_tokens"]
    assert llm.input_ids[:n_prompt].tolist().count(BOS) == 1 and llm.input_ids[0] == BOS
    chunks = list(llm.create_chat_completion(CHAT, temperature=0.0, max_tokens=24, stream=True))
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert content == whole["choices"][0]["message"]["content"] and content
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert chunks[-1]["usage"] == whole["usage"]
    assert whole["usage"]["completion_tokens"] <= 24


def test_named_format_and_model_template_give_the_same_prompt(llm):
    by_name = llm.create_chat_completion(CHAT, temperature=0.0, max_tokens=8)
    prompt_by_name = llm.input_ids[: by_name["usage"]["prompt_tokens"]].tolist()
    llm.chat_format = None
    llm.metadata["tokenizer.chat_template"] = (DATA / "gemma-3-it.jinja").read_text(encoding="utf-8")
    try:
        by_template = llm.create_chat_completion(CHAT, temperature=0.0, max_tokens=8)
        assert llm.input_ids[: by_template["usage"]["prompt_tokens"]].tolist() == prompt_by_name
        assert by_template["choices"][0]["message"] == by_name["choices"][0]["message"]
    finally:
        del llm.metadata["tokenizer.chat_template"]
        llm.chat_format = "gemma"


def test_end_of_turn_token_ends_the_answer(llm):
    r = llm.create_chat_completion(CHAT, logit_bias={END_OF_TURN: 100.0}, max_tokens=8)
    assert r["choices"][0]["message"]["content"] == "" and r["choices"][0]["finish_reason"] == "stop"
    assert r["usage"]["completion_tokens"] == 0


def test_max_tokens_and_logprobs(llm):
    r = llm.create_chat_completion(CHAT, max_tokens=3, temperature=0.0, logprobs=True, top_logprobs=3)
    choice = r["choices"][0]
    assert choice["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 3
    entries = choice["logprobs"]["content"]
    assert len(entries) == 3 and "".join(e["token"] for e in entries) == choice["message"]["content"]
    assert all(len(e["top_logprobs"]) == 3 and e["top_logprobs"][0]["logprob"] >= e["logprob"] - 1e-4
               for e in entries)


def test_forced_tool_call_follows_the_schema(llm):
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}}
    r = llm.create_chat_completion([{"role": "user", "content": "Weather in Paris?"}], tools=[tool],
                                   tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                   max_tokens=40, temperature=0.0)
    call = r["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather"
    assert isinstance(json.loads(call["function"]["arguments"])["city"], str)
    assert r["choices"][0]["finish_reason"] == "tool_calls"
