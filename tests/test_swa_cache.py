"""Sliding-window layers keep only what they need: with swa_full=False (the
default) the window layers of a model like Gemma 3 get their own cache of
window × sequences + n_batch cells, and what no later token can see is
dropped from it. Results are bit-identical to the full-size cache
(attention takes visible cells in position order, whatever cells hold
them), and a sequence rewound further back than its window reaches raises
or, in Llama, is evaluated again."""
from __future__ import annotations

import numpy as np
import pytest

import model_ref as R
from llamapy import Llama
from llamapy import _engine as E

TOKS = [int(t) for t in np.random.default_rng(0).integers(3, 100, 60)]


@pytest.fixture(scope="module")
def gemma_tiny(tmp_path_factory):
    # 6 layers: 0-4 attend to a window of 5 tokens, 5 to everything
    return R.make_model(tmp_path_factory.mktemp("swa"), "gemma3", "F32")


def ctx_for(path, **kw):
    # Bit-exactness between the window cache and the full one holds on the
    # explicit path (cells in position order); the flash path takes cells in
    # cell order, exact up to rounding (tests/test_flash_attn.py).
    kw.setdefault("flash_attn", False)
    kw.setdefault("n_ctx", 64)
    kw.setdefault("n_batch", 8)
    kw.setdefault("n_threads", 2)
    return E.Context(E.Model(str(path)), **kw)


def run(ctx, toks, chunk, seq=0, pos0=0):
    rows = []
    for i in range(0, len(toks), chunk):
        c = toks[i:i + chunk]
        ctx.decode(tokens=c, pos=list(range(pos0 + i, pos0 + i + len(c))), seq_ids=[seq] * len(c),
                   logits=[1] * len(c))
        rows.append(np.array(ctx.get_logits_all()))
    return np.concatenate(rows)


def test_window_cache_is_small_and_exact(gemma_tiny):
    path, spec, cfg, w = gemma_tiny
    full = ctx_for(path, swa_full=True)
    small = ctx_for(path)
    assert full.kv_swa_cells == 0 and small.kv_swa_cells == 5 + 8
    assert small.kv_bytes < 0.4 * full.kv_bytes  # 5 of 6 layers hold 13 cells instead of 64
    ref = run(full, TOKS, 8)
    for chunk in (8, 1, 3):
        np.testing.assert_array_equal(run(ctx_for(path), TOKS, chunk), ref)
    got, _ = R.forward(spec, cfg, w, TOKS, "F32")
    assert np.abs(ref - got).max() / np.abs(got).max() < 2e-3


def test_sequences_share_the_window_cache(gemma_tiny):
    path, *_ = gemma_tiny
    a, b = TOKS[:28], TOKS[30:58]
    ref = ctx_for(path, swa_full=True, n_seq_max=2)
    small = ctx_for(path, n_seq_max=2)
    assert small.kv_swa_cells == 5 * 2 + 8
    outs = []
    for ctx in (ref, small):
        rows = []
        for i in range(0, 28, 4):  # two sequences in every batch
            ctx.decode(tokens=a[i:i + 4] + b[i:i + 4], pos=list(range(i, i + 4)) * 2, seq_ids=[0] * 4 + [1] * 4,
                       logits=[1] * 8)
            rows.append(np.array(ctx.get_logits_all()))
        # sequence 1 forks into 0's place: copies share cells, no data moves
        ctx.kv_seq_rm(0, -1, -1)
        ctx.kv_seq_cp(1, 0, -1, -1)
        ctx.decode(tokens=[5, 6], pos=[28, 28], seq_ids=[0, 1], logits=[1, 1])
        rows.append(np.array(ctx.get_logits_all()))
        outs.append(np.concatenate(rows))
    np.testing.assert_array_equal(outs[1], outs[0])
    np.testing.assert_array_equal(outs[1][-2], run(ctx_for(path), b + [5], 8)[-1])


def test_rewinding_past_the_window(gemma_tiny):
    path, *_ = gemma_tiny
    ctx = ctx_for(path)
    run(ctx, TOKS[:40], 8)
    assert ctx.kv_swa_resumable(0, 38) and not ctx.kv_swa_resumable(0, 20)
    ctx.kv_seq_rm(0, 38, -1)
    run(ctx, TOKS[38:40], 2, pos0=38)  # a short rewind works
    ctx.kv_seq_rm(0, 20, -1)
    with pytest.raises(ValueError, match="swa_full"):
        run(ctx, TOKS[20:24], 4, pos0=20)
    ctx.kv_seq_rm(0, -1, -1)  # all gone: starting over works
    assert ctx.kv_swa_resumable(0, 0)
    np.testing.assert_array_equal(run(ctx, TOKS, 8), run(ctx_for(path, swa_full=True), TOKS, 8))


def test_state_round_trip_with_window_cache(gemma_tiny):
    path, *_ = gemma_tiny
    ctx = ctx_for(path)
    run(ctx, TOKS[:33], 8)
    state = ctx.state_get()
    after = run(ctx, TOKS[33:], 8, pos0=33)
    other = ctx_for(path)
    other.state_set(state)
    np.testing.assert_array_equal(run(other, TOKS[33:], 8, pos0=33), after)
    with pytest.raises(ValueError, match="swa_full"):
        ctx_for(path, swa_full=True).state_set(state)


def test_llama_reuses_or_reevaluates_prefixes(gemma_tiny):
    path, *_ = gemma_tiny
    kw = dict(n_ctx=64, n_batch=8, n_threads=2, verbose=False, seed=1)
    small, full = Llama(str(path), **kw), Llama(str(path), swa_full=True, **kw)
    assert small._ctx.kv_swa_cells > 0 and full._ctx.kv_swa_cells == 0
    for prompt in (TOKS[:30], TOKS[:30] + [7, 8], TOKS[:12], TOKS[:40]):  # extend, rewind far, extend
        outs = []
        for llm in (small, full):
            g = llm.generate(prompt, temp=0.0)
            outs.append([next(g) for _ in range(5)])
        assert outs[0] == outs[1], prompt
    with pytest.raises(TypeError):
        Llama(str(path), swa_full="yes", **kw)
