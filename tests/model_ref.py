"""Plain numpy reference forward passes for the architectures llamapy runs,
and tiny synthetic GGUF models to run them on.

Each architecture is described by an ``ArchSpec`` (its GGUF name, how its
block differs from the plain pre-norm transformer, which tensors it has).
``make_model`` draws seeded weights for a tiny configuration and writes them
to a GGUF file with gguf-py; ``forward`` evaluates one sequence in float64.

The reference repeats the roundings llama.cpp's CPU backend makes, so the
engine can be held to tight tolerances:
  - activations are converted to the weight type's dot-product input format
    before every matrix product (F16 weights: F16; Q8_0 weights: Q8_0 blocks);
  - with an F16 KV cache, keys, values, queries and attention weights are
    rounded to F16;
  - GELU is evaluated on the F16-rounded input and rounded to F16.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

from tiny_gguf import add_common_hparams, add_weight, finish


# ---------------------------------------------------------------------------
# Architectures
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class ArchSpec:
    arch: str
    rope_neox: bool = False
    act: str = "silu"            # gated FFN activation: silu | gelu
    qkv_bias: bool = False
    qkv_fused: bool = False
    gate_up_fused: bool = False
    qk_norm: bool = False
    post_norms: bool = False     # norms after attention and after the FFN
    scale_q: bool = False        # q scaled before attention (Gemma, Phi-3)
    embd_scale: bool = False     # token embeddings times sqrt(n_embd)
    swa_period: int = 0          # layers i with i % period < period - 1 use the window
    swa_rope_base: float | None = None  # RoPE base of the window layers (Gemma 3)
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    rope_freqs: bool = False     # a llama3-style rope_freqs.weight tensor
    tied_output: bool = False    # no output.weight
    rope_sections: tuple | None = None  # M-RoPE rope.dimension_sections (qwen2vl); text positions make it NeoX RoPE
    # Mixture of experts (Config.n_expert > 0): a softmax router and the top
    # n_expert_used experts, weights divided by their sum; expert_ff_key: the
    # width is written as expert_feed_forward_length (qwen3moe) rather than
    # feed_forward_length (llama); moe_gate: the experts have ffn_gate_exps.
    expert_ff_key: bool = False
    moe_gate: bool = True
    # gpt-oss: a softmax over the chosen experts' logits (no renormalisation),
    # biases on the router and the experts, the clamped SwiGLU, attention
    # sinks, a bias on the attention output, the FFN norm stored as
    # post_attention_norm.
    gpt_oss: bool = False
    # glm4moe: sigmoid router with a selection bias, weights normalised and
    # scaled by 2.5, one shared expert, the first layer dense, the FFN norm
    # stored as post_attention_norm, and a next-token-prediction layer after
    # the model's own (in the block count, skipped).
    glm: bool = False
    # deepseek2: multi-head latent attention (Config q_lora / kv_lora /
    # head_k_mla / head_v_mla; head_dim is then the RoPE part) and the glm
    # routing with expert groups (Config n_group / n_group_used).
    mla: bool = False
    # smollm3: layers il with (il + 1) % nope_period == 0 have no RoPE.
    nope_period: int = 0
    # olmo2: no norms before attention and the FFN (only post_norms), q and k
    # RMS-normed as whole rows; swa_rope_plain: its window layers rotate
    # without scaling or YaRN.
    pre_norm: bool = True
    qk_norm_full: bool = False
    swa_rope_plain: bool = False
    # granite: embeddings times embd_mul, q.k times attn_mul, sub-block outputs
    # times residual_mul, logits divided by logit_div (0: none of them);
    # out_biases: biases on attn_output and the FFN's gate, up and down.
    embd_mul: float = 0.0
    attn_mul: float = 0.0
    residual_mul: float = 0.0
    logit_div: float = 0.0
    out_biases: bool = False


@dataclasses.dataclass
class Config:
    n_vocab: int = 100
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_ff: int = 96
    n_ctx_train: int = 256
    rope_base: float = 10000.0
    eps: float = 1e-5
    n_swa: int = 0
    # RoPE scaling metadata, e.g. {"type": "yarn", "factor": 4.0, "original_context_length": 64}
    rope_scaling: dict | None = None
    n_expert: int = 0        # experts per MoE layer (0: dense)
    n_expert_used: int = 0
    n_ff_exp: int = 0        # width of one expert
    n_group: int = 0         # expert groups (group-limited routing), 0: none
    n_group_used: int = 0
    q_lora: int = 0          # multi-head latent attention (ArchSpec.mla)
    kv_lora: int = 0
    head_k_mla: int = 0
    head_v_mla: int = 0


SPECS = {
    "llama": (ArchSpec("llama", rope_freqs=True), Config()),
    "gemma3": (
        ArchSpec("gemma3", rope_neox=True, act="gelu", qk_norm=True, post_norms=True, scale_q=True,
                 embd_scale=True, swa_period=6, swa_rope_base=10000.0, tied_output=True),
        Config(n_layer=6, head_dim=32, rope_base=1e6, eps=1e-6, n_swa=5),
    ),
    "gemma2": (
        ArchSpec("gemma2", rope_neox=True, act="gelu", post_norms=True, scale_q=True, embd_scale=True,
                 swa_period=2, attn_softcap=3.0, final_softcap=2.5, tied_output=True),
        Config(n_layer=3, n_swa=4),
    ),
    "qwen2": (ArchSpec("qwen2", rope_neox=True, qkv_bias=True), Config()),
    # Qwen2-VL's text half: the Qwen 2 block with M-RoPE; a text row has all four
    # position components equal, which rotates exactly as NeoX RoPE.
    "qwen2vl": (ArchSpec("qwen2vl", rope_neox=True, qkv_bias=True, rope_sections=(2, 3, 3, 0)), Config()),
    "qwen3": (ArchSpec("qwen3", rope_neox=True, qk_norm=True), Config(head_dim=32, eps=1e-6)),
    "phi3": (ArchSpec("phi3", rope_neox=True, qkv_fused=True, gate_up_fused=True, scale_q=True), Config()),
    # Mixtures of experts: more experts than tokens choose in a short prompt,
    # so some experts get several tokens, some none.
    "qwen3moe": (
        ArchSpec("qwen3moe", rope_neox=True, qk_norm=True, expert_ff_key=True),
        Config(head_dim=32, eps=1e-6, n_expert=8, n_expert_used=3, n_ff_exp=32),
    ),
    # Mixtral: llama files with experts of width feed_forward_length.
    "llama_moe": (ArchSpec("llama"), Config(n_ff=64, n_expert=4, n_expert_used=2, n_ff_exp=64)),
    # Experts without a gate (llama.cpp's loader allows it): silu(up).
    "llama_moe_nogate": (ArchSpec("llama", moe_gate=False), Config(n_ff=32, n_expert=6, n_expert_used=2, n_ff_exp=32)),
    # DeepSeek V3 shape: MLA with a q bottleneck, RoPE on adjacent pairs of the
    # last 8 elements, sigmoid routing in 4 groups of which 2 compete.
    "deepseek2": (
        ArchSpec("deepseek2", expert_ff_key=True, glm=True, mla=True),
        Config(n_layer=3, n_head=4, n_head_kv=1, head_dim=8, n_ff=96, n_expert=8, n_expert_used=2, n_ff_exp=32,
               n_group=4, n_group_used=2, q_lora=32, kv_lora=32, head_k_mla=40, head_v_mla=16),
    ),
    "glm4moe": (
        ArchSpec("glm4moe", rope_neox=True, qkv_bias=True, expert_ff_key=True, glm=True),
        Config(n_layer=3, n_ff=96, n_expert=8, n_expert_used=3, n_ff_exp=32),
    ),
    # gpt-oss: window layers 0 and 2 (of every 2 layers the first).
    "gpt-oss": (
        ArchSpec("gpt-oss", rope_neox=True, qkv_bias=True, swa_period=2, expert_ff_key=True, gpt_oss=True),
        Config(n_layer=3, n_swa=4, n_expert=6, n_expert_used=2, n_ff_exp=32),
    ),
    # SmolLM3: layer 3 without RoPE.
    "smollm3": (ArchSpec("smollm3", nope_period=4, tied_output=True), Config(n_layer=4)),
    "olmo2": (ArchSpec("olmo2", rope_neox=True, pre_norm=False, qk_norm_full=True, post_norms=True), Config()),
    # OLMo 3 as it converts to olmo2: a window on layers 0-2 of every 4 (no pattern key).
    "olmo2_swa": (
        ArchSpec("olmo2", rope_neox=True, pre_norm=False, qk_norm_full=True, post_norms=True, swa_period=4,
                 swa_rope_plain=True),
        Config(n_layer=4, n_swa=5),
    ),
    "granite": (
        ArchSpec("granite", qkv_bias=True, out_biases=True, embd_mul=12.0, attn_mul=0.09, residual_mul=0.22,
                 logit_div=2.5, tied_output=True),
        Config(),
    ),
    # Granite MoE: experts of width feed_forward_length, softmax routing renormalised.
    "granitemoe": (
        ArchSpec("granitemoe", embd_mul=12.0, attn_mul=0.09, residual_mul=0.22, logit_div=2.5, tied_output=True),
        Config(n_ff=32, n_expert=6, n_expert_used=2, n_ff_exp=32),
    ),
}


def ffn_norm_name(spec: ArchSpec) -> str:
    """The FFN input norm's tensor: gpt-oss and glm4moe store it as post_attention_norm."""
    return "post_attention_norm" if spec.gpt_oss or (spec.glm and not spec.mla) else "ffn_norm"


