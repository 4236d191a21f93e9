"""The forward pass on the Vulkan backend (n_gpu_layers), against the CPU:
every architecture's tiny model fully offloaded, every split point of
n_gpu_layers from 0 to n_layer + 1, encoders, the placement plan it reports
(Context.placement / Llama.device_map), and its failure cases (a plan too
big for the device, a cache type the device cannot store). CI runs this on
Mesa's lavapipe (tools/vulkan_check.sh); without the backend, or without a
device, the module is skipped: tests/test_llama_api.py checks the warning
such a build gives instead."""
from __future__ import annotations

import logging
import os

import numpy as np
import pytest

import encoder_ref as ER
import model_ref as R
from conftest import engine_context
from llamapy import _engine as E

pytestmark = pytest.mark.skipif("vulkan" not in E.backends() or not E.gpu_devices(),
                                reason="built without the Vulkan backend, or no Vulkan device")

PROMPT = [1, 5, 17, 42, 9, 88, 3, 61, 7, 23, 11, 64]


def run(path, steps=(5, 30), **kw):
    """Logits of every prompt row, then of each single-token step after it."""
    kw.setdefault("type_k", "f16")
    kw.setdefault("type_v", "f16")
    ctx = engine_context(path, **kw)
    n = len(PROMPT)
    ctx.decode(tokens=PROMPT, pos=list(range(n)), seq_ids=[0] * n, logits=[1] * n)
    out = [np.array(ctx.get_logits_all())]
    for i, tok in enumerate(steps):
        ctx.decode(tokens=[tok], pos=[n + i], seq_ids=[0], logits=[1])
        out.append(np.array(ctx.get_logits_all()))
    return np.concatenate(out), ctx


def rel(got, ref):
    return float(np.abs(got - ref).max() / np.abs(ref).max())


# (weight type, largest error relative to max |logit|). The device sums in
# another order (and its attention keeps F32 softmax weights where the CPU's
# explicit path rounds them to F16); activation quantization is the CPU's,
# but an input an ULP apart can round to the next Q8_0 level, or move a
# block's F16 scale by one step (every value of the block ~1e-3 off). In the
# tiny gpt-oss one quant of a last-layer input row flips (logits 4.3e-3 off),
# in the tiny deepseek2 one block's scale (8.9e-3, after its latent attention
# and experts); the other architectures stay below 2e-7 with Q8_0 weights.
TOL = {"F32": 2e-3, "Q8_0": 1.5e-2, "F16": 3e-3}


@pytest.mark.parametrize("arch", list(R.SPECS))
@pytest.mark.parametrize("wtype", ["F32", "Q8_0"])
def test_every_architecture_matches_the_cpu(tiny, arch, wtype):
    path, _, cfg, _ = tiny(arch, wtype)
    cpu, _ = run(path)
    gpu, ctx = run(path, n_gpu_layers=-1)
    devices = [p["device"] for p in ctx.placement()]
    assert devices == ["cpu"] + ["gpu0"] * cfg.n_layer + ["gpu0"]
    assert rel(gpu, cpu) < TOL[wtype]
    assert (gpu.argmax(1) == cpu.argmax(1)).mean() >= 0.9


# Two dense architectures and every mixture of experts (routing, expert
# products and their weighted sum on the device, the activations crossing at
# each split point).
SPLIT_ARCHS = ["llama", "gemma3"] + [a for a, (_, cfg) in R.SPECS.items() if cfg.n_expert]


