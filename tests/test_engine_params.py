"""The model and context options as one struct each across the binding
(_engine.ModelParams, _engine.ContextParams): fields typed and checked as they
are set, keyword arguments named after the fields, defaults that depend on the
model resolved once, by the engine (ContextParams.resolved), and Llama's own
n_ctx / n_batch taken from there."""
import numpy as np
import pytest

from llamapy import _engine as E


def test_defaults_and_keywords():
    p = E.ContextParams()
    assert (p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max) == (512, 512, 512, 1)
    assert (p.type_k, p.type_v, p.flash_attn) == ("f16", "f16", -1)
    q = E.ContextParams(n_ctx=128, type_k="Q8_0", type_v=2, flash_attn=True, embeddings=True)
    assert (q.n_ctx, q.type_k, q.type_v, q.flash_attn, q.embeddings) == (128, "q8_0", "q4_0", 1, True)
    q.flash_attn = "auto"
    assert q.flash_attn == -1
    q.type_k = np.int64(0)  # numpy integers are ggml ids too
    assert q.type_k == "f32"
    assert "n_ctx=128" in repr(q)


@pytest.mark.parametrize("kw,exc,words", [
    ({"n_ctxx": 5}, TypeError, "n_ctxx"),
    ({"resolved": 1}, TypeError, "resolved"),
    ({"type_k": "q9_9"}, ValueError, "q9_9"),
    ({"type_v": 11}, ValueError, "11"),
    ({"type_k": 1.0}, TypeError, "float"),
    ({"flash_attn": "sometimes"}, ValueError, "flash_attn"),
    ({"flash_attn": 2}, ValueError, "flash_attn"),
    ({"n_ctx": "big"}, TypeError, "ContextParams.n_ctx: str"),
])
def test_bad_fields_name_the_problem(kw, exc, words):
    with pytest.raises(exc, match=words):
        E.ContextParams(**kw)


def test_resolved_fills_in_the_model_defaults(tiny):
    path, *_ = tiny("llama")
    m = E.Model(str(path))
    r = E.ContextParams(n_ctx=0, n_batch=4096, n_ubatch=0, n_threads=0).resolved(m)
    assert r.n_ctx == m.n_ctx_train
    assert r.n_batch == min(4096, m.n_ctx_train) and r.n_ubatch == min(512, r.n_batch)
    assert r.n_threads >= 1 and r.flash_attn in (0, 1)
    with pytest.raises(ValueError, match="n_seq_max"):
        E.ContextParams(n_seq_max=0).resolved(m)
    # A vocabulary-only model resolves options but cannot hold a context.
    v = E.Model(str(path), E.ModelParams(vocab_only=True))
    assert E.ContextParams(n_ctx=0).resolved(v).n_ctx == m.n_ctx_train
    with pytest.raises(ValueError, match="vocab_only"):
        E.Context(v, n_ctx=16)


def test_context_from_params_equals_keywords(tiny):
    path, *_ = tiny("gemma3")
    m = E.Model(str(path))
    a = E.Context(m, E.ContextParams(n_ctx=32, n_batch=8, type_k="q8_0", flash_attn=False, n_threads=1))
    b = E.Context(m, n_ctx=32, n_batch=8, type_k="q8_0", flash_attn=False, n_threads=1)
    # keywords on top of a params object override its fields
    c = E.Context(m, E.ContextParams(n_ctx=99, flash_attn=True), n_ctx=32, n_batch=8, type_k="q8_0",
                  flash_attn=False, n_threads=1)
    outs = []
    for ctx in (a, b, c):
        assert (ctx.n_ctx, ctx.n_batch, ctx.params.type_k, ctx.attention_path) == (32, 8, "q8_0", "explicit")
        ctx.decode(tokens=[1, 5, 9], pos=[0, 1, 2], seq_ids=[0, 0, 0])
        outs.append(np.array(ctx.get_logits(0)))
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])
    with pytest.raises(TypeError, match="n_ctxx"):
        E.Context(m, n_ctxx=32)


def test_model_params(tiny):
    path, *_ = tiny("llama")
    p = E.ModelParams(use_mmap=False, kv_overrides={"llama.context_length": 77, "general.name": "x", "a.b": 1.5,
                                                   "c.d": True})
    assert p.kv_overrides == {"llama.context_length": 77, "general.name": "x", "a.b": 1.5, "c.d": True}
    m = E.Model(str(path), p)
    assert m.n_ctx_train == 77 and m.name == "x"
    assert E.Model(str(path), kv_overrides={"llama.context_length": 77}).n_ctx_train == 77
    with pytest.raises(TypeError, match="kv_overrides"):
        E.ModelParams(kv_overrides=[1, 2])
    with pytest.raises(TypeError, match="mmap"):
        E.ModelParams(mmap=False)


def test_llama_takes_n_ctx_from_the_engine(tiny):
    from llamapy import Llama

    path, *_ = tiny("llama")
    n_train = E.Model(str(path)).n_ctx_train
    with Llama(model_path=str(path), n_ctx=0, n_batch=100000, verbose=False) as llm:
        assert llm.n_ctx() == n_train == llm.ctx.n_ctx
        assert llm.n_batch == min(100000, n_train) == llm.ctx.n_batch
    with Llama(model_path=str(path), n_ctx=0, vocab_only=True, verbose=False) as llm:
        assert llm.n_ctx() == n_train