def is_swa(spec: ArchSpec, cfg: Config, il: int) -> bool:
    p = spec.swa_period
    return cfg.n_swa > 0 and p > 0 and il % p < p - 1


# ---------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------


def make_weights(spec: ArchSpec, cfg: Config, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded float32 weights, matrices as (rows=out, cols=in)."""
    rng = np.random.default_rng(seed)
    E, H, KV, D, F = cfg.n_embd, cfg.n_head, cfg.n_head_kv, cfg.head_dim, cfg.n_ff

    def mat(rows, cols, gain=1.0):
        return (rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)).astype(np.float32)

    def normw(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    w: dict[str, np.ndarray] = {}
    w["token_embd.weight"] = rng.standard_normal((cfg.n_vocab, E)).astype(np.float32)
    if spec.embd_scale:
        w["token_embd.weight"] /= math.sqrt(E)
    w["output_norm.weight"] = normw(E)
    if not spec.tied_output:
        w["output.weight"] = mat(cfg.n_vocab, E, 2.0)
    if spec.rope_freqs:
        w["rope_freqs.weight"] = np.linspace(1.0, 8.0, D // 2).astype(np.float32)
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        if spec.pre_norm:
            w[p + "attn_norm.weight"] = normw(E)
        q, k, v = mat(H * D, E, 2.0), mat(KV * D, E, 2.0), mat(KV * D, E)
        if spec.mla:
            C, R, HK, HV = cfg.kv_lora, D, cfg.head_k_mla, cfg.head_v_mla
            w[p + "attn_q_a.weight"] = mat(cfg.q_lora, E, 2.0)
            w[p + "attn_q_a_norm.weight"] = normw(cfg.q_lora)
            w[p + "attn_q_b.weight"] = mat(H * HK, cfg.q_lora, 2.0)
            w[p + "attn_kv_a_mqa.weight"] = mat(C + R, E, 2.0)
            w[p + "attn_kv_a_norm.weight"] = normw(C)
            w[p + "attn_k_b.weight"] = np.stack([mat(C, HK - R, 2.0) for _ in range(H)])
            w[p + "attn_v_b.weight"] = np.stack([mat(HV, C) for _ in range(H)])
            w[p + "attn_output.weight"] = mat(E, H * HV)
        elif spec.qkv_fused:
            w[p + "attn_qkv.weight"] = np.concatenate([q, k, v], axis=0)
        else:
            w[p + "attn_q.weight"], w[p + "attn_k.weight"], w[p + "attn_v.weight"] = q, k, v
        if spec.qkv_bias:
            w[p + "attn_q.bias"] = (0.3 * rng.standard_normal(H * D)).astype(np.float32)
            w[p + "attn_k.bias"] = (0.3 * rng.standard_normal(KV * D)).astype(np.float32)
            w[p + "attn_v.bias"] = (0.3 * rng.standard_normal(KV * D)).astype(np.float32)
        if not spec.mla:
            w[p + "attn_output.weight"] = mat(E, H * D)
        if spec.gpt_oss or spec.out_biases:
            w[p + "attn_output.bias"] = (0.3 * rng.standard_normal(E)).astype(np.float32)
        if spec.gpt_oss:
            w[p + "attn_sinks.weight"] = (2.0 * rng.standard_normal(H)).astype(np.float32)
        if spec.qk_norm:
            w[p + "attn_q_norm.weight"] = normw(D)
            w[p + "attn_k_norm.weight"] = normw(D)
        if spec.qk_norm_full:
            w[p + "attn_q_norm.weight"] = normw(H * D)
            w[p + "attn_k_norm.weight"] = normw(KV * D)
        if spec.post_norms:
            w[p + "post_attention_norm.weight"] = normw(E)
            w[p + "post_ffw_norm.weight"] = normw(E)
        if spec.pre_norm:
            w[p + (ffn_norm_name(spec) + ".weight")] = normw(E)
        if cfg.n_expert and not (spec.glm and il == 0):
            X, FE = cfg.n_expert, cfg.n_ff_exp
            w[p + "ffn_gate_inp.weight"] = mat(X, E, 3.0)
            if spec.moe_gate:
                w[p + "ffn_gate_exps.weight"] = np.stack([mat(FE, E, 2.0) for _ in range(X)])
            w[p + "ffn_up_exps.weight"] = np.stack([mat(FE, E) for _ in range(X)])
            w[p + "ffn_down_exps.weight"] = np.stack([mat(E, FE) for _ in range(X)])
            if spec.glm:
                w[p + "exp_probs_b.bias"] = (0.3 * rng.standard_normal(X)).astype(np.float32)
                w[p + "ffn_gate_shexp.weight"] = mat(FE, E, 2.0)
                w[p + "ffn_up_shexp.weight"] = mat(FE, E)
                w[p + "ffn_down_shexp.weight"] = mat(E, FE)
            if spec.gpt_oss:
                w[p + "ffn_gate_inp.bias"] = (0.5 * rng.standard_normal(X)).astype(np.float32)
                for part, rows in (("gate", FE), ("up", FE), ("down", E)):
                    w[p + f"ffn_{part}_exps.bias"] = (0.3 * rng.standard_normal((X, rows))).astype(np.float32)
            continue
        gate, up = mat(F, E, 2.0), mat(F, E)
        if spec.gate_up_fused:
            w[p + "ffn_up.weight"] = np.concatenate([gate, up], axis=0)
        else:
            w[p + "ffn_gate.weight"], w[p + "ffn_up.weight"] = gate, up
        w[p + "ffn_down.weight"] = mat(E, F)
        if spec.out_biases:
            for part, rows in (("gate", F), ("up", F), ("down", E)):
                w[p + f"ffn_{part}.bias"] = (0.3 * rng.standard_normal(rows)).astype(np.float32)
    if spec.glm:
        # the next-token-prediction layer: present in the file, never run
        p = f"blk.{cfg.n_layer}."
        w[p + "attn_norm.weight"] = normw(E)
        w[p + "nextn.eh_proj.weight"] = mat(E, 2 * E)
        w[p + "nextn.enorm.weight"] = normw(E)
    return w


def store_type(name: str, arr: np.ndarray, wtype: str) -> str:
    """The type a tensor is written with: 1-D tensors and biases stay F32, as converters do."""
    if arr.ndim == 1 or name.endswith(".bias"):
        return "F32"
    return wtype


def as_stored(arr: np.ndarray, t: str) -> np.ndarray:
    """What the engine reads back from a tensor written as type t."""
    if t == "F32":
        return arr
    if t == "F16":
        return arr.astype(np.float16).astype(np.float32)
    if t == "Q8_0":
        return gguf.quants.dequantize(gguf.quants.quantize(arr, QT.Q8_0), QT.Q8_0).astype(np.float32)
    raise ValueError(t)


def write_gguf(path: Path, spec: ArchSpec, cfg: Config, weights: dict[str, np.ndarray], wtype: str = "F32") -> None:
    a = spec.arch
    wr = gguf.GGUFWriter(str(path), a)
    add_common_hparams(wr, a, n_ctx_train=cfg.n_ctx_train, n_embd=cfg.n_embd, n_layer=cfg.n_layer + (1 if spec.glm else 0),
                       n_ff=cfg.n_ff, n_head=cfg.n_head)
    wr.add_uint32(f"{a}.attention.head_count_kv", cfg.n_head_kv)
    if spec.mla:  # the cache's geometry: one latent | RoPE row, values its latent
        wr.add_uint32(f"{a}.attention.key_length", cfg.kv_lora + cfg.head_dim)
        wr.add_uint32(f"{a}.attention.value_length", cfg.kv_lora)
        wr.add_uint32(f"{a}.attention.q_lora_rank", cfg.q_lora)
        wr.add_uint32(f"{a}.attention.kv_lora_rank", cfg.kv_lora)
        wr.add_uint32(f"{a}.attention.key_length_mla", cfg.head_k_mla)
        wr.add_uint32(f"{a}.attention.value_length_mla", cfg.head_v_mla)
    else:
        wr.add_uint32(f"{a}.attention.key_length", cfg.head_dim)
        wr.add_uint32(f"{a}.attention.value_length", cfg.head_dim)
    wr.add_float32(f"{a}.attention.layer_norm_rms_epsilon", cfg.eps)
    wr.add_float32(f"{a}.rope.freq_base", cfg.rope_base)
    wr.add_uint32(f"{a}.rope.dimension_count", cfg.head_dim)
    if cfg.n_swa:
        wr.add_uint32(f"{a}.attention.sliding_window", cfg.n_swa)
    if cfg.n_group:
        wr.add_uint32(f"{a}.expert_group_count", cfg.n_group)
        wr.add_uint32(f"{a}.expert_group_used_count", cfg.n_group_used)
    if spec.glm:
        wr.add_uint32(f"{a}.nextn_predict_layers", 1)
        wr.add_uint32(f"{a}.leading_dense_block_count", 1)
        wr.add_uint32(f"{a}.expert_shared_count", 1)
        wr.add_bool(f"{a}.expert_weights_norm", True)
        wr.add_float32(f"{a}.expert_weights_scale", 2.5)
        wr.add_uint32(f"{a}.expert_gating_func", 2)
    if cfg.n_expert:
        wr.add_uint32(f"{a}.expert_count", cfg.n_expert)
        wr.add_uint32(f"{a}.expert_used_count", cfg.n_expert_used)
        if spec.expert_ff_key:
            wr.add_uint32(f"{a}.expert_feed_forward_length", cfg.n_ff_exp)
    if spec.rope_sections:
        wr.add_array(f"{a}.rope.dimension_sections", list(spec.rope_sections))
    if cfg.rope_scaling:
        sc = cfg.rope_scaling
        wr.add_string(f"{a}.rope.scaling.type", sc["type"])
        wr.add_float32(f"{a}.rope.scaling.factor", sc["factor"])
        if "original_context_length" in sc:
            wr.add_uint32(f"{a}.rope.scaling.original_context_length", sc["original_context_length"])
        if "attn_factor" in sc:
            wr.add_float32(f"{a}.rope.scaling.attn_factor", sc["attn_factor"])
    if spec.attn_softcap:
        wr.add_float32(f"{a}.attn_logit_softcapping", spec.attn_softcap)
    if spec.final_softcap:
        wr.add_float32(f"{a}.final_logit_softcapping", spec.final_softcap)
    for key, val in (("embedding_scale", spec.embd_mul), ("attention.scale", spec.attn_mul),
                     ("residual_scale", spec.residual_mul), ("logit_scale", spec.logit_div)):
        if val:
            wr.add_float32(f"{a}.{key}", val)
    # A dummy SentencePiece vocabulary, for loaders that want one.
    wr.add_tokenizer_model("llama")
    wr.add_token_list([b"<unk>", b"<s>", b"</s>"] + [f"t{i}".encode() for i in range(3, cfg.n_vocab)])
    wr.add_token_scores([0.0] * cfg.n_vocab)
    wr.add_token_types([2, 3, 3] + [1] * (cfg.n_vocab - 3))
    wr.add_bos_token_id(1)
    wr.add_eos_token_id(2)
    wr.add_file_type({"F32": 0, "F16": 1, "Q8_0": 7}[wtype])
    for name, arr in weights.items():
        add_weight(wr, name, arr, store_type(name, arr, wtype))
    finish(wr)


def make_model(tmp: Path, arch: str, wtype: str = "F32", seed: int = 0):
    """Writes a tiny model of `arch`; returns (path, spec, cfg, weights as the engine reads them)."""
    spec, cfg = SPECS[arch]
    w = make_weights(spec, cfg, seed)
    path = Path(tmp) / f"tiny-{arch}-{wtype}.gguf"
    write_gguf(path, spec, cfg, w, wtype)
    stored = {k: as_stored(v, store_type(k, v, wtype)) for k, v in w.items()}
    return path, spec, cfg, stored


# ---------------------------------------------------------------------------
# Reference forward pass
# ---------------------------------------------------------------------------


def f16(x):
    return np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float64)


def q8_0_roundtrip(x: np.ndarray) -> np.ndarray:
    """Rows quantized to Q8_0 blocks of 32 and back, as llama.cpp does to activations."""
    x32 = np.asarray(x, dtype=np.float32)
    shape = x32.shape
    b = x32.reshape(-1, 32)
    amax = np.abs(b).max(axis=1, keepdims=True)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d > 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = b * inv
    q = np.trunc(v + np.copysign(np.float32(0.5), v))  # roundf: half away from zero
    d16 = d.astype(np.float16).astype(np.float64)
    return (q.astype(np.float64) * d16).reshape(shape)


def q8_k_roundtrip(x: np.ndarray) -> np.ndarray:
    """Rows quantized to Q8_K blocks of 256 and back (the K-quants' activation format):
    the value of largest magnitude maps to -127, the scale is kept as a float."""
    x32 = np.asarray(x, dtype=np.float32)
    shape = x32.shape
    b = x32.reshape(-1, 256)
    mx = np.take_along_axis(b, np.abs(b).argmax(axis=1)[:, None], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = np.where(mx != 0, np.float32(-127) / mx, np.float32(0)).astype(np.float32)
        q = np.minimum(np.rint(iscale * b), 127)
        d = np.where(iscale != 0, np.float32(1) / iscale, np.float32(0)).astype(np.float32)
    return (q.astype(np.float64) * d.astype(np.float64)).reshape(shape)


def act_round(x: np.ndarray, wtype: str) -> np.ndarray:
    if wtype == "F16":
        return f16(x)
    if wtype == "Q8_0":
        return q8_0_roundtrip(x)
    if wtype == "Q8_K":
        return q8_k_roundtrip(x)
    return np.asarray(x, dtype=np.float64)


def matmul(x, w, wtype):
    """x (n, cols) times w (rows, cols) transposed, after the activation conversion."""
    return act_round(x, wtype) @ np.asarray(w, dtype=np.float64).T


def dot_input(wtype: str | dict, name: str) -> str:
    """The activation format of tensor `name`'s dot products: one type for
    every tensor, or a dict name -> stored type (Q8_0 for the legacy quant
    types, Q8_K for the K-quants, F16 for F16)."""
    if isinstance(wtype, str):
        return wtype
    t = wtype.get(name, "F32")
    if t in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"):
        return "Q8_0"
    if t in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"):
        return "Q8_K"
    return "F16" if t == "F16" else "F32"


def rms_norm(x, w, eps):
    x = np.asarray(x, dtype=np.float64)
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * w if w is not None else y


def gelu_quick_f16(x):
    """Quick GELU x * sigmoid(1.702 x) on the F16-rounded input, rounded to F16 (llama.cpp's table)."""
    h = f16(np.asarray(x, dtype=np.float64))
    return f16(h / (1.0 + np.exp(-1.702 * h)))


def gelu_f16(x):
    """GELU (tanh form) on the F16-rounded input, rounded to F16; exact outside (-10, 10)."""
    x = np.asarray(x, dtype=np.float64)
    h = f16(x)
    g = 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * h * (1.0 + 0.044715 * h * h)))
    y = f16(g)
    y = np.where(x >= 10.0, x, y)
    return np.where(x <= -10.0, 0.0, y)


def silu(x):
    return x / (1.0 + np.exp(-x))


def rope(x, pos, base, n_rot, neox, freq_factors=None, scaling=None):
    """x (n, heads, dim); rotates the first n_rot dims of each head.
    scaling: None, or {"freq_scale", "ext_factor", "attn_factor", "beta_fast",
    "beta_slow", "n_ctx_orig"}: linear scaling, and YaRN's blend of scaled and
    unscaled angles over the dims between two correction dims, with its
    magnitude correction (as llama.cpp defines YaRN)."""
    x = x.copy()
    half = n_rot // 2
    inv = base ** (-2.0 * np.arange(half) / n_rot)
    if freq_factors is not None:
        inv = inv / freq_factors
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]  # (n, half)
    mscale = 1.0
    if scaling:
        fs, ext = scaling["freq_scale"], scaling["ext_factor"]
        interp = fs * ang
        mscale = scaling["attn_factor"]
        if ext:
            def corr_dim(n_rotations):
                return n_rot * math.log(scaling["n_ctx_orig"] / (n_rotations * 2 * math.pi)) / (2 * math.log(base))
            lo = max(0.0, math.floor(corr_dim(scaling["beta_fast"])))
            hi = min(n_rot - 1.0, math.ceil(corr_dim(scaling["beta_slow"])))
            y = (np.arange(half) - lo) / max(0.001, hi - lo)
            ramp = (1.0 - np.clip(y, 0.0, 1.0)) * ext
            ang = interp * (1 - ramp) + ang * ramp
            mscale *= 1.0 + 0.1 * math.log(1.0 / fs)
        else:
            ang = interp
    c, s = np.cos(ang)[:, None, :] * mscale, np.sin(ang)[:, None, :] * mscale
    if neox:
        x0, x1 = x[..., :half].copy(), x[..., half:n_rot].copy()
        x[..., :half] = x0 * c - x1 * s
        x[..., half:n_rot] = x0 * s + x1 * c
    else:
        x0, x1 = x[..., 0:n_rot:2].copy(), x[..., 1:n_rot:2].copy()
        x[..., 0:n_rot:2] = x0 * c - x1 * s
        x[..., 1:n_rot:2] = x0 * s + x1 * c
    return x


