"""Anthropic's Messages API on the server (/v1/messages, count_tokens),
through the official anthropic SDK and raw HTTP: text, thinking and tool_use
blocks, whole and streamed (the SDK assembles the event sequence and checks
it), the request's blocks reaching the chat template as the right messages,
stop reasons (a stop sequence named), errors in Anthropic's shape, x-api-key.

As in test_server_reasoning.py, the server is real (uvicorn, slots, the chat
handler and its parsers, the completion loop) on Gemma 3 270M's vocabulary
with gpt-oss's chat template; only the model's choice of tokens is scripted
(Llama.generate yields the tokens of ``REPLY`` and records its prompt)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import needs

needs("fastapi")
needs("uvicorn")
httpx = needs("httpx")
anthropic = needs("anthropic")

from server_helpers import LiveServer  # noqa: E402

pytestmark = pytest.mark.model

ANSWER = ("<|channel|>analysis<|message|>The user asks about Paris; say it is sunny.<|end|>"
          "<|start|>assistant<|channel|>final<|message|>It is sunny in Paris.")
CALL = ("<|channel|>analysis<|message|>I need the weather tool.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city": "Paris"}')
WEATHER = {"name": "get_weather", "description": "Get the weather.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
MSGS = [{"role": "user", "content": "What is the weather in Paris?"}]
KEY = "test-key-123"

REPLY = {"text": ANSWER, "cut": None}   # what the scripted model writes next (cut: stop after N tokens)
PROMPTS = []


@pytest.fixture(scope="module")
def scripted(gemma_path):
    from llamapy.llama import Llama

    def generate(self, tokens, **kwargs):
        PROMPTS.append(self.detokenize(list(tokens), special=True).decode("utf-8"))
        reply = self.tokenize(REPLY["text"].encode("utf-8"), add_bos=False, special=False)
        if REPLY["cut"] is not None:
            for t in reply[:REPLY["cut"]] + [reply[0]] * 1000:
                time.sleep(REPLY.get("delay", 0.0))  # a model's pace: a stream can be cut meanwhile
                yield t  # runs into max_tokens
            return
        yield from reply + [self.token_eos()]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Llama, "generate", generate)
        yield


@pytest.fixture(scope="module")
def server(gemma_path, llama_cpp_sdist, scripted):
    template = (Path(llama_cpp_sdist) / "vendor" / "llama.cpp" / "models" / "templates" /
                "openai-gpt-oss-120b.jinja").read_text(encoding="utf-8")
    s = LiveServer(["-m", gemma_path, "-c", "1024", "-t", "2", "--chat-template", template, "--api-key", KEY]).start()
    yield s
    s.stop()


@pytest.fixture
def sdk(server):
    return anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)


@pytest.fixture(autouse=True)
def reset():
    REPLY.update(text=ANSWER, cut=None, delay=0.0)
    PROMPTS.clear()


def test_message_with_thinking_and_text(sdk):
    m = sdk.messages.create(model="local", max_tokens=200, messages=MSGS)
    kinds = [b.type for b in m.content]
    assert kinds == ["thinking", "text"]
    assert m.content[0].thinking == "The user asks about Paris; say it is sunny."
    assert m.content[1].text == "It is sunny in Paris."
    assert m.stop_reason == "end_turn" and m.role == "assistant"
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0
    assert "What is the weather in Paris?" in PROMPTS[-1]


def test_tool_use_block(sdk):
    REPLY["text"] = CALL
    m = sdk.messages.create(model="local", max_tokens=200, messages=MSGS, tools=[WEATHER])
    tool = [b for b in m.content if b.type == "tool_use"]
    assert len(tool) == 1 and tool[0].name == "get_weather" and tool[0].input == {"city": "Paris"}
    assert m.stop_reason == "tool_use"
    assert "get_weather" in PROMPTS[-1]  # the tool reached the template


def test_stream_matches_the_whole_message(sdk):
    whole = sdk.messages.create(model="local", max_tokens=200, messages=MSGS)
    with sdk.messages.stream(model="local", max_tokens=200, messages=MSGS) as s:
        kinds = [e.type for e in s]
        final = s.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "content_block_stop" in kinds and "message_delta" in kinds
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == whole.content[0].thinking
    assert final.content[1].text == whole.content[1].text
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == whole.usage.output_tokens


def test_streamed_tool_use(sdk):
    REPLY["text"] = CALL
    with sdk.messages.stream(model="local", max_tokens=200, messages=MSGS, tools=[WEATHER]) as s:
        deltas = [e.delta.type for e in s if e.type == "content_block_delta"]
        final = s.get_final_message()
    assert "input_json_delta" in deltas
    tool = [b for b in final.content if b.type == "tool_use"]
    assert tool and tool[0].input == {"city": "Paris"} and final.stop_reason == "tool_use"


def test_max_tokens_stop_reason(sdk):
    REPLY["cut"] = 3
    m = sdk.messages.create(model="local", max_tokens=5, messages=MSGS)
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 5


def test_stop_sequence_is_named(sdk):
    """A request's stop sequence ends the text before it and is reported as the stop; the
    chat format's own end of turn is end_turn (whole and streamed)."""
    m = sdk.messages.create(model="local", max_tokens=100, messages=MSGS, stop_sequences=["xyz", " in Paris"])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == " in Paris"
    assert m.content[-1].type == "text" and m.content[-1].text == "It is sunny"
    with sdk.messages.stream(model="local", max_tokens=100, messages=MSGS, stop_sequences=[" in Paris"]) as st:
        final = st.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == " in Paris"
    m = sdk.messages.create(model="local", max_tokens=100, messages=MSGS, stop_sequences=["rainy"])
    assert m.stop_reason == "end_turn" and m.stop_sequence is None


