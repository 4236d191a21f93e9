"""RoPE scaling: linear and YaRN, from the model's metadata
(rope.scaling.type / factor / original_context_length / attn_factor) and from
the context options llama-cpp-python has (rope_scaling_type, rope_freq_scale,
yarn_ext_factor, yarn_attn_factor, yarn_beta_fast, yarn_beta_slow,
yarn_orig_ctx), against the numpy reference (tests/model_ref.py)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import model_ref as R
from llamapy import Llama
from llamapy import _engine as E

PROMPT = [1, 5, 17, 42, 9, 88, 3, 61]
POS0 = 150  # far enough out that scaling changes the angles a lot
YARN = {"type": "yarn", "factor": 4.0, "original_context_length": 64, "attn_factor": 1.1}


def write(tmp_path, arch, scaling, name):
    spec, cfg = R.SPECS[arch]
    cfg = dataclasses.replace(cfg, rope_scaling=scaling, n_ctx_train=1024)
    w = R.make_weights(spec, cfg, seed=3)
    path = tmp_path / f"{name}.gguf"
    R.write_gguf(path, spec, cfg, w, "F32")
    return str(path), spec, cfg, w


def logits(path, **kw):
    ctx = E.Context(E.Model(path), n_ctx=256, n_threads=2, type_k="f32", type_v="f32", **kw)
    n = len(PROMPT)
    ctx.decode(tokens=PROMPT, pos=list(range(POS0, POS0 + n)), seq_ids=[0] * n, logits=[1] * n)
    return np.array(ctx.get_logits_all()), ctx.rope


def reference(spec, cfg, w, scaling):
    ref, _ = R.forward(spec, cfg, w, PROMPT, "F32", kv_f16=False, pos0=POS0, rope_scaling=scaling)
    return ref


def yarn_ref(factor=4.0, ext=1.0, attn=1.1, fast=32.0, slow=1.0, orig=64):
    return {"freq_scale": 1.0 / factor, "ext_factor": ext, "attn_factor": attn, "beta_fast": fast,
            "beta_slow": slow, "n_ctx_orig": orig}


def assert_close(got, ref, tol=3e-4):
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert err < tol, err


# olmo2_swa: OLMo 3's window layers rotate with no scaling and no YaRN, its full layers with both
@pytest.mark.parametrize("arch", ["qwen2", "llama", "gemma3", "olmo2_swa"])
def test_yarn_from_metadata_matches_reference(tmp_path, arch):
    path, spec, cfg, w = write(tmp_path, arch, YARN, "yarn")
    got, rope = logits(path)
    assert rope["ext_factor"] == 1.0 and rope["freq_scale"] == 0.25 and rope["n_ctx_orig"] == 64
    ref = reference(spec, cfg, w, yarn_ref())
    assert_close(got, ref)
    # and it matters: without scaling the logits are far off
    plain = reference(spec, cfg, w, None)
    assert np.abs(plain - ref).max() / np.abs(ref).max() > 100 * 3e-4


def test_linear_from_metadata_matches_reference(tmp_path):
    path, spec, cfg, w = write(tmp_path, "qwen2", {"type": "linear", "factor": 4.0}, "linear")
    got, rope = logits(path)
    assert rope["ext_factor"] == 0.0 and rope["freq_scale"] == 0.25
    assert_close(got, reference(spec, cfg, w, yarn_ref(ext=0.0, attn=1.0)))


def test_context_options_turn_yarn_on(tmp_path):
    """An unscaled model with rope_scaling_type=2 and YaRN's values given as
    options computes exactly what the YaRN model computes from its metadata."""
    plain, spec, cfg, w = write(tmp_path, "qwen2", None, "plain")
    yarn, *_ = write(tmp_path, "qwen2", YARN, "yarn")
    got, rope = logits(plain, rope_scaling_type=2, rope_freq_scale=0.25, yarn_orig_ctx=64, yarn_attn_factor=1.1)
    assert rope["ext_factor"] == 1.0
    np.testing.assert_array_equal(got, logits(yarn)[0])
    # beta values change which dims are blended
    got2, _ = logits(plain, rope_scaling_type=2, rope_freq_scale=0.25, yarn_orig_ctx=64, yarn_attn_factor=1.1,
                     yarn_beta_fast=8.0, yarn_beta_slow=2.0)
    assert_close(got2, reference(spec, cfg, w, yarn_ref(fast=8.0, slow=2.0)))


def test_context_options_turn_scaling_off_or_to_linear(tmp_path):
    plain, spec, cfg, w = write(tmp_path, "qwen2", None, "plain")
    yarn, *_ = write(tmp_path, "qwen2", YARN, "yarn")
    # none: no frequency scale, no YaRN blend (the attention factor stays the model's)
    got, rope = logits(yarn, rope_scaling_type=0)
    assert rope["freq_scale"] == 1.0 and rope["ext_factor"] == 0.0
    assert_close(got, reference(spec, cfg, w, yarn_ref(factor=1.0, ext=0.0)))
    # linear: the model's factor without the blend; the same with yarn_ext_factor=0
    lin, _ = logits(yarn, rope_scaling_type=1)
    assert_close(lin, reference(spec, cfg, w, yarn_ref(ext=0.0)))
    np.testing.assert_array_equal(lin, logits(yarn, yarn_ext_factor=0.0)[0])


def test_llama_options_reach_the_context(tmp_path):
    plain, *_ = write(tmp_path, "qwen2", None, "plain")
    llm = Llama(plain, n_ctx=256, verbose=False, rope_scaling_type=2, rope_freq_scale=0.5, yarn_orig_ctx=128,
                yarn_beta_fast=16.0, yarn_attn_factor=1.0)
    r = llm._ctx.rope
    assert (r["freq_scale"], r["ext_factor"], r["n_ctx_orig"], r["beta_fast"], r["beta_slow"]) == (0.5, 1.0, 128,
                                                                                                   16.0, 1.0)
    default = Llama(plain, n_ctx=256, verbose=False)._ctx.rope
    assert (default["freq_scale"], default["ext_factor"]) == (1.0, 0.0)


@pytest.mark.parametrize("kw,exc", [
    ({"rope_scaling_type": 3}, NotImplementedError),
    ({"rope_scaling_type": 7}, ValueError),
    ({"yarn_beta_fast": -1.0}, ValueError),
    ({"yarn_attn_factor": "x"}, TypeError),
    ({"yarn_orig_ctx": -5}, ValueError),
])
def test_bad_scaling_options(tmp_path, kw, exc):
    plain, *_ = write(tmp_path, "qwen2", None, "plain")
    with pytest.raises(exc):
        Llama(plain, n_ctx=64, verbose=False, **kw)
