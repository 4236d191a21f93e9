"""Random-weight Qwen3.5 GGUF models with real layer shapes, for speed measurements (issue 34).
Fewer layers than the real models (every fourth one full attention, as there); every other
shape is the real model's, as its config.json gives it (hidden size, heads, the gated
delta-net's key / value heads and head sizes, experts), written the way llama.cpp's converter
writes qwen35 / qwen35moe files (tensor names, the fused qkv and gate projections, the
recurrent-layer list, partial multi-axis RoPE), without the multi-token-prediction block:

  qwen35-4b          Qwen3.5-4B: hidden 2560, 16 heads of 256 (4 KV heads), RoPE on a quarter
                     of each head; delta-net 16 key heads / 32 value heads of 128, convolution 4;
                     FFN 9216; vocabulary 248320
  qwen35moe-35b-a3b  Qwen3.5-35B-A3B: hidden 2048, 16 heads of 256 (2 KV heads); delta-net as
                     above; 256 experts of 512, 8 per token, one gated shared expert of 512

llama.cpp's Q4_K_M mix (Q6_K for attn_v / ffn_down(_exps) in its "more bits" layers and for the
output head); the recurrent layers' small tensors (convolution, A, dt bias, alpha / beta
projections, norms) F32 as the converter leaves them. Weights are a few random rows quantized
with llamapy and tiled; the routers are fully random F32 so tokens spread over the experts.
The vocabulary is a dummy byte-level BPE one so that llama.cpp loads the files too.

    python benchmarks/synthetic_hybrid_models.py qwen35-4b out.gguf [n_layer]
"""
from __future__ import annotations

import os
import sys

import numpy as np

from synthetic_models import add_dummy_vocab, finish, quantized_adder
from synthetic_moe_models import more_bits

SHAPES = {
    "qwen35-4b": dict(arch="qwen35", hidden=2560, layers=32, heads=16, kv_heads=4, head=256, rot=64,
                      k_heads=16, v_heads=32, k_dim=128, v_dim=128, conv=4, ff=9216, vocab=248320,
                      default_layers=8),
    "qwen35moe-35b-a3b": dict(arch="qwen35moe", hidden=2048, layers=40, heads=16, kv_heads=2, head=256, rot=64,
                              k_heads=16, v_heads=32, k_dim=128, v_dim=128, conv=4, vocab=248320, n_expert=256,
                              n_used=8, ff_exp=512, ff_shexp=512, default_layers=8),
}
INTERVAL = 4  # every fourth layer is full attention