def test_history_blocks_become_messages(sdk):
    """system, an assistant turn with thinking + tool_use, the user's
    tool_result: the template sees the call and its result."""
    msgs = MSGS + [
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I need the weather tool.", "signature": ""},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21 C"}]}]
    sdk.messages.create(model="local", max_tokens=50, system="You are terse.", messages=msgs, tools=[WEATHER])
    prompt = PROMPTS[-1]
    assert "You are terse." in prompt
    assert "to=functions.get_weather" in prompt and '"city": "Paris"' in prompt.replace('{"city":"Paris"}',
                                                                                      '{"city": "Paris"}')
    assert "sunny, 21 C" in prompt


def test_count_tokens(sdk, server):
    n = sdk.messages.count_tokens(model="local", messages=MSGS).input_tokens
    m = sdk.messages.create(model="local", max_tokens=50, messages=MSGS)
    assert n == m.usage.input_tokens
    with_tools = sdk.messages.count_tokens(model="local", messages=MSGS, tools=[WEATHER]).input_tokens
    assert with_tools > n


def test_errors_have_anthropic_shape(server):
    h = {"x-api-key": KEY}
    r = httpx.post(server.url + "/v1/messages", json={"messages": MSGS}, headers=h)  # no max_tokens
    assert r.status_code == 400
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in r.json()["error"]["message"]
    r = httpx.post(server.url + "/v1/messages", json={"max_tokens": 5, "messages": [{"role": "system",
                                                                                       "content": "x"}]}, headers=h)
    assert r.status_code == 400 and "system" in r.json()["error"]["message"]
    r = httpx.post(server.url + "/v1/messages", json={"max_tokens": 5, "messages": MSGS},
                   headers={"x-api-key": "wrong"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    # the OpenAI routes keep their own shape
    r = httpx.post(server.url + "/v1/chat/completions", json={"messages": MSGS}, headers={"x-api-key": "wrong"})
    assert r.status_code == 401 and "code" in r.json()["error"]


def test_sdk_raises_on_bad_request(sdk):
    with pytest.raises(anthropic.BadRequestError):
        sdk.messages.create(model="local", max_tokens=10, messages=[{"role": "user", "content": [
            {"type": "document", "source": {}}]}])


def test_raw_stream_event_names(server):
    body = {"max_tokens": 100, "messages": MSGS, "stream": True}
    names = []
    with httpx.stream("POST", server.url + "/v1/messages", json=body, headers={"x-api-key": KEY}) as r:
        for line in r.iter_lines():
            if line.startswith("event: "):
                names.append(line[7:])
            elif line.startswith("data: "):
                assert json.loads(line[6:])["type"] == names[-1]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]


def test_stream_cut_by_the_client_frees_the_slot(server):
    """A client that drops a /v1/messages stream cancels its generation: the
    slot is free for the next request at once."""
    import time

    REPLY["cut"], REPLY["delay"] = 3, 0.01  # the scripted model would go on for 1000 tokens, 10 s
    runner = server.app.state.server.runner
    before = runner.stats()["requests_cancelled"]
    body = {"max_tokens": 900, "messages": MSGS, "stream": True}
    with httpx.Client(base_url=server.url, timeout=30, headers={"x-api-key": KEY}) as c:
        with c.stream("POST", "/v1/messages", json=body) as s:
            lines = s.iter_lines()
            assert next(lines).startswith("event: message_start")
    deadline = time.monotonic() + 10
    while runner.stats()["requests_cancelled"] == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert runner.stats()["requests_cancelled"] == before + 1
    REPLY["cut"], REPLY["delay"] = None, 0.0
    t0 = time.monotonic()
    r = httpx.post(server.url + "/v1/messages", json={"max_tokens": 50, "messages": MSGS}, headers={"x-api-key": KEY},
                   timeout=30)
    assert r.status_code == 200 and time.monotonic() - t0 < 10
