"""Random-weight mixture-of-experts GGUF models with real layer shapes, for
speed measurements (issue 33). Fewer layers than the real models so they fit
the 24 GiB machines next to a second implementation's copy in the page cache;
every other shape is the real model's:

  qwen3moe-30b-a3b   Qwen3-30B-A3B: hidden 2048, 32 heads of 128, 4 KV heads,
                     128 experts of 768, 8 per token, vocabulary 151936;
                     llama.cpp's Q4_K_M mix (Q6_K for attn_v / ffn_down_exps in
                     its "more bits" layers and for the output head)
  gptoss-20b         gpt-oss-20b: hidden 2880, 64 heads of 64, 8 KV heads,
                     32 experts of 2880, 4 per token, window 128 on every other
                     layer, vocabulary 201088; experts MXFP4 and the rest Q8_0,
                     as its GGUF ships (llama.cpp's MXFP4_MOE)
  deepseek-v2-lite   DeepSeek-V2-Lite: hidden 2048, 16 heads, latent 512 + RoPE
                     64, head 192 / 128, no q bottleneck, 64 experts of 1408,
                     6 per token, 2 shared, the first layer dense (10944),
                     vocabulary 102400; Q4_K_M-like (Q8_0 where rows are not
                     whole 256-blocks: attn_k_b, as llama.cpp falls back)

Weights are random but well-formed blocks (a few rows quantized with llamapy,
tiled), except the routers, which are fully random F32 so that tokens spread
over the experts as in a trained model. The vocabulary is a dummy byte-level
BPE one so that llama.cpp loads the files too.

    python benchmarks/synthetic_moe_models.py qwen3moe-30b-a3b out.gguf [n_layer]
"""
from __future__ import annotations

import os
import sys

import numpy as np

from synthetic_models import add_dummy_vocab, finish, quantized_adder

SHAPES = {
    "qwen3moe-30b-a3b": dict(arch="qwen3moe", hidden=2048, layers=48, heads=32, kv_heads=4, head=128, n_expert=128,
                             n_used=8, ff_exp=768, ff=6144, vocab=151936, rope_base=1e6, eps=1e-6, default_layers=12),
    "gptoss-20b": dict(arch="gpt-oss", hidden=2880, layers=24, heads=64, kv_heads=8, head=64, n_expert=32, n_used=4,
                       ff_exp=2880, ff=2880, vocab=201088, rope_base=150000.0, eps=1e-5, swa=128, default_layers=8),
    "deepseek-v2-lite": dict(arch="deepseek2", hidden=2048, layers=27, heads=16, kv_heads=1, head=192, n_expert=64,
                             n_used=6, ff_exp=1408, ff=10944, vocab=102400, rope_base=10000.0, eps=1e-6,
                             kv_lora=512, rope=64, head_v=128, shared=2, dense_lead=1, default_layers=10),
}


