"""llamapy.ray.serve_app: the server's own FastAPI app as 2 Ray Serve replicas of Gemma 3 270M on a
local Ray instance (``ray.init(num_cpus=2)``, once for the module). The ``openai`` and ``ollama``
clients get the greedy answers the library gives in-process, streamed or not; a bad API key is
refused as by the plain server; both replicas answer; killing one replica's process mid-stream
fails at most the streams it was serving, the others finish, the next requests succeed and
Serve brings the replica back. Router presets (a models dir) share one replica through Serve's
model multiplexing, least recently used model out."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from conftest import needs

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-ray"
MSGS = [{"role": "user", "content": "Name the largest planet."}]
APP = "llamapy-test"


@pytest.fixture(scope="module")
def served(gemma_path):
    ray = needs("ray")
    serve = needs("ray.serve")
    needs("fastapi")
    needs("sse_starlette")
    env = {"PYTHONPATH": os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
    needs("httpx")
    from server_helpers import free_port

    import llamapy.ray as lr
    from llamapy.server.config import parse_settings

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    settings = parse_settings(server_flags(gemma_path) + ["--port", str(port)], environ={})
    serve.run(lr.serve_app(settings=settings, num_replicas=2, name="gemma"), name=APP, route_prefix="/")
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()
    ray.shutdown()


def server_flags(gemma_path):
    # 4 slots per replica: the streams of the kill test all run at once, whatever the routing.
    return ["-m", gemma_path, "-c", "2048", "-np", "4", "-t", "1", "--api-key", KEY, "--alias", "gemma"]


@pytest.fixture(scope="module")
def plain(gemma_path):
    """The plain server (uvicorn, this process) with the same flags: the reference."""
    from server_helpers import LiveServer

    s = LiveServer(server_flags(gemma_path)).start()
    yield s.url
    s.stop()


def clients(url):
    openai = needs("openai")
    ollama = needs("ollama")
    return (openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0),
            ollama.Client(host=url, headers={"Authorization": f"Bearer {KEY}"}))


def test_openai_chat_and_stream_equal_the_plain_server(served, plain):
    (oai, _), (ref_oai, _) = clients(served), clients(plain)
    ref = ref_oai.chat.completions.create(model="gemma", messages=MSGS, max_tokens=12, temperature=0)
    r = oai.chat.completions.create(model="gemma", messages=MSGS, max_tokens=12, temperature=0)
    assert r.choices[0].message.content == ref.choices[0].message.content
    assert r.usage.completion_tokens == ref.usage.completion_tokens
    chunks = list(oai.chat.completions.create(model="gemma", messages=MSGS, max_tokens=12, temperature=0, stream=True))
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1  # streamed, not one piece
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ref.choices[0].message.content
    assert oai.models.list().data[0].id == "gemma"
    done = oai.completions.create(model="gemma", prompt="The capital of France is", max_tokens=8, temperature=0)
    assert done.choices[0].text == ref_oai.completions.create(model="gemma", prompt="The capital of France is",
                                                              max_tokens=8, temperature=0).choices[0].text


def test_ollama_client_equals_the_plain_server(served, plain):
    (_, client), (_, ref_client) = clients(served), clients(plain)
    opts = {"num_predict": 8, "temperature": 0}
    ref = ref_client.chat(model="gemma", messages=MSGS, options=opts).message.content
    assert client.chat(model="gemma", messages=MSGS, options=opts).message.content == ref
    parts = list(client.chat(model="gemma", messages=MSGS, options=opts, stream=True))
    assert len(parts) > 2 and "".join(p.message.content for p in parts) == ref


def test_bad_api_key_is_refused(served):
    openai = needs("openai")
    httpx = needs("httpx")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=served + "/v1", api_key="sk-wrong", max_retries=0).models.list()
    assert httpx.get(served + "/v1/models").status_code == 401
    r = httpx.post(served + "/api/chat", json={"model": "gemma", "messages": MSGS})
    assert r.status_code == 401 and r.headers["x-llamapy-replica"]


def test_both_replicas_answer(served):
    httpx = needs("httpx")
    ids = {httpx.get(served + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}).headers["x-llamapy-replica"]
           for _ in range(24)}
    assert len(ids) == 2


def replica_pids():
    """Serve replica id -> the pid of its actor process (asked of the actor itself: the
    state API needs Ray's dashboard, which the tests do not start)."""
    import ray

    out = {}
    for a in ray.util.list_named_actors(all_namespaces=True):
        if a["name"].startswith("SERVE_REPLICA::") and "#gemma#" in a["name"]:
            try:
                actor = ray.get_actor(a["name"], namespace=a["namespace"])
                out[a["name"].rsplit("#", 1)[1]] = ray.get(actor.__ray_call__.remote(lambda self: os.getpid()),
                                                           timeout=30)
            except (ray.exceptions.RayError, ValueError):
                pass  # gone meanwhile: not a live replica
    return out


def test_killing_a_replica_mid_stream(served):
    httpx = needs("httpx")
    from ray import serve

    n = 4
    started = threading.Barrier(n + 1, timeout=120)
    results = [None] * n  # (replica id, finished normally)
    replicas = [None] * n  # which replica serves each stream, known from its headers

    def stream(i):
        # Greedy, these prompts run the whole 300 tokens (no end of text): long enough to be cut.
        body = {"model": "gemma", "prompt": f"Count from {i}:", "max_tokens": 300, "temperature": 0, "stream": True}
        replica, finished = None, False
        try:
            with httpx.stream("POST", served + "/v1/completions", json=body, timeout=120,
                              headers={"Authorization": f"Bearer {KEY}"}) as r:
                replica = replicas[i] = r.headers["x-llamapy-replica"]
                lines = r.iter_lines()
                for line in lines:
                    if line.startswith("data: {"):
                        break
                started.wait()
                for line in lines:
                    if line.startswith("data: {") and json.loads(line[6:])["choices"][0].get("finish_reason"):
                        finished = True
        except httpx.HTTPError:
            pass  # the stream broke: the killed replica's
        finally:
            if replica is None:
                started.abort()
            results[i] = (replica, finished)

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    started.wait()  # every stream has its first token
    pids = replica_pids()
    victim = replicas[0]
    os.kill(pids[victim], signal.SIGKILL)
    for t in threads:
        t.join(150)
        assert not t.is_alive()
    on_victim = [ok for rid, ok in results if rid == victim]
    others = [ok for rid, ok in results if rid != victim]
    assert all(others), results  # the surviving replica's streams end normally
    assert on_victim and not results[0][1], results  # the killed replica's stream did not
    # The next requests succeed (on the surviving replica while Serve replaces the other) ...
    auth = {"Authorization": f"Bearer {KEY}"}
    body = {"model": "gemma", "messages": MSGS, "max_tokens": 2, "temperature": 0}
    for _ in range(4):
        assert httpx.post(served + "/v1/chat/completions", json=body, headers=auth, timeout=120).status_code == 200
    # ... and Serve brings the killed one back: two replicas answer again.
    t0 = time.monotonic()
    while time.monotonic() - t0 < 180:
        st = serve.status().applications[APP].deployments["gemma"]
        if st.replica_states.get("RUNNING", 0) == 2 and victim not in replica_pids():
            break
        time.sleep(1)
    else:
        pytest.fail(f"Serve did not replace the killed replica: {serve.status().applications[APP]}")
    ids, t0 = set(), time.monotonic()
    while len(ids) < 2 and time.monotonic() - t0 < 60:  # the proxy learns of the new replica
        ids.add(httpx.get(served + "/v1/models", headers=auth).headers["x-llamapy-replica"])
    assert len(ids) == 2 and victim not in ids


def test_unknown_server_option_is_refused():
    needs("ray.serve")
    from llamapy.ray.serve import settings_for

    with pytest.raises(TypeError, match="unknown server option"):
        settings_for("m.gguf", no_such_flag=1)


TINY = ROOT / "tests" / "data" / "vlm" / "gemma3" / "gemma3-text-f16.gguf"


def test_replica_resources_follow_the_memory_plan(gemma_path):
    needs("ray.serve")
    from llamapy import plan_memory
    from llamapy.ray.serve import replica_resources, settings_for

    s = settings_for(gemma_path, ctx_size=1024, parallel=2, threads=3)
    res = replica_resources(s)
    plan = plan_memory(gemma_path, n_ctx=1024, n_parallel=2, n_batch=2048, n_ubatch=512, n_threads=3)
    assert res == {"num_cpus": 3.0, "memory": plan.total_bytes}
    assert replica_resources(settings_for(gemma_path))["num_cpus"] == 1.0  # no --threads: one CPU


def test_serve_ray_flags(capsys):
    from llamapy.server.cli import _ray_options, main

    assert _ray_options(["-m", "x", "--port", "1"]) == (["-m", "x", "--port", "1"], None)
    rest, opts = _ray_options(["--ray", "-m", "x", "--replicas=3", "--ray-address", "auto"])
    assert rest == ["-m", "x"] and opts == {"replicas": 3, "autoscale": None, "address": "auto"}
    assert _ray_options(["--ray", "--autoscale", "1,4", "-m", "x"])[1]["autoscale"] == [1, 4]
    assert main(["--replicas", "2", "-m", "x"]) == 2
    assert "--replicas goes with --ray" in capsys.readouterr().err
    assert main(["--ray", "--autoscale", "4,1", "-m", "x"]) == 2
    assert "--autoscale: bad value" in capsys.readouterr().err


def test_router_presets_share_a_replica_lru(served, gemma_path, tmp_path):
    """Router mode on Serve: a models dir of two models, one replica holding at most one of
    them; each request loads its model there (evicting the other), answers as that model
    does in-process; the key is checked before anything loads. Runs last: it replaces the
    two-replica app (the 2 CPUs are theirs)."""
    from ray import serve

    import llamapy.ray as lr
    from llamapy import Llama

    httpx = needs("httpx")
    serve.delete(APP)
    models = tmp_path / "models"
    models.mkdir()
    (models / "gemma.gguf").symlink_to(gemma_path)
    (models / "tiny.gguf").symlink_to(TINY)
    serve.run(lr.serve_app(models_dir=str(models), models_max=1, ctx_size=512, threads=1, api_key=[KEY],
                           name="models"), name="llamapy-models", route_prefix="/")
    auth = {"Authorization": f"Bearer {KEY}"}

    def status():
        return {m["id"]: m["status"]["value"] for m in httpx.get(served + "/v1/models", headers=auth).json()["data"]}

    assert status() == {"gemma": "unloaded", "tiny": "unloaded"}
    chat = {"messages": MSGS, "max_tokens": 6, "temperature": 0}
    assert httpx.post(served + "/v1/chat/completions", json={"model": "gemma", **chat}).status_code == 401
    assert status() == {"gemma": "unloaded", "tiny": "unloaded"}  # a refused request loads nothing
    oai, ollama_client = clients(served)
    want = {}
    for name, path in (("gemma", gemma_path), ("tiny", str(TINY))):
        llm = Llama(path, n_ctx=512, n_threads=1, verbose=False)
        want[name] = llm.create_chat_completion(MSGS, max_tokens=6, temperature=0)["choices"][0]["message"]["content"]
        llm.close()
    r = oai.chat.completions.create(model="gemma", **chat)
    assert r.choices[0].message.content == want["gemma"] and r.model == "gemma"
    assert status() == {"gemma": "loaded", "tiny": "unloaded"}
    opts = {"num_predict": 6, "temperature": 0}
    assert ollama_client.chat(model="tiny", messages=MSGS, options=opts).message.content == want["tiny"]
    assert status() == {"gemma": "unloaded", "tiny": "loaded"}  # the least recently used one went
    # Serve's routing header names the model too; streaming through the model's own app.
    chunks = list(oai.chat.completions.create(model="gemma", stream=True, **chat,
                                              extra_headers={"serve_multiplexed_model_id": "gemma"}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want["gemma"]
    r = httpx.post(served + "/v1/chat/completions", json={"model": "nope", **chat}, headers=auth)
    assert r.status_code == 404 and "no model 'nope'" in r.json()["error"]["message"]
    r = httpx.post(served + "/v1/chat/completions", json=chat, headers=auth)
    assert r.status_code == 400 and r.json()["error"]["code"] == "model_required"
