"""Request input the server must refuse with a 400 naming the problem (issue
31 items 2, 3, 7, 11, 16, 17, 18), each through a real server on loopback
with the issue's repro: generation from an encoder, embedding inputs over the
model's positions, Ollama bodies without a JSON Content-Type, max_tokens
values that escaped --max-tokens-limit, keep_alive values that broke /api/ps,
malformed messages and chat_template_kwargs that reached the library, and
request fields whose engine errors (pybind signatures, "call eval()")
reached clients."""
from __future__ import annotations

import json
import math

import pytest
from conftest import needs

needs("fastapi")
needs("uvicorn")
httpx = needs("httpx")

from server_helpers import LiveServer  # noqa: E402

pytestmark = pytest.mark.model

LIMIT = 8  # --max-tokens-limit of the Gemma server
USER = [{"role": "user", "content": "hi"}]


def _msg(r):
    return r.json()["error"]["message"]


@pytest.fixture(scope="module")
def gemma(gemma_path):
    s = LiveServer(["-m", gemma_path, "-c", "512", "-t", "2", "--max-tokens-limit", str(LIMIT)]).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def g(gemma):
    # One connection per request: a 500 makes uvicorn drop the kept-alive
    # connection, which would show up as a different failure in the next call.
    class Client:
        def post(self, path, **kw):
            return httpx.post(gemma.url + path, timeout=120, **kw)

        def get(self, path, **kw):
            return httpx.get(gemma.url + path, timeout=120, **kw)
    return Client()


@pytest.fixture(scope="module")
def stoppers(g):
    """logit_bias banning EOS and <end_of_turn>: a generation then runs until a limit ends it."""
    ids = g.post("/tokenize", json={"content": "<end_of_turn><eos>", "add_special": False}).json()["tokens"]
    assert len(ids) == 2
    return {str(t): -1e9 for t in ids}


@pytest.fixture(scope="module")
def minilm():
    import minilm_ref

    s = LiveServer(["-m", minilm_ref.gguf_path("f32"), "--embedding", "-t", "2"]).start()
    yield s
    s.stop()


# ------------------------------------------------------------------ item 2: encoders generate nothing
@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": USER, "max_tokens": 4}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 4}),
    ("/api/generate", {"model": "m", "prompt": "hi", "stream": False, "options": {"num_predict": 4}}),
    ("/api/chat", {"model": "m", "messages": USER, "stream": False, "options": {"num_predict": 4}}),
])
def test_encoder_refuses_generation(minilm, path, body):
    r = httpx.post(minilm.url + path, json=body, timeout=60)
    assert r.status_code == 400, r.text
    msg = _msg(r)
    assert "encoder" in msg and "embeddings only" in msg and "[unused" not in r.text
    # it still embeds, and says what it can do
    assert httpx.post(minilm.url + "/v1/embeddings", json={"input": "hi"}).status_code == 200
    show = httpx.post(minilm.url + "/api/show", json={"model": "m"}).json()
    assert show["capabilities"] == ["embedding"]


# ------------------------------------------------------------------ item 3: embedding inputs are never cut
def test_embedding_inputs_over_the_models_positions(minilm):
    c = httpx.Client(base_url=minilm.url, timeout=60)
    long_text = "hello " * 600
    n = len(c.post("/tokenize", json={"content": long_text}).json()["tokens"])
    assert 512 < n <= 2048  # the band the server used to cut silently (its limit said 2048)
    for path, body, field in (("/v1/embeddings", {"input": long_text}, "input"),
                              ("/v1/embeddings", {"input": ["hi", long_text]}, "input[1]"),
                              ("/api/embed", {"model": "m", "input": long_text}, "input"),
                              ("/api/embed", {"model": "m", "input": long_text, "truncate": False}, "input"),
                              ("/api/embeddings", {"model": "m", "prompt": long_text}, "prompt")):
        r = c.post(path, json=body)
        assert r.status_code == 400, (path, r.text)
        msg = _msg(r)
        assert msg.startswith(f"{field} has {n} tokens") and "at most 512" in msg and "positions" in msg, msg
    # exactly the model's positions is fine
    fits = "hello " * 510
    assert len(c.post("/tokenize", json={"content": fits}).json()["tokens"]) == 512
    assert c.post("/v1/embeddings", json={"input": fits}).status_code == 200
    assert len(c.post("/api/embeddings", json={"model": "m", "prompt": fits}).json()["embedding"]) == 384
    # Ollama's truncate, asked for, cuts the input to the model's positions
    cut = c.post("/api/embed", json={"model": "m", "input": long_text, "truncate": True})
    assert cut.status_code == 200 and cut.json()["prompt_eval_count"] == 512, cut.text
    assert len(cut.json()["embeddings"][0]) == 384


