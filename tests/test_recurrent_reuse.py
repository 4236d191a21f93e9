"""Hybrid models (recurrent state beside the KV cache: Qwen3.5, LFM2, Granite 4.0-H) under the reuse paths that sit above
the engine: Llama's RAM and disk prompt caches (a cached state restored into a context that
meanwhile evaluated something else, or into a new process's context), and the server's parallel
slots (continuous batching of several sequences in one context, each with its own recurrent
state; prefix affinity reusing a slot's state). Each is held against a fresh context evaluating
the same tokens: the same greedy tokens. test_recurrent_state.py covers the engine's own paths
(suffix removal, prefix reuse, save/load, speculative rollback).

Where this build has a Vulkan device (tools/vulkan_check.sh: lavapipe) each runs again with
every layer on the GPU (the states in device memory), the fresh contexts likewise."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
from conftest import needs

from llamapy import Llama, _engine
from llamapy.llama_cache import LlamaDiskCache, LlamaRAMCache

DATA = Path(__file__).parent / "data" / "hybrid"
FILES = [DATA / "qwen35" / "qwen35-q8_0.gguf", DATA / "qwen35moe" / "qwen35moe-q8_0.gguf",
         DATA / "lfm2" / "lfm2-q8_0.gguf", DATA / "lfm2moe" / "lfm2moe-q8_0.gguf",
         DATA / "granitehybrid" / "granitehybrid-q8_0.gguf"]
PROMPTS = [[11, 42, 97, 150, 203, 260, 31, 77, 188, 5, 140, 222, 56, 90, 310, 12],
           [300, 45, 9, 120, 64, 64, 199, 3, 17],
           [11, 42, 97, 150, 203, 260, 31, 77, 2, 2, 8]]  # shares a part of the first, not its end


# n_gpu_layers of each placement under test: the CPU, and every layer on a Vulkan device
NGL = [0] + ([-1] if "vulkan" in _engine.backends() and _engine.gpu_devices() else [])


def llama(path, **kw):
    kw.setdefault("n_ctx", 256)
    return Llama(model_path=str(path), n_batch=64, n_threads=2, verbose=False, **kw)


def complete(llm, prompt, n=8):
    """Greedy text and its token count (EOS barred, so that every answer has n tokens)."""
    out = llm.create_completion(prompt, max_tokens=n, temperature=0.0, logit_bias={llm.token_eos(): -1e9})
    return out["choices"][0]["text"], out["usage"]["completion_tokens"]


# (file, n_gpu_layers): every family in every placement
CASES = [(f, n) for f in FILES for n in NGL]


@pytest.fixture(params=CASES, ids=lambda c: f"{c[0].parent.name}-{'gpu' if c[1] else 'cpu'}")
def case(request):
    return request.param


@pytest.fixture
def path(case):
    return case[0]


@pytest.fixture
def ngl(case):
    return case[1]


@pytest.fixture
def fresh(path, ngl):
    """What a new context gives for each prompt."""
    return {i: complete(llama(path, n_gpu_layers=ngl), p) for i, p in enumerate(PROMPTS)}


@pytest.mark.parametrize("kind", ["ram", "disk"])
def test_prompt_caches_restore_the_recurrent_state(path, fresh, kind, tmp_path, ngl):
    cache = LlamaRAMCache(capacity_bytes=1 << 30) if kind == "ram" else LlamaDiskCache(str(tmp_path / "cache"))
    llm = llama(path, n_gpu_layers=ngl)
    llm.set_cache(cache)
    # Fill the cache with every prompt, then ask again in another order: each answer comes
    # from a state restored out of the cache into a context holding another sequence.
    for i in (0, 1, 2):
        assert complete(llm, PROMPTS[i]) == fresh[i], i
    assert all(PROMPTS[i] in cache for i in (0, 1, 2))
    for i in (2, 0, 1, 0):
        assert complete(llm, PROMPTS[i]) == fresh[i], i
    # A new Llama (as a new process would) reading the same disk cache
    if kind == "disk":
        other = llama(path, n_gpu_layers=ngl)
        other.set_cache(LlamaDiskCache(str(tmp_path / "cache")))
        assert complete(other, PROMPTS[1]) == fresh[1]


httpx = needs("httpx")


def test_server_slots_keep_one_state_per_sequence(path, ngl):
    """Two slots batched together in one context, then prefix affinity: every answer equals a
    fresh context's, and the reuse counts as cached tokens only where a state was there.
    Both sides use the explicit attention path (what -fa auto picks with several slots): the
    tiny random models have near-ties that the two attention paths' rounding can flip."""
    needs("fastapi")
    needs("uvicorn")
    from server_helpers import LiveServer

    eos = llama(path, vocab_only=True).token_eos()
    fresh = {i: complete(llama(path, flash_attn=False, n_gpu_layers=ngl), p) for i, p in enumerate(PROMPTS)}
    s = LiveServer(["-m", str(path), "-c", "512", "-np", "2", "-t", "2", "-b", "64", "-fa", "off",
                    "-ngl", str(ngl)]).start()
    try:
        def ask(prompt, out=None, key=None):
            with httpx.Client(base_url=s.url, timeout=120) as c:
                r = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 8, "temperature": 0,
                                                    "logit_bias": {str(eos): -1e9}})
            assert r.status_code == 200, r.text
            body = r.json()
            got = (body["choices"][0]["text"], body["usage"]["completion_tokens"])
            if out is not None:
                out[key] = (got, body["usage"])
            return got, body["usage"]

        # concurrent: two sequences in one batch, each with its own recurrent state
        for _ in range(2):
            out = {}
            threads = [threading.Thread(target=ask, args=(PROMPTS[i], out, i)) for i in (0, 1)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            assert out[0][0] == fresh[0] and out[1][0] == fresh[1]
        # a prompt that shares only part of a slot's sequence, with no checkpoint where they
        # part: the state cannot be cut there, so it is evaluated from the start (and says so),
        # never continued from a state that holds the other prompt's rows
        got, usage = ask(PROMPTS[2])
        assert got == fresh[2]
        assert usage["prompt_tokens_details"]["cached_tokens"] == 0
        # the next turn after a slot's prompt resumes from the checkpoint at that prompt's end
        cont = PROMPTS[2] + [7, 8, 9]
        got, usage = ask(cont)
        assert got == complete(llama(path, flash_attn=False, n_gpu_layers=ngl), cont)
        assert usage["prompt_tokens_details"]["cached_tokens"] == len(PROMPTS[2])
    finally:
        s.stop()
