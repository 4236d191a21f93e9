"""Errors a new user meets name the problem (issue 31, items 5 and 6)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from llamapy import Llama
from llamapy.memory_plan import plan_memory
from llamapy.system import memory_available

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def llm(gemma_path):
    m = Llama(model_path=gemma_path, n_ctx=256, n_threads=2, verbose=False)
    yield m
    m.close()


def test_directory_as_model_path(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        Llama(model_path=str(tmp_path), verbose=False)


def test_unknown_chat_format_fails_in_the_constructor(gemma_path):
    with pytest.raises(ValueError, match="unknown chat format 'bogus'"):
        Llama(model_path=gemma_path, chat_format="bogus", verbose=False)


def test_context_too_large_for_memory_names_the_bytes(gemma_path, monkeypatch):
    n_ctx = 1 << 24
    need = plan_memory(gemma_path, n_ctx=n_ctx).kv_bytes
    with open("/proc/meminfo") as f:
        total = int(next(line for line in f if line.startswith("MemTotal:")).split()[1]) * 1024
    if need < 2 * total:
        # A machine that might hold it: the engine's allocation failure, as a smaller one raises it.
        from llamapy import _engine

        def no_memory(*args, **kwargs):
            raise MemoryError("std::bad_alloc")

        monkeypatch.setattr(_engine, "Context", no_memory)
    with pytest.raises(MemoryError) as e:
        Llama(model_path=gemma_path, n_ctx=n_ctx, verbose=False)
    msg = str(e.value)
    assert f"n_ctx={n_ctx}" in msg and "GiB of KV cache" in msg
    if memory_available() is not None:
        assert "available" in msg
    assert "bad_alloc" not in msg


@pytest.mark.parametrize("kw, name", [({"seed": "x"}, "seed"), ({"max_tokens": "x"}, "max_tokens"),
                                      ({"stop": 5}, "stop")])
def test_bad_completion_arguments_are_named(llm, kw, name):
    with pytest.raises((TypeError, ValueError), match=name):
        llm.create_completion("Hi", **kw)


def test_set_seed_names_seed(llm):
    with pytest.raises(TypeError, match="seed must be an int"):
        llm.set_seed("x")


def test_verbose_says_which_chat_format_was_guessed(gemma_path, capfd):
    m = Llama(model_path=gemma_path, n_ctx=256, n_threads=2, verbose=True)
    try:
        capfd.readouterr()
        m.create_chat_completion(messages=[{"role": "user", "content": "Hi"}], max_tokens=1)
        err = capfd.readouterr().err
        assert "using chat format 'gemma'" in err
    finally:
        m.close()


def _cli(*args, stdin=""):
    return subprocess.run([sys.executable, "-m", "llamapy", *args], input=stdin, capture_output=True, text=True,
                          timeout=300)


def test_run_help_shows_the_defaults():
    out = _cli("run", "--help").stdout
    flat = " ".join(out.split())
    assert "(default: 2048)" in flat and "0: the model's trained length" in flat
    assert "(default: 128)" in flat and "(default: 0.8)" in flat and "(default: 40)" in flat


def test_chat_with_an_unknown_format_fails_at_start(gemma_path):
    r = _cli("chat", "-m", gemma_path, "--chat-format", "nosuch", stdin="hello\n")
    assert r.returncode == 1
    assert "unknown chat format 'nosuch'" in r.stderr
    assert r.stdout == ""


def test_an_encoder_with_embedding_true_refuses_to_generate(tmp_path):
    # Loaded for embeddings, an encoder still has no output head: a completion is a clear
    # error, not text from the wrong tensors (issue 31 item 2, the library side).
    import encoder_ref as ER

    path, _, _ = ER.make_model(tmp_path, "bert", "F32", 1)
    with Llama(model_path=str(path), embedding=True, verbose=False) as m:
        assert len(m.embed("hello")) == m.n_embd()
        with pytest.raises(ValueError, match="is an encoder"):
            m.create_completion("hello", max_tokens=1)
        with pytest.raises(ValueError, match="cannot generate"):
            list(m.create_completion("hello", max_tokens=1, stream=True))
