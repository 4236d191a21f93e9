"""The small dense families (and Granite's MoE) against llama.cpp: the tiny random-weight
models of tests/data/dense (converted with llama.cpp's own convert_hf_to_gguf.py, quantized
with its quantizer) and what llama.cpp (llama-cpp-python 0.3.36) produced on them, recorded
by tools/make_dense_fixtures.py (see that folder's README for the recordings and llama.cpp's
own noise): smollm3 (a layer without RoPE), olmo2 (post-norms only, whole-row q/k norms),
olmo3 (olmo2 with sliding-window layers and YaRN on the full ones), granite (its four
multipliers, optional biases), granitemoe.

Every file: llama.cpp's 16 greedy tokens, generated freely, are ours too, except that after
a step where llama.cpp's own top-2 gap is within the noise allowed for the file (a tie) the
two may go different ways (the comparison stops there). Every step's top-10 logits,
teacher-forced along llama.cpp's path: F16 files within TOL_F16, or 1.5 times llama.cpp's own
flash-off/on difference at that step where that is larger. Quantized files round activations
to 8 bits before every product, so a one-ulp difference in summation order can flip a
rounding and move a position by about as much as llama.cpp's own flash off/on moves it
(0.1-0.25 here): every position within TOL_Q, except where llama.cpp itself moves by more
than TOL_Q / 2, and the median position no further than 1.5 times llama.cpp's own median."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import model_ref as R
from llamapy import Llama, _engine

# Every case on the CPU, and with every layer on a GPU where this build has a Vulkan device
# (tools/vulkan_check.sh runs it on lavapipe).
WHERE = ["cpu"] + (["gpu"] if "vulkan" in _engine.backends() and _engine.gpu_devices() else [])

DATA = Path(__file__).parent / "data" / "dense"
FAMILIES = ["smollm3", "olmo2", "olmo3", "granite", "granitemoe"]
TOL_F16 = 0.03   # llama.cpp's own on these files: batch vs step <= 0.006, flash off vs on <= 0.018
TOL_Q = 0.3      # quantized: llama.cpp's own flash off vs on reaches 0.25


def record(family):
    return json.loads((DATA / family / "record.json").read_text())


def cases():
    for fam in FAMILIES:
        for ftype in record(fam)["files"]:
            yield pytest.param(fam, ftype, id=f"{fam}-{ftype}")


def test_fixture_files_are_intact():
    files = json.loads((DATA / "manifest.json").read_text())
    assert {rel.split("/")[0] for rel in files} == set(FAMILIES)
    for rel, info in files.items():
        data = (DATA / rel).read_bytes()
        assert len(data) == info["bytes"] and hashlib.sha256(data).hexdigest() == info["sha256"], rel


def teacher_forced(llm, prompt, ids):
    """Logits of every step along llama.cpp's greedy path (prompt, then its tokens)."""
    llm.reset()
    seq = list(prompt) + list(ids)
    llm.eval(seq[:-1])
    return np.array(llm.scores[:len(seq) - 1])[len(prompt) - 1:]


def greedy(llm, prompt, n):
    llm.reset()
    got = []
    for tok in llm.generate(prompt, temp=0.0):
        got.append(tok)
        if len(got) == n:
            return got
    return got


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("family,ftype", list(cases()))
def test_matches_llama_cpp(family, ftype, where):
    rec = record(family)
    fr = rec["files"][ftype]
    assert "error" not in fr, fr.get("error")
    npz = np.load(DATA / family / "logits.npz")
    llm = Llama(model_path=str(DATA / family / fr["file"]), n_ctx=rec["n_ctx"], n_batch=rec["n_batch"],
                n_threads=2, logits_all=True, flash_attn=True, verbose=False,
                n_gpu_layers=-1 if where == "gpu" else 0)
    assert llm.n_vocab() == fr["n_vocab"]
    exact = ftype == "F16"
    for pi, pr in enumerate(fr["prompts"]):
        at = f"{family} {ftype} prompt {pi}"
        steps = teacher_forced(llm, pr["prompt_ids"], pr["ids"])
        deltas, gaps = [], []
        for i, top in enumerate(pr["top10"]):
            ids = [a for a, _ in top]
            ref = np.array([b for _, b in top])
            deltas.append(float(np.abs(steps[i][ids] - ref).max()))
            gaps.append(ref[0] - ref[1])
        own = pr["flash_off"]["top10_delta_vs_flash_on_per_position"][len(pr["prompt_ids"]) - 1:]
        last = npz[f"{ftype}.p{pi}.last_logits"]
        full = float(np.abs(steps[0] - last).max())  # the whole vocabulary at the prompt's end
        if exact:
            off = [i for i, d in enumerate(deltas) if d >= TOL_F16 and d > 1.5 * own[i]]
            assert not off and full < TOL_F16, f"{at}: top-10 off at {off} ({max(deltas):.4f}), all {full:.4f}"
            tie = lambda i: gaps[i] <= max(2 * own[i], 1e-3)  # noqa: E731
        else:
            unexplained = [i for i, d in enumerate(deltas) if d > TOL_Q and own[i] <= TOL_Q / 2]
            assert not unexplained, f"{at}: positions {unexplained} off by {[round(deltas[i], 3) for i in unexplained]}"
            own_full = float(np.abs(npz[f"{ftype}.p{pi}.last_logits_flash_off"] - last).max())
            assert full < max(TOL_Q, 1.5 * own_full), f"{at}: whole last row off by {full:.3f}"
            # typical positions: as close as llama.cpp's two attention paths are to each other
            assert np.median(deltas) < max(0.05, 1.5 * float(np.median(own))), \
                f"{at}: median {np.median(deltas):.3f}, llama.cpp's own {np.median(own):.3f}"
            tie = lambda i: gaps[i] <= TOL_Q  # noqa: E731
        # free-running greedy generation gives llama.cpp's tokens up to a tie, where either may win
        got = greedy(llm, pr["prompt_ids"], len(pr["ids"]))
        for i, (a, b) in enumerate(zip(got, pr["ids"])):
            if a != b:
                assert tie(i), f"{at}: step {i} gave {a}, llama.cpp {b} (its top-2 gap {gaps[i]:.4f})"
                break
        else:
            assert len(got) == len(pr["ids"]), at
    llm.close()


