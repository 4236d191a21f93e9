"""Parallel slots (-np N) with continuous batching: concurrency equals requests run
alone (greedy), a long prompt is evaluated in chunks while other streams keep
producing tokens, prefix affinity and cached_tokens, cancellation frees a slot,
context limits (400 before work; finish_reason "length" with a note when a slot's
limit or the shared pool runs out). Tiny seeded models for the mechanics, Gemma 3
270M for the 8-client parity check.

Equality with a request run alone is exact on the explicit attention path: a row's
result does not depend on what else is in the batch. The flash path's result
depends on where a sequence's cells sit in the shared pool (tile rounding, which
Gemma amplifies), so -fa auto resolves to explicit with several slots; the Gemma
parity test runs the defaults to hold that choice.
"""
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


@pytest.fixture(scope="module")
def tiny_path(tiny):
    return str(tiny("llama")[0])


@pytest.fixture(scope="module")
def no_eos(tiny_path):
    from llamapy import Llama

    eos = Llama(tiny_path, vocab_only=True, verbose=False).token_eos()
    return {str(eos): -1e9}


def ids(*parts):
    """A prompt of token ids (the tiny models' vocabulary has no words): BOS, then ids from 5 up."""
    return [1] + [5 + (p % 95) for p in parts]


def sse_data(line):
    if not line.startswith("data: ") or line == "data: [DONE]":
        return None
    return json.loads(line[6:])


def stream_completion(url, body, out, key, started=None):
    """Runs a streamed completion; out[key] = [(t_arrival, chunk), ...]."""
    chunks = []
    out[key] = chunks
    with httpx.Client(base_url=url, timeout=120) as c:
        with c.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
            if started is not None:
                started.set()
            for line in r.iter_lines():
                d = sse_data(line)
                if d is not None:
                    chunks.append((time.monotonic(), d))