@pytest.mark.parametrize("arch", SPLIT_ARCHS)
@pytest.mark.parametrize("flash", [False, True])
def test_every_split_gives_the_same_logits(tiny, arch, flash):
    path, _, cfg, _ = tiny(arch, "F16")
    cpu, _ = run(path, flash_attn=flash)
    for ngl in range(0, cfg.n_layer + 2):
        got, ctx = run(path, n_gpu_layers=ngl, flash_attn=flash)
        parts = ctx.placement()
        on_gpu = [p["name"] for p in parts if p["device"] != "cpu"]
        want = [f"blk.{il}" for il in range(max(0, cfg.n_layer - ngl), cfg.n_layer)]
        assert on_gpu == want + (["output"] if ngl > cfg.n_layer else []), ngl
        assert all(p["kv_device"] == p["device"] for p in parts if p["layer"] >= 0)  # each layer's cache beside it
        assert rel(got, cpu) < TOL["F16"], ngl


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("flash", [False, True])
def test_offload_kqv_false_keeps_the_cache_and_its_attention_on_the_cpu(tiny, arch, flash):
    """offload_kqv=False: the layers run on the device, the KV cache stays in
    host memory and the attention over it runs on the CPU, at every split;
    the device plan counts no cache bytes."""
    path, _, cfg, _ = tiny(arch, "F16")
    cpu, _ = run(path, flash_attn=flash)
    for ngl in (1, cfg.n_layer, cfg.n_layer + 1):
        got, ctx = run(path, n_gpu_layers=ngl, flash_attn=flash, offload_kqv=False)
        parts = ctx.placement()
        assert [p["name"] for p in parts if p["device"] != "cpu"][:1] == [f"blk.{cfg.n_layer - ngl if ngl <= cfg.n_layer else 0}"]
        assert all(p["kv_device"] == "cpu" for p in parts if p["layer"] >= 0)
        assert rel(got, cpu) < TOL["F16"], ngl
        assert not ctx.params.offload_kqv


@pytest.mark.parametrize("cache", ["q8_0", "iq4_nl"])
@pytest.mark.parametrize("offload_kqv", [True, False])
def test_quantized_caches_on_either_side(tiny, cache, offload_kqv):
    """Quantized caches with the layers on the device, the cache on the device
    (its store gives the CPU's bytes: tests/test_backend_ops.py) or on the
    CPU (offload_kqv=False): the logits are the CPU's within the device
    tolerance. Keys computed on the device an ULP apart from the CPU's can
    round to the next 4-bit level: IQ4_NL gets the width of a few such steps
    (measured 5.8e-3), Q8_0 the F32 tolerance."""
    path, _, cfg, _ = tiny("gemma3", "F32")
    cpu, _ = run(path, type_k=cache, type_v=cache)
    got, ctx = run(path, n_gpu_layers=-1, type_k=cache, type_v=cache, offload_kqv=offload_kqv)
    assert {p["device"] for p in ctx.placement() if p["layer"] >= 0} == {"gpu0"}
    assert {p["kv_device"] for p in ctx.placement() if p["layer"] >= 0} == {"gpu0" if offload_kqv else "cpu"}
    assert rel(got, cpu) < (TOL["F32"] if cache == "q8_0" else 1.5e-2)
    assert (got.argmax(1) == cpu.argmax(1)).mean() >= 0.9


def _two_devices(monkeypatch):
    """Two logical Vulkan devices on the first physical one (each its own
    VkDevice, queue and memory account): enough to test layer splits, which
    only decide where parts live and how activations cross."""
    import subprocess
    import sys

    monkeypatch.setenv("LLAMAPY_VK_VISIBLE_DEVICES", "0,0")
    code = "from llamapy import _engine as E; print(len(E.gpu_devices()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2"


