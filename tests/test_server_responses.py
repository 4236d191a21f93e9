"""OpenAI's Responses API on the server (/v1/responses, GET and DELETE by id),
through the official openai SDK (client.responses, whose stream parser knows
every event type) and raw HTTP: reasoning, message and function_call output
items, whole and streamed; function_call / function_call_output input items
reaching the chat template; previous_response_id from the store and
store=false; instructions; max_output_tokens ending as incomplete; errors.

As in test_server_reasoning.py, the server is real on Gemma 3 270M's
vocabulary with gpt-oss's chat template; only the model's choice of tokens is
scripted (Llama.generate yields the tokens of ``REPLY``, records its prompt)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import needs

needs("fastapi")
needs("uvicorn")
httpx = needs("httpx")
openai = needs("openai")

from server_helpers import LiveServer  # noqa: E402

pytestmark = pytest.mark.model

ANSWER = ("<|channel|>analysis<|message|>The user asks about Paris; say it is sunny.<|end|>"
          "<|start|>assistant<|channel|>final<|message|>It is sunny in Paris.")
CALL = ("<|channel|>analysis<|message|>I need the weather tool.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city": "Paris"}')
WEATHER = {"type": "function", "name": "get_weather", "description": "Get the weather.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
QUESTION = "What is the weather in Paris?"

REPLY = {"text": ANSWER, "cut": None}
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
                yield t
            return
        yield from reply + [self.token_eos()]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Llama, "generate", generate)
        yield


@pytest.fixture(scope="module")
def server(gemma_path, llama_cpp_sdist, scripted):
    template = (Path(llama_cpp_sdist) / "vendor" / "llama.cpp" / "models" / "templates" /
                "openai-gpt-oss-120b.jinja").read_text(encoding="utf-8")
    s = LiveServer(["-m", gemma_path, "-c", "2048", "-t", "2", "--chat-template", template]).start()
    yield s
    s.stop()


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)


@pytest.fixture(autouse=True)
def reset():
    REPLY.update(text=ANSWER, cut=None, delay=0.0)
    PROMPTS.clear()


def test_reasoning_and_message(client):
    r = client.responses.create(model="local", input=QUESTION, instructions="Be brief.")
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == "The user asks about Paris; say it is sunny."
    assert r.output_text == "It is sunny in Paris."
    assert r.status == "completed" and r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    assert r.usage.output_tokens_details.reasoning_tokens > 0
    assert "Be brief." in PROMPTS[-1] and QUESTION in PROMPTS[-1]


def test_function_call_and_its_output(client):
    REPLY["text"] = CALL
    r = client.responses.create(model="local", input=QUESTION, tools=[WEATHER])
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and json.loads(calls[0].arguments) == {"city": "Paris"}
    # the client runs the tool and sends the call and its output back as input items
    REPLY["text"] = ANSWER
    items = [{"role": "user", "content": QUESTION},
             {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
              "arguments": calls[0].arguments},
             {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 C"}]
    r2 = client.responses.create(model="local", input=items, tools=[WEATHER])
    assert r2.output_text == "It is sunny in Paris."
    assert "to=functions.get_weather" in PROMPTS[-1] and "sunny, 21 C" in PROMPTS[-1]


def test_stream_events(client):
    whole = client.responses.create(model="local", input=QUESTION)
    kinds = []
    with client.responses.stream(model="local", input=QUESTION) as s:
        for ev in s:
            kinds.append(ev.type)
        final = s.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    for k in ("response.output_item.added", "response.output_text.delta", "response.output_text.done",
              "response.reasoning_text.delta", "response.output_item.done"):
        assert k in kinds
    assert final.output_text == whole.output_text
    assert [o.type for o in final.output] == ["reasoning", "message"]


def test_streamed_function_call(client):
    REPLY["text"] = CALL
    with client.responses.stream(model="local", input=QUESTION, tools=[WEATHER]) as s:
        kinds = [ev.type for ev in s]
        final = s.get_final_response()
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    call = [o for o in final.output if o.type == "function_call"][0]
    assert json.loads(call.arguments) == {"city": "Paris"}


def test_previous_response_id_and_store(client):
    first = client.responses.create(model="local", input="My name is Ada.")
    client.responses.create(model="local", input="What is my name?", previous_response_id=first.id)
    assert "My name is Ada." in PROMPTS[-1] and "It is sunny in Paris." in PROMPTS[-1]  # the earlier turn and reply
    assert client.responses.retrieve(first.id).id == first.id
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    unstored = client.responses.create(model="local", input="x", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="local", input="y", previous_response_id=unstored.id)


def test_max_output_tokens_is_incomplete(client):
    REPLY["cut"] = 3
    r = client.responses.create(model="local", input=QUESTION, max_output_tokens=6)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 6


def test_bad_requests(server):
    for body, fragment in (({"input": [{"type": "mystery"}]}, "mystery"),
                           ({"input": "x", "tools": [{"type": "web_search"}]}, "function tools"),
                           ({"input": "x", "text": {"format": {"type": "yaml"}}}, "text.format"),
                           ({"input": ""}, "input is empty")):
        r = httpx.post(server.url + "/v1/responses", json=body)
        assert r.status_code == 400 and fragment in r.json()["error"]["message"], (body, r.text)


def test_stream_cut_by_the_client_frees_the_slot(server):
    import time

    REPLY["cut"], REPLY["delay"] = 3, 0.01  # 1000 tokens at a model's pace: 10 s
    runner = server.app.state.server.runner
    before = runner.stats()["requests_cancelled"]
    with httpx.Client(base_url=server.url, timeout=30) as c:
        with c.stream("POST", "/v1/responses", json={"input": QUESTION, "stream": True,
                                                     "max_output_tokens": 900}) as s:
            lines = s.iter_lines()
            assert next(lines).startswith("event: response.created")
    deadline = time.monotonic() + 10
    while runner.stats()["requests_cancelled"] == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert runner.stats()["requests_cancelled"] == before + 1
    REPLY["cut"], REPLY["delay"] = None, 0.0
    r = httpx.post(server.url + "/v1/responses", json={"input": QUESTION}, timeout=30)
    assert r.status_code == 200 and r.json()["status"] == "completed"
