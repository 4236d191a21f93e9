"""Router mode (no -m) on three tiny seeded GGUFs and a preset: the model
list and preset precedence, lazy loading, LRU eviction at --models-max 2,
the memory check with a fake small machine (eviction, then 507), 404
model_not_found, load/unload (the child and its memory gone), crash
isolation (a child killed with SIGKILL), --no-models-autoload and
?autoload=. Every model runs in a real child server process."""
from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time

import pytest
from conftest import needs

httpx = needs("httpx")
needs("fastapi")
needs("uvicorn")
needs("sse_starlette")

from server_helpers import free_port  # noqa: E402

from llamapy.server.config import ConfigError, parse_settings  # noqa: E402
from llamapy.server.presets import model_entries  # noqa: E402

PRESET = """\
[*]
ctx-size = 128
threads = 1

[beta]
alias = b
c = 200
load-on-startup = false

[huge]
model = gamma.gguf
ctx-size = 4000000
"""


@pytest.fixture(scope="module")
def models(tiny, tmp_path_factory):
    """alpha.gguf (llama), beta/ (qwen2, a folder), gamma.gguf (gemma3), and a
    preset naming beta's alias and a 'huge' model (gamma at 4M context)."""
    root = tmp_path_factory.mktemp("router-models")
    shutil.copy(tiny("llama")[0], root / "alpha.gguf")
    (root / "beta").mkdir()
    shutil.copy(tiny("qwen2")[0], root / "beta" / "model.gguf")
    shutil.copy(tiny("gemma3")[0], root / "gamma.gguf")
    (root / "notes.txt").write_text("not a model")
    preset = root / "preset.ini"
    preset.write_text(PRESET)
    (root / "startup.ini").write_text("[*]\nctx-size = 128\nthreads = 1\n\n[alpha]\nload-on-startup = true\n")
    return root


class RouterServer:
    def __init__(self, argv, environ=None) -> None:
        import uvicorn

        from llamapy.server.router_routes import create_router_app

        self.port = free_port()
        self.settings = parse_settings(list(argv) + ["--port", str(self.port)], environ={})
        env = dict(os.environ)
        env.update(environ or {})
        self.app = create_router_app(self.settings, env)
        self.router = self.app.state.router
        cfg = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = httpx.Client(base_url=self.url, timeout=60)

    def __enter__(self) -> "RouterServer":
        self.thread.start()
        t0 = time.monotonic()
        while not self.server.started:
            assert time.monotonic() - t0 < 30, "router did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.http.close()
        from sse_starlette.sse import AppStatus

        AppStatus.should_exit = False

    def states(self):
        return {m["id"]: m["status"]["value"] for m in self.http.get("/models").json()["data"]}

    def card(self, name):
        return next(m for m in self.http.get("/models").json()["data"] if m["id"] == name)

    def complete(self, model, **kw):
        return self.http.post("/v1/completions", json={"model": model, "prompt": "a", "max_tokens": 3,
                                                        "temperature": 0}, params=kw)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/status") as f:  # a zombie is gone too
        return "State:\tZ" not in f.read()


# ------------------------------------------------------------------ model list and preset
def test_models_dir_and_preset_precedence(models):
    argv = ["--models-dir", str(models), "--models-preset", str(models / "preset.ini")]
    entries = model_entries(parse_settings(argv, environ={}))
    assert sorted(entries) == ["alpha", "beta", "gamma", "huge"]
    assert entries["beta"].path == str(models / "beta" / "model.gguf") and entries["beta"].aliases == ["b"]
    assert entries["huge"].path == str(models / "gamma.gguf")
    ctx = {n: e.settings["ctx_size"] for n, e in entries.items()}
    assert ctx == {"alpha": 128, "beta": 200, "gamma": 128, "huge": 4000000}  # section > [*] > default (4096)
    assert all(e.settings["threads"] == 1 for e in entries.values())
    # The command line wins over both.
    entries = model_entries(parse_settings(argv + ["-c", "80"], environ={}))
    assert {e.settings["ctx_size"] for e in entries.values()} == {80}
    # So does the environment (it is the router's own setting too).
    entries = model_entries(parse_settings(argv, environ={"LLAMA_ARG_CTX_SIZE": "96"}))
    assert {e.settings["ctx_size"] for e in entries.values()} == {96}