def type_roundtrip(x: np.ndarray, t: str) -> np.ndarray:
    """Rows (whole blocks) stored as ggml type t and read back."""
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    if t == "IQ4_NL":  # gguf has no IQ4_NL quantizer; llamapy's reference one is bit-exact with llama.cpp's
        from llamapy import _engine

        flat = x32.reshape(-1, 32)
        return _engine.dequantize(_engine.quantize(flat, t), t, list(flat.shape)).astype(np.float64).reshape(x32.shape)
    qt = getattr(QT, t)
    return gguf.quants.dequantize(gguf.quants.quantize(x32, qt), qt).astype(np.float64).reshape(x32.shape)


def hadamard(n: int) -> np.ndarray:
    """The orthonormal Walsh-Hadamard matrix of size n (Sylvester order)."""
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / math.sqrt(n)


def rotate_blocks(x: np.ndarray, block: int) -> np.ndarray:
    """The last axis in consecutive blocks times hadamard(block)."""
    shape = x.shape
    return (x.reshape(-1, block) @ hadamard(block)).reshape(shape)


def rotation_blocks(kv_type: str | None, head_dim: int) -> tuple[int, int]:
    """(keys, values) Hadamard blocks llama.cpp uses with a quantized cache: a
    head size that is a multiple of 64; keys in the largest power-of-two block
    dividing it, values in 64s."""
    if not kv_type or kv_type in ("F16", "BF16", "F32") or head_dim % 64:
        return 0, 0
    b = 64
    while head_dim % (2 * b) == 0:
        b *= 2
    return b, 64


