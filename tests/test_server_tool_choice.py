"""A forced tool call through the agent APIs, with a real model generating: Anthropic's
tool_choice ``any`` / ``tool`` and OpenAI Responses' ``required`` / a named function put the
grammar on the reply (llamapy/chat/completion.py), so whatever Gemma 3 270M writes is a call
of a declared tool with arguments of its schema, returned as a tool_use block / a
function_call item; ``none`` leaves no call. (test_server_anthropic.py and
test_server_responses.py script the model's text; a grammar only shows with real sampling.)"""
from __future__ import annotations

import json

import pytest
from conftest import needs

needs("fastapi")
needs("uvicorn")
needs("httpx")
anthropic = needs("anthropic")
openai = needs("openai")

from server_helpers import LiveServer  # noqa: E402

pytestmark = pytest.mark.model

PARAMS = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
          "required": ["city", "days"]}
WEATHER_A = {"name": "get_weather", "description": "Get the weather forecast.", "input_schema": PARAMS}
TIME_A = {"name": "get_time", "description": "Get the local time.",
          "input_schema": {"type": "object", "properties": {"place": {"type": "string"}}, "required": ["place"]}}
WEATHER_R = {"type": "function", "name": "get_weather", "description": "Get the weather forecast.",
             "parameters": PARAMS}
TIME_R = {"type": "function", "name": "get_time", "description": "Get the local time.",
          "parameters": TIME_A["input_schema"]}
ASK = "What will the weather be in Paris for the next 3 days?"


@pytest.fixture(scope="module")
def server(gemma_path):
    s = LiveServer(["-m", gemma_path, "-c", "2048", "-t", "2"]).start()
    yield s
    s.stop()


def valid_weather(args):
    return set(args) == {"city", "days"} and isinstance(args["city"], str) and isinstance(args["days"], int)


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_anthropic_forced_call(server, choice):
    sdk = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    m = sdk.messages.create(model="local", max_tokens=96, extra_body={"temperature": 0.0}, tools=[TIME_A, WEATHER_A],
                            tool_choice=choice, messages=[{"role": "user", "content": ASK}])
    uses = [b for b in m.content if b.type == "tool_use"]
    assert uses, m.content
    assert m.stop_reason == "tool_use"
    if choice["type"] == "tool":
        assert [u.name for u in uses] == ["get_weather"] and valid_weather(uses[0].input)
    else:
        assert all(u.name in ("get_weather", "get_time") for u in uses)


def test_anthropic_tool_choice_none(server):
    sdk = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    m = sdk.messages.create(model="local", max_tokens=24, extra_body={"temperature": 0.0}, tools=[WEATHER_A],
                            tool_choice={"type": "none"}, messages=[{"role": "user", "content": ASK}])
    assert not [b for b in m.content if b.type == "tool_use"] and m.stop_reason != "tool_use"


@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "get_weather"}])
def test_responses_forced_call(server, choice):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    r = client.responses.create(model="local", input=ASK, tools=[TIME_R, WEATHER_R], tool_choice=choice,
                                max_output_tokens=96, temperature=0.0)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls, r.output
    if isinstance(choice, dict):
        assert [c.name for c in calls] == ["get_weather"] and valid_weather(json.loads(calls[0].arguments))
    else:
        assert all(c.name in ("get_weather", "get_time") for c in calls)
