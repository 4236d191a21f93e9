"""The shared per-architecture runner: every architecture llamapy supports is
written as a tiny seeded GGUF model (tests/model_ref.py) and held against the
numpy reference forward pass, then against itself under batching, micro-
batching, several sequences, cache edits and state save/restore. Bad input
must raise, never crash or corrupt the context.
"""

from __future__ import annotations

import numpy as np
import pytest

import model_ref as R
from conftest import engine_context
from llamapy import _engine as E

ARCHS = list(R.SPECS)
PROMPT = [1, 5, 17, 42, 9, 88, 3, 61, 7, 23, 11, 64]


new_ctx = engine_context


def decode_all(ctx, toks, pos0=0, seq=0):
    """Decodes toks as one batch of sequence `seq`; returns the logits of every row."""
    n = len(toks)
    ctx.decode(tokens=toks, pos=list(range(pos0, pos0 + n)), seq_ids=[seq] * n, logits=[1] * n)
    return np.array(ctx.get_logits_all())


def rel_err(got, ref):
    return np.abs(np.asarray(got) - ref) / np.abs(ref).max()


# ---------------------------------------------------------------------------
# Against the numpy reference
# ---------------------------------------------------------------------------

# (weight type, cache type, max relative error, 90th percentile). F16 and
# Q8_0 round activations (as llama.cpp does); an input one float ulp away can
# round the other way, so those bounds allow for a few flipped roundings.
VARIANTS = [
    ("F32", "f32", 2e-4, 2e-5),
    ("F32", "f16", 2e-3, 2e-4),
    ("F16", "f32", 3e-3, 3e-4),
    ("Q8_0", "f32", 3e-2, 2e-3),
]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("wtype,kv,tol_max,tol_p90", VARIANTS)
def test_logits_match_reference(tiny, arch, wtype, kv, tol_max, tol_p90):
    path, spec, cfg, w = tiny(arch, wtype)
    # The explicit attention path (F16-rounded softmax weights against an F16
    # cache, as the reference); the flash path: tests/test_flash_attn.py.
    ctx = new_ctx(path, type_k=kv, type_v=kv, flash_attn=False)
    got = decode_all(ctx, PROMPT)
    ref, _ = R.forward(spec, cfg, w, PROMPT, wtype, kv_f16=(kv == "f16"))
    err = rel_err(got, ref)
    if spec.mla and wtype != "F32":
        # two more rounded products per layer (the absorbed queries, the heads'
        # outputs through attn_v_b): a rounding flip more often (3.1e-4 at p90
        # with the scalar kernels' summation order)
        tol_max, tol_p90 = 1.5 * tol_max, 1.5 * tol_p90
    if cfg.n_expert and wtype == "Q8_0":
        # a flipped 8-bit rounding moves a token's router logits and expert
        # weights, so it spreads further than in a dense block: the tiny gpt-oss
        # at the AVX2 level has one in layer 0 (the experts' output, 1.9e-4)
        # that reaches 7.5e-3 at p90 by the output (F32 / F16 weights: 1e-7)
        tol_p90 = 1.5e-2
    assert err.max() < tol_max, f"max relative error {err.max():.2e}"
    assert np.quantile(err, 0.9) < tol_p90
    assert (got.argmax(1) == ref.argmax(1)).mean() >= 0.9


@pytest.mark.parametrize("arch", ARCHS)
def test_embeddings_output_match_reference(tiny, arch):
    path, spec, cfg, w = tiny(arch)
    ctx = new_ctx(path, embeddings=True, type_k="f32", type_v="f32")
    ctx.decode(tokens=PROMPT, pos=list(range(len(PROMPT))), seq_ids=[0] * len(PROMPT))  # all rows by default
    assert ctx.n_outputs == len(PROMPT)
    _, hid = R.forward(spec, cfg, w, PROMPT, "F32", kv_f16=False)
    got = np.stack([np.array(ctx.get_embeddings(i)) for i in range(len(PROMPT))])
    assert rel_err(got, hid).max() < 2e-4


