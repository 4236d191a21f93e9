"""The HTTP server on a tiny seeded model: settings (flags, env, --config,
features not built yet), security (keys, CORS, body limit, bad JSON), SSE
framing, context limits, the queue (503 + Retry-After), cancellation on
disconnect, --timeout, and greedy parity with the in-process API."""
from __future__ import annotations

import json
import threading
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("sse_starlette")

from server_helpers import LiveServer  # noqa: E402

from llamapy.server.config import ConfigError, parse_settings  # noqa: E402


@pytest.fixture(scope="module")
def tiny_path(tiny):
    return str(tiny("llama")[0])


@pytest.fixture(scope="module")
def long_req(tiny_path):
    """A completion that runs for seconds on the tiny model: EOS is banned, the context is large."""
    from llamapy import Llama

    eos = Llama(tiny_path, vocab_only=True, verbose=False).token_eos()
    return {"prompt": "a", "max_tokens": 30000, "temperature": 0, "logit_bias": {str(eos): -1e9}}


LONG_CTX = ["-c", "32768"]


@pytest.fixture(scope="module")
def server(tiny_path):
    s = LiveServer(["-m", tiny_path, "-c", "256", "-t", "1", "--metrics", "--api-key", "k1", "--api-key", "k2",
                    "--max-body", "4000", "--max-tokens-limit", "200", "--n-probs-max", "5"]).start()
    yield s
    s.stop()


def client(server, key="k1"):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def sse_events(text):
    """The data fields of an SSE body; asserts the framing (blank-line separated events)."""
    events = [e for e in text.replace("\r\n", "\n").split("\n\n") if e.strip()]
    out = []
    for e in events:
        lines = [ln for ln in e.split("\n") if not ln.startswith(":")]
        assert lines and all(ln.startswith("data: ") for ln in lines), e
        out.append("\n".join(ln[6:] for ln in lines))
    return out


# ------------------------------------------------------------------ settings
def test_settings_precedence_env_and_config(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"ctx-size": 300, "port": 9000, "alias": "from-file"}))
    s = parse_settings(["-m", "x.gguf", "--config", str(cfg), "--port", "9100"],
                       environ={"LLAMA_ARG_CTX_SIZE": "512"})
    assert (s.ctx_size, s.port, s.alias, s.host) == (512, 9100, "from-file", "127.0.0.1")
    y = tmp_path / "c.yaml"
    y.write_text("model: m.gguf\nembedding: true\napi_key: [a, b]\n")
    s = parse_settings(["--config", str(y)], environ={})
    assert s.model == "m.gguf" and s.embedding is True and s.api_key == ["a", "b"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"ctx-sise": 1}))
    with pytest.raises(ConfigError, match="ctx-sise"):
        parse_settings(["-m", "x", "--config", str(bad)], environ={})
    with pytest.raises(ConfigError, match="ctx-size needs a int"):
        parse_settings(["-m", "x"], environ={"LLAMA_ARG_CTX_SIZE": "lots"})


@pytest.mark.parametrize("argv, match", [
    (["-m", "x", "-np", "0"], "positive integer"),
    (["-m", "x", "--ctx-per-slot", "-5"], "ctx-per-slot"),
    ([], "router mode"),
    (["-m", "x", "--models-dir", "d"], "--models-dir: router mode"),
    (["-m", "x", "--models-max", "2"], "--models-max: router mode"),
    (["-m", "x", "-fa", "maybe"], "on, off, auto"),
])
def test_bad_flag_combinations_fail_at_startup(argv, match):
    with pytest.raises(ConfigError, match=match):
        parse_settings(argv, environ={})


def test_cli_reports_a_router_flag_with_m(capsys):
    from llamapy.cli import main

    assert main(["serve", "-m", "x.gguf", "--models-max", "2"]) == 2
    assert "router mode" in capsys.readouterr().err


