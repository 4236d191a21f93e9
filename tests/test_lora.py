"""LoRA adapters in llama.cpp's GGUF format (general.type "adapter",
adapter.type "lora", adapter.lora.alpha, "<matrix>.lora_a" [n_in, rank] and
"<matrix>.lora_b" [rank, n_out]): the engine adds scale·alpha/rank·B(Ax) to
each adapted product; checked against the numpy reference run on merged
weights W + scale·alpha/rank·BA."""
from __future__ import annotations

import dataclasses

import gguf
import numpy as np
import pytest

import model_ref as R
from llamapy import GGUFError, Llama
from llamapy import _engine as E
from tiny_gguf import add_weight, finish

PROMPT = [1, 5, 17, 42, 9, 88, 3, 61]


def write_adapter(path, arch, pairs, alpha=8.0, general_type="adapter", wtype="F32"):
    wr = gguf.GGUFWriter(str(path), arch)
    wr.add_string("general.type", general_type)
    wr.add_string("adapter.type", "lora")
    if alpha is not None:
        wr.add_float32("adapter.lora.alpha", alpha)
    for name, (a, b) in pairs.items():
        add_weight(wr, name + ".lora_a", a, wtype)
        add_weight(wr, name + ".lora_b", b, wtype)
    finish(wr)
    return str(path)


def make_pairs(w, names, rank, seed=0, gain=0.05):
    rng = np.random.default_rng(seed)
    pairs = {}
    for n in names:
        out, inp = w[n].shape
        pairs[n] = (rng.standard_normal((rank, inp)).astype(np.float32) * gain,
                    rng.standard_normal((out, rank)).astype(np.float32) * gain)
    return pairs


def merged(w, pairs, factor):
    m = dict(w)
    for n, (a, b) in pairs.items():
        m[n] = (np.asarray(w[n], dtype=np.float64) + factor * (b.astype(np.float64) @ a.astype(np.float64)))
    return m


def logits(path, adapters=(), **kw):
    model = E.Model(str(path))
    ctx = E.Context(model, n_ctx=64, n_threads=2, type_k="f32", type_v="f32", **kw)
    if adapters:
        ctx.set_adapters([(E.LoraAdapter(model, p), s) for p, s in adapters])
    n = len(PROMPT)
    ctx.decode(tokens=PROMPT, pos=list(range(n)), seq_ids=[0] * n, logits=[1] * n)
    return np.array(ctx.get_logits_all())


def close(got, ref, tol=3e-4):
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert err < tol, err


@pytest.mark.parametrize("arch,names", [
    ("llama", ["blk.0.attn_q.weight", "blk.0.attn_v.weight", "blk.1.ffn_down.weight", "output.weight"]),
    ("phi3", ["blk.0.attn_qkv.weight", "blk.1.ffn_up.weight", "blk.1.attn_output.weight"]),  # fused matrices
    ("gemma3", ["blk.2.ffn_gate.weight", "blk.5.attn_k.weight", "output.weight"]),  # tied output
])
@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_adapter_matches_merged_reference(tiny, tmp_path, arch, names, scale):
    path, spec, cfg, w = tiny(arch)
    if "output.weight" in names and "output.weight" not in w:
        w = dict(w, **{"output.weight": w["token_embd.weight"]})  # the tied head is adapted as output.weight
    rank, alpha = 4, 8.0
    pairs = make_pairs(w, names, rank)
    ad = write_adapter(tmp_path / "a.gguf", arch, pairs, alpha=alpha)
    got = logits(path, [(ad, scale)])
    ref, _ = R.forward(spec, cfg, merged(w, pairs, scale * alpha / rank), PROMPT, "F32", kv_f16=False)
    close(got, ref)
    base, _ = R.forward(spec, cfg, w, PROMPT, "F32", kv_f16=False)
    assert np.abs(base - ref).max() / np.abs(ref).max() > 1e-2  # the adapter matters


def test_alpha_zero_means_no_rank_division_and_adapters_add_up(tiny, tmp_path):
    path, spec, cfg, w = tiny("qwen2")
    p1 = make_pairs(w, ["blk.0.attn_q.weight"], 2, seed=1)
    p2 = make_pairs(w, ["blk.0.attn_q.weight", "blk.1.ffn_up.weight"], 3, seed=2)
    a1 = write_adapter(tmp_path / "1.gguf", "qwen2", p1, alpha=None)  # absent alpha: scale alone
    a2 = write_adapter(tmp_path / "2.gguf", "qwen2", p2, alpha=6.0)
    got = logits(path, [(a1, 0.7), (a2, 1.5)])
    m = merged(w, p1, 0.7)
    m = merged(m, p2, 1.5 * 6.0 / 3)
    ref, _ = R.forward(spec, cfg, m, PROMPT, "F32", kv_f16=False)
    close(got, ref)


