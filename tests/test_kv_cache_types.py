"""Quantized KV caches (type_k / type_v = Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
IQ4_NL, as llama.cpp offers): keys and values are stored quantized per row,
queries meet the keys in the keys' activation format (Q8_0 / Q8_1) as in
llama.cpp's q·k, and attention weights meet dequantized values in F32 (as in
llama.cpp's flash-attention path, the one that allows quantized values).
Checked against the numpy reference on tiny models, against the engine itself
(batching, state round trips), and on Gemma 3 270M by perplexity."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import model_ref as R
from lm_metrics import perplexity
from llamapy import Llama
from llamapy import _engine as E

PROMPT = [1, 5, 17, 42, 9, 88, 3, 61, 7, 23, 11, 64]
QUANT_TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL"]


def run(path, toks, **kw):
    ctx = E.Context(E.Model(str(path)), n_ctx=64, n_threads=2, n_threads_batch=2, **kw)
    n = len(toks)
    ctx.decode(tokens=toks, pos=list(range(n)), seq_ids=[0] * n, logits=[1] * n)
    return ctx, np.array(ctx.get_logits_all())


@pytest.mark.parametrize("arch", ["qwen3", "gemma3"])  # head size 32: whole blocks per head
@pytest.mark.parametrize("t", QUANT_TYPES)
def test_logits_match_reference(tiny, arch, t):
    path, spec, cfg, w = tiny(arch)
    # The explicit path, whose q·k the reference follows (dequantized keys);
    # the flash path takes q·k from the type's vec_dot: tests/test_flash_attn.py.
    _, got = run(path, PROMPT, type_k=t, type_v=t, flash_attn=False)
    ref, _ = R.forward(spec, cfg, w, PROMPT, "F32", kv_type=t)
    err = np.abs(got - ref) / np.abs(ref).max()
    if t == "IQ4_NL":
        # IQ4_NL picks each block's scale by a search over candidates: a key
        # one float ulp away (float32 engine vs float64 reference) can pick
        # another scale, so whole blocks may differ by a few percent.
        assert err.max() < 0.1 and np.median(err) < 0.01, (err.max(), np.median(err))
    else:
        assert err.max() < 3e-3, err.max()
    # and the cache type matters: the F32-cache reference is measurably elsewhere
    exact, _ = R.forward(spec, cfg, w, PROMPT, "F32", kv_f16=False)
    assert np.abs(exact - ref).max() / np.abs(ref).max() > 3 * (np.median(err) if t == "IQ4_NL" else err.max())


@pytest.mark.parametrize("t", ["Q8_0", "Q4_0"])
def test_prefill_equals_stepwise(tiny, t):
    path, *_ = tiny("gemma3")
    _, full = run(path, PROMPT, type_k=t, type_v=t)
    ctx = E.Context(E.Model(str(path)), n_ctx=64, n_threads=2, type_k=t, type_v=t)
    rows = []
    for i, tok in enumerate(PROMPT):
        ctx.decode(tokens=[tok], pos=[i], seq_ids=[0])
        rows.append(np.array(ctx.get_logits()))
    np.testing.assert_array_equal(np.stack(rows), full)


def test_mixed_types_and_state_round_trip(tiny):
    path, *_ = tiny("qwen3")
    ctx, _ = run(path, PROMPT[:8], type_k="q8_0", type_v="q4_0")
    state = ctx.state_get()
    ctx.decode(tokens=PROMPT[8:], pos=list(range(8, 12)), seq_ids=[0] * 4, logits=[1] * 4)
    after = np.array(ctx.get_logits_all())
    other = E.Context(E.Model(str(path)), n_ctx=64, n_threads=2, type_k="q8_0", type_v="q4_0")
    other.state_set(state)
    other.decode(tokens=PROMPT[8:], pos=list(range(8, 12)), seq_ids=[0] * 4, logits=[1] * 4)
    np.testing.assert_array_equal(np.array(other.get_logits_all()), after)
    f16 = E.Context(E.Model(str(path)), n_ctx=64, n_threads=2)
    with pytest.raises(ValueError):
        f16.state_set(state)  # saved with other cache types


def test_bad_cache_types_are_refused(tiny):
    path, *_ = tiny("llama")  # head size 16: not whole Q8_0 blocks
    with pytest.raises(ValueError, match="multiple of 32"):
        run(path, PROMPT, type_k="q8_0")
    for bad in ("q4_k", "q2_k", "nonsense"):
        with pytest.raises(ValueError, match="KV cache type"):
            run(path, PROMPT, type_v=bad)
    with pytest.raises(ValueError, match="type_k"):
        Llama(str(path), n_ctx=64, verbose=False, type_k=12)  # Q4_K
    with pytest.raises(ValueError, match="type_v"):
        Llama(str(path), n_ctx=64, verbose=False, type_v=99)


@pytest.mark.parametrize("head_dim,blocks", [(64, (64, 64)), (128, (128, 64))])
@pytest.mark.parametrize("t", ["Q8_0", "Q4_0"])
def test_hadamard_rotation_matches_reference(tmp_path, head_dim, blocks, t):
    """Heads of 64+ with a quantized cache: q, k, v rotated in Hadamard blocks
    before the cache, outputs rotated back (as llama.cpp does)."""
    import dataclasses

    spec, cfg = R.SPECS["qwen3"]
    cfg = dataclasses.replace(cfg, head_dim=head_dim)
    w = R.make_weights(spec, cfg, seed=5)
    path = tmp_path / "wide.gguf"
    R.write_gguf(path, spec, cfg, w, "F32")
    ctx, got = run(path, PROMPT, type_k=t, type_v=t)
    assert ctx.kv_rotation == blocks
    ref, _ = R.forward(spec, cfg, w, PROMPT, "F32", kv_type=t)
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert err < 3e-3, err
    off, unrotated = run(path, PROMPT, type_k=t, type_v=t, kv_rotation=False)
    assert off.kv_rotation == (0, 0)
    ref_off, _ = R.forward(spec, cfg, w, PROMPT, "F32", kv_type=t, rotate_kv=False)
    assert np.abs(unrotated - ref_off).max() / np.abs(ref_off).max() < 3e-3
    # the rotation is invisible in exact arithmetic: without quantization it changes nothing but rounding
    assert run(path, PROMPT, type_k="f32", type_v="f32")[0].kv_rotation == (0, 0)


KV_DATA = Path(__file__).parent / "data" / "gemma3_kv_cache_llama_cpp.json"


@pytest.mark.model
def test_gemma_perplexity_with_quantized_caches(gemma_path):
    """Perplexity of the fixture text with each quantized cache type is
    llama.cpp's with that type (recorded: tools/record_llama_cpp_fixtures.py
    --kv) within 1% (8 bits) to 10% (4 bits), and Q8_0 costs under 1% over F16."""
    ref = json.loads(KV_DATA.read_text())
    assert ref["model_sha256"] == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    fx = json.loads((Path(__file__).parent / "data" / "gemma-3-270m-q4_k_m.llama_cpp.json").read_text())
    text = fx["perplexity"]["text"]
    ids_types = {"F16": 1, "Q8_0": 8, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "IQ4_NL": 20}
    ours = {}
    for name, t in ids_types.items():
        llm = Llama(gemma_path, n_ctx=512, n_threads=2, logits_all=True, verbose=False, type_k=t, type_v=t)
        ids = llm.tokenize(text.encode())[:512]
        llm.eval(ids)
        ours[name] = perplexity(np.asarray(llm.scores[: len(ids)]), ids)
        llm.close()
    # This model turns rounding differences into visible logit changes (see
    # test_gemma3_vs_llama_cpp.py), and 4-bit caches round a lot: budgets
    # grow with the rounding (measured spread of our runs: up to 5% at 4 bits).
    budget = {"F16": 0.01, "Q8_0": 0.01, "Q5_0": 0.05, "Q5_1": 0.05, "Q4_0": 0.1, "Q4_1": 0.1, "IQ4_NL": 0.1}
    for name, value in ours.items():
        assert abs(value / ref["perplexity"][name] - 1) < budget[name], (name, value)
    ratios = [ours[n] / ref["perplexity"][n] for n in ours]
    assert abs(float(np.mean(ratios)) - 1) < 0.03  # no systematic loss against llama.cpp
    assert ours["Q8_0"] / ours["F16"] - 1 < 0.01
    assert len(set(ours.values())) == len(ours)  # every type really changes the cache