# ------------------------------------------------------------------ security
def test_api_keys_and_public_health(server):
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    r = httpx.get(server.url + "/v1/models")
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    r = client(server, "wrong").get("/v1/models")
    assert r.status_code == 401 and set(r.json()["error"]) == {"code", "message", "type"}
    r = client(server, "k2").get("/v1/models")
    assert r.status_code == 200 and r.json()["data"][0]["meta"]["n_ctx"] == 256


def test_key_file_and_cors_list(tiny_path, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# one key a line\nsk-a\n\nsk-b\n")
    s = LiveServer(["-m", tiny_path, "-c", "64", "--api-key-file", str(keys),
                    "--cors-origins", "https://app.example"]).start()
    try:
        assert httpx.get(s.url + "/v1/models", headers={"Authorization": "Bearer sk-b"}).status_code == 200
        assert httpx.get(s.url + "/v1/models", headers={"Authorization": "Bearer sk-c"}).status_code == 401
        pre = {"Access-Control-Request-Method": "POST"}
        r = httpx.options(s.url + "/v1/completions", headers={"Origin": "https://app.example", **pre})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
        r = httpx.options(s.url + "/v1/completions", headers={"Origin": "http://localhost:3000", **pre})
        assert r.status_code == 400
    finally:
        s.stop()


def test_cors_preflight(server):
    pre = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
    r = httpx.options(server.url + "/v1/chat/completions", headers={"Origin": "https://evil.example", **pre})
    assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
    r = httpx.options(server.url + "/v1/chat/completions", headers={"Origin": "http://localhost:3000", **pre})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000"


def test_body_limit_and_bad_json(server):
    c = client(server)
    r = c.post("/v1/completions", json={"prompt": "a" * 5000})
    assert r.status_code == 413 and "4000" in r.json()["error"]["message"]
    r = c.post("/v1/completions", content=b'{"prompt": ', headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "a"}], "max_tokens": "9"})
    assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]
    r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": 5}]})
    assert r.status_code == 400 and "content" in r.json()["error"]["message"]
    r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "a"}], "stop": [1]})
    assert r.status_code == 400 and "stop" in r.json()["error"]["message"]
    # sampling values are checked by the library's SamplingParams before any work
    r = c.post("/v1/completions", json={"prompt": "a", "mirostat": 7})
    assert r.status_code == 400 and "mirostat_mode" in r.json()["error"]["message"]
    r = c.post("/v1/chat/completions", json={"messages": []})
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
    r = c.get("/nope")
    assert r.status_code == 404 and "error" in r.json()


def test_limits_and_context(server):
    c = client(server)
    r = c.post("/v1/completions", json={"prompt": "a", "max_tokens": 201})
    assert r.status_code == 400 and "at most 200" in r.json()["error"]["message"]
    r = c.post("/v1/completions", json={"prompt": "a", "logprobs": 6})
    assert r.status_code == 400 and "n-probs-max" in r.json()["error"]["message"]
    r = c.post("/v1/completions", json={"prompt": [5] * 300, "max_tokens": 1})
    err = r.json()["error"]
    assert r.status_code == 400 and "300 tokens" in err["message"] and "256" in err["message"]
    assert err["code"] == "context_length_exceeded"
    props = c.get("/props").json()
    assert props["n_ctx"] == 256 and props["max_prompt_tokens"] == 255 and props["total_slots"] == 1