def wait_until(pred, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


# ------------------------------------------------------------------ tiny model
def test_props_and_slots_describe_the_limits(tiny_path):
    s = LiveServer(["-m", tiny_path, "-c", "512", "-np", "4", "-t", "1", "--metrics"]).start()
    try:
        props = httpx.get(s.url + "/props").json()
        assert props["total_slots"] == 4 and props["ctx_mode"] == "shared" and props["kv_cells"] == 512
        assert props["max_request_tokens"] == 512 and "share one KV pool of 512" in props["context_note"]
        slots = httpx.get(s.url + "/slots").json()
        assert [x["id"] for x in slots] == [0, 1, 2, 3]
        assert all(x["state"] == "idle" and x["n_ctx"] == 512 and x["n_tokens_cached"] == 0 for x in slots)
        metrics = httpx.get(s.url + "/metrics").text
        assert "llamapy:slots 4.0" in metrics and 'llamapy:slot_tokens_cached{slot="3",state="idle"} 0.0' in metrics
    finally:
        s.stop()
    s = LiveServer(["-m", tiny_path, "-c", "512", "-np", "4", "-t", "1", "--ctx-per-slot"]).start()
    try:
        props = httpx.get(s.url + "/props").json()
        assert props["ctx_mode"] == "per-slot" and props["max_request_tokens"] == 128 and props["n_ctx"] == 128
        assert all(x["n_ctx"] == 128 for x in httpx.get(s.url + "/slots").json())
    finally:
        s.stop()
    with pytest.raises(RuntimeError, match="does not fit the context of 512"):
        LiveServer(["-m", tiny_path, "-c", "512", "-np", "4", "--ctx-per-slot", "200"]).start()


def test_concurrent_requests_equal_alone_tiny(tiny_path, no_eos):
    from llamapy import Llama

    prompts = [ids(*range(7 * i, 7 * i + 3 + i)) for i in range(8)]
    body = {"max_tokens": 24, "temperature": 0, "logit_bias": no_eos}
    ref = Llama(tiny_path, n_ctx=512, flash_attn=False, verbose=False)
    alone = [ref.create_completion(p, **body)["choices"][0]["text"] for p in prompts]
    s = LiveServer(["-m", tiny_path, "-c", "512", "-np", "4", "-t", "1", "-fa", "off", "--metrics"]).start()
    try:
        out = {}
        threads = [threading.Thread(target=stream_completion, args=(s.url, {**body, "prompt": p}, out, i))
                   for i, p in enumerate(prompts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for i in range(8):
            assert "".join(d["choices"][0]["text"] for _, d in out[i]) == alone[i], i
            assert out[i][-1][1]["choices"][0]["finish_reason"] == "length"
        stats = s.app.state.server.runner.stats()
        assert stats["requests_total"] == 8 and stats["requests_failed"] == 0
        # Batched: fewer decode steps than rows (8 x (prompt + 23 tokens) rows).
        assert stats["batch_steps"] < stats["batch_rows"] / 2
    finally:
        s.stop()


def test_long_prompt_is_interleaved_with_generation(tiny_path, no_eos):
    s = LiveServer(["-m", tiny_path, "-c", "4096", "-np", "2", "-b", "32", "-ub", "32", "-t", "1"]).start()
    try:
        out = {}
        gen = threading.Thread(target=stream_completion, args=(
            s.url, {"prompt": "a", "max_tokens": 400, "temperature": 0, "logit_bias": no_eos}, out, "gen"))
        gen.start()
        wait_until(lambda: len(out.get("gen", [])) >= 3)
        long_prompt = ids(*range(600))
        t_sent = time.monotonic()
        stream_completion(s.url, {"prompt": long_prompt, "max_tokens": 2, "temperature": 0}, out, "long")
        gen.join(120)
        t_first_long = out["long"][0][0]
        during = [t for t, _ in out["gen"] if t_sent < t < t_first_long]
        steps_of_prompt = 600 // 32  # the long prompt takes at least this many steps of n_batch 32
        # The other stream kept producing tokens while the long prompt was evaluated in chunks.
        assert len(during) >= steps_of_prompt // 2, (len(during), steps_of_prompt)
        assert out["gen"][-1][1]["choices"][0]["finish_reason"] == "length"
    finally:
        s.stop()


def test_prefix_affinity_and_cached_tokens(tiny_path):
    s = LiveServer(["-m", tiny_path, "-c", "2048", "-np", "2", "-t", "1"]).start()
    try:
        base = ids(*range(0, 360, 3))
        with httpx.Client(base_url=s.url, timeout=60) as c:
            first = c.post("/v1/completions", json={"prompt": base, "max_tokens": 2, "temperature": 0}).json()
            n_base = first["usage"]["prompt_tokens"]
            assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
            # An unrelated request goes to the other (empty) slot: the first slot keeps its prefix.
            other = c.post("/v1/completions", json={"prompt": ids(50, 51, 52), "max_tokens": 2, "temperature": 0}).json()
            assert other["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
            cached = sorted(x["n_tokens_cached"] for x in c.get("/slots").json())
            assert cached[1] >= n_base
            again = c.post("/v1/completions", json={"prompt": base + [7, 8], "max_tokens": 2,
                                                     "temperature": 0}).json()
            assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= n_base - 1
    finally:
        s.stop()


def test_cancel_frees_the_slot(tiny_path, no_eos):
    s = LiveServer(["-m", tiny_path, "-c", "8192", "-np", "2", "-t", "1", "--queue-max", "0"]).start()
    long_body = {"prompt": "a", "max_tokens": 4000, "temperature": 0, "logit_bias": no_eos}
    try:
        runner = s.app.state.server.runner
        with httpx.Client(base_url=s.url, timeout=60) as a, httpx.Client(base_url=s.url, timeout=60) as b:
            with a.stream("POST", "/v1/completions", json={**long_body, "stream": True}) as s1:
                l1 = s1.iter_lines()
                next(l1)
                with b.stream("POST", "/v1/completions", json={**long_body, "stream": True}) as s2:
                    l2 = s2.iter_lines()
                    next(l2)
                    assert runner.stats()["busy"] == 2
                    r = httpx.post(s.url + "/v1/completions", json={"prompt": "c", "max_tokens": 2})
                    assert r.status_code == 503 and r.headers["retry-after"]
                # The second stream is gone: its slot is free for the next request while the first still runs.
                wait_until(lambda: runner.stats()["busy"] == 1)
                r = httpx.post(s.url + "/v1/completions", json={"prompt": "c", "max_tokens": 2}, timeout=30)
                assert r.status_code == 200
                states = [x["state"] for x in httpx.get(s.url + "/slots").json()]
                assert "processing" in states
        wait_until(lambda: runner.stats()["busy"] == 0)
        assert runner.stats()["requests_cancelled"] == 2
    finally:
        s.stop()


def test_per_slot_limit_ends_with_length_and_a_note(tiny_path, no_eos):
    s = LiveServer(["-m", tiny_path, "-c", "256", "-np", "2", "-t", "1", "--ctx-per-slot"]).start()
    try:
        r = httpx.post(s.url + "/v1/completions", json={"prompt": ids(3, 4), "temperature": 0, "logit_bias": no_eos,
                                                         "max_tokens": 0}, timeout=60).json()
        choice = r["choices"][0]
        assert choice["finish_reason"] == "length" and r["usage"]["total_tokens"] == 128
        assert "context limit of 128" in choice["finish_details"]["message"]
        # Over-long: 400 naming the count and the limit, before any decode.
        before = s.app.state.server.runner.stats()["batch_rows"]
        r = httpx.post(s.url + "/v1/completions", json={"prompt": ids(*range(300)), "max_tokens": 4})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        assert "128" in r.json()["error"]["message"]
        r = httpx.post(s.url + "/v1/completions", json={"prompt": ids(3, 4), "max_tokens": 200})
        assert r.status_code == 400 and "200" in r.json()["error"]["message"]
        assert s.app.state.server.runner.stats()["batch_rows"] == before
    finally:
        s.stop()


def test_shared_pool_exhaustion_ends_with_length(tiny_path, no_eos):
    s = LiveServer(["-m", tiny_path, "-c", "128", "-np", "2", "-t", "1", "--metrics"]).start()
    body = {"prompt": ids(3, 4, 5), "temperature": 0, "logit_bias": no_eos, "max_tokens": 0}
    try:
        # The case below needs both requests growing at once. On a busy machine the second
        # can arrive after the first has finished (no overlap, both reach 128), so each
        # attempt sends them from warm connections released together, and tries again.
        clients = [httpx.Client(base_url=s.url, timeout=120) for _ in range(2)]
        for c in clients:
            assert c.get("/health").status_code == 200  # the connection is open before the clock
        for _attempt in range(20):
            finals = [None, None]
            gate = threading.Barrier(2)

            def post(i):
                gate.wait(30)
                finals[i] = clients[i].post("/v1/completions", json=body).json()

            threads = [threading.Thread(target=post, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            assert all(f["choices"][0]["finish_reason"] == "length" for f in finals)
            if min(f["usage"]["total_tokens"] for f in finals) < 128:
                break
        for c in clients:
            c.close()
        # One ran out of cells while both grew; once it ended, its cells gave way and the other
        # went on to the whole pool.
        cut, full = sorted(finals, key=lambda f: f["usage"]["total_tokens"])
        assert cut["usage"]["total_tokens"] < 128 and full["usage"]["total_tokens"] == 128
        assert "shared KV pool of 128 tokens is full" in cut["choices"][0]["finish_details"]["message"]
        assert "context limit of 128" in full["choices"][0]["finish_details"]["message"]
        assert s.app.state.server.runner.stats()["requests_context_full"] >= 1
        # The pool is free again: a new request runs (idle slots' caches give way).
        r = httpx.post(s.url + "/v1/completions", json={**body, "max_tokens": 100}, timeout=60).json()
        assert r["usage"]["completion_tokens"] == 100
    finally:
        s.stop()


# ------------------------------------------------------------------ Gemma 3 270M
@pytest.mark.model
def test_eight_clients_on_four_slots_equal_alone(gemma_path):
    openai = pytest.importorskip("openai")
    from llamapy import Llama

    questions = ["Name the largest planet.", "What is 2 + 2?", "Say hello in French.", "Name a primary colour.",
                 "What is the capital of Italy?", "Name a fruit.", "What colour is the sky?", "Count to three."]
    msgs = [[{"role": "user", "content": q}] for q in questions]
    ref = Llama(gemma_path, n_ctx=1024, n_threads=2, flash_attn=False, verbose=False)
    alone = [ref.create_chat_completion(m, max_tokens=20, temperature=0)["choices"][0]["message"]["content"]
             for m in msgs]
    ref.close()
    s = LiveServer(["-m", gemma_path, "-c", "1024", "-np", "4", "-t", "2", "--alias", "gemma"]).start()
    try:
        runner = s.app.state.server.runner
        peak = {"busy": 0, "used": 0, "waiting": 0}
        done = threading.Event()

        def watch():
            while not done.is_set():
                st = runner.stats()
                for k, key in (("busy", "busy"), ("used", "kv_cells_used"), ("waiting", "waiting")):
                    peak[k] = max(peak[k], st[key])
                time.sleep(0.002)

        watcher = threading.Thread(target=watch)
        watcher.start()
        oai = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        replies = [None] * 8

        def ask(i):
            r = oai.chat.completions.create(model="gemma", messages=msgs[i], max_tokens=20, temperature=0)
            replies[i] = r.choices[0].message.content

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        done.set()
        watcher.join()
        assert replies == alone
        assert peak["busy"] == 4 and peak["waiting"] >= 1 and peak["used"] > 0
        # Then empty again: no slot runs, nothing waits, and the pool holds only the slots' cached prefixes.
        st = runner.stats()
        assert st["busy"] == 0 and st["waiting"] == 0 and st["requests_total"] == 8
        assert st["kv_cells_used"] == sum(x["n_tokens_cached"] for x in runner.slot_info())
    finally:
        s.stop()


# ------------------------------------------------- the stepper's logits views
def test_logits_views_survive_later_steps(tiny_path):
    """Slots read their logits as views of the context's output (no copy per step); a
    decode never writes under a live view, so a slot still sampling from its rows (a slow
    grammar, while the step thread runs the next step) reads what its step computed."""
    import numpy as np

    from llamapy import Llama
    from llamapy._sequence import Sequence
    from llamapy.server.batch import BatchDecoder, Stepper

    llm = Llama(tiny_path, n_ctx=256, n_seq_max=2, verbose=False)
    ctx = llm.ctx
    stepper = Stepper(ctx, 64, busy=lambda: [], check=lambda i: None, make_room=lambda n, free: None,
                      on_full=lambda i, m: None)
    stepper.start()
    try:
        dec = BatchDecoder(stepper)
        seqs = [Sequence(ctx, i, 128, 64, llm.n_vocab(), 0, decoder=dec) for i in range(2)]
        seqs[0].eval(ids(1, 2, 3, 4))
        held = seqs[0].last_logits()
        assert held.base is not None, "the stepper hands out views, not copies"
        kept = np.array(held)
        for step in range(3):  # later steps of the other sequence, then of this one
            seqs[1].eval(ids(9, 8, 7, 6, 5 + step))
            np.testing.assert_array_equal(held, kept)
            assert not np.array_equal(seqs[1].last_logits(), kept)
        seqs[0].eval(ids(11))
        np.testing.assert_array_equal(held, kept)
        np.testing.assert_array_equal(seqs[0]._out.get_logits(-1), np.array(seqs[0].last_logits()))
    finally:
        stepper.stop(RuntimeError("test over"))

    # the same guarantee in process: a view from get_logits keeps its values
    llm2 = Llama(tiny_path, n_ctx=256, verbose=False)
    llm2.eval(ids(1, 2, 3))
    view = llm2.ctx.get_logits(-1)
    before = np.array(view)
    llm2.eval(ids(4, 5))
    np.testing.assert_array_equal(view, before)
    assert not np.array_equal(np.array(llm2.ctx.get_logits(-1)), before)


def test_a_request_failing_in_the_dispatcher_fails_alone(tiny_path, no_eos, monkeypatch):
    """An exception while the dispatcher places a request is that request's error (500);
    the dispatcher thread lives on and serves the next one (before, it died and every
    later request waited forever)."""
    from llamapy.server import slots

    real = slots.SlotScheduler._assign
    failures = []

    def assign_once_failing(self, job):
        if not failures:
            failures.append(job)
            raise RuntimeError("placement failed")
        return real(self, job)

    monkeypatch.setattr(slots.SlotScheduler, "_assign", assign_once_failing)
    srv = LiveServer(["-m", tiny_path, "-c", "128", "-np", "2"]).start()
    try:
        body = {"prompt": ids(1, 2, 3), "max_tokens": 3, "temperature": 0, "logit_bias": no_eos}
        r = httpx.post(srv.url + "/v1/completions", json=body, timeout=60)
        assert r.status_code == 500 and failures
        r = httpx.post(srv.url + "/v1/completions", json=body, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    finally:
        srv.stop()