def write_hybrid(path: str, name: str, n_layer: int | None = None) -> str:
    import gguf

    if os.path.exists(path):
        return path
    s = SHAPES[name]
    L = n_layer or s["default_layers"]
    rng = np.random.default_rng(0)
    arch, E, H, KV, D, V = s["arch"], s["hidden"], s["heads"], s["kv_heads"], s["head"], s["vocab"]
    NK, NV, DK, DV = s["k_heads"], s["v_heads"], s["k_dim"], s["v_dim"]
    inner, conv_dim = NV * DV, 2 * NK * DK + NV * DV
    moe = "n_expert" in s
    recurrent = [(i + 1) % INTERVAL != 0 for i in range(L)]

    w = gguf.GGUFWriter(path + ".tmp", arch)
    w.add_name(f"random {name} shapes, {L} of {s['layers']} layers")
    w.add_context_length(262144)
    w.add_embedding_length(E)
    w.add_block_count(L)
    if not moe:
        w.add_feed_forward_length(s["ff"])
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_rope_dimension_count(s["rot"])
    half = s["rot"] // 2
    w.add_array(f"{arch}.rope.dimension_sections", [half - 2 * (half // 3), half // 3, half // 3, 0])
    w.add_rope_freq_base(1e7)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_uint32(f"{arch}.ssm.conv_kernel", s["conv"])
    w.add_uint32(f"{arch}.ssm.state_size", DK)
    w.add_uint32(f"{arch}.ssm.group_count", NK)
    w.add_uint32(f"{arch}.ssm.time_step_rank", NV)
    w.add_uint32(f"{arch}.ssm.inner_size", inner)
    w.add_array(f"{arch}.attention.recurrent_layers", recurrent)
    w.add_uint32(f"{arch}.full_attention_interval", INTERVAL)
    if moe:
        w.add_expert_count(s["n_expert"])
        w.add_expert_used_count(s["n_used"])
        w.add_uint32(f"{arch}.expert_feed_forward_length", s["ff_exp"])
        w.add_uint32(f"{arch}.expert_shared_feed_forward_length", s["ff_shexp"])
    w.add_vocab_size(V)
    w.add_file_type(15)
    add_dummy_vocab(w, V)
    add = quantized_adder(w, rng)

    def f32(tname: str, *shape: int, scale: float = 0.0, value: float = 1.0) -> None:
        a = (np.full(shape, value, np.float32) if scale == 0.0
             else (rng.standard_normal(shape) * scale).astype(np.float32))
        w.add_tensor(tname, a)

    add("token_embd.weight", "Q4_K", V, E)
    add("output.weight", "Q6_K", V, E)
    f32("output_norm.weight", E)
    for i in range(L):
        p = f"blk.{i}."
        more = more_bits(i, L)
        f32(p + "attn_norm.weight", E)
        f32(p + "post_attention_norm.weight", E)
        if recurrent[i]:
            add(p + "attn_qkv.weight", "Q4_K", conv_dim, E)
            add(p + "attn_gate.weight", "Q4_K", inner, E)
            f32(p + "ssm_conv1d.weight", conv_dim, s["conv"], scale=0.3)
            f32(p + "ssm_a", NV, value=-0.5)
            f32(p + "ssm_dt.bias", NV, scale=0.1)
            f32(p + "ssm_alpha.weight", NV, E, scale=0.02)
            f32(p + "ssm_beta.weight", NV, E, scale=0.02)
            f32(p + "ssm_norm.weight", DV)
            add(p + "ssm_out.weight", "Q4_K", E, inner)
        else:
            add(p + "attn_q.weight", "Q4_K", 2 * H * D, E)  # queries and their output gate
            add(p + "attn_k.weight", "Q4_K", KV * D, E)
            add(p + "attn_v.weight", "Q6_K" if more else "Q4_K", KV * D, E)
            add(p + "attn_output.weight", "Q4_K", E, H * D)
            f32(p + "attn_q_norm.weight", D)
            f32(p + "attn_k_norm.weight", D)
        if moe:
            X, F, S = s["n_expert"], s["ff_exp"], s["ff_shexp"]
            f32(p + "ffn_gate_inp.weight", X, E, scale=0.05)
            add(p + "ffn_gate_exps.weight", "Q4_K", F, E, X)
            add(p + "ffn_up_exps.weight", "Q4_K", F, E, X)
            add(p + "ffn_down_exps.weight", "Q6_K" if more else "Q4_K", E, F, X)
            f32(p + "ffn_gate_inp_shexp.weight", 1, E, scale=0.05)
            add(p + "ffn_gate_shexp.weight", "Q4_K", S, E)
            add(p + "ffn_up_shexp.weight", "Q4_K", S, E)
            add(p + "ffn_down_shexp.weight", "Q6_K" if more else "Q4_K", E, S)
        else:
            add(p + "ffn_gate.weight", "Q4_K", s["ff"], E)
            add(p + "ffn_up.weight", "Q4_K", s["ff"], E)
            add(p + "ffn_down.weight", "Q6_K" if more else "Q4_K", E, s["ff"])
    return finish(w, path)


if __name__ == "__main__":
    name, out = sys.argv[1], sys.argv[2]
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    print(write_hybrid(out, name, int(sys.argv[3]) if len(sys.argv) > 3 else None))