def test_image_parts_refused_without_projector(server):
    msg = [{"role": "user", "content": [{"type": "text", "text": "hi"},
                                        {"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]
    r = client(server).post("/v1/chat/completions", json={"messages": msg})
    assert r.status_code == 400 and "--mmproj" in r.json()["error"]["message"]
    r = client(server).post("/api/chat", json={"model": "m", "messages": msg, "stream": False})
    assert r.status_code == 400 and "--mmproj" in r.json()["error"]["message"]


def test_media_path_rules(tmp_path):
    from llamapy.server.errors import APIError
    from llamapy.server.security import check_image_url

    with pytest.raises(APIError, match="--media-path"):
        check_image_url("file:///etc/passwd", None)
    (tmp_path / "a.png").write_bytes(b"x")
    assert check_image_url(f"file://{tmp_path}/a.png", str(tmp_path)) == str((tmp_path / "a.png").resolve())
    assert check_image_url("a.png", str(tmp_path)) == str((tmp_path / "a.png").resolve())  # relative to it
    with pytest.raises(APIError, match="outside"):
        check_image_url(f"file://{tmp_path}/../x.png", str(tmp_path))
    with pytest.raises(APIError, match="remote"):
        check_image_url("http://169.254.169.254/x.png", str(tmp_path))
    check_image_url("data:image/png;base64,AAAA", None)


# ------------------------------------------------------------------ behaviour
def test_greedy_parity_and_sse_framing(server, tiny_path):
    from llamapy import Llama

    c = client(server)
    req = {"prompt": "abc", "max_tokens": 12, "temperature": 0}
    whole = c.post("/v1/completions", json=req).json()
    llm = Llama(tiny_path, n_ctx=256, n_threads=1, verbose=False)
    ref = llm.create_completion("abc", max_tokens=12, temperature=0)
    assert whole["choices"][0]["text"] == ref["choices"][0]["text"]
    assert whole["usage"]["completion_tokens"] == ref["usage"]["completion_tokens"]
    msgs = [{"role": "user", "content": "hello"}]
    chat = c.post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 8, "temperature": 0}).json()
    ref_chat = llm.create_chat_completion(msgs, max_tokens=8, temperature=0)
    assert chat["choices"][0]["message"]["content"] == ref_chat["choices"][0]["message"]["content"]
    llm.close()
    # The same chat again: its prompt is in the cache.
    again = c.post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 8, "temperature": 0}).json()
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == again["usage"]["prompt_tokens"] - 1

    r = c.post("/v1/completions", json={**req, "stream": True, "stream_options": {"include_usage": True}})
    assert r.headers["content-type"].startswith("text/event-stream")
    data = sse_events(r.text)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert "".join(ch["choices"][0]["text"] for ch in chunks if ch["choices"]) == ref["choices"][0]["text"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 12
    assert all(ch["usage"] is None for ch in chunks[:-1])


def test_tokenize_detokenize_template_metrics(server):
    c = client(server)
    toks = c.post("/tokenize", json={"content": "t38t43", "add_special": False}).json()["tokens"]
    assert c.post("/detokenize", json={"tokens": toks}).json()["content"].endswith("t38t43")
    assert c.post("/detokenize", json={"tokens": [10 ** 6]}).status_code == 400
    prompt = c.post("/apply-template", json={"messages": [{"role": "user", "content": "zq"}]}).json()["prompt"]
    assert "zq" in prompt
    m = c.get("/metrics")
    assert m.status_code == 200 and "llamapy:requests_total" in m.text and "# TYPE" in m.text
    assert c.get("/slots").json()[0]["id"] == 0


def test_queue_full_and_disconnect_frees_the_slot(tiny_path, long_req):
    s = LiveServer(["-m", tiny_path, *LONG_CTX, "-t", "1", "--queue-max", "1"]).start()
    try:
        with httpx.Client(base_url=s.url, timeout=30) as a:
            with a.stream("POST", "/v1/completions", json={**long_req, "stream": True}) as stream:
                lines = stream.iter_lines()  # kept: a dropped iterator closes the response
                next(lines)  # it runs
                t_health = time.monotonic()  # the event loop answers while the worker generates
                assert httpx.get(s.url + "/health").status_code == 200 and time.monotonic() - t_health < 1
                result = {}

                def waiting():
                    t0 = time.monotonic()
                    r = httpx.post(s.url + "/v1/completions", json={"prompt": "b", "max_tokens": 2}, timeout=30)
                    result["status"], result["s"] = r.status_code, time.monotonic() - t0

                t = threading.Thread(target=waiting)
                t.start()
                deadline = time.monotonic() + 10
                while s.app.state.server.runner.stats()["waiting"] < 1 and time.monotonic() < deadline:
                    time.sleep(0.01)
                r = httpx.post(s.url + "/v1/completions", json={"prompt": "c", "max_tokens": 2})
                assert r.status_code == 503 and r.headers["retry-after"]
                assert r.json()["error"]["code"] == "server_busy"
                t_close = time.monotonic()
            # The stream is closed: its generation stops and the waiting request runs at once.
            t.join(10)
            assert result["status"] == 200 and time.monotonic() - t_close < 3
        deadline = time.monotonic() + 5
        while s.app.state.server.runner.stats()["busy"] and time.monotonic() < deadline:
            time.sleep(0.01)  # the worker counts a job just after its last item went out
        stats = s.app.state.server.runner.stats()
        assert stats["requests_cancelled"] == 1 and stats["queue_rejected_total"] == 1
        assert stats["tokens_predicted_total"] == 2
    finally:
        s.stop()


def test_timeout_and_no_metrics(tiny_path, long_req):
    s = LiveServer(["-m", tiny_path, *LONG_CTX, "-t", "1", "--timeout", "0.3", "--queue-max", "0"]).start()
    try:
        r = httpx.post(s.url + "/v1/completions", json=long_req, timeout=30)
        assert r.status_code == 504 and r.json()["error"]["code"] == "timeout"
        r = httpx.post(s.url + "/v1/completions", json={**long_req, "stream": True}, timeout=30)
        data = sse_events(r.text)
        assert data[-1] == "[DONE]" and json.loads(data[-2])["error"]["code"] == "timeout"
        r = httpx.get(s.url + "/metrics")
        assert r.status_code == 501 and "--metrics" in r.json()["error"]["message"]
        r = httpx.post(s.url + "/v1/embeddings", json={"input": "a"})
        assert r.status_code == 501 and "--embedding" in r.json()["error"]["message"]
    finally:
        s.stop()


def test_health_503_while_loading(tiny_path):
    gate = threading.Event()

    def slow_load():
        from llamapy import Llama

        gate.wait(10)
        return Llama(tiny_path, n_ctx=64, verbose=False)

    s = LiveServer(["-m", tiny_path], load=slow_load).start(ready=False)
    try:
        r = httpx.get(s.url + "/health")
        assert r.status_code == 503 and r.json()["error"]["code"] == "loading_model"
        r = httpx.post(s.url + "/v1/completions", json={"prompt": "a"})
        assert r.status_code == 503 and r.headers.get("retry-after")
        gate.set()
        deadline = time.monotonic() + 10
        while httpx.get(s.url + "/health").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        gate.set()
        s.stop()


def test_shutdown_ends_an_open_stream(tiny_path, long_req):
    s = LiveServer(["-m", tiny_path, *LONG_CTX, "-t", "1"]).start()
    with httpx.Client(base_url=s.url, timeout=30) as c:
        with c.stream("POST", "/v1/completions", json={**long_req, "stream": True}) as st:
            lines = st.iter_lines()
            next(lines)
            stopper = threading.Thread(target=s.stop)
            t0 = time.monotonic()
            stopper.start()
            rest = [ln for ln in lines if ln.startswith("data: ")]  # ends instead of running 30000 tokens
        assert rest[-1] == "data: [DONE]" and "shutting down" in rest[-2]
        stopper.join(20)
        assert not s.thread.is_alive() and time.monotonic() - t0 < 15
        runner = s.app.state.server.runner
        assert runner.state == "stopped" and runner.stats()["requests_cancelled"] == 1


# ------------------------------------------------------------------ images (--mmproj)
VLM = __import__("pathlib").Path(__file__).parent / "data" / "vlm"


def test_image_parts_with_projector():
    import base64

    from llamapy import Llama

    text, proj = str(VLM / "gemma3" / "gemma3-text-f16.gguf"), str(VLM / "gemma3" / "gemma3-mmproj-f16.gguf")
    img = VLM / "images" / "square_64x64.webp"
    data_uri = "data:image/webp;base64," + base64.b64encode(img.read_bytes()).decode()

    def msgs(url):
        return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                             {"type": "text", "text": "describe"}]}]

    Llama(text, mmproj=proj, n_ctx=256, n_threads=1, verbose=False).close()  # loads with its projector
    s = LiveServer(["-m", text, "--mmproj", proj, "-c", "256", "-t", "1", "--media-path", str(VLM / "images")])
    s.start()
    try:
        c = httpx.Client(base_url=s.url, timeout=60)
        req = {"max_tokens": 6, "temperature": 0}
        got = c.post("/v1/chat/completions", json={"messages": msgs(data_uri), **req}).json()
        by_file = c.post("/v1/chat/completions", json={"messages": msgs(f"file://{img}"), **req}).json()
        r = c.post("/v1/chat/completions", json={"messages": msgs(f"file://{VLM / 'manifest.json'}"), **req})
        assert r.status_code == 403 and "outside --media-path" in r.json()["error"]["message"]
        assert c.get("/props").json()["modalities"]["vision"] is True
    finally:
        s.stop()
    llm = Llama(text, mmproj=proj, n_ctx=256, n_threads=1, verbose=False)
    ref = llm.create_chat_completion(msgs(data_uri), **req)
    llm.close()
    assert got["choices"][0]["message"]["content"] == ref["choices"][0]["message"]["content"]
    assert by_file["choices"][0]["message"]["content"] == ref["choices"][0]["message"]["content"]
    assert got["usage"]["prompt_tokens"] == ref["usage"]["prompt_tokens"]


