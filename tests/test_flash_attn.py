"""flash_attn end to end: the option (True / False / "auto", llama_cpp's
LLAMA_FLASH_ATTN_TYPE_* values; bad values raise), what it resolves to, the
attention work memory (independent of n_ctx with flash), and models on both
paths: every tiny architecture against the numpy reference written for each
path, flash vs explicit on Gemma 3 270M (logits close, greedy tokens equal),
quantized value caches, the encoders, and flash's prefill = stepwise and
thread-count invariance on a whole model."""
from __future__ import annotations

import numpy as np
import pytest

import encoder_ref as ER
import model_ref as R
from llamapy import Llama
from conftest import engine_context
from llamapy import _engine as E

PROMPT = [1, 5, 17, 42, 9, 88, 3, 61, 7, 23, 11, 64]


ctx_for = engine_context


def logits_of(ctx, toks, pos0=0):
    n = len(toks)
    ctx.decode(tokens=toks, pos=list(range(pos0, pos0 + n)), seq_ids=[0] * n, logits=[1] * n)
    return np.array(ctx.get_logits_all())


def rel_err(got, ref):
    return np.abs(np.asarray(got) - ref) / np.abs(ref).max()


# ------------------------------------------------------------------ the option
@pytest.mark.parametrize("value,active", [(True, True), (False, False), ("auto", True), ("AUTO", True), (None, True),
                                          (-1, True), (0, False), (1, True)])
def test_engine_flash_attn_values(tiny, value, active):
    path, *_ = tiny("llama")
    ctx = ctx_for(path, flash_attn=value)
    assert ctx.flash_attn is active  # "auto" on the CPU: flash (it reads every cache type)
    assert ctx.attention_path == ("flash" if active else "explicit")


def test_auto_is_explicit_for_several_sequences(tiny):
    # The server's slots share one pool: a reply must not depend on where its
    # cells sit, which only the explicit path guarantees bit for bit.
    path, *_ = tiny("llama")
    assert ctx_for(path, flash_attn="auto", n_seq_max=1).attention_path == "flash"
    assert ctx_for(path, flash_attn="auto", n_seq_max=4).attention_path == "explicit"
    assert ctx_for(path, flash_attn=True, n_seq_max=4).attention_path == "flash"  # asked for: kept


@pytest.mark.parametrize("value", ["yes", "on", 2, -2, 1.0, [1]])
def test_bad_flash_attn_values_are_value_errors(tiny, value):
    path, *_ = tiny("llama")
    with pytest.raises(ValueError, match="flash_attn"):
        ctx_for(path, flash_attn=value)
    with pytest.raises(ValueError, match="flash_attn"):
        Llama(model_path=str(path), n_ctx=64, verbose=False, flash_attn=value)


def test_llama_flash_attn_option(tiny, capsys):
    import llamapy as lc

    path, *_ = tiny("qwen3")
    for value, active in [(True, True), (False, False), ("auto", True), (lc.LLAMA_FLASH_ATTN_TYPE_DISABLED, False),
                          (lc.LLAMA_FLASH_ATTN_TYPE_ENABLED, True), (lc.LLAMA_FLASH_ATTN_TYPE_AUTO, True)]:
        with Llama(model_path=str(path), n_ctx=64, verbose=False, flash_attn=value) as llm:
            assert llm.flash_attn_active is active, value
    with Llama(model_path=str(path), n_ctx=64, verbose=False) as llm:  # default: auto
        assert llm.context_params.flash_attn == -1 and llm.flash_attn_active
    Llama(model_path=str(path), n_ctx=64, verbose=True, flash_attn=False).close()
    assert "flash_attn  = off -> explicit" in capsys.readouterr().err


def test_flash_scratch_does_not_grow_with_n_ctx(tiny):
    path, *_ = tiny("gemma3")
    flash = [ctx_for(path, n_ctx=n, flash_attn=True).attention_scratch_bytes for n in (512, 8192)]
    explicit = [ctx_for(path, n_ctx=n, flash_attn=False).attention_scratch_bytes for n in (512, 8192)]
    assert flash[0] == flash[1] > 0
    assert explicit[1] > explicit[0] > 0