def more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: the layers its K-quant mixes give more bits."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def write_moe(path: str, name: str, n_layer: int | None = None) -> str:
    import gguf

    if os.path.exists(path):
        return path
    s = SHAPES[name]
    L = n_layer or s["default_layers"]
    rng = np.random.default_rng(0)
    arch, E, H, KV, D, X = s["arch"], s["hidden"], s["heads"], s["kv_heads"], s["head"], s["n_expert"]
    F, V = s["ff_exp"], s["vocab"]
    mxfp4 = name == "gptoss-20b"

    w = gguf.GGUFWriter(path + ".tmp", arch)
    w.add_name(f"random {name} shapes, {L} of {s['layers']} layers")
    w.add_context_length(131072)
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_feed_forward_length(s["ff"])
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_rope_freq_base(s["rope_base"])
    w.add_layer_norm_rms_eps(s["eps"])
    w.add_expert_count(X)
    w.add_expert_used_count(s["n_used"])
    w.add_uint32(f"{arch}.expert_feed_forward_length", F)
    w.add_vocab_size(V)
    w.add_file_type(38 if mxfp4 else 15)
    if arch == "deepseek2":
        C, R = s["kv_lora"], s["rope"]
        w.add_key_length(C + R)
        w.add_value_length(C)
        w.add_uint32(f"{arch}.attention.kv_lora_rank", C)
        # 0: no q bottleneck (V2-Lite; llama.cpp asks for the key unless the layer count is Lite's)
        w.add_uint32(f"{arch}.attention.q_lora_rank", 0)
        w.add_uint32(f"{arch}.attention.key_length_mla", D)
        w.add_uint32(f"{arch}.attention.value_length_mla", s["head_v"])
        w.add_rope_dimension_count(R)
        w.add_uint32(f"{arch}.leading_dense_block_count", s["dense_lead"])
        w.add_uint32(f"{arch}.expert_shared_count", s["shared"])
        w.add_float32(f"{arch}.expert_weights_scale", 1.0)
    else:
        w.add_key_length(D)
        w.add_value_length(D)
        w.add_rope_dimension_count(D)
    if arch == "gpt-oss":
        w.add_sliding_window(s["swa"])
        w.add_string(f"{arch}.rope.scaling.type", "yarn")
        w.add_float32(f"{arch}.rope.scaling.factor", 32.0)
        w.add_uint32(f"{arch}.rope.scaling.original_context_length", 4096)
    add_dummy_vocab(w, V)
    add = quantized_adder(w, rng)

    def f32(tname: str, *shape: int, scale: float = 0.0) -> None:
        a = np.ones(shape, np.float32) if scale == 0.0 else (rng.standard_normal(shape) * scale).astype(np.float32)
        w.add_tensor(tname, a)

    base = "Q8_0" if mxfp4 else "Q4_K"
    add("token_embd.weight", base, V, E)
    add("output.weight", "Q8_0" if mxfp4 else "Q6_K", V, E)
    f32("output_norm.weight", E)
    for i in range(L):
        p = f"blk.{i}."
        more = more_bits(i, L)
        f32(p + "attn_norm.weight", E)
        f32(p + ("post_attention_norm.weight" if arch == "gpt-oss" else "ffn_norm.weight"), E)
        if arch == "deepseek2":
            C, R, HV = s["kv_lora"], s["rope"], s["head_v"]
            add(p + "attn_q.weight", "Q4_K", H * D, E)
            add(p + "attn_kv_a_mqa.weight", "Q4_K", C + R, E)
            f32(p + "attn_kv_a_norm.weight", C)
            add(p + "attn_k_b.weight", "Q8_0", C, D - R, H)
            add(p + "attn_v_b.weight", "Q4_K", HV, C, H)
            add(p + "attn_output.weight", "Q4_K", E, H * HV)
        else:
            add(p + "attn_q.weight", base, H * D, E)
            add(p + "attn_k.weight", base, KV * D, E)
            add(p + "attn_v.weight", "Q6_K" if (more and not mxfp4) else base, KV * D, E)
            add(p + "attn_output.weight", base, E, H * D)
        if arch == "qwen3moe":
            f32(p + "attn_q_norm.weight", D)
            f32(p + "attn_k_norm.weight", D)
        if arch == "gpt-oss":
            for b, n in (("attn_q.bias", H * D), ("attn_k.bias", KV * D), ("attn_v.bias", KV * D),
                         ("attn_output.bias", E), ("attn_sinks.weight", H)):
                f32(p + b, n, scale=0.1)
        if arch == "deepseek2" and i < s["dense_lead"]:
            add(p + "ffn_gate.weight", "Q4_K", s["ff"], E)
            add(p + "ffn_up.weight", "Q4_K", s["ff"], E)
            # 10944 is not whole 256-blocks: llama.cpp's K-quant fallback (Q6_K -> Q8_0, Q4_K -> Q5_0)
            add(p + "ffn_down.weight", ("Q6_K" if more else "Q4_K") if s["ff"] % 256 == 0 else ("Q8_0" if more else "Q5_0"),
                E, s["ff"])
            continue
        f32(p + "ffn_gate_inp.weight", X, E, scale=0.05)
        et = "MXFP4" if mxfp4 else "Q4_K"
        add(p + "ffn_gate_exps.weight", et, F, E, X)
        add(p + "ffn_up_exps.weight", et, F, E, X)
        down_t = "MXFP4" if mxfp4 else ("Q6_K" if more else "Q4_K")
        if arch == "deepseek2" and F % 256:
            down_t = "Q8_0" if more else "Q5_0"  # 1408 is not whole 256-blocks: llama.cpp's K-quant fallback
        add(p + "ffn_down_exps.weight", down_t, E, F, X)
        if arch == "gpt-oss":
            f32(p + "ffn_gate_inp.bias", X, scale=0.1)
            for b, n in (("ffn_gate_exps.bias", F), ("ffn_up_exps.bias", F), ("ffn_down_exps.bias", E)):
                f32(p + b, X, n, scale=0.1)
        if arch == "deepseek2":
            S = F * s["shared"]
            add(p + "ffn_gate_shexp.weight", "Q4_K", S, E)
            add(p + "ffn_up_shexp.weight", "Q4_K", S, E)
            add(p + "ffn_down_shexp.weight", ("Q8_0" if more else "Q5_0") if S % 256 else "Q4_K", E, S)
    return finish(w, path)


if __name__ == "__main__":
    name, out = sys.argv[1], sys.argv[2]
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    print(write_moe(out, name, int(sys.argv[3]) if len(sys.argv) > 3 else None))
    from llamapy.experts import expert_summary

    print(expert_summary(out))
