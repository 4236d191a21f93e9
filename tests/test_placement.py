"""The per-layer placement plan (Context.placement / device_memory): which
device holds each layer's weights and KV cache (all on the CPU in this
build) and the bytes per device, which must add up to the file's tensor
bytes, the context's kv_bytes and its activation buffers."""

from __future__ import annotations

import pytest

import encoder_ref as ER
import model_ref as R
from llamapy import _engine as E
from llamapy.gguf_file import GGUFFile


def check_plan(path, ctx, n_layer):
    parts = ctx.placement()
    assert [p["name"] for p in parts] == ["input"] + [f"blk.{il}" for il in range(n_layer)] + ["output"]
    assert [p["layer"] for p in parts] == [-1] + list(range(n_layer)) + [-1]
    assert all(p["device"] == "cpu" for p in parts)
    assert all(p["kv_device"] == ("cpu" if p["layer"] >= 0 else None) for p in parts)
    tensors = GGUFFile(str(path)).tensors
    assert sum(p["weight_bytes"] for p in parts) == sum(t.nbytes for t in tensors)
    for il in range(n_layer):
        want = sum(t.nbytes for t in tensors if t.name.startswith(f"blk.{il}."))
        assert parts[il + 1]["weight_bytes"] == want
    assert sum(p["kv_bytes"] for p in parts) == ctx.kv_bytes
    assert parts[0]["kv_bytes"] == parts[-1]["kv_bytes"] == 0

    (dev,) = ctx.device_memory()
    assert dev["device"] == "cpu"
    assert dev["weight_bytes"] == sum(t.nbytes for t in tensors)
    assert dev["kv_bytes"] == ctx.kv_bytes
    assert dev["activation_bytes"] > 0
    assert dev["total_bytes"] == dev["weight_bytes"] + dev["kv_bytes"] + dev["activation_bytes"]
    return parts, dev


@pytest.mark.parametrize("arch", list(R.SPECS))
def test_decoder_plan_adds_up(tiny, arch):
    path, _, cfg, _ = tiny(arch)
    ctx = E.Context(E.Model(str(path)), n_ctx=64, n_threads=2)
    parts, _ = check_plan(path, ctx, cfg.n_layer)
    if arch == "llama":  # untied output head
        assert parts[-1]["weight_bytes"] > 0


def test_window_cache_layers(tiny):
    """Gemma 3's sliding-window layers keep their rows in a smaller cache."""
    path, spec, cfg, _ = tiny("gemma3")
    ctx = E.Context(E.Model(str(path)), n_ctx=64, n_batch=8, n_threads=2)
    assert ctx.kv_swa_cells > 0
    parts, _ = check_plan(path, ctx, cfg.n_layer)
    kv = [p["kv_bytes"] for p in parts[1:-1]]
    for il in range(cfg.n_layer):
        smaller = R.is_swa(spec, cfg, il)
        assert (kv[il] < max(kv)) == smaller, il


def test_activations_grow_with_the_batch(tiny):
    path, _, _, _ = tiny("qwen2")
    small = E.Context(E.Model(str(path)), n_ctx=64, n_batch=8, n_ubatch=8, n_threads=2).device_memory()[0]
    big = E.Context(E.Model(str(path)), n_ctx=64, n_batch=64, n_ubatch=64, n_threads=2).device_memory()[0]
    assert big["activation_bytes"] > small["activation_bytes"]
    assert big["weight_bytes"] == small["weight_bytes"]


@pytest.mark.parametrize("arch", ["bert", "nomic-bert"])
def test_encoder_plan_adds_up(tmp_path, arch):
    path, cfg, _ = ER.make_model(tmp_path, arch)
    ctx = E.Context(E.Model(str(path)), n_ctx=32, n_batch=32, embeddings=True, n_threads=2)
    check_plan(path, ctx, cfg.n_layer)


@pytest.mark.model
def test_gemma3_270m_plan(gemma_path):
    ctx = E.Context(E.Model(gemma_path), n_ctx=256, n_threads=2)
    check_plan(gemma_path, ctx, 18)
