"""Weights kept in host memory while their layer runs on a GPU: llama.cpp's
way of running a big mixture of experts on a small GPU (--n-cpu-moe,
--override-tensor "<regex>=CPU"). The options' parsing and the engine's rule
for which tensors stay (placement.h host_kept) everywhere; on a Vulkan device
(lavapipe in tools/vulkan_check.sh) the products with those weights run on
the CPU inside GPU layers and give the CPU's logits, and the placement plan
and llamapy.plan_memory put their bytes on the host."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import engine_context
from llamapy import Llama, _engine as E, plan_memory
from llamapy.gguf_file import GGUFFile

HAS_GPU = "vulkan" in E.backends() and bool(E.gpu_devices())
PROMPT = [1, 5, 17, 42, 9, 88, 3, 61, 7, 23, 11, 64]


@pytest.mark.parametrize("given,want", [
    (None, []),
    ("exps=CPU", ["exps"]),
    (r"blk\.0\.=cpu,ffn_up=CPU", [r"blk\.0\.", "ffn_up"]),
    ([r"\.ffn_(up|down)_exps\.=CPU", "attn_q=CPU"], [r"\.ffn_(up|down)_exps\.", "attn_q"]),
    ({"output": "CPU"}, ["output"]),
])
def test_override_tensor_forms(given, want):
    assert list(E.ContextParams(override_tensor=given).override_tensor) == want


@pytest.mark.parametrize("given,error,match", [
    ("exps=CUDA0", ValueError, "must be CPU"),
    ("exps", ValueError, "is not <tensor name regex>=<buffer type>"),
    ("(unclosed=CPU", ValueError, "not a valid regular expression"),
    (3, TypeError, "override_tensor must be"),
    ([1], TypeError, "entries must be strings"),
])
def test_override_tensor_errors(given, error, match):
    with pytest.raises(error, match=match):
        E.ContextParams(override_tensor=given)


def test_n_cpu_moe_is_checked():
    with pytest.raises(ValueError, match="n_cpu_moe"):
        E.ContextParams(n_cpu_moe=-1)
    assert E.ContextParams(n_cpu_moe=3).n_cpu_moe == 3


def test_which_tensors_stay_on_the_host():
    names = ["token_embd.weight", "blk.0.ffn_up_exps.weight", "blk.0.ffn_gate_inp.weight",
             "blk.1.ffn_down_exps.weight", "blk.1.ffn_gate_up_exps.weight", "blk.2.ffn_gate_exps.weight",
             "blk.2.attn_q.weight", "output.weight", "blk.10.ffn_up_exps.weight"]
    kept = E.host_kept(names, 11, E.ContextParams(n_cpu_moe=2))
    assert [n for n, k in zip(names, kept) if k] == ["blk.0.ffn_up_exps.weight", "blk.1.ffn_down_exps.weight",
                                                     "blk.1.ffn_gate_up_exps.weight"]
    kept = E.host_kept(names, 11, E.ContextParams(override_tensor=r"attn_q=CPU,^output\.=CPU"))
    assert [n for n, k in zip(names, kept) if k] == ["blk.2.attn_q.weight", "output.weight"]
    assert not any(E.host_kept(names, 11, E.ContextParams()))


def test_without_a_gpu_the_options_change_nothing_and_say_so(tiny, caplog):
    if HAS_GPU:
        pytest.skip("this build has a GPU device")
    path, *_ = tiny("qwen3moe")
    with caplog.at_level("WARNING", logger="llamapy"):
        llm = Llama(model_path=str(path), n_ctx=64, n_cpu_moe=2, verbose=False)
    assert "n_cpu_moe=2" in caplog.text and "no effect" in caplog.text
    llm.eval(PROMPT)
    plan = plan_memory(path, n_ctx=64, n_cpu_moe=2)
    assert [d["device"] for d in plan.devices] == ["cpu"]


def _logits(path, **kw):
    ctx = engine_context(path, type_k="f16", type_v="f16", **kw)
    n = len(PROMPT)
    ctx.decode(tokens=PROMPT, pos=list(range(n)), seq_ids=[0] * n, logits=[1] * n)
    out = [np.array(ctx.get_logits_all())]
    for i, tok in enumerate((5, 30)):
        ctx.decode(tokens=[tok], pos=[n + i], seq_ids=[0], logits=[1])
        out.append(np.array(ctx.get_logits_all()))
    return np.concatenate(out), ctx


@pytest.mark.skipif(not HAS_GPU, reason="needs a Vulkan device (tools/vulkan_check.sh runs it on lavapipe)")
@pytest.mark.parametrize("arch", ["qwen3moe", "gpt-oss", "deepseek2"])
@pytest.mark.parametrize("opts", [dict(n_cpu_moe=2), dict(n_cpu_moe=99), dict(override_tensor="exps=CPU"),
                                  dict(override_tensor=r"blk\.1\.attn_output=CPU,^output\.=CPU")])
def test_host_kept_weights_inside_gpu_layers(tiny, arch, opts):
    path, _, cfg, _ = tiny(arch, "Q8_0")
    cpu, _ = _logits(path)
    gpu, ctx = _logits(path, n_gpu_layers=-1, **opts)
    err = float(np.abs(gpu - cpu).max() / np.abs(cpu).max())
    # Q8_0 activations: test_vulkan_models.TOL's bound (in the tiny deepseek2 one
    # block's F16 scale rounds a step apart on lavapipe: 8.9e-3)
    assert err < 1.5e-2, err
    # the bytes of the kept tensors are on the host, the rest on the device
    p = E.ContextParams(**opts)
    with GGUFFile(path) as f:
        names = [t.name for t in f.tensors]
        sizes = [t.nbytes for t in f.tensors]
    kept = E.host_kept(names, cfg.n_layer, p)
    mem = {d["device"]: d["weight_bytes"] for d in ctx.device_memory()}
    def on_gpu_part(n):  # the engine's parts: blk.<il < n_layer> and output*; the rest is input, on the host
        parts = n.split(".")
        return n.startswith("output") or (parts[0] == "blk" and int(parts[1]) < cfg.n_layer)
    host = sum(s for n, s, k in zip(names, sizes, kept) if k or not on_gpu_part(n))
    assert mem["cpu"] == host
    plan = plan_memory(path, n_ctx=64, n_gpu_layers=-1, n_threads=2, **opts)
    got = {d["device"]: d["weight_bytes"] for d in plan.devices}
    assert got == mem