# ------------------------------------------------------------------ item 7: Ollama bodies, quantization names
def test_ollama_json_body_without_json_content_type(g):
    body = json.dumps({"model": "m", "prompt": "hi", "stream": False, "options": {"num_predict": 2}})
    form = {"content-type": "application/x-www-form-urlencoded"}  # what `curl -d` sends
    r = g.post("/api/generate", content=body, headers=form)
    assert r.status_code == 200 and r.json()["done"] is True, r.text
    r = g.post("/api/chat", content=json.dumps({"model": "m", "messages": USER, "stream": False,
                                                "options": {"num_predict": 2}}), headers=form)
    assert r.status_code == 200 and r.json()["message"]["role"] == "assistant", r.text
    r = g.post("/api/generate", content=body, headers={"content-type": "text/plain"})
    assert r.status_code == 200, r.text
    r = g.post("/api/generate", content=b"model=m&prompt=hi", headers=form)
    assert r.status_code == 400 and "not valid JSON" in _msg(r)


def test_ollama_quantization_level_is_the_file_types_name(g):
    tags = g.get("/api/tags").json()["models"][0]["details"]
    assert tags["quantization_level"] == "Q4_K_M"  # general.file_type 15
    assert g.get("/api/ps").json()["models"][0]["details"]["quantization_level"] == "Q4_K_M"
    assert g.post("/api/show", json={"model": "m"}).json()["details"]["quantization_level"] == "Q4_K_M"


def test_quantization_level_table():
    from llamapy.server.ollama_routes import quantization_level

    assert [quantization_level(v) for v in (0, 1, 7, 15, "15", 1024 + 7, 32, None, 999)] == \
        ["F32", "F16", "Q8_0", "Q4_K_M", "Q4_K_M", "Q8_0", "BF16", "", "unknown"]


