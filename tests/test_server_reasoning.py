"""A reasoning model's reply through the HTTP server: reasoning_content and
tool calls on /v1/chat/completions (whole and streamed), ``reasoning_format``
(request field and --reasoning-format), and Ollama's ``thinking`` / ``think``.

The server is real (uvicorn, slots, the chat handler, the completion loop)
and runs Gemma 3 270M's vocabulary with gpt-oss's chat template given by
--chat-template; only the model's choice of tokens is scripted: Llama.generate
is replaced for this module by one that yields the tokens of ``REPLY``, as a
gpt-oss model would write them, and records the prompt it was given."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import needs

needs("fastapi")
needs("uvicorn")
httpx = needs("httpx")

from server_helpers import LiveServer  # noqa: E402

pytestmark = pytest.mark.model

ANSWER = ("<|channel|>analysis<|message|>The user asks about Paris; say it is sunny.<|end|>"
          "<|start|>assistant<|channel|>final<|message|>It is sunny in Paris.")
CALL = ("<|channel|>analysis<|message|>I need the weather tool.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city": "Paris"}')
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
MSGS = [{"role": "user", "content": "What is the weather in Paris?"}]

REPLY = {"text": ANSWER}   # what the scripted model writes next
PROMPTS = []               # the prompts it was given, as text


@pytest.fixture(scope="module")
def scripted(gemma_path):
    from llamapy.llama import Llama

    def generate(self, tokens, **kwargs):
        PROMPTS.append(self.detokenize(list(tokens), special=True).decode("utf-8"))
        reply = self.tokenize(REPLY["text"].encode("utf-8"), add_bos=False, special=False)
        assert self.detokenize(reply).decode("utf-8") == REPLY["text"]  # Gemma's vocabulary spells any text
        yield from reply + [self.token_eos()]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Llama, "generate", generate)
        yield


@pytest.fixture(scope="module")
def template(llama_cpp_sdist):
    path = Path(llama_cpp_sdist) / "vendor" / "llama.cpp" / "models" / "templates" / "openai-gpt-oss-120b.jinja"
    return path.read_text(encoding="utf-8")


def start(gemma_path, template, *flags):
    return LiveServer(["-m", gemma_path, "-c", "1024", "-t", "2", "--chat-template", template, *flags]).start()


@pytest.fixture(scope="module")
def server(gemma_path, template, scripted):
    s = start(gemma_path, template)
    yield s
    s.stop()


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def chat(client, reply, **body):
    REPLY["text"] = reply
    r = client.post("/v1/chat/completions", json={"messages": MSGS, **body})
    assert r.status_code == 200, r.text
    return r.json()


def sse(client, reply, **body):
    """The streamed deltas of one chat, joined: (reasoning, content, calls, finish_reason)."""
    REPLY["text"] = reply
    with client.stream("POST", "/v1/chat/completions", json={"messages": MSGS, "stream": True, **body}) as r:
        assert r.status_code == 200
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    reasoning = content = ""
    calls = []
    for c in chunks:
        delta = c["choices"][0]["delta"]
        assert "<|" not in (delta.get("content") or "") + (delta.get("reasoning_content") or "")
        reasoning += delta.get("reasoning_content") or ""
        content += delta.get("content") or ""
        calls += [(tc["function"]["name"], tc["function"]["arguments"]) for tc in delta.get("tool_calls", [])]
    return reasoning, content, calls, chunks[-1]["choices"][0]["finish_reason"]


def test_openai_route_splits_the_reply(client):
    r = chat(client, ANSWER)
    assert r["choices"][0]["message"] == {"role": "assistant", "content": "It is sunny in Paris.",
                                          "reasoning_content": "The user asks about Paris; say it is sunny."}
    assert PROMPTS[-1].endswith("<|start|>user<|message|>What is the weather in Paris?<|end|><|start|>assistant")
    assert sse(client, ANSWER) == ("The user asks about Paris; say it is sunny.", "It is sunny in Paris.", [], "stop")


def test_openai_route_tool_call(client):
    r = chat(client, CALL, tools=[WEATHER])
    msg = r["choices"][0]["message"]
    assert r["choices"][0]["finish_reason"] == "tool_calls" and msg["content"] is None
    assert msg["reasoning_content"] == "I need the weather tool."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg["tool_calls"]] == \
        [("get_weather", {"city": "Paris"})]
    assert sse(client, CALL, tools=[WEATHER]) == \
        ("I need the weather tool.", "", [("get_weather", '{"city": "Paris"}')], "tool_calls")
    # The call and its result go back into the next prompt as the template writes them.
    history = MSGS + [msg, {"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": "sunny"}]
    REPLY["text"] = "<|channel|>final<|message|>Sunny."
    r = client.post("/v1/chat/completions", json={"messages": history, "tools": [WEATHER]}).json()
    assert r["choices"][0]["message"]["content"] == "Sunny."
    assert PROMPTS[-1].endswith(
        "<|start|>assistant<|channel|>analysis<|message|>I need the weather tool.<|end|>"
        '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>'
        '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"sunny"<|end|>'
        "<|start|>assistant")


def test_reasoning_format_request_field(client):
    r = chat(client, ANSWER, reasoning_format="none")
    assert r["choices"][0]["message"] == {"role": "assistant", "content": ANSWER}
    bad = client.post("/v1/chat/completions", json={"messages": MSGS, "reasoning_format": "sometimes"})
    assert bad.status_code == 400 and "reasoning_format" in bad.json()["error"]["message"]


def test_reasoning_format_flag(gemma_path, template, scripted):
    s = start(gemma_path, template, "--reasoning-format", "none")
    try:
        with httpx.Client(base_url=s.url, timeout=60) as c:
            assert chat(c, ANSWER)["choices"][0]["message"]["content"] == ANSWER
            assert chat(c, ANSWER, reasoning_format="auto")["choices"][0]["message"]["content"] == \
                "It is sunny in Paris."
    finally:
        s.stop()


def test_ollama_thinking(server, client):
    REPLY["text"] = ANSWER
    r = client.post("/api/chat", json={"model": "m", "messages": MSGS, "stream": False, "think": "high"}).json()
    assert r["message"] == {"role": "assistant", "content": "It is sunny in Paris.",
                            "thinking": "The user asks about Paris; say it is sunny."}
    assert "Reasoning: high" in PROMPTS[-1]
    lines = [json.loads(line) for line in client.post("/api/chat", json={"model": "m", "messages": MSGS}).text
             .splitlines()]
    assert "".join(x["message"].get("thinking", "") for x in lines) == "The user asks about Paris; say it is sunny."
    assert "".join(x["message"]["content"] for x in lines) == "It is sunny in Paris." and lines[-1]["done"]
    g = client.post("/api/generate", json={"model": "m", "prompt": "Weather in Paris?", "stream": False}).json()
    assert (g["response"], g["thinking"]) == ("It is sunny in Paris.", "The user asks about Paris; say it is sunny.")
    bad = client.post("/api/chat", json={"model": "m", "messages": MSGS, "think": "very"})
    assert bad.status_code == 400 and "think must be" in bad.json()["error"]["message"]
    ollama = needs("ollama")
    out = ollama.Client(host=server.url).chat(model="m", messages=MSGS, think=True)
    assert out.message.thinking == "The user asks about Paris; say it is sunny."
    assert out.message.content == "It is sunny in Paris."


def test_ollama_tool_calls_whole_and_streamed(server, client):
    """Ollama's /api/chat with tools: the call as Ollama returns it (arguments an object), whole
    and streamed (the assembled call on the last line), and through the ollama client."""
    REPLY["text"] = CALL
    body = {"model": "m", "messages": MSGS, "tools": [WEATHER]}
    whole = client.post("/api/chat", json={**body, "stream": False}).json()
    want = [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]
    assert [{"function": c["function"]} for c in whole["message"]["tool_calls"]] == want
    assert whole["message"]["thinking"] == "I need the weather tool."
    lines = [json.loads(line) for line in client.post("/api/chat", json=body).text.splitlines()]
    assert lines[-1]["done"] and [{"function": c["function"]} for c in lines[-1]["message"]["tool_calls"]] == want
    assert not any(x["message"].get("tool_calls") for x in lines[:-1])
    assert "".join(x["message"].get("thinking", "") for x in lines) == "I need the weather tool."
    ollama = needs("ollama")
    for stream in (False, True):
        out = ollama.Client(host=server.url).chat(model="m", messages=MSGS, tools=[WEATHER], stream=stream)
        calls = [c for part in (out if stream else [out]) for c in (part.message.tool_calls or [])]
        assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
