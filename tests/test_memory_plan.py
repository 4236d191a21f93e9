"""llamapy.plan_memory against what the engine allocates (Context.kv_bytes,
device_memory()) for every architecture, and against the RSS a loaded
Gemma 3 270M really takes (in a subprocess, for a clean measurement)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import encoder_ref as ER
import model_ref as R
from llamapy import _engine as E
from llamapy import plan_memory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (n_ctx, n_parallel, type_k, type_v, flash_attn, n_batch)
CASES = [(64, 1, "f16", "f16", "auto", None), (256, 4, "q8_0", "q4_0", "off", 32), (100, 2, "f32", "bf16", "on", 16),
         (40, 3, "q8_0", "f16", "auto", 8)]
FLASH = {"auto": -1, "on": 1, "off": 0}


def _check(path, n_ctx, n_par, tk, tv, fa, nb, embedding=False):
    kw = dict(n_ctx=n_ctx, n_threads=2, n_threads_batch=2, type_k=tk, type_v=tv, flash_attn=FLASH[fa],
              n_seq_max=n_par, embeddings=embedding)
    if nb:
        kw.update(n_batch=nb)
    ctx = E.Context(E.Model(str(path)), **kw)
    plan = plan_memory(path, n_ctx=n_ctx, n_parallel=n_par, type_k=tk, type_v=tv, flash_attn=fa, n_batch=nb,
                       n_threads=2)
    dm = ctx.device_memory()[0]
    assert plan.kv_bytes == ctx.kv_bytes == dm["kv_bytes"]
    assert plan.kv_swa_cells == ctx.kv_swa_cells
    assert plan.compute_bytes == dm["activation_bytes"]
    assert plan.weights_bytes == dm["weight_bytes"]
    assert plan.flash_attn == ctx.flash_attn and plan.n_batch == ctx.n_batch and plan.n_ubatch == ctx.n_ubatch
    assert plan.devices[0]["device"] == dm["device"] == "cpu"
    return plan


@pytest.mark.parametrize("arch", list(R.SPECS))
@pytest.mark.parametrize("case", CASES)
def test_plan_equals_the_engine_on_every_decoder(tiny, arch, case):
    path, spec, cfg, _ = tiny(arch)
    n_ctx, n_par, tk, tv, fa, nb = case
    if cfg.head_dim % 32:  # block-quantized caches need head sizes that are multiples of 32
        tk, tv = ("bf16" if t.startswith("q") else t for t in (tk, tv))
    _check(path, n_ctx, n_par, tk, tv, fa, nb)


@pytest.mark.parametrize("arch", ["bert", "nomic-bert"])
def test_plan_equals_the_engine_on_encoders(tmp_path, arch):
    path, _, _ = ER.make_model(tmp_path, arch, "F32", 1)
    plan = _check(path, 64, 1, "f16", "f16", "auto", None)
    assert plan.kv_cells == 1 and not plan.flash_attn  # encoders keep no cache; auto is explicit for them


def test_sliding_window_cache_and_model_default_context(gemma_path):
    plan = _check(gemma_path, 8192, 4, "f16", "f16", "auto", None)
    assert plan.kv_swa_cells == 512 * 4 + 512  # every sequence's window plus one batch
    _check(gemma_path, 2048, 1, "q8_0", "q8_0", "off", None)
    full = plan_memory(gemma_path, n_ctx=None)
    assert full.n_ctx == 32768  # None: the model's trained length, as n_ctx=0


def test_bad_options_are_clear_errors(tiny, tmp_path):
    path = tiny("llama")[0]
    with pytest.raises(ValueError, match="type_k"):
        plan_memory(path, type_k="q9_9")
    with pytest.raises(ValueError, match="n_parallel"):
        plan_memory(path, n_parallel=0)
    with pytest.raises(ValueError, match="does not exist"):
        plan_memory(tmp_path / "nope.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(ValueError):
        plan_memory(bad)


def test_inspect_plan_cli(tiny):
    path = tiny("gemma3")[0]
    r = subprocess.run([sys.executable, "-m", "llamapy", "inspect", str(path), "--plan", "-c", "64", "-np", "2"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    plan = plan_memory(path, n_ctx=64, n_parallel=2)
    assert "KV cache:" in r.stdout and f"({plan.total_bytes} bytes)" in r.stdout and "device cpu" in r.stdout


_RSS_SCRIPT = r"""
import json, sys
def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
from llamapy import Llama, plan_memory
path, n_ctx = sys.argv[1], int(sys.argv[2])
before = rss()
llm = Llama(path, n_ctx=n_ctx, n_batch=n_ctx, n_threads=2, n_threads_batch=2, use_mmap=False, verbose=False)
llm.eval(list(range(1000, 1000 + n_ctx - 1)))  # fills every KV cell and every activation row
llm.eval([1000 + n_ctx])                          # and one decode
grown = rss() - before
plan = plan_memory(path, n_ctx=n_ctx, n_batch=n_ctx, n_threads=2)
print(json.dumps({"grown": grown, "plan": plan.total_bytes}))
"""


def test_plan_predicts_rss_growth_within_5_percent(gemma_path):
    r = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, gemma_path, "512"], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert abs(out["plan"] - out["grown"]) <= 0.05 * out["grown"], out