# ------------------------------------------------------------------ item 11: --max-tokens-limit holds
@pytest.mark.parametrize("extra", [{"max_tokens": -1}, {"max_tokens": 0}, {}])
def test_chat_until_the_context_ends_is_capped(g, stoppers, extra):
    r = g.post("/v1/chat/completions", json={"messages": USER, "temperature": 0, "logit_bias": stoppers, **extra})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == LIMIT and r.json()["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("max_tokens", [-1, 0])
def test_completion_until_the_context_ends_is_capped(g, stoppers, max_tokens):
    r = g.post("/v1/completions", json={"prompt": "hi", "max_tokens": max_tokens, "temperature": 0,
                                        "logit_bias": stoppers})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == LIMIT, r.text
    st = g.post("/v1/completions", json={"prompt": "hi", "max_tokens": max_tokens, "temperature": 0,
                                         "logit_bias": stoppers, "stream": True,
                                         "stream_options": {"include_usage": True}})
    events = [json.loads(e[6:]) for e in st.text.split("\n") if e.startswith("data: {")]
    assert events[-1]["usage"]["completion_tokens"] == LIMIT


def test_negative_max_tokens_are_refused(g):
    r = g.post("/v1/chat/completions", json={"messages": USER, "max_completion_tokens": -5})
    assert r.status_code == 400 and "max_completion_tokens is -5" in _msg(r)
    r = g.post("/v1/chat/completions", json={"messages": USER, "max_tokens": -2})
    assert r.status_code == 400 and "max_tokens is -2" in _msg(r)
    r = g.post("/v1/completions", json={"prompt": "hi", "max_tokens": -7})
    assert r.status_code == 400 and "max_tokens is -7" in _msg(r)
    r = g.post("/api/generate", json={"model": "m", "prompt": "hi", "stream": False, "options": {"num_predict": -3}})
    assert r.status_code == 400 and "options.num_predict is -3" in _msg(r)
    r = g.post("/v1/chat/completions", json={"messages": USER, "max_tokens": LIMIT + 1})
    assert r.status_code == 400 and f"at most {LIMIT}" in _msg(r)


@pytest.mark.parametrize("options", [{"num_predict": -1}, {"num_predict": -2}, {}])
def test_ollama_num_predict_unlimited_is_capped(g, options):
    for path, body in (("/api/generate", {"prompt": "hi", "raw": True}), ("/api/chat", {"messages": USER})):
        r = g.post(path, json={"model": "m", "stream": False, "options": {"temperature": 0, **options}, **body})
        assert r.status_code == 200 and r.json()["eval_count"] <= LIMIT, r.text
    # raw "hi" runs on past any EOS greedily (the test would see the whole context otherwise)
    r = g.post("/api/generate", json={"model": "m", "prompt": "hi", "raw": True, "stream": False,
                                      "options": {"temperature": 0, **options}})
    assert r.json()["eval_count"] == LIMIT and r.json()["done_reason"] == "length"


def test_cap_leaves_room_for_a_long_prompt(g):
    # "Until the context ends" with 4 tokens of room is 4 tokens, not a 400 about a max_tokens nobody sent.
    r = g.post("/v1/completions", json={"prompt": [1000] * 508, "max_tokens": -1, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] <= 4


# ------------------------------------------------------------------ item 16: keep_alive
@pytest.mark.parametrize("keep_alive", [1e300, "nan", "9999999999h", float("inf"), "inf", "-inf"])
def test_absurd_keep_alive_is_refused_and_api_ps_keeps_working(g, keep_alive):
    # json.dumps writes float("inf") as Infinity, which Python's (and so FastAPI's) JSON reader takes
    r = g.post("/api/generate", content=json.dumps({"model": "m", "prompt": "", "keep_alive": keep_alive}))
    assert r.status_code == 400 and "keep_alive" in _msg(r), r.text
    ps = g.get("/api/ps")
    assert ps.status_code == 200 and ps.json()["models"], ps.text


def test_long_but_valid_keep_alive_is_reported(g):
    r = g.post("/api/chat", json={"model": "m", "messages": [], "keep_alive": "2000000h"})
    assert r.status_code == 200 and r.json()["done_reason"] == "load"
    ps = g.get("/api/ps")
    assert ps.status_code == 200 and ps.json()["models"][0]["expires_at"] > "2200"
    assert g.post("/api/chat", json={"model": "m", "messages": [], "keep_alive": -1}).status_code == 200
    assert g.get("/api/ps").status_code == 200
    g.post("/api/chat", json={"model": "m", "messages": [], "keep_alive": "5m"})


def test_keep_alive_bounds():
    from llamapy.server.errors import APIError
    from llamapy.server.ollama_routes import KEEP_ALIVE_MAX_S, parse_keep_alive

    assert math.isclose(KEEP_ALIVE_MAX_S, 9223372036.854776)
    assert parse_keep_alive("2562047h") == 2562047 * 3600.0  # Go's longest whole-hour duration
    for bad in ("2562048h", 1e300, float("nan"), "NaN", "Infinity", "1e400"):
        with pytest.raises(APIError, match="keep_alive"):
            parse_keep_alive(bad)


# ------------------------------------------------------------------ item 17: malformed messages and kwargs
def test_assistant_tool_calls_not_a_list(g):
    msgs = USER + [{"role": "assistant", "content": "x", "tool_calls": "abc"}, {"role": "user", "content": "y"}]
    r = g.post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 2})
    assert r.status_code == 400 and "messages[1].tool_calls" in _msg(r), r.text
    r = g.post("/apply-template", json={"messages": msgs})
    assert r.status_code == 400 and "messages[1].tool_calls" in _msg(r), r.text
    bad_call = USER + [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": "f"}]}]
    r = g.post("/v1/chat/completions", json={"messages": bad_call, "max_tokens": 2})
    assert r.status_code == 400 and "messages[1].tool_calls[0].function" in _msg(r), r.text


def test_ollama_tool_calls_empty_object(g):
    msgs = USER + [{"role": "assistant", "content": "x", "tool_calls": [{}]}]
    r = g.post("/api/chat", json={"model": "m", "messages": msgs, "stream": False, "options": {"num_predict": 2}})
    assert r.status_code == 400 and "messages[1].tool_calls[0].function" in _msg(r), r.text
    # a well-formed Ollama call (arguments an object) still goes through
    good = USER + [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f",
                                                                                    "arguments": {"x": 1}}}]}]
    r = g.post("/api/chat", json={"model": "m", "messages": good, "stream": False, "options": {"num_predict": 2}})
    assert r.status_code == 200, r.text
    r = g.post("/api/chat", json={"model": "m", "messages": USER, "stream": False, "tools": [{"function": "x"}]})
    assert r.status_code == 400 and "tools[0].function" in _msg(r), r.text


@pytest.mark.parametrize("key,value", [("function_call", {}), ("logits_processor", "x"), ("stopping_criteria", "x"),
                                       ("grammar", 'root ::= "a"'), ("max_tokens", 100000), ("stream", True),
                                       ("llama", None), ("messages", [])])