# ------------------------------------------------------------------ entry points
def test_python_m_llamapy_serve_and_sigterm(tiny_path, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from server_helpers import free_port

    port = free_port()
    cfg = tmp_path / "serve.json"
    cfg.write_text(json.dumps({"ctx-size": 128, "threads": 1}))
    env = {**os.environ, "LLAMA_ARG_PORT": str(port), "PYTHONPATH": str(__import__("pathlib").Path(__file__)
                                                                             .parent.parent)}
    p = subprocess.Popen([sys.executable, "-m", "llamapy.server", "-m", tiny_path, "--config", str(cfg)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert p.poll() is None and time.monotonic() < deadline, p.stdout.read() if p.poll() else "timeout"
            time.sleep(0.05)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "a", "max_tokens": 2})
        assert r.status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/props").json()["n_ctx"] == 128
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=20)
        # uvicorn shuts down gracefully, then re-raises the signal (exit status -SIGTERM), as it documents.
        assert p.returncode in (0, -signal.SIGTERM) and "Application shutdown complete" in out, out
        assert "POST /v1/completions 200" in out  # the access log, through logging
    finally:
        if p.poll() is None:
            p.kill()


def test_serve_exits_when_the_model_cannot_load(tmp_path):
    import subprocess
    import sys

    from server_helpers import free_port

    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 60)
    p = subprocess.run([sys.executable, "-m", "llamapy", "serve", "-m", str(bad), "--port", str(free_port())],
                       capture_output=True, text=True, timeout=60,
                       env={**__import__("os").environ,
                            "PYTHONPATH": str(__import__("pathlib").Path(__file__).parent.parent)})
    assert p.returncode == 1 and "failed to load" in p.stderr
    assert main_no_jinja() == 2