def test_preset_errors_name_the_problem(models, tmp_path):
    bad = tmp_path / "bad.ini"
    bad.write_text("[alpha]\nctx-sise = 5\n")
    with pytest.raises(ConfigError, match="unknown key 'ctx-sise'"):
        model_entries(parse_settings(["--models-dir", str(models), "--models-preset", str(bad)], environ={}))
    bad.write_text("[alpha]\nctx-size = lots\n")
    with pytest.raises(ConfigError, match=r"\[alpha\].*ctx-size needs a int"):
        model_entries(parse_settings(["--models-dir", str(models), "--models-preset", str(bad)], environ={}))
    bad.write_text("[ghost]\nctx-size = 5\n")
    with pytest.raises(ConfigError, match=r"\[ghost\]: no 'model =' path"):
        model_entries(parse_settings(["--models-preset", str(bad)], environ={}))
    with pytest.raises(ConfigError, match="--models-dir: router mode only"):
        parse_settings(["-m", "x.gguf", "--models-dir", str(models)], environ={})
    with pytest.raises(ConfigError, match="--models-max: router mode only"):
        parse_settings(["-m", "x.gguf", "--models-max", "2"], environ={})


# ------------------------------------------------------------------ serving
def test_lazy_load_lru_404_unload_and_crash(models):
    argv = ["--models-dir", str(models), "--models-preset", str(models / "preset.ini"), "--models-max", "2"]
    with RouterServer(argv) as rs:
        assert rs.states() == {"alpha": "unloaded", "beta": "unloaded", "gamma": "unloaded", "huge": "unloaded"}
        # Every model is listed, loaded or not, in the OpenAI and Ollama lists.
        assert [m["id"] for m in rs.http.get("/v1/models").json()["data"]] == ["alpha", "beta", "gamma", "huge"]
        assert [m["name"] for m in rs.http.get("/api/tags").json()["models"]] == ["alpha", "beta", "gamma", "huge"]

        r = rs.complete("alpha")  # lazy: the first request loads it
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "alpha" and r.json()["choices"][0]["finish_reason"] == "length"
        assert rs.states()["alpha"] == "loaded"

        # By alias, through the Ollama API, streamed (NDJSON passed through line by line).
        r = rs.http.post("/api/generate", json={"model": "b", "prompt": "hi", "options": {"num_predict": 3}})
        assert r.status_code == 200, r.text
        lines = [json.loads(x) for x in r.text.splitlines() if x.strip()]
        assert lines[-1]["done"] and len(lines) >= 2
        assert rs.states() == {"alpha": "loaded", "beta": "loaded", "gamma": "unloaded", "huge": "unloaded"}

        # A third model: the least recently used idle one (alpha) goes.
        with rs.http.stream("POST", "/v1/chat/completions", json={
                "model": "gamma", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                "stream": True}) as resp:
            assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
            events = [ln for ln in resp.iter_lines() if ln.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and len(events) >= 3
        assert rs.states() == {"alpha": "unloaded", "beta": "loaded", "gamma": "loaded", "huge": "unloaded"}
        assert "room for gamma" in rs.card("alpha")["status"]["reason"]

        # Unknown model: 404 model_not_found, OpenAI-shaped, on every route.
        for path, body in (("/v1/completions", {"model": "nope", "prompt": "a"}),
                           ("/api/chat", {"model": "nope", "messages": []}),
                           ("/models/load", {"model": "nope"})):
            r = rs.http.post(path, json=body)
            assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found", r.text
            assert "alpha" in r.json()["error"]["message"]
        r = rs.http.post("/v1/completions", json={"prompt": "a"})
        assert r.status_code == 400 and "model" in r.json()["error"]["message"]

        # Unload: the child ends, and its memory with it.
        pid = rs.card("gamma")["pid"]
        with open(f"/proc/{pid}/status") as f:
            rss = int(next(ln for ln in f if ln.startswith("VmRSS:")).split()[1])
        assert rss > 10_000  # KiB: an interpreter with a model
        r = rs.http.post("/models/unload", json={"model": "gamma"})
        assert r.status_code == 200 and r.json()["status"]["value"] == "unloaded"
        assert not _alive(pid)

        # Load explicitly.
        r = rs.http.post("/models/load", json={"model": "alpha"})
        assert r.status_code == 200 and r.json()["status"]["value"] == "loaded"

        # Crash isolation: SIGKILL one child; the router says so and the other model still answers.
        pid = rs.card("beta")["pid"]
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        while rs.states()["beta"] != "failed":
            assert time.monotonic() - t0 < 10
            time.sleep(0.05)
        assert "killed by SIGKILL" in rs.card("beta")["status"]["reason"]
        assert rs.complete("alpha").status_code == 200
        assert rs.http.get("/health").status_code == 200
        # The next request for the crashed model loads it again.
        r = rs.complete("beta")
        assert r.status_code == 200, r.text
        assert rs.states()["beta"] == "loaded" and rs.card("beta")["pid"] != pid
    # The router's shutdown ends its children.
    assert not any(_alive(s.proc.pid) for s in rs.router.slots.values() if s.proc)


def test_memory_margin_evicts_then_507(models):
    # A fake machine: 250 MiB free with no model, 100 MiB per child process: two models fit, not three.
    argv = ["--models-dir", str(models), "--models-preset", str(models / "preset.ini"), "--models-memory-margin", "10"]
    with RouterServer(argv, {"LLAMAPY_ROUTER_FAKE_MEMORY": "1000,250,100"}) as rs:
        assert rs.complete("alpha").status_code == 200
        assert rs.complete("beta").status_code == 200
        assert rs.complete("gamma").status_code == 200  # --models-max is 4: memory made room
        assert rs.states() == {"alpha": "unloaded", "beta": "loaded", "gamma": "loaded", "huge": "unloaded"}
        need = rs.card("gamma")["memory"]
        assert need["process_bytes"] == 100 * 2**20 and need["predicted_bytes"] > need["process_bytes"]
        # 'huge' (4M cells of KV) can never fit: 507 with the numbers; nothing was unloaded for it.
        r = rs.complete("huge")
        assert r.status_code == 507, r.text
        msg = r.json()["error"]["message"]
        assert r.json()["error"]["code"] == "insufficient_memory"
        assert "needs" in msg and "KV cache" in msg and "margin of 10 MiB" in msg and "250 MiB" in msg, msg
        assert rs.states() == {"alpha": "unloaded", "beta": "loaded", "gamma": "loaded", "huge": "unloaded"}


def test_no_models_autoload_and_load_on_startup(models):
    argv = ["--models-dir", str(models), "--models-preset", str(models / "startup.ini"), "--no-models-autoload"]
    with RouterServer(argv) as rs:
        t0 = time.monotonic()
        # load-on-startup, without a request; one read per pass (a second read could already see "loaded")
        while (state := rs.states()["alpha"]) != "loaded":
            assert time.monotonic() - t0 < 60 and state in ("unloaded", "loading"), state
            time.sleep(0.1)
        assert rs.complete("alpha").status_code == 200
        r = rs.complete("gamma")
        assert r.status_code == 503 and r.json()["error"]["code"] == "model_not_loaded"
        assert "/models/load" in r.json()["error"]["message"]
        assert rs.states()["gamma"] == "unloaded"
        assert rs.complete("gamma", autoload="maybe").status_code == 400
        assert rs.complete("gamma", autoload="true").status_code == 200
        assert rs.http.post("/models/load", json={"model": "beta"}).json()["status"]["value"] == "loaded"
        assert rs.complete("beta").status_code == 200

        # Ollama's keep_alive: 0 unloads once the request is done; a load request keeps it that long.
        r = rs.http.post("/api/generate", json={"model": "beta", "prompt": "hi", "keep_alive": 0, "stream": False,
                                                "options": {"num_predict": 2}})
        assert r.status_code == 200 and r.json()["done"], r.text
        _wait_state(rs, "beta", "unloaded")
        r = rs.http.post("/api/chat", json={"model": "gamma", "keep_alive": "1s"})
        assert r.json()["done_reason"] == "load" and rs.states()["gamma"] == "loaded"
        assert [m["name"] for m in rs.http.get("/api/ps").json()["models"]] == ["alpha", "gamma"]
        _wait_state(rs, "gamma", "unloaded")
        r = rs.http.post("/api/generate", json={"model": "alpha", "keep_alive": "2 weeks"})
        assert r.status_code == 400 and "keep_alive" in r.json()["error"]["message"]
        r = rs.http.post("/api/generate", json={"model": "alpha", "keep_alive": 0})
        assert r.json()["done_reason"] == "unload" and rs.states()["alpha"] == "unloaded"


def _wait_state(rs, name, state, limit=15.0):
    t0 = time.monotonic()
    while rs.states()[name] != state:
        assert time.monotonic() - t0 < limit, rs.card(name)
        time.sleep(0.05)


def test_a_model_that_fails_to_load_is_reported(tmp_path, tiny):
    (tmp_path / "broken.gguf").write_bytes(b"GGUF" + b"\0" * 64)
    shutil.copy(tiny("llama")[0], tmp_path / "ok.gguf")
    with RouterServer(["--models-dir", str(tmp_path), "-c", "64", "-t", "1"]) as rs:
        r = rs.complete("broken")
        assert r.status_code == 503 and r.json()["error"]["code"] == "model_load_failed", r.text
        card = rs.card("broken")
        assert card["status"]["value"] == "failed" and card["status"]["reason"]
        assert rs.complete("ok").status_code == 200  # the router and the other model are fine


def test_a_model_in_use_is_never_evicted(models):
    from llamapy import Llama

    eos = Llama(str(models / "alpha.gguf"), vocab_only=True, verbose=False).token_eos()
    argv = ["--models-dir", str(models), "--models-preset", str(models / "preset.ini"), "--models-max", "1",
            "-c", "32768"]
    with RouterServer(argv) as rs:
        body = {"model": "alpha", "prompt": "a", "max_tokens": 30000, "temperature": 0, "stream": True,
                "logit_bias": {str(eos): -1e9}}  # runs for seconds: EOS is banned, the context is large
        with rs.http.stream("POST", "/v1/completions", json=body) as resp:
            assert resp.status_code == 200
            lines = resp.iter_lines()
            assert next(ln for ln in lines if ln.startswith("data: "))
            assert rs.card("alpha")["in_flight"] == 1
            r = rs.complete("gamma")  # alpha is the only one loaded and it is busy
            assert r.status_code == 503 and r.json()["error"]["code"] == "models_busy", r.text
            assert "Retry-After" in r.headers and "--models-max 1" in r.json()["error"]["message"]
            assert rs.states()["alpha"] == "loaded"
        # The client went away mid-stream: the model is idle again, so it can make room.
        t0 = time.monotonic()
        while rs.card("alpha")["in_flight"]:
            assert time.monotonic() - t0 < 10
            time.sleep(0.05)
        assert rs.complete("gamma").status_code == 200
        assert rs.states()["alpha"] == "unloaded"


def test_cli_router_errors_exit_2(models, tmp_path, capsys):
    from llamapy.cli import main

    bad = tmp_path / "bad.ini"
    bad.write_text("[alpha]\nlayers = 3\n")
    assert main(["serve", "--models-dir", str(models), "--models-preset", str(bad)]) == 2
    assert "unknown key 'layers'" in capsys.readouterr().err


def test_real_memory_is_read_from_proc_meminfo(models):
    from llamapy.server.router import Router

    router = Router(parse_settings(["--models-dir", str(models)], environ={}), environ={})
    mem = router.memory()  # no child: available now == available with every model unloaded
    assert 0 < mem["available"] == mem["available_unloaded"] <= mem["total"]
    assert router.process_bytes > 10 * 2**20  # this interpreter, as the cost of one more
    with pytest.raises(ValueError, match="LLAMAPY_ROUTER_FAKE_MEMORY"):
        Router(parse_settings(["--models-dir", str(models)], environ={}),
               environ={"LLAMAPY_ROUTER_FAKE_MEMORY": "lots"})