# ---------------------------------------------------------------------------
# Bad files: a missing or mis-shaped tensor or key names itself
# ---------------------------------------------------------------------------


def _write(tmp_path, arch, change):
    spec, cfg = R.SPECS[arch]
    w = R.make_weights(spec, cfg)
    change(w)
    path = tmp_path / f"bad-{arch}.gguf"
    R.write_gguf(path, spec, cfg, w)
    return str(path)


@pytest.mark.parametrize("arch,change,message", [
    ("olmo2", lambda w: w.pop("blk.1.post_ffw_norm.weight"), "lacks tensor blk.1.post_ffw_norm.weight"),
    # a per-head q norm (qwen3's size) where olmo2 normalises the whole row
    ("olmo2", lambda w: w.__setitem__("blk.0.attn_q_norm.weight", w["blk.0.attn_q_norm.weight"][:16].copy()),
     r"blk.0.attn_q_norm.weight has shape \[16\], expected \[64\]"),
    ("olmo2", lambda w: w.__setitem__("blk.0.attn_k_norm.weight", w["blk.0.attn_q_norm.weight"].copy()),
     r"blk.0.attn_k_norm.weight has shape \[64\], expected \[32\]"),
    ("smollm3", lambda w: w.pop("blk.3.attn_k.weight"), "lacks tensor blk.3.attn_k.weight"),
    ("granite", lambda w: w.__setitem__("blk.1.ffn_up.bias", w["blk.1.ffn_up.bias"][:32].copy()),
     r"blk.1.ffn_up.bias has shape \[32\], expected \[96\]"),
    ("granitemoe", lambda w: w.pop("blk.0.ffn_up_exps.weight"), "lacks tensor blk.0.ffn_up_exps.weight"),
])
def test_bad_tensor_is_named(tmp_path, arch, change, message):
    with pytest.raises(ValueError, match=message):
        _engine.Model(_write(tmp_path, arch, change))


def test_granite_needs_its_logit_scale(tmp_path):
    import dataclasses

    spec, cfg = R.SPECS["granite"]
    path = tmp_path / "no-logit-scale.gguf"
    R.write_gguf(path, dataclasses.replace(spec, logit_div=0.0), cfg, R.make_weights(spec, cfg))
    with pytest.raises(ValueError, match="lacks granite.logit_scale"):
        _engine.Model(str(path))
    with pytest.raises(ValueError, match="granite.logit_scale is 0"):
        Llama(model_path=str(R.make_model(tmp_path, "granite")[0]), n_ctx=64, verbose=False,
              kv_overrides={"granite.logit_scale": 0.0})


# ---------------------------------------------------------------------------
# Granite's readings that the recordings do not reach
# ---------------------------------------------------------------------------


def _logits(ctx, n, **kw):
    ctx.decode(pos=list(range(n)), seq_ids=[0] * n, logits=[1] * n, **kw)
    return np.array(ctx.get_logits_all())


def test_granite_scales_given_embeddings_too(tmp_path):
    """llama.cpp scales every input of a Granite model without deepstack layers (images
    included) by embedding_scale: rows given as input go the token rows' way."""
    from conftest import engine_context

    path, spec, cfg, w = R.make_model(tmp_path, "granite")
    toks = [1, 5, 17, 42, 9, 88]
    ref = _logits(engine_context(path), len(toks), tokens=toks)
    rows = np.asarray(w["token_embd.weight"], dtype=np.float32)[toks]  # unscaled, as an image's rows arrive
    got = _logits(engine_context(path), len(toks), embd=rows)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * np.abs(ref).max())


def test_granite_without_rope(tmp_path):
    """rope.scaling.finetuned = false: llama.cpp's granite rotates no layer."""
    import dataclasses

    path, spec, cfg, w = R.make_model(tmp_path, "granite")
    toks = [1, 5, 17, 42, 9, 88]
    model = _engine.Model(str(path), kv_overrides={"granite.rope.scaling.finetuned": False})
    assert not model.unread_overrides
    got = _logits(_engine.Context(model, n_ctx=64, n_threads=2, type_k="f32", type_v="f32"), len(toks), tokens=toks)
    nope, _ = R.forward(dataclasses.replace(spec, nope_period=1), cfg, w, toks, "F32", kv_f16=False)
    roped, _ = R.forward(spec, cfg, w, toks, "F32", kv_f16=False)
    assert np.abs(got - nope).max() / np.abs(nope).max() < 2e-4
    assert np.abs(roped - nope).max() / np.abs(nope).max() > 10 * 2e-4  # and it matters (4e-3 here)