# ---------------------------------------------------------------------------
# The engine against itself
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_prefill_equals_stepwise(tiny, arch):
    path, *_ = tiny(arch)
    full = decode_all(new_ctx(path), PROMPT)
    ctx = new_ctx(path)
    steps = []
    for i, t in enumerate(PROMPT):
        ctx.decode(tokens=[t], pos=[i], seq_ids=[0])
        steps.append(np.array(ctx.get_logits()))
    np.testing.assert_allclose(np.stack(steps), full, rtol=0, atol=2e-5 * np.abs(full).max())
    # Micro-batches of 5 rows, and a prefill split over two decode calls.
    micro = decode_all(new_ctx(path, n_ubatch=5), PROMPT)
    np.testing.assert_allclose(micro, full, rtol=0, atol=2e-5 * np.abs(full).max())
    ctx = new_ctx(path)
    a = decode_all(ctx, PROMPT[:7])
    b = decode_all(ctx, PROMPT[7:], pos0=7)
    np.testing.assert_allclose(np.concatenate([a, b]), full, rtol=0, atol=2e-5 * np.abs(full).max())


@pytest.mark.parametrize("arch", ARCHS)
def test_only_requested_rows_get_logits(tiny, arch):
    path, *_ = tiny(arch)
    full = decode_all(new_ctx(path), PROMPT)
    ctx = new_ctx(path)
    want = [i % 3 == 0 for i in range(len(PROMPT))]
    ctx.decode(tokens=PROMPT, pos=list(range(len(PROMPT))), seq_ids=[0] * len(PROMPT), logits=want)
    rows = [i for i, f in enumerate(want) if f]
    assert ctx.n_outputs == len(rows)
    np.testing.assert_allclose(np.array(ctx.get_logits_all()), full[rows], rtol=0, atol=2e-5 * np.abs(full).max())
    # Default: only the last row.
    ctx = new_ctx(path)
    ctx.decode(tokens=PROMPT, pos=list(range(len(PROMPT))), seq_ids=[0] * len(PROMPT))
    assert ctx.n_outputs == 1
    np.testing.assert_allclose(np.array(ctx.get_logits(-1)), full[-1], rtol=0, atol=2e-5 * np.abs(full).max())


# A sequence's results do not depend on where its cells lie in the cache, nor
# on the other sequences' cells beside them: the explicit path takes visible
# cells in position order; the flash path adds each 64-cell tile's
# exponentials in double (they sit in different slots for each layout), so
# here, where all cells share one tile, both agree with the sequence alone to
# rounding. (A float sum tree there moved the tiny Gemma 3 with an F16 cache by
# ~4e-4 at the AVX2 level: a last-bit change of one layer's output rounds to a
# different F16 key in the next.) Across tiles the flash path depends on how
# the tiles split a sequence's cells, in rounding only.
@pytest.mark.parametrize("flash", [False, True], ids=["explicit", "flash"])
@pytest.mark.parametrize("arch", ARCHS)
def test_two_sequences_in_one_batch(tiny, arch, flash):
    rel = 2e-5
    path, *_ = tiny(arch)

    def new_ctx(path, **kw):
        return engine_context(path, flash_attn=flash, **kw)

    a, b = PROMPT[:9], [2, 4, 6, 8, 10, 12, 14]
    ref_a = decode_all(new_ctx(path), a)
    ref_b = decode_all(new_ctx(path), b)
    # Interleave the two sequences' rows in one batch.
    rows = [(t, i, 0) for i, t in enumerate(a)] + [(t, i, 1) for i, t in enumerate(b)]
    rows.sort(key=lambda r: (r[1], r[2]))
    ctx = new_ctx(path, n_seq_max=2)
    ctx.decode(tokens=[r[0] for r in rows], pos=[r[1] for r in rows], seq_ids=[r[2] for r in rows],
               logits=[1] * len(rows))
    got = np.array(ctx.get_logits_all())
    got_a = got[[k for k, r in enumerate(rows) if r[2] == 0]]
    got_b = got[[k for k, r in enumerate(rows) if r[2] == 1]]
    tol = rel * np.abs(ref_a).max()
    np.testing.assert_allclose(got_a, ref_a, rtol=0, atol=tol)
    np.testing.assert_allclose(got_b, ref_b, rtol=0, atol=tol)
    # Then one more token for each, in one batch.
    ctx.decode(tokens=[30, 31], pos=[len(a), len(b)], seq_ids=[0, 1], logits=[1, 1])
    two = np.array(ctx.get_logits_all())
    alone_a = decode_all(new_ctx(path), a + [30])[-1]
    alone_b = decode_all(new_ctx(path), b + [31])[-1]
    np.testing.assert_allclose(two[0], alone_a, rtol=0, atol=tol)
    np.testing.assert_allclose(two[1], alone_b, rtol=0, atol=tol)