def test_flash_scratch_does_not_grow_in_use(tiny):
    # Token generation over many cells takes the split path, whose partials
    # cover every key head: reserved with the context, not grown by a call.
    path, *_ = tiny("qwen3")
    with Llama(model_path=str(path), n_ctx=1024, n_threads=2, flash_attn=True, verbose=False) as llm:
        before = llm._ctx.attention_scratch_bytes
        llm.eval([5 + i % 90 for i in range(600)])
        llm.eval([7])
        assert llm._ctx.attention_scratch_bytes == before > 0


# ------------------------------------------------------------- tiny models
@pytest.mark.parametrize("arch", list(R.SPECS))
@pytest.mark.parametrize("kv", ["f16", "f32"])
@pytest.mark.parametrize("flash", [False, True])
def test_tiny_models_match_the_reference_of_their_path(tiny, arch, kv, flash):
    path, spec, cfg, w = tiny(arch)
    got = logits_of(ctx_for(path, type_k=kv, type_v=kv, flash_attn=flash), PROMPT)
    ref, _ = R.forward(spec, cfg, w, PROMPT, "F32", kv_f16=(kv == "f16"), flash=flash)
    err = rel_err(got, ref)
    tol_max, tol_p90 = (2e-3, 2e-4) if kv == "f16" else (2e-4, 2e-5)
    assert err.max() < tol_max and np.quantile(err, 0.9) < tol_p90, (err.max(), np.quantile(err, 0.9))


@pytest.mark.parametrize("arch", list(R.SPECS))
def test_tiny_models_flash_vs_explicit(tiny, arch):
    path, *_ = tiny(arch)
    on = logits_of(ctx_for(path, flash_attn=True), PROMPT)
    off = logits_of(ctx_for(path, flash_attn=False), PROMPT)
    # F16 cache: the explicit path rounds the softmax weights to F16 (2^-11
    # relative), flash keeps them in F32; that is the whole difference.
    assert 0 < rel_err(on, off).max() < 2e-3


@pytest.mark.parametrize("t", ["Q8_0", "Q4_0"])
@pytest.mark.parametrize("flash", [False, True])
def test_quantized_value_caches_on_both_paths(tiny, t, flash):
    path, spec, cfg, w = tiny("gemma3")  # head size 32: whole blocks
    got = logits_of(ctx_for(path, type_k=t, type_v=t, flash_attn=flash), PROMPT)
    ref, _ = R.forward(spec, cfg, w, PROMPT, "F32", kv_type=t)
    assert rel_err(got, ref).max() < 3e-3


def test_flash_prefill_equals_stepwise_and_threads(tiny):
    # Long enough (300 cells) that single-row decodes split the cells over
    # the threads (split-K) while the prefill runs whole blocks per thread.
    path, *_ = tiny("gemma3")
    toks = [int(x) for x in np.random.default_rng(3).integers(1, 100, 300)]
    full = logits_of(ctx_for(path, n_ctx=512, n_batch=512, n_ubatch=512, flash_attn=True), toks)
    for n_threads in (1, 3):
        ctx = ctx_for(path, n_ctx=512, n_threads=n_threads, n_threads_batch=n_threads, flash_attn=True)
        logits_of(ctx, toks[:280])
        steps = [logits_of(ctx, [tok], pos0=280 + i)[0] for i, tok in enumerate(toks[280:])]
        np.testing.assert_array_equal(np.stack(steps), full[280:])


@pytest.mark.parametrize("arch", ["bert", "nomic-bert"])
def test_encoders_on_both_paths(tmp_path, arch):
    path, cfg, w = ER.make_model(tmp_path, arch, "F32", 0)
    toks = [2, 10, 12, 7, 40, 3]
    ref = ER.forward(cfg, w, toks, "F32")
    outs = []
    for flash in (False, True):  # F32 keys and values used in place, weights in F32 on both paths
        ctx = ctx_for(path, embeddings=True, n_seq_max=4, flash_attn=flash)
        assert ctx.flash_attn is flash
        ctx.decode(tokens=toks, pos=list(range(len(toks))), seq_ids=[0] * len(toks))
        outs.append(np.array(ctx.get_embeddings_all()))
        assert np.abs(outs[-1] - ref).max() / np.abs(ref).max() < 3e-4


