"""The HTTP server on Gemma 3 270M (a real vocabulary and chat template),
driven by the ``openai`` SDK and the ``ollama`` client: chat, streaming,
tools, JSON schema, logprobs, completions, embeddings, and the /api/*
endpoints. Greedy replies equal the same request run in-process."""
from __future__ import annotations

import json

import pytest
from conftest import needs

needs("fastapi")
needs("uvicorn")
openai = needs("openai")
httpx = needs("httpx")

from server_helpers import LiveServer  # noqa: E402

pytestmark = pytest.mark.model

MSGS = [{"role": "user", "content": "Name the largest planet."}]


@pytest.fixture(scope="module")
def server(gemma_path):
    s = LiveServer(["-m", gemma_path, "-c", "1024", "-t", "2", "--embedding", "--pooling", "mean", "--alias", "gemma",
                    "--api-key", "sk-test"]).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)


@pytest.fixture(scope="module")
def llm(gemma_path):
    from llamapy import Llama

    m = Llama(gemma_path, n_ctx=1024, n_threads=2, embedding=True, verbose=False)
    yield m
    m.close()


def test_chat_greedy_equals_in_process(oai, llm):
    r = oai.chat.completions.create(model="gemma", messages=MSGS, max_tokens=16, temperature=0)
    ref = llm.create_chat_completion(MSGS, max_tokens=16, temperature=0)
    assert r.choices[0].message.content == ref["choices"][0]["message"]["content"]
    assert r.usage.completion_tokens == ref["usage"]["completion_tokens"]
    assert r.usage.prompt_tokens_details.cached_tokens >= 0
    stream = oai.chat.completions.create(model="gemma", messages=MSGS, max_tokens=16, temperature=0, stream=True,
                                         stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ref["choices"][0]["message"]["content"]
    assert chunks[-1].usage.completion_tokens == ref["usage"]["completion_tokens"]
    # The same prompt again: all but its last token come from the cache.
    again = oai.chat.completions.create(model="gemma", messages=MSGS, max_tokens=1, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1


def test_json_schema_tools_logprobs(oai):
    schema = {"type": "object", "properties": {"planet": {"type": "string"}}, "required": ["planet"]}
    r = oai.chat.completions.create(model="gemma", messages=MSGS, max_tokens=40, temperature=0,
                                    response_format={"type": "json_schema",
                                                     "json_schema": {"name": "p", "schema": schema}})
    assert "planet" in json.loads(r.choices[0].message.content)
    tools = [{"type": "function", "function": {"name": "lookup", "description": "look a planet up",
                                               "parameters": schema}}]
    r = oai.chat.completions.create(model="gemma", messages=MSGS, max_tokens=40, temperature=0, tools=tools,
                                    tool_choice={"type": "function", "function": {"name": "lookup"}})
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "lookup" and "planet" in json.loads(call.function.arguments)
    assert r.choices[0].finish_reason == "tool_calls"
    r = oai.chat.completions.create(model="gemma", messages=MSGS, max_tokens=3, temperature=0, logprobs=True,
                                    top_logprobs=2)
    assert len(r.choices[0].logprobs.content) == 3 and len(r.choices[0].logprobs.content[0].top_logprobs) == 2


def test_chat_template_kwargs_change_the_prompt(server):
    c = httpx.Client(base_url=server.url, headers={"Authorization": "Bearer sk-test"}, timeout=60)
    plain = c.post("/apply-template", json={"messages": MSGS}).json()["prompt"]
    assert "Name the largest planet." in plain and "<start_of_turn>" in plain
    r = c.post("/v1/chat/completions", json={"messages": MSGS, "max_tokens": 2, "temperature": 0,
                                             "chat_template_kwargs": {"enable_thinking": False}})
    assert r.status_code == 200
    r = c.post("/v1/chat/completions", json={"messages": MSGS, "chat_template_kwargs": {"add_generation_prompt": 1}})
    assert r.status_code == 400 and "add_generation_prompt" in r.json()["error"]["message"]


def test_completions_and_embeddings(oai, llm):
    r = oai.completions.create(model="gemma", prompt="The capital of France is", max_tokens=8, temperature=0)
    ref = llm.create_completion("The capital of France is", max_tokens=8, temperature=0)
    assert r.choices[0].text == ref["choices"][0]["text"]
    e = oai.embeddings.create(model="gemma", input=["hello", "world"])
    assert len(e.data) == 2 and len(e.data[0].embedding) == llm.n_embd()
    assert oai.models.list().data[0].id == "gemma"


def test_ollama_client(server, llm):
    ollama = pytest.importorskip("ollama")
    c = ollama.Client(host=server.url, headers={"Authorization": "Bearer sk-test"})
    opts = {"temperature": 0, "num_predict": 12}
    r = c.chat(model="gemma", messages=MSGS, options=opts)
    ref = llm.create_chat_completion(MSGS, max_tokens=12, temperature=0)
    assert r.message.content == ref["choices"][0]["message"]["content"] and r.done
    parts = list(c.chat(model="gemma", messages=MSGS, options=opts, stream=True))
    assert "".join(p.message.content for p in parts) == ref["choices"][0]["message"]["content"]
    assert parts[-1].done and parts[-1].eval_count == ref["usage"]["completion_tokens"]
    g = c.generate(model="gemma", prompt="Name the largest planet.", options=opts, keep_alive="10m")
    assert g.response == ref["choices"][0]["message"]["content"]
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    j = c.chat(model="gemma", messages=MSGS, format=schema, options={"temperature": 0, "num_predict": 40})
    assert isinstance(json.loads(j.message.content)["ok"], bool)
    emb = c.embed(model="gemma", input=["a", "b"])
    assert len(emb.embeddings) == 2
    assert c.list().models[0].model == "gemma"
    ps = c.ps().models[0]
    assert ps.context_length == 1024 and ps.expires_at is not None
    assert c.show("gemma").details.family == "gemma3"
    with pytest.raises(ollama.ResponseError, match="num_ctx"):
        c.chat(model="gemma", messages=MSGS, options={"num_ctx": 99999})


def test_langchain_chat_openai(server, llm):
    import langchain_openai as lc  # in the test extra
    chat = lc.ChatOpenAI(base_url=server.url + "/v1", api_key="sk-test", model="gemma", temperature=0,
                         max_tokens=12, max_retries=0)
    ref = llm.create_chat_completion(MSGS, max_tokens=12, temperature=0)["choices"][0]["message"]["content"]
    assert chat.invoke("Name the largest planet.").content == ref
    assert "".join(c.content for c in chat.stream("Name the largest planet.")) == ref