@pytest.mark.parametrize("flash", [False, True], ids=["explicit", "flash"])
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_shared_prefix_rows_and_seq_cp(tiny, arch, flash):
    # Both contexts on the same path: "auto" picks explicit for n_seq_max > 1.
    path, *_ = tiny(arch)

    def new_ctx(path, **kw):
        return engine_context(path, flash_attn=flash, **kw)

    prefix, tail_a, tail_b = PROMPT[:6], [70, 71, 72], [80, 81]
    ref_a = decode_all(new_ctx(path), prefix + tail_a)[-1]
    ref_b = decode_all(new_ctx(path), prefix + tail_b)[-1]
    tol = 2e-5 * np.abs(ref_a).max()
    # A prefix whose rows belong to both sequences.
    ctx = new_ctx(path, n_seq_max=2)
    ctx.decode(tokens=prefix, pos=list(range(6)), seq_ids=[[0, 1]] * 6)
    assert ctx.kv_n_used == 6
    ctx.decode(tokens=tail_a + tail_b, pos=[6, 7, 8, 6, 7], seq_ids=[0, 0, 0, 1, 1], logits=[0, 0, 1, 0, 1])
    np.testing.assert_allclose(np.array(ctx.get_logits(0)), ref_a, rtol=0, atol=tol)
    np.testing.assert_allclose(np.array(ctx.get_logits(1)), ref_b, rtol=0, atol=tol)
    # The same through seq_cp.
    ctx = new_ctx(path, n_seq_max=2)
    decode_all(ctx, prefix)
    ctx.kv_seq_cp(0, 1)
    assert ctx.kv_seq_pos_max(1) == 5 and ctx.kv_n_used == 6
    ctx.decode(tokens=tail_b, pos=[6, 7], seq_ids=[1, 1])
    np.testing.assert_allclose(np.array(ctx.get_logits()), ref_b, rtol=0, atol=tol)
    ctx.decode(tokens=tail_a, pos=[6, 7, 8], seq_ids=[0, 0, 0])
    np.testing.assert_allclose(np.array(ctx.get_logits()), ref_a, rtol=0, atol=tol)
    # seq_keep drops the other sequence's cells.
    ctx.kv_seq_keep(1)
    assert ctx.kv_seq_pos_max(0) == -1 and ctx.kv_seq_pos_max(1) == 7 and ctx.kv_n_used == 8


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_seq_rm_then_redo(tiny, arch):
    path, *_ = tiny(arch)
    ref = decode_all(new_ctx(path), PROMPT[:5] + [50, 51, 52])
    ctx = new_ctx(path)
    decode_all(ctx, PROMPT)
    assert ctx.kv_seq_pos_max(0) == len(PROMPT) - 1
    ctx.kv_seq_rm(0, 5, -1)
    assert ctx.kv_seq_pos_max(0) == 4 and ctx.kv_seq_pos_min(0) == 0 and ctx.kv_n_used == 5
    got = decode_all(ctx, [50, 51, 52], pos0=5)
    np.testing.assert_allclose(got, ref[5:], rtol=0, atol=2e-5 * np.abs(ref).max())
    ctx.kv_seq_rm(-1)
    assert ctx.kv_n_used == 0 and ctx.kv_seq_pos_max(0) == -1
    decode_all(ctx, PROMPT[:3])
    ctx.kv_clear()
    assert ctx.kv_n_used == 0


