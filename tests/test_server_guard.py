"""The server's guards (issue 31), each through a real server on loopback
with the issue's repro as input: Host names (DNS rebinding: 403), Origins
(cross-site requests: 403, whatever the method and Content-Type), a chunked
body over --max-body (413), a router child killed mid-stream (the stream
ends with an error event, not silently), a model that cannot load (the
command fails before it listens), and prompts of megabytes (refused by
their size before tokenizing, and tokenized off the dispatcher thread, so
they stall no other request)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import needs

httpx = needs("httpx")
needs("fastapi")
needs("uvicorn")
needs("sse_starlette")

from server_helpers import LiveServer, free_port  # noqa: E402
from test_server_router import RouterServer  # noqa: E402

ATTACKER_HOST = "attacker.example:8080"
EVIL = "http://evil.example"
BIG_PROMPT = "hello world " * 650_000  # 7.8 MB, the size of the prompts


@pytest.fixture(scope="module")
def tiny_path(tiny):
    return str(tiny("llama")[0])


@pytest.fixture(scope="module")
def server(tiny_path):
    """No API key: the guards must hold without one."""
    s = LiveServer(["-m", tiny_path, "-c", "256", "-t", "1"]).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def router(tiny, tmp_path_factory):
    """alpha (tiny llama), g1 and g2 (tiny gemma3: its greedy text never reaches EOS, so streams run long)."""
    root = tmp_path_factory.mktemp("guard-models")
    shutil.copy(tiny("llama")[0], root / "alpha.gguf")
    shutil.copy(tiny("gemma3")[0], root / "g1.gguf")
    shutil.copy(tiny("gemma3")[0], root / "g2.gguf")
    with RouterServer(["--models-dir", str(root), "-c", "32768", "-t", "1"]) as rs:
        yield rs


def _refused(r, status, code, named):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and named in err["message"], err


# ------------------------------------------------------------------ 13: Host (DNS rebinding)
def test_foreign_host_is_refused(server):
    for method, path in (("GET", "/health"), ("GET", "/v1/models"), ("POST", "/v1/completions")):
        r = httpx.request(method, server.url + path, headers={"Host": ATTACKER_HOST},
                          json={"prompt": "a", "max_tokens": 1} if method == "POST" else None)
        _refused(r, 403, "host_not_allowed", ATTACKER_HOST)
    for host in ("localhost", "localhost:8080", "LocalHost:1", "127.0.0.1", f"127.0.0.1:{server.port}",
                 "127.3.4.5:99", "[::1]", "[::1]:8080"):
        assert httpx.get(server.url + "/v1/models", headers={"Host": host}).status_code == 200, host
    # Names that merely start like loopback ones, and other addresses: a loopback-bound server answers none.
    for host in ("localhost.attacker.example", "127.0.0.1.nip.io", "10.0.0.1:8080", "[::2]:8080"):
        assert httpx.get(server.url + "/v1/models", headers={"Host": host}).status_code == 403, host


def test_allowed_hosts_and_a_wildcard_bind(tiny_path):
    from llamapy.server.config import parse_settings

    assert parse_settings(["-m", "x"], environ={"LLAMA_ARG_ALLOWED_HOSTS": "a.example, *"}).allowed_hosts == \
        ["a.example", "*"]
    # LiveServer listens on 127.0.0.1 whatever --host says; the guard follows --host.
    s = LiveServer(["-m", tiny_path, "-c", "64", "-t", "1", "--host", "0.0.0.0",
                    "--allowed-hosts", "api.example,Other.Example."]).start()
    try:
        for host in ("api.example", "api.example:443", "other.example", "localhost:1", "192.168.1.5:8080",
                     "[fe80::1]:8080", socket.gethostname()):
            assert httpx.get(s.url + "/v1/models", headers={"Host": host}).status_code == 200, host
        _refused(httpx.get(s.url + "/v1/models", headers={"Host": ATTACKER_HOST}), 403, "host_not_allowed",
                 ATTACKER_HOST)
    finally:
        s.stop()


def test_host_guard_rules():
    from llamapy.server.security import HostGuard

    loop = HostGuard(None, "127.0.0.1")
    assert loop.allows("[::ffff:127.0.0.1]:80") and not loop.allows("192.168.1.5")
    assert HostGuard(None, "127.0.0.1", ["*"]).allows(ATTACKER_HOST)
    lan = HostGuard(None, "192.168.1.5")  # one address: that one, not every address literal
    assert lan.allows("192.168.1.5:8080") and not lan.allows("192.168.1.6") and not lan.allows(ATTACKER_HOST)
    assert HostGuard(None, "::").allows("[2001:db8::1]:8080")


def test_router_refuses_a_foreign_host(router):
    r = router.http.get("/models", headers={"Host": ATTACKER_HOST})
    _refused(r, 403, "host_not_allowed", ATTACKER_HOST)
    r = router.http.post("/models/load", json={"model": "alpha"}, headers={"Host": ATTACKER_HOST})
    _refused(r, 403, "host_not_allowed", ATTACKER_HOST)
    assert router.states()["alpha"] == "unloaded"


# ------------------------------------------------------------------ 14: Origin (cross-site requests)
def test_cross_origin_requests_are_refused(server):
    text_plain = {"Origin": EVIL, "Content-Type": "text/plain"}  # a "simple" request: no preflight
    body = json.dumps({"prompt": "a", "max_tokens": 1})
    for method, path, content in (("POST", "/v1/completions", body), ("POST", "/tokenize", '{"content": "a"}'),
                                  ("GET", "/v1/models", None)):
        r = httpx.request(method, server.url + path, content=content, headers=text_plain)
        _refused(r, 403, "origin_not_allowed", EVIL)
        assert "access-control-allow-origin" not in r.headers
    # An allowed origin (the default CORS list) and no Origin at all (curl, SDKs) pass.
    ok = {"Content-Type": "application/json"}
    r = httpx.post(server.url + "/v1/completions", content=body, headers={"Origin": "http://localhost:3000", **ok})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert httpx.post(server.url + "/v1/completions", content=body, headers=ok).status_code == 200


def test_cors_origins_setting_is_the_one_list(tiny_path):
    s = LiveServer(["-m", tiny_path, "-c", "64", "-t", "1", "--cors-origins", "https://app.example"]).start()
    try:
        r = httpx.get(s.url + "/v1/models", headers={"Origin": "https://app.example"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
        # Not on the list now: refused, though the default list has it.
        _refused(httpx.get(s.url + "/v1/models", headers={"Origin": "http://localhost:3000"}), 403,
                 "origin_not_allowed", "http://localhost:3000")
    finally:
        s.stop()


def test_router_state_cannot_be_changed_cross_site(router):
    assert router.http.post("/models/load", json={"model": "alpha"}).status_code == 200
    evil = {"Origin": EVIL, "Content-Type": "text/plain"}
    for path, body in (("/models/unload", {"model": "alpha"}),
                       ("/api/generate", {"model": "alpha", "keep_alive": 0})):
        _refused(router.http.post(path, content=json.dumps(body), headers=evil), 403, "origin_not_allowed", EVIL)
        assert router.states()["alpha"] == "loaded", path
    # The same text/plain request from an allowed origin goes through; a cross-site load does not.
    r = router.http.post("/models/unload", content=json.dumps({"model": "alpha"}),
                         headers={"Origin": "http://127.0.0.1:5173", "Content-Type": "text/plain"})
    assert r.status_code == 200 and router.states()["alpha"] == "unloaded"
    r = router.http.post("/models/load", content=json.dumps({"model": "alpha"}), headers=evil)
    _refused(r, 403, "origin_not_allowed", EVIL)
    assert router.states()["alpha"] == "unloaded"


# ------------------------------------------------------------------ 18: a chunked body over the limit
def test_chunked_body_over_the_limit_is_413(server, router):
    def twenty_mb():  # a generator: httpx sends it chunked, without Content-Length
        for _ in range(320):
            yield b"x" * 65536

    for url in (server.url, router.url):
        r = httpx.post(url + "/v1/completions", content=twenty_mb(), headers={"Content-Type": "application/json"},
                       timeout=60)
        assert r.request.headers.get("transfer-encoding") == "chunked" and "content-length" not in r.request.headers
        _refused(r, 413, "request_too_large", "--max-body")
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "a", "max_tokens": 1})
    assert r.status_code == 200  # the server is fine afterwards


# ------------------------------------------------------------------ 15: a router child dying mid-stream
def _kill_child(router, name):
    pid = router.card(name)["pid"]
    os.kill(pid, signal.SIGKILL)


def test_child_killed_mid_sse_stream_ends_with_an_error_event(router):
    body = {"model": "g1", "prompt": "a", "max_tokens": 30000, "temperature": 0, "stream": True}
    with router.http.stream("POST", "/v1/completions", json=body) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()
        first = next(ln for ln in lines if ln.startswith("data: "))
        assert json.loads(first[6:])["choices"]
        _kill_child(router, "g1")
        rest = [ln for ln in lines if ln.startswith("data: ")]
    # As the single-model server ends a stream that fails midway: an error event, then [DONE].
    assert rest[-1] == "data: [DONE]", rest[-3:]
    err = json.loads(rest[-2][6:])["error"]
    assert err["code"] == "model_unavailable" and "g1" in err["message"] and "SIGKILL" in err["message"], err
    assert all("choices" in json.loads(ln[6:]) for ln in rest[:-2])  # whole events only, none cut in half


def test_child_killed_mid_ndjson_stream_ends_with_an_error_line(router):
    body = {"model": "g2", "prompt": "a", "raw": True, "stream": True,
            "options": {"num_predict": 30000, "temperature": 0}}
    with router.http.stream("POST", "/api/generate", json=body) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()
        assert json.loads(next(lines))["done"] is False
        _kill_child(router, "g2")
        rest = [json.loads(ln) for ln in lines if ln]
    assert "g2" in rest[-1]["error"] and "SIGKILL" in rest[-1]["error"], rest[-1]
    assert all(obj.get("done") is False for obj in rest[:-1])


# ------------------------------------------------------------------ 5: a model that cannot load
def test_serve_fails_before_listening(tmp_path):
    folder = tmp_path / "model.gguf"
    folder.mkdir()
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"GGUF" + b"\0" * 60)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    for path, why in (("/missing.gguf", "No such file"), (str(folder), "is a directory"),
                      (str(corrupt), "failed to load")):
        p = subprocess.run([sys.executable, "-m", "llamapy", "serve", "-m", path, "--port", str(free_port())],
                           capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 1, (path, p.stderr)
        assert path in p.stderr and why in p.stderr, p.stderr
        assert "Uvicorn running" not in p.stdout + p.stderr, p.stderr


# ------------------------------------------------------------------ 12: prompts of megabytes
def _timed_post(url, path, body, out, key):
    t0 = time.monotonic()
    r = httpx.post(url + path, json=body, timeout=300)
    out[key] = (r, time.monotonic() - t0)


def _big_prompts_and_a_short_one(url, big_bodies, short_body):
    """Sends the big requests, then (once they are in) the short one; {key: (response, seconds)}."""
    out = {}
    threads = [threading.Thread(target=_timed_post, args=(url, path, body, out, key))
               for key, (path, body) in big_bodies.items()]
    for t in threads:
        t.start()
    time.sleep(0.5)  # the big bodies are uploaded and parsed: the server works on them
    _timed_post(url, "/v1/completions", short_body, out, "short")
    for t in threads:
        t.join()
    return out


def _tokenize_seconds(path, text):
    from llamapy import Llama

    vocab = Llama(path, vocab_only=True, verbose=False)
    t0 = time.monotonic()
    vocab.tokenize(text.encode("utf-8"))
    return time.monotonic() - t0


@pytest.fixture(scope="module")
def gemma_server(gemma_path):
    s = LiveServer(["-m", gemma_path, "-np", "4", "-c", "512", "-t", "2"]).start()
    yield s
    s.stop()


def test_huge_prompts_are_refused_at_once_and_stall_nothing(gemma_path, gemma_server):
    # One such tokenization, timed here: on this machine, under its present load.
    t_tok = _tokenize_seconds(gemma_path, BIG_PROMPT)
    out = _big_prompts_and_a_short_one(gemma_server.url, {
        "completion": ("/v1/completions", {"prompt": BIG_PROMPT, "max_tokens": 4}),
        "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": BIG_PROMPT}], "max_tokens": 4})},
        {"prompt": "Hi", "max_tokens": 4, "temperature": 0})
    r, seconds = out["short"]
    assert r.status_code == 200, r.text
    # Before: the dispatcher tokenized both big prompts (two of t_tok) before it gave the short one a slot.
    assert seconds < t_tok, (seconds, t_tok)
    for key in ("completion", "chat"):
        r, seconds = out[key]
        _refused(r, 400, "context_length_exceeded", "512 tokens")
        assert "bytes" in r.json()["error"]["message"] and seconds < t_tok, (key, seconds, t_tok)
    assert "the prompt is 7800000 bytes" in out["completion"][0].json()["error"]["message"]


def test_the_size_bound_refuses_only_what_cannot_fit(gemma_path, gemma_server):
    from llamapy import Llama
    from llamapy.server.work import max_token_bytes

    piece = "\u2014" * 16  # 16 em dashes: one token of Gemma's, 48 bytes, its longest
    vocab = Llama(gemma_path, vocab_only=True, verbose=False)
    assert len(vocab.tokenize((piece * 3).encode(), add_bos=False)) == 3
    assert max_token_bytes(vocab) == len(piece.encode()) == 48
    url, n_ctx = gemma_server.url + "/v1/completions", 512
    # BOS + 510 pieces = 511 tokens, the most a prompt may have: 24480 bytes pass the bound (511 x 48) and fit.
    r = httpx.post(url, json={"prompt": piece * (n_ctx - 2), "max_tokens": 1}, timeout=300)
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == n_ctx - 1, r.text
    # 511 pieces: exactly the bound in bytes, so tokenized, and refused by its 512 tokens.
    r = httpx.post(url, json={"prompt": piece * (n_ctx - 1), "max_tokens": 1}, timeout=300)
    _refused(r, 400, "context_length_exceeded", f"the prompt has {n_ctx} tokens")
    # 512 pieces: over the bound, refused by its size.
    r = httpx.post(url, json={"prompt": piece * n_ctx, "max_tokens": 1}, timeout=300)
    _refused(r, 400, "context_length_exceeded", f"the prompt is {n_ctx * 48} bytes")


def test_prompts_without_a_size_bound_are_tokenized_off_the_dispatcher(tiny_path, server):
    # The tiny vocabulary has no byte tokens, so no size bound: the prompts are tokenized, then refused.
    big = "t5 t6 t7 " * 866_000
    t_tok = _tokenize_seconds(tiny_path, big)
    out = _big_prompts_and_a_short_one(server.url, {
        "a": ("/v1/completions", {"prompt": big, "max_tokens": 4}),
        "b": ("/v1/completions", {"prompt": big, "max_tokens": 4})},
        {"prompt": "t5", "max_tokens": 4})
    r, seconds = out["short"]
    assert r.status_code == 200 and seconds < t_tok, (r.text, seconds, t_tok)
    for key in ("a", "b"):
        _refused(out[key][0], 400, "context_length_exceeded", "tokens")