def mla_attention(spec: ArchSpec, cfg: Config, w: dict[str, np.ndarray], p: str, h: np.ndarray, pos, kvr, wtype,
                  tap=lambda name, val: None, round_weights: bool = True) -> np.ndarray:
    """Multi-head latent attention of one sequence's rows h (DeepSeek V2/V3, as
    llama.cpp evaluates it: absorbed queries over the cached latent | RoPE
    rows); returns the heads' outputs after attn_v_b, (n, n_head * head_v)."""
    n, H, R, C = len(h), cfg.n_head, cfg.head_dim, cfg.kv_lora
    HK, HV = cfg.head_k_mla, cfg.head_v_mla
    qa = rms_norm(matmul(h, w[p + "attn_q_a.weight"], dot_input(wtype, p + "attn_q_a.weight")),
                  w[p + "attn_q_a_norm.weight"], cfg.eps)
    q = matmul(qa, w[p + "attn_q_b.weight"], dot_input(wtype, p + "attn_q_b.weight")).reshape(n, H, HK)
    tap("q", q)
    kv = matmul(h, w[p + "attn_kv_a_mqa.weight"], dot_input(wtype, p + "attn_kv_a_mqa.weight"))
    latent = rms_norm(kv[:, :C], w[p + "attn_kv_a_norm.weight"], cfg.eps)
    k_pe = rope(kv[:, None, C:], pos, cfg.rope_base, R, False)[:, 0]
    q_pe = rope(q[:, :, HK - R:], pos, cfg.rope_base, R, False)
    absorbed = np.stack([matmul(q[:, hh, :HK - R], w[p + "attn_k_b.weight"][hh], dot_input(wtype, p + "attn_k_b.weight"))
                         for hh in range(H)], axis=1)  # (n, H, C)
    Q = np.concatenate([absorbed, q_pe], axis=2)
    K = np.concatenate([latent, k_pe], axis=1)
    tap("Qcur", Q)
    tap("Kcur", K)
    Q, K = kvr(Q), kvr(K)
    scale = 1.0 / math.sqrt(HK)
    out = np.zeros((n, H, C))
    for t in range(n):
        for hh in range(H):
            s = (K[:t + 1] @ Q[t, hh]) * scale
            e = np.exp(s - s.max())
            pr = e / e.sum()
            out[t, hh] = (kvr(pr) if round_weights else pr) @ K[:t + 1, :C]
    tap("kqv_out", out)
    heads = np.stack([matmul(out[:, hh], w[p + "attn_v_b.weight"][hh], dot_input(wtype, p + "attn_v_b.weight"))
                      for hh in range(H)], axis=1)
    tap("kqv_out_v", heads)
    return heads.reshape(n, H * HV)