def test_full_cache_raises_and_changes_nothing(tiny):
    path, spec, cfg, w = tiny("llama")
    ctx = new_ctx(path, n_ctx=16, n_batch=16)
    decode_all(ctx, PROMPT[:10])
    before = np.array(ctx.get_logits_all())
    with pytest.raises(ValueError, match="full"):
        ctx.decode(tokens=PROMPT[:8], pos=list(range(10, 18)), seq_ids=[0] * 8)
    assert ctx.kv_n_used == 10 and ctx.kv_seq_pos_max(0) == 9
    np.testing.assert_array_equal(np.array(ctx.get_logits_all()), before)
    got = decode_all(ctx, PROMPT[10:12] + [5, 6, 7, 8], pos0=10)  # exactly fills the cache
    ref, _ = R.forward(spec, cfg, w, PROMPT[:12] + [5, 6, 7, 8], "F32")
    assert rel_err(got, ref[10:]).max() < 2e-3
    with pytest.raises(ValueError, match="full"):
        ctx.decode(tokens=[1], pos=[16], seq_ids=[0])


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_state_round_trip(tiny, arch):
    path, *_ = tiny(arch)
    ctx = new_ctx(path, n_seq_max=2)
    decode_all(ctx, PROMPT[:7])
    decode_all(ctx, [3, 4, 5], seq=1)
    state = ctx.state_get()
    last = np.array(ctx.get_logits_all())
    after = decode_all(ctx, PROMPT[7:], pos0=7)

    other = new_ctx(path, n_seq_max=2, n_ctx=32)
    other.state_set(state)
    assert other.kv_n_used == 10 and other.kv_seq_pos_max(1) == 2
    np.testing.assert_array_equal(np.array(other.get_logits_all()), last)
    np.testing.assert_array_equal(decode_all(other, PROMPT[7:], pos0=7), after)
    # Corrupt or foreign states raise and leave the context as it was.
    for bad in (state[:-3], b"junk" + state[4:], state[:40]):
        with pytest.raises(ValueError):
            other.state_set(bad)
    assert other.kv_n_used == 15
    q8 = new_ctx(tiny("qwen3")[0])
    with pytest.raises(ValueError):
        q8.state_set(state)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_embedding_rows_as_input(tiny, arch):
    path, spec, cfg, w = tiny(arch)
    ref = decode_all(new_ctx(path), PROMPT[:6])
    rows = np.asarray(w["token_embd.weight"], dtype=np.float32)[PROMPT[:6]]
    if spec.embd_scale:  # Gemma scales token embeddings, not embeddings given as input
        rows = rows * np.float32(np.sqrt(cfg.n_embd))
    ctx = new_ctx(path)
    ctx.decode(embd=rows, pos=list(range(6)), seq_ids=[0] * 6, logits=[1] * 6)
    np.testing.assert_allclose(np.array(ctx.get_logits_all()), ref, rtol=0, atol=1e-4 * np.abs(ref).max())


# ---------------------------------------------------------------------------
# Model facts and bad input
# ---------------------------------------------------------------------------


def test_model_properties(tiny):
    path, spec, cfg, w = tiny("gemma3")
    m = E.Model(str(path))
    assert (m.arch, m.n_vocab, m.n_embd, m.n_layer, m.n_head, m.n_head_kv) == (
        "gemma3", cfg.n_vocab, cfg.n_embd, cfg.n_layer, cfg.n_head, cfg.n_head_kv)
    assert m.n_ctx_train == cfg.n_ctx_train and m.rope_freq_base == cfg.rope_base and m.n_swa == cfg.n_swa
    assert m.n_params == sum(v.size for v in w.values())
    assert m.size_bytes == 4 * m.n_params
    assert m.desc().startswith("gemma3 ") and "F32" in m.desc()
    assert "gemma3" in E.Model.supported_archs and "llama" in E.Model.supported_archs
    v = E.Model(str(path), vocab_only=True)
    assert v.vocab_only and v.n_vocab == cfg.n_vocab
    with pytest.raises(ValueError, match="vocab_only"):
        E.Context(v)