def test_scale_zero_and_removal_give_the_base(tiny, tmp_path):
    path, spec, cfg, w = tiny("llama")
    ad = write_adapter(tmp_path / "a.gguf", "llama", make_pairs(w, ["blk.0.attn_q.weight"], 4))
    base = logits(path)
    np.testing.assert_array_equal(logits(path, [(ad, 0.0)]), base)
    model = E.Model(str(path))
    ctx = E.Context(model, n_ctx=64, n_threads=2, type_k="f32", type_v="f32")
    ctx.set_adapters([(E.LoraAdapter(model, ad), 1.0)])
    ctx.set_adapters([])
    ctx.decode(tokens=PROMPT, pos=list(range(8)), seq_ids=[0] * 8, logits=[1] * 8)
    np.testing.assert_array_equal(np.array(ctx.get_logits_all()), base)


def test_quantized_adapter_and_batch_invariance(tiny, tmp_path):
    path, spec, cfg, w = tiny("llama")
    pairs = make_pairs(w, ["blk.0.ffn_gate.weight"], 32)  # rank 32: whole Q8_0 blocks
    ad = write_adapter(tmp_path / "q.gguf", "llama", pairs, wtype="Q8_0")
    full = logits(path, [(ad, 1.0)])
    model = E.Model(str(path))
    ctx = E.Context(model, n_ctx=64, n_threads=2, type_k="f32", type_v="f32")
    ctx.set_adapters([(E.LoraAdapter(model, ad), 1.0)])
    rows = []
    for i, t in enumerate(PROMPT):
        ctx.decode(tokens=[t], pos=[i], seq_ids=[0])
        rows.append(np.array(ctx.get_logits()))
    np.testing.assert_array_equal(np.stack(rows), full)


def test_bad_adapters_are_refused(tiny, tmp_path):
    path, spec, cfg, w = tiny("llama")
    model = E.Model(str(path))
    good = make_pairs(w, ["blk.0.attn_q.weight"], 4)
    cases = {
        "not a LoRA adapter": write_adapter(tmp_path / "t.gguf", "llama", good, general_type="model"),
        "architecture 'qwen2'": write_adapter(tmp_path / "arch.gguf", "qwen2", good),
        "does not multiply with": write_adapter(tmp_path / "missing.gguf", "llama",
                                                {"blk.9.attn_q.weight": good["blk.0.attn_q.weight"]}),
        "do not fit": write_adapter(tmp_path / "shape.gguf", "llama",
                                    {"blk.0.attn_k.weight": good["blk.0.attn_q.weight"]}),
    }
    for msg, p in cases.items():
        with pytest.raises(GGUFError, match=msg):
            E.LoraAdapter(model, p)
    with pytest.raises(OSError):
        E.LoraAdapter(model, str(tmp_path / "nope.gguf"))


def test_llama_lora_options(tiny, tmp_path, caplog):
    path, spec, cfg, w = tiny("llama")
    pairs = make_pairs(w, ["blk.1.attn_output.weight"], 4)
    ad = write_adapter(tmp_path / "a.gguf", "llama", pairs, alpha=4.0)
    llm = Llama(str(path), n_ctx=64, verbose=False, lora_path=ad, lora_scale=0.5, type_k=0, type_v=0)
    llm.eval(PROMPT)
    ref, _ = R.forward(spec, cfg, merged(w, pairs, 0.5 * 4.0 / 4), PROMPT, "F32", kv_f16=False)
    close(np.asarray(llm._last_logits()), ref[-1])
    assert llm.lora_path == ad and llm.lora_scale == 0.5
    assert llm._ctx.hooks == ["adapters"]  # what the context adds to the model (_embedding_workers.py)
    with pytest.raises(ValueError, match="does not exist"):
        Llama(str(path), n_ctx=64, verbose=False, lora_path=str(tmp_path / "none.gguf"))
    with pytest.raises(ValueError, match="lora_scale"):
        Llama(str(path), n_ctx=64, verbose=False, lora_path=ad, lora_scale=float("nan"))
    with caplog.at_level("WARNING", logger="llamapy"):
        Llama(str(path), n_ctx=64, verbose=False, lora_path=ad, lora_base="base.gguf")
    assert "lora_base" in caplog.text