def main_no_jinja():
    from llamapy.server.cli import main

    return main(["-m", "x.gguf", "--no-jinja"])


def test_shutdown_ends_an_open_ollama_stream(tiny):
    # Ollama's options cannot ban EOS; the tiny gemma3's greedy text never reaches it.
    s = LiveServer(["-m", str(tiny("gemma3")[0]), *LONG_CTX, "-t", "1"]).start()
    body = {"model": "m", "prompt": "a", "raw": True, "stream": True,
            "options": {"num_predict": 30000, "temperature": 0}}
    with httpx.Client(base_url=s.url, timeout=30) as c:
        with c.stream("POST", "/api/generate", json=body) as st:
            lines = st.iter_lines()
            assert json.loads(next(lines))["done"] is False
            stopper = threading.Thread(target=s.stop)
            t0 = time.monotonic()
            stopper.start()
            rest = [json.loads(ln) for ln in lines if ln]
        assert "shutting down" in rest[-1]["error"] and time.monotonic() - t0 < 5
        stopper.join(20)


def test_engine_flags_and_chat_template(tiny):
    from llamapy.server.app import llama_kwargs

    # qwen3's tiny model has 32-wide heads, as a Q8_0 cache needs.
    s = LiveServer(["-m", str(tiny("qwen3")[0]), "-c", "128", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-b", "64",
                    "-ub", "32", "-t", "1", "--chat-template", "chatml", "--alias", "tiny"]).start()
    try:
        c = httpx.Client(base_url=s.url, timeout=30)
        prompt = c.post("/apply-template", json={"messages": [{"role": "user", "content": "x"}]}).json()["prompt"]
        assert "<|im_start|>user" in prompt
        r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 3})
        assert r.status_code == 200 and r.json()["model"] == "tiny"
        llm = s.app.state.server.llama
        assert llm.n_batch == 64 and llm.n_ubatch == 32 and llm.flash_attn_active
    finally:
        s.stop()
    jinja = "{% for m in messages %}[{{ m.content }}]{% endfor %}"
    kw = llama_kwargs(parse_settings(["-m", "x", "--chat-template", jinja], environ={}))
    assert kw["kv_overrides"] == {"tokenizer.chat_template": jinja} and "chat_format" not in kw
    # --seed fixes the base seed; without it each start draws one (never LLAMA_DEFAULT_SEED,
    # whose derived per-request seeds would repeat across starts)
    assert llama_kwargs(parse_settings(["-m", "x", "--seed", "5"], environ={}))["seed"] == 5
    seeds = {llama_kwargs(parse_settings(["-m", "x"], environ={}))["seed"] for _ in range(8)}
    assert len(seeds) > 1 and all(0 <= v < 0xFFFFFFFF for v in seeds)
    # -t is the prompt threads too (llama-server's -tb defaults to -t)
    kw = llama_kwargs(parse_settings(["-m", "x", "-t", "3"], environ={}))
    assert kw["n_threads"] == kw["n_threads_batch"] == 3


# ------------------------------------------------------------------ Ollama translation
def test_ollama_tool_messages_translate():
    from llamapy.server.ollama_routes import _messages, _tool_calls

    msgs = _messages([{"role": "assistant", "content": "",
                       "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
                      {"role": "tool", "content": "42"}], has_projector=False)
    call = msgs[0]["tool_calls"][0]
    assert call["type"] == "function" and json.loads(call["function"]["arguments"]) == {"x": 1}
    back = _tool_calls({"tool_calls": [{"function": {"name": "f", "arguments": '{"x": 1}'}}]})
    assert back == [{"function": {"name": "f", "arguments": {"x": 1}}}]


def test_keep_alive_parsing():
    from llamapy.server.errors import APIError
    from llamapy.server.ollama_routes import parse_keep_alive

    assert parse_keep_alive("5m") == 300 and parse_keep_alive("1h30m") == 5400 and parse_keep_alive(10) == 10
    assert parse_keep_alive(0) == 0 and parse_keep_alive("-1") is None and parse_keep_alive(-1) is None
    assert parse_keep_alive(None) == 300
    with pytest.raises(APIError, match="duration"):
        parse_keep_alive("soon")