def test_bad_inputs_raise(tiny):
    path, *_ = tiny("llama")
    ctx = new_ctx(path, n_ctx=32, n_batch=8, n_seq_max=2)
    ok = dict(tokens=[1, 2], pos=[0, 1], seq_ids=[0, 0])
    bad = [
        (dict(ok, tokens=[1, 100]), ValueError, "token id 100"),
        (dict(ok, tokens=[-1, 2]), ValueError, "token id -1"),
        (dict(ok, pos=[0, -1]), ValueError, "negative"),
        (dict(ok, seq_ids=[0, 2]), ValueError, "n_seq_max"),
        (dict(ok, seq_ids=[[0], []]), ValueError, "no sequence"),
        (dict(ok, pos=[1, 1]), ValueError, "increase"),
        (dict(ok, pos=[0]), ValueError, "pos has 1"),
        (dict(ok, seq_ids=[0]), ValueError, "seq_ids has 1"),
        (dict(ok, logits=[1]), ValueError, "flags"),
        (dict(ok, tokens=[1.5, 2.0]), TypeError, "integers"),
        (dict(ok, tokens=[1, 2**40]), ValueError, "32 bits"),
        (dict(tokens=list(range(9)), pos=list(range(9)), seq_ids=[0] * 9), ValueError, "n_batch"),
        (dict(tokens=[], pos=[], seq_ids=[]), ValueError, "empty"),
        (dict(ok, embd=np.zeros((2, 64), np.float32)), ValueError, "not both"),
        (dict(pos=[0], seq_ids=[0], embd=np.zeros((1, 63), np.float32)), ValueError, "shape"),
    ]
    for kw, exc, msg in bad:
        with pytest.raises(exc, match=msg):
            ctx.decode(**kw)
        assert ctx.kv_n_used == 0
    ctx.decode(**ok)
    with pytest.raises(ValueError, match="already reaches"):
        ctx.decode(tokens=[3], pos=[1], seq_ids=[0])
    with pytest.raises(ValueError, match="out of range"):
        ctx.get_logits(1)
    with pytest.raises(ValueError, match="embeddings"):
        ctx.get_embeddings(0)
    for call in (lambda: ctx.kv_seq_rm(5), lambda: ctx.kv_seq_cp(0, 7), lambda: ctx.kv_seq_keep(-1),
                 lambda: ctx.kv_seq_pos_max(2)):
        with pytest.raises(ValueError, match="out of range"):
            call()
    with pytest.raises(ValueError, match="not supported"):
        new_ctx(path, type_k="q4_k")
    with pytest.raises(ValueError, match="multiple of 32"):
        new_ctx(path, type_k="q4_0")  # llama's tiny heads are 16 wide
    with pytest.raises(ValueError, match="n_seq_max"):
        new_ctx(path, n_seq_max=0)


def test_bad_model_files(tiny, tmp_path):
    import gguf

    with pytest.raises(OSError):
        E.Model(str(tmp_path / "missing.gguf"))
    # An architecture we do not run.
    p = tmp_path / "odd.gguf"
    wr = gguf.GGUFWriter(str(p), "mamba")
    wr.add_tensor("x", np.zeros(4, np.float32))
    wr.write_header_to_file(); wr.write_kv_data_to_file(); wr.write_tensors_to_file(); wr.close()
    with pytest.raises(NotImplementedError, match="mamba.*supported: .*gemma3"):
        E.Model(str(p))
    # A supported architecture with a tensor missing.
    path, spec, cfg, w = tiny("llama")
    w = dict(w)
    del w["blk.1.ffn_down.weight"]
    p2 = tmp_path / "broken.gguf"
    R.write_gguf(p2, spec, cfg, w)
    with pytest.raises(ValueError, match="blk.1.ffn_down.weight"):
        E.Model(str(p2))
    # A tensor of the wrong shape.
    w = R.make_weights(spec, cfg)
    w["blk.0.attn_q.weight"] = w["blk.0.attn_q.weight"][:, :32].copy()
    R.write_gguf(p2, spec, cfg, w)
    with pytest.raises(ValueError, match="blk.0.attn_q.weight has shape"):
        E.Model(str(p2))


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_long_context_decode_spread_over_threads(tiny, arch):
    """Single-row decodes over many cells take the thread-split attention path;
    it must give the numbers the one-thread path gives."""
    path, *_ = tiny(arch)
    rng = np.random.default_rng(3)
    toks = rng.integers(3, 100, 300).tolist()
    ref = new_ctx(path, n_ctx=320, n_batch=320, n_threads=1, n_threads_batch=1)
    ref.decode(tokens=toks, pos=list(range(300)), seq_ids=[0] * 300)
    split = new_ctx(path, n_ctx=320, n_batch=320, n_threads=4, n_threads_batch=1)
    split.decode(tokens=toks, pos=list(range(300)), seq_ids=[0] * 300)
    for i, t in enumerate([5, 6, 7]):
        ref.decode(tokens=[t], pos=[300 + i], seq_ids=[0])
        split.decode(tokens=[t], pos=[300 + i], seq_ids=[0])
        np.testing.assert_array_equal(np.array(split.get_logits()), np.array(ref.get_logits()))