def _split_run(path, arch, ngl, shares=None, **kw):
    """run() in a fresh process that sees two devices: (logits, placement)."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys, numpy as np\n"
        f"sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
        "import test_vulkan_models as T\n"
        f"got, ctx = T.run({str(path)!r}, n_gpu_layers={ngl}, **{dict(kw, **({'tensor_split': shares} if shares else {}))!r})\n"
        f"np.save({str(path) + '.npy'!r}, got)\n"
        # llamapy.plan_memory predicts the same bytes per device
        "from llamapy import plan_memory\n"
        f"plan = plan_memory({str(path)!r}, n_ctx=64, n_gpu_layers={ngl}, tensor_split={shares!r}, "
        f"offload_kqv={kw.get('offload_kqv', True)!r}, n_threads=2)\n"
        "assert {d['device']: (d['weight_bytes'], d['kv_bytes']) for d in plan.devices} == "
        "{d['device']: (d['weight_bytes'], d['kv_bytes']) for d in ctx.device_memory()}, "
        "(plan.devices, ctx.device_memory())\n"
        "print(json.dumps([dict(p) for p in ctx.placement()]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return np.load(str(path) + ".npy"), json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_layers_split_across_two_devices(tiny, arch, monkeypatch):
    """tensor_split across two devices: consecutive layers in proportion to
    the shares, the output part on the last device, each layer's cache on
    its device (or the CPU with offload_kqv=False), and the CPU's logits."""
    _two_devices(monkeypatch)
    path, _, cfg, _ = tiny(arch, "F16")
    cpu, _ = run(path)
    n = cfg.n_layer


    def expected(ngl, shares):
        # llama.cpp's rule: the k-th of the n offloaded parts goes to the first
        # device whose cumulative share (normalised) is above k / n.
        n_parts = n + 1 if ngl < 0 else ngl
        first = n + 1 - n_parts if ngl < 0 else n - ngl
        cum = np.cumsum(shares) / np.sum(shares)
        devs = ["cpu"] * (n + 2)
        for k in range(n_parts):
            devs[first + 1 + k] = f"gpu{int(np.argmax(cum > k / n_parts))}"
        return devs

    cases = [  # (n_gpu_layers, tensor_split)
        (-1, [1, 1]), (-1, [0, 1]), (-1, [1, 0]), (n, [3, 1]), (n - 1, [1, 3]), (-1, [1, 4]),
        (-1, None),  # no shares: by free memory (the same on both here: an even split)
    ]
    for ngl, shares in cases:
        want = expected(ngl, shares or [1, 1])
        for kqv in (True, False):
            got, parts = _split_run(path, arch, ngl, shares, offload_kqv=kqv)
            devs = [p["device"] for p in parts]
            assert devs == want, (ngl, shares, devs)
            layers = devs[1:-1]
            kv = [p["kv_device"] for p in parts if p["layer"] >= 0]
            assert kv == (layers if kqv else ["cpu"] * n)
            assert rel(got, cpu) < TOL["F16"], (shares, kqv)