def test_chat_template_kwargs_are_template_variables_only(g, key, value):
    for stream in (False, True):
        r = g.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 2, "stream": stream,
                                                 "chat_template_kwargs": {key: value}})
        # a 400 before any stream starts (the repro's stream used to drop the connection)
        assert r.status_code == 400 and r.headers["content-type"].startswith("application/json"), r.text
        assert f"chat_template_kwargs.{key}" in _msg(r)
    r = g.post("/apply-template", json={"messages": USER, "chat_template_kwargs": {key: value}})
    assert r.status_code == 400 and f"chat_template_kwargs.{key}" in _msg(r)
    # a template variable still reaches the template
    r = g.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 2,
                                             "chat_template_kwargs": {"enable_thinking": False}})
    assert r.status_code == 200


# ------------------------------------------------------------------ item 18: engine errors, 500s
def test_apply_template_with_a_projector():
    import base64
    import pathlib

    vlm = pathlib.Path(__file__).parent / "data" / "vlm"
    s = LiveServer(["-m", str(vlm / "gemma3" / "gemma3-text-f16.gguf"), "--mmproj",
                    str(vlm / "gemma3" / "gemma3-mmproj-f16.gguf"), "-c", "256", "-t", "1"]).start()
    try:
        c = httpx.Client(base_url=s.url, timeout=60)
        r = c.post("/apply-template", json={"messages": USER})
        assert r.status_code == 200 and "hi" in r.json()["prompt"], r.text
        img = "data:image/webp;base64," + base64.b64encode((vlm / "images" / "square_64x64.webp").read_bytes()).decode()
        msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": img}},
                                             {"type": "text", "text": "describe"}]}]
        r = c.post("/apply-template", json={"messages": msgs})
        assert r.status_code == 200 and "<__media__>describe" in r.json()["prompt"], r.text
    finally:
        s.stop()


@pytest.mark.parametrize("path,body,field", [
    ("/v1/chat/completions", {"messages": USER, "max_tokens": 2, "top_k": 2 ** 40}, "top_k"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "top_k": -(2 ** 70)}, "top_k"),
    ("/api/generate", {"model": "m", "prompt": "hi", "stream": False, "options": {"top_k": 2 ** 40}},
     "options.top_k"),
    ("/v1/completions", {"prompt": [], "max_tokens": 2}, "prompt"),
    ("/v1/completions", {"prompt": [2 ** 40], "max_tokens": 2}, "prompt"),
    ("/v1/completions", {"prompt": [-1], "max_tokens": 2}, "prompt"),
    ("/v1/chat/completions", {"messages": USER, "max_tokens": 2, "chat_template_kwargs": {"grammar": 'root ::= "a"'}},
     "chat_template_kwargs.grammar"),
    ("/v1/chat/completions", {"messages": USER, "max_tokens": 2,
                              "response_format": {"type": "json_schema", "json_schema": "x"}},
     "response_format.json_schema"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
     "messages[0].content[0].text"),
    ("/v1/chat/completions", {"messages": USER, "tools": [{}]}, "tools[0].function"),
    ("/v1/chat/completions", {"messages": USER, "stream": True, "stream_options": {"include_usage": "x"}},
     "stream_options.include_usage"),
    ("/api/generate", {"model": "m", "prompt": "hi", "stream": False, "options": {"stop": 5}}, "options.stop"),
    ("/api/chat", {"model": "m", "messages": [{"role": "user", "content": "hi", "images": "abc"}], "stream": False},
     "messages[0].images"),
])
def test_engine_errors_become_400s_naming_the_field(g, path, body, field):
    r = g.post(path, json=body)
    assert r.status_code == 400, r.text
    msg = _msg(r)
    assert field in msg, msg
    for raw in ("incompatible", "eval()", "object is not", "has no attribute", "Traceback"):
        assert raw not in msg, msg
    # the server still answers (a token id past int32 used to kill the dispatcher thread)
    assert g.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1}).status_code == 200


def test_lone_surrogate_is_a_400(g):
    r = g.post("/v1/completions", content=b'{"prompt": "\\ud800", "max_tokens": 1}',
               headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid Unicode" in _msg(r) and "codec" not in _msg(r)


def test_500_carries_no_internal_message(gemma, g):
    # A failure inside the server (here a Llama method made to fail) is a 500
    # that says so and no more: no exception text, type or path.
    llm = gemma.app.state.server.llama

    def broken(*a, **k):
        raise RuntimeError("secret /srv/models/path")

    llm.detokenize = broken
    try:
        r = g.post("/detokenize", json={"tokens": [1]})
    finally:
        del llm.detokenize
    assert r.status_code == 500
    assert "secret" not in r.text and "RuntimeError" not in r.text and "internal error" in _msg(r)
    assert g.post("/detokenize", json={"tokens": [1]}).status_code == 200