# --------------------------------------------------------------- Gemma 3 270M
GEMMA_PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,"]


def test_gemma_flash_vs_explicit(gemma_path):
    # Gemma 3 270M amplifies tiny perturbations (its hidden states reach the
    # thousands, and activations are requantized to 8 bits in every matmul):
    # merely storing the cache in F16 instead of F32 moves its logits by 2-4.
    # The two paths differ by less than 2^-11 relative inside attention (the
    # explicit path rounds the softmax weights to F16, as llama.cpp without
    # flash attention; llama.cpp's flash path accumulates values in F16, ours
    # in F32), so the bound is that cache-rounding noise, and the greedy
    # choices must agree.
    m = E.Model(gemma_path)
    toks = list(range(1000, 1024))
    explicit = logits_of(E.Context(m, n_ctx=128, n_threads=2, flash_attn=False), toks)
    flash = logits_of(E.Context(m, n_ctx=128, n_threads=2, flash_attn=True), toks)
    f32_cache = logits_of(E.Context(m, n_ctx=128, n_threads=2, type_k="f32", type_v="f32", flash_attn=False), toks)
    noise = np.abs(explicit - f32_cache).max()
    assert 0 < np.abs(flash - explicit).max() < 1.5 * noise
    assert np.abs(flash - f32_cache).max() < 1.5 * noise
    # Greedy decisions: the explicit path's greedy continuation of each
    # prompt, replayed on the flash path, gets the same choice wherever the
    # explicit path's top-1/top-2 margin is above that noise's typical size
    # (the near ties below it may go either way, as between llama.cpp runs).
    from llamapy import Llama

    with Llama(model_path=gemma_path, n_ctx=256, n_threads=2, verbose=False, flash_attn=False) as llm:
        prompts = [llm.tokenize(p.encode()) for p in GEMMA_PROMPTS]
    n_checked = 0
    for prompt in prompts:
        ctx = E.Context(m, n_ctx=128, n_threads=2, flash_attn=False)
        seq, margins = list(prompt), []
        lg = logits_of(ctx, seq)[-1]
        for _ in range(16):
            top2 = np.sort(lg)[-2:]
            margins.append(top2[1] - top2[0])
            seq.append(int(lg.argmax()))
            lg = logits_of(ctx, [seq[-1]], pos0=len(seq) - 1)[0]
        replay = logits_of(E.Context(m, n_ctx=128, n_threads=2, flash_attn=True), seq)
        for i, margin in enumerate(margins):
            if margin > 1.0:
                assert replay[len(prompt) - 1 + i].argmax() == seq[len(prompt) + i]
                n_checked += 1
    # how many steps clear the margin depends on the machine's continuations (20 on a Zen 2 at
    # the AVX2 level, 24 and more on the AVX-512 Xeon): enough to mean something either way
    assert n_checked >= 16


@pytest.mark.parametrize("t", ["Q8_0", "Q4_0"])
def test_gemma_quantized_caches_flash_vs_explicit(gemma_path, t):
    # Against the F32-cache logits, flash is no farther off than the explicit
    # path (both take the weights in F32 against quantized values; flash's
    # q·k is the type's vec_dot, explicit's uses dequantized keys).
    toks = list(range(1000, 1032))
    m = E.Model(gemma_path)
    f32_cache = logits_of(E.Context(m, n_ctx=128, n_threads=2, type_k="f32", type_v="f32", flash_attn=False), toks)
    err = {}
    for fl in (False, True):
        got = logits_of(E.Context(m, n_ctx=128, n_threads=2, type_k=t, type_v=t, flash_attn=fl), toks)
        err[fl] = np.median(np.abs(got - f32_cache).max(axis=1))
    assert err[True] < 1.5 * err[False], err