def moe_route(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Softmax routing as llama.cpp's build_moe_ffn does it for qwen3moe and
    Mixtral: (ids, weights) of each row's k most probable experts (ties: the
    lower index), the weights divided by their sum."""
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = z / z.sum(axis=1, keepdims=True)
    ids = np.argsort(-probs, axis=1, kind="stable")[:, :k]
    wts = np.take_along_axis(probs, ids, axis=1)
    return ids, wts / wts.sum(axis=1, keepdims=True)


def moe_ffn(spec: ArchSpec, cfg: Config, w: dict[str, np.ndarray], p: str, h: np.ndarray, wtype,
            tap=lambda name, val: None) -> np.ndarray:
    """The mixture-of-experts FFN of the rows h: each row's chosen experts'
    gated FFNs, weighted and summed. tap(name, value) receives the router's
    logits ("ffn_moe_logits")."""
    logits = matmul(h, w[p + "ffn_gate_inp.weight"], dot_input(wtype, p + "ffn_gate_inp.weight"))
    tap("ffn_moe_logits", logits)
    if spec.glm:
        probs = 1.0 / (1.0 + np.exp(-logits))
        sel = probs + w[p + "exp_probs_b.bias"]
        if cfg.n_group > 1:
            g = sel.reshape(len(sel), cfg.n_group, -1)
            score = np.sort(g, axis=2)[:, :, -2:].sum(axis=2)
            keep = np.argsort(-score, axis=1, kind="stable")[:, :cfg.n_group_used]
            masked = np.full(g.shape, -np.inf)
            for t in range(len(sel)):
                masked[t, keep[t]] = g[t, keep[t]]
            sel = masked.reshape(sel.shape)
        ids = np.argsort(-sel, axis=1, kind="stable")[:, :cfg.n_expert_used]
        wts = np.take_along_axis(probs, ids, axis=1)
        wts = 2.5 * wts / np.maximum(wts.sum(axis=1, keepdims=True), 6.103515625e-5)
    elif spec.gpt_oss:
        logits = logits + w[p + "ffn_gate_inp.bias"]
        ids = np.argsort(-logits, axis=1, kind="stable")[:, :cfg.n_expert_used]
        z = np.take_along_axis(logits, ids, axis=1)
        z = np.exp(z - z.max(axis=1, keepdims=True))
        wts = z / z.sum(axis=1, keepdims=True)
    else:
        ids, wts = moe_route(logits, cfg.n_expert_used)
    bias = (lambda part, e: w[p + f"ffn_{part}_exps.bias"][e]) if spec.gpt_oss else (lambda part, e: 0.0)
    out = np.zeros_like(h, dtype=np.float64)
    for t in range(h.shape[0]):
        for j in range(cfg.n_expert_used):
            e = ids[t, j]
            up = matmul(h[t:t + 1], w[p + "ffn_up_exps.weight"][e], dot_input(wtype, p + "ffn_up_exps.weight"))
            up = up + bias("up", e)
            if spec.gpt_oss:
                gate = matmul(h[t:t + 1], w[p + "ffn_gate_exps.weight"][e], dot_input(wtype, p + "ffn_gate_exps.weight"))
                g = np.minimum(gate + bias("gate", e), 7.0)
                a = g / (1.0 + np.exp(-1.702 * g)) * (np.clip(up, -7.0, 7.0) + 1.0)
            elif spec.moe_gate:
                gate = matmul(h[t:t + 1], w[p + "ffn_gate_exps.weight"][e], dot_input(wtype, p + "ffn_gate_exps.weight"))
                a = silu(gate) * up
            else:
                a = silu(up)
            down = matmul(a, w[p + "ffn_down_exps.weight"][e], dot_input(wtype, p + "ffn_down_exps.weight"))[0]
            out[t] += wts[t, j] * (down + bias("down", e))
    if p + "ffn_up_shexp.weight" in w:
        g = matmul(h, w[p + "ffn_gate_shexp.weight"], dot_input(wtype, p + "ffn_gate_shexp.weight"))
        u = matmul(h, w[p + "ffn_up_shexp.weight"], dot_input(wtype, p + "ffn_up_shexp.weight"))
        shared = matmul(silu(g) * u, w[p + "ffn_down_shexp.weight"], dot_input(wtype, p + "ffn_down_shexp.weight"))
        tap("ffn_moe_out", out)
        tap("ffn_shexp_out", shared)
        out = out + shared
    return out


def forward(spec: ArchSpec, cfg: Config, w: dict[str, np.ndarray], tokens, wtype: str = "F32",
            kv_f16: bool = True, pos0: int = 0, rope_scaling: dict | None = None, kv_type: str | None = None,
            rotate_kv: bool = True, flash: bool = False, trace: dict | None = None):
    """Logits (n, n_vocab) and final hidden states (n, n_embd) of one sequence
    of tokens at positions pos0, pos0+1, ... rope_scaling: the RoPE scaling of
    the global layers (see rope()). kv_type: a quantized cache type ("Q8_0",
    "Q4_0", ...): keys and values go through it, queries through Q8_0 (the
    activation format of its dot product), attention weights stay exact; with
    rotate_kv, queries, keys and values are Hadamard-rotated first where
    llama.cpp does (rotation_blocks) and the outputs rotated back. flash: the
    attention weights stay exact against an F16 cache too (the flash path),
    instead of being rounded to F16 (the explicit path, llama.cpp without
    flash attention).
    trace: a dict that receives the named intermediates under the engine's
    (llama.cpp's) graph names, as (n, cols) arrays ("attn_norm-0", "Qcur-0",
    ..., "result_output")."""
    def tap(name, il, val):
        if trace is not None:
            trace[name if il < 0 else f"{name}-{il}"] = np.asarray(val, dtype=np.float64).reshape(n, -1).copy()

    E, H, KV, D, F = cfg.n_embd, cfg.n_head, cfg.n_head_kv, cfg.head_dim, cfg.n_ff
    n = len(tokens)
    pos = np.arange(pos0, pos0 + n)
    kvr = f16 if kv_f16 else (lambda a: np.asarray(a, dtype=np.float64))
    emb = np.asarray(w["token_embd.weight"], dtype=np.float64)
    x = emb[np.asarray(tokens)]
    tap("inp_embd", -1, x)
    if spec.embd_scale or spec.embd_mul:
        x = x * np.float32(spec.embd_mul or math.sqrt(E))
        tap("inp_scaled", -1, x)
    ff = w.get("rope_freqs.weight")
    attn_scale = spec.attn_mul or 1.0 / math.sqrt(D)
    res_mul = spec.residual_mul or 1.0
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        swa = is_swa(spec, cfg, il)
        base = spec.swa_rope_base if (swa and spec.swa_rope_base) else cfg.rope_base
        if spec.pre_norm:
            h = rms_norm(x, w[p + "attn_norm.weight"], cfg.eps)
            tap("attn_norm", il, h)
        else:
            h = x
        if spec.mla:
            o = matmul(mla_attention(spec, cfg, w, p, h, pos, kvr, wtype, lambda name, val: tap(name, il, val),
                                     round_weights=not (kv_type or flash)),
                       w[p + "attn_output.weight"], dot_input(wtype, p + "attn_output.weight"))
        else:
            if spec.qkv_fused:
                qkv = matmul(h, w[p + "attn_qkv.weight"], dot_input(wtype, p + "attn_qkv.weight"))
                q, k, v = qkv[:, :H * D], qkv[:, H * D:H * D + KV * D], qkv[:, H * D + KV * D:]
            else:
                q = matmul(h, w[p + "attn_q.weight"], dot_input(wtype, p + "attn_q.weight"))
                k = matmul(h, w[p + "attn_k.weight"], dot_input(wtype, p + "attn_k.weight"))
                v = matmul(h, w[p + "attn_v.weight"], dot_input(wtype, p + "attn_v.weight"))
            if spec.qkv_bias:
                q, k, v = q + w[p + "attn_q.bias"], k + w[p + "attn_k.bias"], v + w[p + "attn_v.bias"]
            if spec.qk_norm_full:
                q = rms_norm(q, w[p + "attn_q_norm.weight"], cfg.eps)
                k = rms_norm(k, w[p + "attn_k_norm.weight"], cfg.eps)
                tap("Qcur_normed", il, q)
                tap("Kcur_normed", il, k)
            q, k, v = q.reshape(n, H, D), k.reshape(n, KV, D), v.reshape(n, KV, D)
            if spec.qk_norm:
                q = rms_norm(q, w[p + "attn_q_norm.weight"], cfg.eps)
                k = rms_norm(k, w[p + "attn_k_norm.weight"], cfg.eps)
                tap("Qcur_normed", il, q)
                tap("Kcur_normed", il, k)
            # Window layers keep their own unscaled frequencies, but llama.cpp
            # applies the context's YaRN values (attention factor) to every layer.
            sc = dict(rope_scaling, freq_scale=1.0) if (swa and rope_scaling) else rope_scaling
            if swa and spec.swa_rope_plain:
                sc = None  # olmo2's window layers: no scaling, no YaRN at all
            if not (spec.nope_period and (il + 1) % spec.nope_period == 0):
                q = rope(q, pos, base, D, spec.rope_neox, ff, sc)
                k = rope(k, pos, base, D, spec.rope_neox, ff, sc)
            tap("Qcur", il, q)
            tap("Kcur", il, k)
            tap("Vcur", il, v)
            if spec.scale_q:
                q = q * attn_scale
            kq_scale = 1.0 if spec.scale_q else attn_scale
            rot_k, rot_v = rotation_blocks(kv_type, D) if rotate_kv else (0, 0)
            if rot_k:
                q, k = rotate_blocks(q, rot_k), rotate_blocks(k, rot_k)
            if rot_v:
                v = rotate_blocks(v, rot_v)
            if kv_type:
                q, k, v = q8_0_roundtrip(q), type_roundtrip(k, kv_type), type_roundtrip(v, kv_type)
            else:
                q, k, v = kvr(q), kvr(k), kvr(v)
            out = np.zeros((n, H, D))
            for t in range(n):
                vis = [j for j in range(t + 1) if not (swa and pos[t] - pos[j] >= cfg.n_swa)]
                for hh in range(H):
                    g = hh // (H // KV)
                    s = k[vis, g, :] @ q[t, hh, :]
                    if spec.attn_softcap:
                        s = np.tanh(s / spec.attn_softcap) * spec.attn_softcap
                    s = s * kq_scale
                    if spec.gpt_oss:
                        sink = float(w[p + "attn_sinks.weight"][hh])
                        m = max(s.max(), sink)
                        e = np.exp(s - m)
                        tot = e.sum() + math.exp(sink - m)
                    else:
                        e = np.exp(s - s.max())
                        tot = e.sum()
                    pr = e / tot if (kv_type or flash) else kvr(e / tot)
                    out[t, hh, :] = pr @ v[vis, g, :]
            if rot_v:
                out = rotate_blocks(out, rot_v)
            tap("kqv_out", il, out)
            o = matmul(out.reshape(n, H * D), w[p + "attn_output.weight"], dot_input(wtype, p + "attn_output.weight"))
        if p + "attn_output.bias" in w:
            o = o + w[p + "attn_output.bias"]
        tap("attn_out", il, o)
        if spec.post_norms:
            o = rms_norm(o, w[p + "post_attention_norm.weight"], cfg.eps)
            tap("attn_post_norm", il, o)
        x = x + o * res_mul
        tap("sa_out" if spec.post_norms and spec.pre_norm else "ffn_inp", il, x)
        if spec.pre_norm:
            h = rms_norm(x, w[p + (ffn_norm_name(spec) + ".weight")], cfg.eps)
            tap("ffn_norm", il, h)
        else:
            h = x
        if cfg.n_expert and p + "ffn_gate_inp.weight" in w:
            o = moe_ffn(spec, cfg, w, p, h, wtype, lambda name, val: tap(name, il, val))
            if p + "ffn_up_shexp.weight" not in w:
                tap("ffn_moe_out", il, o)
            tap("ffn_out", il, o)
            x = x + o * res_mul
            tap("l_out", il, x)
            continue
        if spec.gate_up_fused:
            gu = matmul(h, w[p + "ffn_up.weight"], dot_input(wtype, p + "ffn_up.weight"))
            gate, up = gu[:, :F], gu[:, F:]
        else:
            gate = matmul(h, w[p + "ffn_gate.weight"], dot_input(wtype, p + "ffn_gate.weight"))
            up = matmul(h, w[p + "ffn_up.weight"], dot_input(wtype, p + "ffn_up.weight"))
        if spec.out_biases:
            gate, up = gate + w[p + "ffn_gate.bias"], up + w[p + "ffn_up.bias"]
        a = (gelu_f16(gate) if spec.act == "gelu" else silu(gate)) * up
        o = matmul(a, w[p + "ffn_down.weight"], dot_input(wtype, p + "ffn_down.weight"))
        if spec.out_biases:
            o = o + w[p + "ffn_down.bias"]
        tap("ffn_out", il, o)
        if spec.post_norms:
            o = rms_norm(o, w[p + "post_ffw_norm.weight"], cfg.eps)
            tap("ffn_post_norm", il, o)
        x = x + o * res_mul
        tap("l_out", il, x)
    hfin = rms_norm(x, w["output_norm.weight"], cfg.eps)
    tap("result_norm", -1, hfin)
    out_w = w.get("output.weight", w["token_embd.weight"])
    logits = matmul(hfin, out_w, dot_input(wtype, "output.weight" if "output.weight" in w else "token_embd.weight"))
    if spec.logit_div:
        logits = logits * np.float32(1.0 / np.float32(spec.logit_div))
    if spec.final_softcap:
        logits = np.tanh(logits / spec.final_softcap) * spec.final_softcap
    tap("result_output", -1, logits)
    return logits, hfin
