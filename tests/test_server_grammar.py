"""llama-server's request extensions that pin the output (issue 35, item 8): ``grammar`` (GBNF
text) and ``json_schema`` on /v1/completions and /v1/chat/completions, with Gemma 3 270M
sampling under them; a bad grammar or schema, both at once, or one beside tools /
response_format is a 400 naming the field, before any work."""
from __future__ import annotations

import json

import pytest
from conftest import needs

needs("fastapi")
needs("uvicorn")
httpx = needs("httpx")

from server_helpers import LiveServer  # noqa: E402

pytestmark = pytest.mark.model

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                           "days": {"type": "integer", "minimum": 1, "maximum": 9}},
          "required": ["city", "days"], "additionalProperties": False}
CHAT = [{"role": "user", "content": "Weather in Paris for 3 days, as JSON."}]


@pytest.fixture(scope="module")
def client(gemma_path):
    s = LiveServer(["-m", gemma_path, "-c", "1024", "-t", "2"]).start()
    with httpx.Client(base_url=s.url, timeout=120) as c:
        yield c
    s.stop()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_completion_grammar(client, seed):
    r = client.post("/v1/completions", json={"prompt": "Is the sky blue? Answer:", "max_tokens": 8, "seed": seed,
                                             "temperature": 1.0, "grammar": 'root ::= " yes" | " no"'})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] in (" yes", " no")


def test_chat_json_schema(client):
    for stream in (False, True):
        body = {"messages": CHAT, "max_tokens": 64, "temperature": 0.0, "json_schema": SCHEMA, "stream": stream}
        if not stream:
            r = client.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
            text = r.json()["choices"][0]["message"]["content"]
        else:
            text = ""
            with client.stream("POST", "/v1/chat/completions", json=body) as r:
                assert r.status_code == 200
                for line in r.iter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        for c in json.loads(line[6:])["choices"]:
                            text += c["delta"].get("content") or ""
        out = json.loads(text)
        assert set(out) == {"city", "days"} and isinstance(out["city"], str) and 1 <= out["days"] <= 9


def test_completion_json_schema(client):
    r = client.post("/v1/completions", json={"prompt": "JSON:", "max_tokens": 64, "temperature": 0.0,
                                             "json_schema": SCHEMA})
    assert r.status_code == 200, r.text
    assert set(json.loads(r.json()["choices"][0]["text"])) == {"city", "days"}


@pytest.mark.parametrize("path, extra, field", [
    ("/v1/completions", {"grammar": 'root ::= "a'}, "grammar"),
    ("/v1/completions", {"grammar": "   "}, "grammar"),
    ("/v1/completions", {"grammar": "root ::= missing"}, "grammar"),
    ("/v1/completions", {"json_schema": {"type": "frobnicate"}}, "json_schema"),
    ("/v1/completions", {"grammar": 'root ::= "a"', "json_schema": SCHEMA}, "grammar"),
    ("/v1/completions", {"grammar": 3}, "grammar"),
    ("/v1/chat/completions", {"json_schema": SCHEMA, "response_format": {"type": "json_object"}}, "json_schema"),
    ("/v1/chat/completions", {"grammar": 'root ::= "a"', "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object"}}}]}, "grammar"),
])
def test_bad_requests(client, path, extra, field):
    body = {"max_tokens": 4, **({"prompt": "Hi"} if path == "/v1/completions" else {"messages": CHAT}), **extra}
    r = client.post(path, json=body)
    assert r.status_code == 400, r.text
    assert field in r.json()["error"]["message"]
