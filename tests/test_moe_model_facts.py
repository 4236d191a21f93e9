"""Mixture-of-experts models as files: what the planner, the load report and
the loader say about them. Experts, total and active parameters and the
bytes a decode step reads (llamapy.experts) against counts made here from the
weights; bad expert tensors (missing, mis-shaped, a bad count in the
metadata) are clear errors naming the problem."""
from __future__ import annotations

import pytest

import model_ref as R
from llamapy import Llama, plan_memory
from llamapy.experts import expert_summary
from llamapy.gguf_file import GGUFFile

MOE = ["qwen3moe", "llama_moe", "gpt-oss", "glm4moe", "deepseek2"]


@pytest.mark.parametrize("arch", MOE)
def test_summary_counts_what_a_token_reads(tiny, arch):
    path, spec, cfg, w = tiny(arch, "F16")
    ex = expert_summary(path)
    assert ex is not None and ex.n_expert == cfg.n_expert and ex.n_expert_used == cfg.n_expert_used
    own = {k: v for k, v in w.items() if not k.startswith(f"blk.{cfg.n_layer}.")}  # the MTP layer is never run
    total = sum(v.size for v in own.values())
    experts = sum(v.size for k, v in own.items() if "_exps." in k)
    assert ex.params_total == total
    assert ex.params_active == total - experts + experts * cfg.n_expert_used // cfg.n_expert
    with GGUFFile(path) as f:
        sizes = {t.name: t.nbytes for t in f.tensors}
    # one embedding row, the chosen experts' share, everything else whole
    want = sizes["token_embd.weight"] // cfg.n_vocab
    for k in own:
        if k == "token_embd.weight":
            continue
        want += sizes[k] * cfg.n_expert_used // cfg.n_expert if "_exps." in k else sizes[k]
    assert ex.bytes_read_per_token == want
    assert plan_memory(path, n_ctx=64).experts == ex.as_dict()


def test_dense_models_have_no_summary(tiny):
    path, *_ = tiny("llama")
    assert expert_summary(path) is None and plan_memory(path, n_ctx=64).experts is None


def test_load_report_names_the_experts(tiny, capfd):
    path, spec, cfg, _ = tiny("qwen3moe")
    Llama(model_path=str(path), n_ctx=64, verbose=True)
    err = capfd.readouterr().err
    assert f"n_expert    = {cfg.n_expert}, {cfg.n_expert_used} per token, width {cfg.n_ff_exp}" in err
    assert "parameters per token; weights read per token" in err


def _write(tmp_path, arch, edit):
    spec, cfg = R.SPECS[arch]
    w = R.make_weights(spec, cfg)
    edit(w)
    path = tmp_path / f"bad-{arch}.gguf"
    R.write_gguf(path, spec, cfg, w)
    return path


@pytest.mark.parametrize("tensor", ["ffn_up_exps", "ffn_down_exps", "ffn_gate_exps", "ffn_gate_inp"])
def test_a_missing_expert_tensor_is_named(tmp_path, tensor):
    path = _write(tmp_path, "qwen3moe", lambda w: w.pop(f"blk.1.{tensor}.weight"))
    with pytest.raises(ValueError, match=rf"lacks tensor blk\.1\.{tensor}\.weight"):
        Llama(model_path=str(path), n_ctx=64, verbose=False)


def test_a_misshaped_expert_tensor_is_named(tmp_path):
    def drop_expert(w):
        w["blk.0.ffn_up_exps.weight"] = w["blk.0.ffn_up_exps.weight"][:-1]  # 7 experts of 8
    path = _write(tmp_path, "qwen3moe", drop_expert)
    with pytest.raises(ValueError, match=r"blk\.0\.ffn_up_exps\.weight has shape \[64, 32, 7\], expected \[64, 32, 8\]"):
        Llama(model_path=str(path), n_ctx=64, verbose=False)


def test_the_gateless_layout_only_where_llama_cpp_accepts_it(tmp_path):
    # llama files may omit ffn_gate_exps (llama_moe_nogate runs them); qwen3moe's loader requires it
    path = _write(tmp_path, "qwen3moe", lambda w: w.pop("blk.0.ffn_gate_exps.weight"))
    with pytest.raises(ValueError, match=r"lacks tensor blk\.0\.ffn_gate_exps\.weight"):
        Llama(model_path=str(path), n_ctx=64, verbose=False)


@pytest.mark.parametrize("key,value,message", [
    ("expert_used_count", 9, r"expert_used_count 9 must be in 1\.\.8"),
    ("expert_used_count", 0, r"expert_used_count is missing or 0"),
    ("expert_count", 0, r"expert_count is missing or 0"),
])
def test_bad_expert_counts_are_named(tmp_path, key, value, message):
    spec, cfg = R.SPECS["qwen3moe"]
    path = tmp_path / "tiny.gguf"
    R.write_gguf(path, spec, cfg, R.make_weights(spec, cfg))
    # rewrite one metadata value through llamapy's kv_overrides (the loader reads the override)
    with pytest.raises(ValueError, match=message):
        Llama(model_path=str(path), n_ctx=64, verbose=False, kv_overrides={f"qwen3moe.{key}": value})


def test_inspect_shows_the_experts(tiny):
    import io

    from llamapy.inspect_cmd import run_inspect

    path, spec, cfg, _ = tiny("glm4moe")
    out = io.StringIO()
    assert run_inspect(str(path), out=out, show_tensors=False) == 0
    text = out.getvalue()
    assert f"experts:           {cfg.n_expert}, {cfg.n_expert_used} per token, width {cfg.n_ff_exp}" in text
    assert "active parameters:" in text and "read per token:" in text


def test_server_options_reach_llama():
    from llamapy.server.app import llama_kwargs
    from llamapy.server.config import parse_settings

    kw = llama_kwargs(parse_settings(["-m", "x.gguf", "--n-cpu-moe", "3", "-ot", r"exps=CPU,blk\.0\.=CPU"], {}))
    assert kw["n_cpu_moe"] == 3 and kw["override_tensor"] == r"exps=CPU,blk\.0\.=CPU"
    kw = llama_kwargs(parse_settings(["-m", "x.gguf", "--cpu-moe"], {}))
    assert kw["n_cpu_moe"] >= 1 << 20  # every layer's experts
    assert "n_cpu_moe" not in llama_kwargs(parse_settings(["-m", "x.gguf"], {}))