def test_split_options_are_checked(tiny, monkeypatch):
    from llamapy import Llama

    path, _, cfg, _ = tiny("llama", "F32")
    with pytest.raises(ValueError, match="split_mode"):
        engine_context(path, n_gpu_layers=1, split_mode=2)
    with pytest.raises(ValueError, match="tensor_split"):
        engine_context(path, n_gpu_layers=1, tensor_split=[1.0, -1.0])
    with pytest.raises(ValueError, match="tensor_split"):
        Llama(model_path=str(path), n_ctx=64, n_gpu_layers=1, tensor_split=[float("nan")], verbose=False)
    with pytest.raises(ValueError, match="split_mode"):
        Llama(model_path=str(path), n_ctx=64, n_gpu_layers=1, split_mode=7, verbose=False)
    # One device: shares for more devices than there are leave every GPU part on it.
    ctx = engine_context(path, n_gpu_layers=-1, tensor_split=[0.0, 5.0])
    assert {p["device"] for p in ctx.placement()[1:]} == {"gpu0"}
    monkeypatch.setenv("LLAMAPY_VK_VISIBLE_DEVICES", "7")
    import subprocess
    import sys

    code = (f"from llamapy import Llama\nLlama(model_path={str(path)!r}, n_ctx=64, n_gpu_layers=1)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "LLAMAPY_VK_VISIBLE_DEVICES='7'" in out.stderr  # the warning says why no device is there


@pytest.mark.parametrize("wtype", ["F32", "Q8_0"])
def test_lora_adapters_with_gpu_layers(tiny, tmp_path, wtype):
    """LoRA terms on the device: every split gives the CPU's logits with the
    adapter; replacing and removing adapters takes effect (the device drops
    its copies of the old ones)."""
    import test_lora as L

    path, _, cfg, w = tiny("llama", "F32")
    names = ["blk.0.attn_q.weight", "blk.1.ffn_down.weight", "blk.1.attn_v.weight", "output.weight"]
    r1, r2 = (4, 2) if wtype == "F32" else (32, 32)  # Q8_0 rows are whole blocks of 32
    a1 = L.write_adapter(tmp_path / "a1.gguf", "llama", L.make_pairs(w, names, r1, seed=1, gain=0.1), wtype=wtype)
    a2 = L.write_adapter(tmp_path / "a2.gguf", "llama", L.make_pairs(w, names[:2], r2, seed=2, gain=0.1), wtype=wtype)

    def run_with(ngl, plan):
        model = E.Model(str(path))
        ctx = E.Context(model, n_ctx=64, n_threads=2, type_k="f32", type_v="f32", n_gpu_layers=ngl)
        n = len(L.PROMPT)
        out = []
        for adapters in plan:
            ctx.set_adapters([(E.LoraAdapter(model, p), s) for p, s in adapters])
            ctx.kv_clear()
            ctx.decode(tokens=L.PROMPT, pos=list(range(n)), seq_ids=[0] * n, logits=[1] * n)
            out.append(np.array(ctx.get_logits_all()))
        return out

    plan = [[(a1, 1.0)], [(a2, 0.5), (a1, 0.25)], []]
    cpu = run_with(0, plan)
    assert rel(cpu[0], cpu[2]) > 1e-2 and rel(cpu[1], cpu[2]) > 1e-2  # the adapters matter
    for ngl in (1, -1):
        gpu = run_with(ngl, plan)
        for g, c in zip(gpu, cpu):
            assert rel(g, c) < TOL["F32"], ngl


@pytest.mark.parametrize("arch,wtype", [("llama", "Q8_0"), ("gemma3", "F16"), ("qwen3", "F32")])
def test_subgroup_shaders_give_the_portable_shaders_bits(tiny, arch, wtype):
    """The shaders with reductions come in two variants: subgroup shuffles
    (devices that have them) and shared-memory trees (the portable ones,
    LLAMAPY_VULKAN_SUBGROUPS=0). They add in the same order: the same logits,
    bit for bit, prompt and steps, both attention paths."""
    import subprocess
    import sys

    path, _, _, _ = tiny(arch, wtype)
    code = (
        "import sys, numpy as np\n"
        f"sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
        "import test_vulkan_models as T\n"
        "from llamapy import _engine as E\n"
        "print(E.gpu_devices()[0]['subgroup_ops'])\n"
        f"a, _ = T.run({str(path)!r}, n_gpu_layers=-1, flash_attn=False)\n"
        f"b, _ = T.run({str(path)!r}, n_gpu_layers=-1, flash_attn=True)\n"
        "np.save(sys.argv[1], np.concatenate([a, b]))\n")
    got = {}
    for sg in ("1", "0"):
        out_path = str(path) + f".sg{sg}.npy"
        env = dict(os.environ, LLAMAPY_VULKAN_SUBGROUPS=sg)
        r = subprocess.run([sys.executable, "-c", code, out_path], capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        got[sg] = (r.stdout.split()[0], np.load(out_path))
    assert got["0"][0] == "False"
    # CI's lavapipe has subgroup shuffles: there this compares the two shader
    # variants. A device without them runs the portable shaders both times
    # (the comparison then only says the results do not depend on the setting).
    assert got["1"][0] == "True" or not os.environ.get("CI"), "CI's device must run the subgroup shaders"
    np.testing.assert_array_equal(got["1"][1], got["0"][1])


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_plan_memory_places_bytes_as_the_engine(tiny, arch):
    """llamapy.plan_memory(n_gpu_layers=..., offload_kqv=...) gives each
    device the weight and KV bytes the engine's placement holds there."""
    from llamapy import plan_memory

    path, _, cfg, _ = tiny(arch, "Q8_0")
    for ngl in (0, 1, cfg.n_layer, cfg.n_layer + 1, -1):
        for kqv in (True, False):
            ctx = engine_context(path, n_ctx=64, n_gpu_layers=ngl, offload_kqv=kqv, type_k="f16", type_v="f16")
            plan = plan_memory(path, n_ctx=64, n_gpu_layers=ngl, offload_kqv=kqv, n_threads=2)
            got = {d["device"]: (d["weight_bytes"], d["kv_bytes"]) for d in plan.devices}
            want = {d["device"]: (d["weight_bytes"], d["kv_bytes"]) for d in ctx.device_memory()}
            assert got == want, (ngl, kqv)
            assert sum(d["weight_bytes"] for d in plan.devices) == plan.weights_bytes
            assert sum(d["kv_bytes"] for d in plan.devices) == plan.kv_bytes


def test_sequences_cache_edits_and_state_on_the_gpu(tiny):
    """Two sequences in one batch, seq_rm and a state round trip: the KV cache
    lives in device memory, which the host edits in place between steps."""
    path, _, _, _ = tiny("qwen3", "F32")
    outs = []
    for ngl in (0, -1):
        ctx = engine_context(path, n_gpu_layers=ngl, n_seq_max=2, type_k="f16", type_v="f16")
        a, b = PROMPT[:6], PROMPT[6:]
        ctx.decode(tokens=a + b, pos=list(range(6)) + list(range(6)), seq_ids=[0] * 6 + [1] * 6, logits=[1] * 12)
        first = np.array(ctx.get_logits_all())
        state = ctx.state_get()
        ctx.kv_seq_rm(1, 3, -1)
        ctx.decode(tokens=[9], pos=[3], seq_ids=[1], logits=[1])
        after_rm = np.array(ctx.get_logits_all())
        ctx.state_set(state)
        ctx.decode(tokens=[9], pos=[6], seq_ids=[0], logits=[1])
        after_restore = np.array(ctx.get_logits_all())
        outs.append(np.concatenate([first, after_rm, after_restore]))
    assert rel(outs[1], outs[0]) < TOL["F32"]


@pytest.mark.parametrize("arch", ["bert", "nomic-bert"])
def test_encoders_on_the_gpu(tmp_path, arch):
    path, cfg, _ = ER.make_model(tmp_path, arch, "F32", pooling=0)
    toks = [2, 10, 12, 7, 40, 3]
    got = {}
    for ngl in (0, -1):
        ctx = engine_context(path, embeddings=True, n_gpu_layers=ngl)
        ctx.decode(tokens=toks, pos=list(range(len(toks))), seq_ids=[0] * len(toks))
        got[ngl] = np.array(ctx.get_embeddings_all())
        if ngl:
            assert {p["device"] for p in ctx.placement() if p["layer"] >= 0} == {"gpu0"}
    assert rel(got[-1], got[0]) < 5e-4  # within the CPU's own tolerance to the reference (3e-4) twice


def test_tensor_callback_sees_device_results(tiny):
    path, _, cfg, _ = tiny("llama", "F32")
    seen = {}
    for ngl in (0, -1):
        ctx = engine_context(path, n_gpu_layers=ngl)
        names = {}
        ctx.set_tensor_callback(lambda name, a: names.__setitem__(name, np.array(a)))
        ctx.decode(tokens=PROMPT, pos=list(range(len(PROMPT))), seq_ids=[0] * len(PROMPT), logits=[1] * len(PROMPT))
        seen[ngl] = names
    for name in (f"l_out-{cfg.n_layer - 1}", "result_output"):
        assert rel(seen[-1][name], seen[0][name]) < 2e-3


def test_device_map_and_verbose_report(tiny, caplog):
    from llamapy import Llama

    path, _, cfg, _ = tiny("llama", "F32")
    with caplog.at_level(logging.INFO, logger="llamapy"):
        llm = Llama(model_path=str(path), n_ctx=64, n_gpu_layers=2, verbose=False)
    dm = llm.device_map()
    assert [p["device"] for p in dm] == ["cpu"] * (cfg.n_layer - 1) + ["gpu0", "gpu0", "cpu"]
    assert any("offloaded 2/" in r.getMessage() for r in caplog.records)
    llm.close()
    for value in (-1, "all"):
        llm = Llama(model_path=str(path), n_ctx=64, n_gpu_layers=value, verbose=False)
        assert [p["device"] for p in llm.device_map()] == ["cpu"] + ["gpu0"] * (cfg.n_layer + 1)
        llm.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="llamapy"):
        llm = Llama(model_path=str(path), n_ctx=64, n_gpu_layers=-1, offload_kqv=False, verbose=False)
    assert not caplog.records  # a working option: no "no effect" note
    assert llm.context_params.offload_kqv is False
    dm = llm.device_map()
    assert {p["kv_device"] for p in dm if p["layer"] >= 0} == {"cpu"} and dm[1]["device"] == "gpu0"
    assert llm.create_completion("a b", max_tokens=3, temperature=0)["usage"]["completion_tokens"] >= 1
    llm.close()


def test_a_plan_too_big_for_the_device_says_so(tiny, monkeypatch):
    path, _, cfg, _ = tiny("llama", "F32")
    monkeypatch.setenv("LLAMAPY_VULKAN_MEMORY", "100000")  # 100 kB: a fake small device
    with pytest.raises(ValueError, match=r"n_gpu_layers=-1 needs [\d.]+ MiB .* but [\d.]+ MiB of [\d.]+ MiB are free"):
        engine_context(path, n_gpu_layers=-1)
    ctx = engine_context(path, n_gpu_layers=-2)  # auto: none fit
    assert ctx.params.n_gpu_layers == 0
    assert all(p["device"] == "cpu" for p in ctx.placement())
    monkeypatch.setenv("LLAMAPY_VULKAN_MEMORY", str(8 << 30))
    ctx = engine_context(path, n_gpu_layers=-2)  # auto: everything fits
    assert ctx.params.n_gpu_layers == cfg.n_layer + 1
    monkeypatch.setenv("LLAMAPY_VULKAN_MEMORY", "lots")
    with pytest.raises(ValueError, match="LLAMAPY_VULKAN_MEMORY"):
        engine_context(path, n_gpu_layers=1)


def test_what_the_device_cannot_do_says_so(tiny, gemma_path):
    path, _, _, _ = tiny("llama", "F32")
    with pytest.raises(ValueError, match="main_gpu=7"):
        engine_context(path, n_gpu_layers=1, main_gpu=7)
    with pytest.raises(ValueError, match="n_gpu_layers"):
        engine_context(path, n_gpu_layers=-3)


def test_gemma3_270m_fully_offloaded(gemma_path):
    """The real model, every part but the embedding lookups on the device:
    the same next token as the CPU, logits within the spread the CPU's own ISA
    levels show on Gemma (its activations amplify rounding differences layer
    by layer; benchmarks/RESULTS.md has a longer perplexity comparison)."""
    toks = [2, 651, 3925, 529, 506, 17491, 3544, 12124]
    out = {}
    for ngl in (0, -1):
        ctx = E.Context(E.Model(gemma_path), n_ctx=64, n_threads=2, n_gpu_layers=ngl)
        ctx.decode(tokens=toks, pos=list(range(len(toks))), seq_ids=[0] * len(toks), logits=[0] * 7 + [1])
        out[ngl] = np.array(ctx.get_logits_all())[-1]
    assert out[-1].argmax() == out[0].argmax()
    assert rel(out[-1], out[0]) < 0.12  # measured 0.08 on lavapipe
    top = np.argsort(out[0])[-5:]
    assert set(np.argsort(out[-1])[-5:]) & set(top) and len(set(np.argsort(out[-1])[-5:]) & set(top)) >= 4
