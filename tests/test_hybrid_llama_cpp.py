"""Hybrid models against llama.cpp: Qwen3.5 (qwen35, qwen35moe: gated delta-net + gated
attention; with a next-token-prediction block that both implementations load and skip),
LFM2 (lfm2: gated short convolutions + attention; lfm2moe: the same with experts after two
dense layers, a sigmoid router with a selection bias) and Granite 4.0-H (granitehybrid: Mamba-2 +
attention without positions, Granite's multipliers; experts with a shared expert, and the
dense-FFN layout as granitehybrid_dense). The tiny random-weight models of
tests/data/hybrid (converted with llama.cpp's own convert_hf_to_gguf.py, quantized with its
quantizer) and what llama.cpp (llama-cpp-python 0.3.36) produced on them, recorded by
tools/make_hybrid_fixtures.py.

The tolerances are the MoE comparison's (tests/test_moe_llama_cpp.py: TOL_F16, TOL_Q and
the rules for near ties and rounding flips), applied to the same recordings. Also: the
second of the two prompts that share a prefix, evaluated right after the first (its
prefix reused from the first one's recurrent-state checkpoint), gives llama.cpp's fresh
tokens (tests/test_recurrent_state.py holds the reuse itself against fresh evaluations).

Every case of every family runs on the CPU and, where this build has a Vulkan device
(tools/vulkan_check.sh runs it on lavapipe), with every layer on the GPU and with a partial
split (the last two layers on the GPU, the others on the CPU: Qwen3.5's delta-net layer 2 and
attention layer 3; LFM2's and Granite's last two), against the same recordings and
tolerances."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from llamapy import Llama, _engine
from test_moe_llama_cpp import TOL_F16, TOL_Q, check_recorded_prompt, teacher_forced

DATA = Path(__file__).parent / "data" / "hybrid"
FAMILIES = ["qwen35", "qwen35moe", "lfm2", "lfm2moe", "granitehybrid", "granitehybrid_dense"]
# where -> n_gpu_layers: the CPU, and where a Vulkan device exists every layer on it
# ("gpu") and the last 2 ("split")
HAS_GPU = "vulkan" in _engine.backends() and bool(_engine.gpu_devices())
GPU_LAYERS = {"cpu": 0, "gpu": -1, "split": 2}
WHERE = ["cpu"] + (["gpu", "split"] if HAS_GPU else [])


def record(family):
    return json.loads((DATA / family / "record.json").read_text())


def cases():
    for fam in FAMILIES:
        for ftype in record(fam)["files"]:
            yield pytest.param(fam, ftype, id=f"{fam}-{ftype}")


def open_llm(family, ftype, where="cpu", **kw):
    rec = record(family)
    fr = rec["files"][ftype]
    return Llama(model_path=str(DATA / family / fr["file"]), n_ctx=rec["n_ctx"], n_batch=rec["n_batch"],
                 n_threads=2, logits_all=True, flash_attn=True, verbose=False, n_gpu_layers=GPU_LAYERS[where], **kw)


def test_fixture_files_are_intact():
    manifest = json.loads((DATA / "manifest.json").read_text())
    for rel, info in manifest.items():
        data = (DATA / rel).read_bytes()
        assert len(data) == info["bytes"] and hashlib.sha256(data).hexdigest() == info["sha256"], rel


def test_hyperparameters_and_mtp_block_skipped():
    m = _engine.Model(str(DATA / "qwen35" / "qwen35-f16.gguf"))
    md = json.loads((DATA / "qwen35" / "hf_config.json").read_text())["config"]
    # block_count 5 holds the next-token-prediction block; the model runs the 4 others
    assert m.n_layer == md["num_hidden_layers"] == 4


def test_lfm2_convolution_layers_come_from_the_kv_head_counts():
    cfg = json.loads((DATA / "lfm2" / "config.json").read_text())
    shape = _engine.model_shape(str(DATA / "lfm2" / "lfm2-f16.gguf"))
    # the converter writes head_count_kv 0 for each "conv" layer; those keep a state, no KV cells
    assert shape["recurrent_layers"] == [t == "conv" for t in cfg["layer_types"]]
    n_attn = cfg["layer_types"].count("full_attention")
    # per sequence: the last conv_L_cache - 1 inputs of every channel of each convolution layer
    n_conv = len(cfg["layer_types"]) - n_attn
    assert shape["recurrent_bytes_per_seq"] == 4 * n_conv * (cfg["conv_L_cache"] - 1) * cfg["hidden_size"]


def test_lfm2moe_dense_lead_layers_then_experts():
    cfg = json.loads((DATA / "lfm2moe" / "config.json").read_text())
    shape = _engine.model_shape(str(DATA / "lfm2moe" / "lfm2moe-f16.gguf"))
    assert shape["recurrent_layers"] == [t == "conv" for t in cfg["layer_types"]]
    assert shape["n_expert"] == cfg["num_experts"]
    n_conv = cfg["layer_types"].count("conv")
    assert shape["recurrent_bytes_per_seq"] == 4 * n_conv * (cfg["conv_L_cache"] - 1) * cfg["hidden_size"]
    from llamapy.gguf_file import GGUFFile

    with GGUFFile(DATA / "lfm2moe" / "lfm2moe-f16.gguf") as f:
        names = {t.name for t in f.tensors}
        assert f.metadata["lfm2moe.leading_dense_block_count"] == cfg["num_dense_layers"] == 2
    # the dense lead layers have a dense FFN and no router, the others the experts and no dense FFN
    for il in range(len(cfg["layer_types"])):
        moe = il >= cfg["num_dense_layers"]
        assert (f"blk.{il}.ffn_gate_inp.weight" in names) == moe
        assert (f"blk.{il}.exp_probs_b.bias" in names) == moe
        assert (f"blk.{il}.ffn_up.weight" in names) == (not moe)


@pytest.mark.parametrize("family", ["granitehybrid", "granitehybrid_dense"])
def test_granitehybrid_mamba2_layers_and_state(family):
    cfg = json.loads((DATA / family / "config.json").read_text())
    shape = _engine.model_shape(str(DATA / family / f"{family}-f16.gguf"))
    assert shape["recurrent_layers"] == [t == "linear_attention" for t in cfg["layer_types"]]
    assert shape["n_expert"] == cfg["num_local_experts"]
    # per sequence and Mamba-2 layer: the convolution's tail over x | B | C, and each head's
    # (head_dim, d_state) scan state
    d_inner = cfg["mamba_expand"] * cfg["hidden_size"]
    conv = (cfg["mamba_d_conv"] - 1) * (d_inner + 2 * cfg["mamba_n_groups"] * cfg["mamba_d_state"])
    n_mamba = cfg["layer_types"].count("linear_attention")
    assert shape["recurrent_bytes_per_seq"] == 4 * n_mamba * (conv + d_inner * cfg["mamba_d_state"])


def _edited_copy(tmp_path, old: bytes, new: bytes, family="lfm2"):
    """A family's F16 file with a tensor's name (same length) or shape bytes replaced."""
    data = (DATA / family / f"{family}-f16.gguf").read_bytes()
    assert data.count(old) == 1
    path = tmp_path / f"bad-{family}.gguf"
    path.write_bytes(data.replace(old, new))
    return path


@pytest.mark.parametrize("family,name", [
    ("lfm2", b"blk.3.shortconv.conv.weight"), ("lfm2", b"blk.1.shortconv.in_proj.weight"),
    ("lfm2", b"blk.5.shortconv.out_proj.weight"), ("lfm2", b"token_embd_norm.weight"),
    ("lfm2moe", b"blk.3.shortconv.conv.weight"), ("lfm2moe", b"blk.2.ffn_gate_inp.weight"),
    ("lfm2moe", b"blk.5.ffn_down_exps.weight"), ("lfm2moe", b"blk.1.ffn_up.weight"),
    ("lfm2moe", b"blk.4.exp_probs_b.bias"),  # required, as llama.cpp requires it
    ("granitehybrid", b"blk.0.ssm_in.weight"), ("granitehybrid", b"blk.1.ssm_conv1d.weight"),
    ("granitehybrid", b"blk.3.ssm_dt.bias"), ("granitehybrid", b"blk.0.ssm_a"), ("granitehybrid", b"blk.1.ssm_d"),
    ("granitehybrid", b"blk.3.ssm_norm.weight"), ("granitehybrid", b"blk.0.ssm_out.weight")])
def test_missing_tensor_is_named(tmp_path, family, name):
    import struct

    n = struct.pack("<Q", len(name))  # the name with its length: "blk.1.ssm_d" is also in "blk.1.ssm_dt.bias"
    path = _edited_copy(tmp_path, n + name, n + b"X" + name[1:], family)
    with pytest.raises(ValueError, match="lacks tensor " + name.decode().replace(".", r"\.")):
        Llama(model_path=str(path), n_ctx=64, verbose=False)


def test_lfm2_misshaped_tensor_is_named(tmp_path):
    import struct

    name = b"blk.0.shortconv.in_proj.weight"
    # name, n_dims 2, ne (64, 192): claim 191 rows (the data still lies inside the file)
    head = struct.pack("<Q", len(name)) + name + struct.pack("<IQQ", 2, 64, 192)
    path = _edited_copy(tmp_path, head, head[:-8] + struct.pack("<Q", 191))
    with pytest.raises(ValueError, match=r"blk\.0\.shortconv\.in_proj\.weight has shape \[64, 191\]"):
        Llama(model_path=str(path), n_ctx=64, verbose=False)


def placed(pairs):
    """(…, where) for every placement a case runs on."""
    out = []
    for c in pairs:
        values, name = (c.values, c.id) if hasattr(c, "values") else (tuple(c), "-".join(c))
        out += [pytest.param(*values, w, id=f"{name}-{w}") for w in WHERE]
    return out


@pytest.mark.parametrize("family,ftype,where", placed(cases()))
def test_matches_llama_cpp(family, ftype, where):
    rec = record(family)
    fr = rec["files"][ftype]
    npz = np.load(DATA / family / "logits.npz")
    llm = open_llm(family, ftype, where)
    assert llm.n_vocab() == fr["n_vocab"]
    exact = ftype == "F16"
    for pi, pr in enumerate(fr["prompts"]):
        check_recorded_prompt(llm, pr, npz[f"{ftype}.p{pi}.last_logits"], exact, f"{family} {ftype} prompt {pi}")


@pytest.mark.parametrize("family,where", placed((f,) for f in FAMILIES))
def test_shared_prefix_prompt_matches_fresh_llama_cpp(family, where):
    """The first prompt of the pair (and a few generated tokens), then the second: the
    greedy tokens are llama.cpp's for the second prompt evaluated fresh."""
    rec = record(family)
    a, b = rec["shared_prefix"]["prompts"]
    n_shared = rec["shared_prefix"]["n_shared"]
    pa, pb = rec["files"]["F16"]["prompts"][a], rec["files"]["F16"]["prompts"][b]
    assert pa["prompt_ids"][:n_shared] == pb["prompt_ids"][:n_shared]
    llm = open_llm(family, "F16", where)
    got = []
    for tok in llm.generate(pa["prompt_ids"], temp=0.0):
        got.append(tok)
        if len(got) == 4:
            break
    assert got == pa["ids"][:4]
    evals = []
    orig = llm._seq._eval_ids

    def counting(toks, *args):
        evals.append(len(toks))
        return orig(toks, *args)

    llm._seq._eval_ids = counting
    got = []
    for tok in llm.generate(pb["prompt_ids"], temp=0.0):
        got.append(tok)
        if len(got) == len(pb["ids"]):
            break
    assert got == pb["ids"]
    # The first prompt diverges inside the shared part, where no checkpoint was taken (they
    # are at the ends of evaluated batches): the second is evaluated again from its start,
    # never from a state that includes the first prompt's other tokens.
    assert sum(evals[:2]) == len(pb["prompt_ids"]), evals


@pytest.mark.skipif(not HAS_GPU, reason="no GPU backend device in this build")
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("where", ["gpu", "split"])
def test_gpu_layers_are_placed_on_the_device(family, where):
    """The layers go where n_gpu_layers says, recurrent ones included (delta-net, short
    convolution, Mamba-2): nothing is refused, nothing quietly stays on the CPU (the
    recordings above then hold the results)."""
    llm = open_llm(family, "F16", where)
    on_gpu = [p["device"] != "cpu" for p in llm.device_map() if p["layer"] >= 0]
    n = len(on_gpu)
    assert on_gpu == ([True] * n if where == "gpu" else [False] * (n - 2) + [True, True])
    assert llm._ctx.recurrent_bytes == open_llm(family, "F16")._ctx.recurrent_bytes > 0
