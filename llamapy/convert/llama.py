"""LLaMA-style checkpoints (``LlamaForCausalLM``: Llama 2/3, Mistral, SmolLM, ...; Mixtral's
experts are stacked by the shared writer) -> GGUF architecture ``llama``.

What differs from the shared decoder writer: llama.cpp's llama graph applies rotary embedding
to adjacent pairs (x0, x1), Hugging Face's to the two halves of each head (x0, x_{d/2}), so the
rows of q_proj / k_proj (and their biases) are reordered per head: row (half h, index i) moves
to (index i, half h). Also ``llama.vocab_size``, ``llama.rope.dimension_count``, and for Llama 3
rope scaling ("llama3") the per-frequency factors as a ``rope_freqs.weight`` tensor.
"""
from __future__ import annotations

import json
import math
import os
from typing import Dict

import numpy as np

from .decoder import DecoderFamily, need, rope_parameters

MODEL_TYPES = ("llama", "mistral", "mixtral")


def permute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """(n_head * 2 * half, ...) rows in half-split order -> interleaved pair order, per head."""
    half = w.shape[0] // n_head // 2
    return w.reshape(n_head, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _hook(name: str, x: np.ndarray, cfg: dict) -> np.ndarray:
    n_head = int(cfg["num_attention_heads"])
    if name.endswith(("attn_q.weight", "attn_q.bias")):
        return permute_rows(x, n_head)
    if name.endswith(("attn_k.weight", "attn_k.bias")):
        return permute_rows(x, int(cfg.get("num_key_value_heads") or n_head))
    return x


def _head_dim(cfg: dict) -> int:
    return int(cfg.get("head_dim") or need(cfg, "hidden_size") // need(cfg, "num_attention_heads"))


def _extra_kv(w, cfg: dict, hf_dir: str) -> None:
    w.add_vocab_size(need(cfg, "vocab_size"))
    w.add_rope_dimension_count(_head_dim(cfg))


def _adjust_vocab(vocab, cfg: dict, hf_dir: str) -> None:
    """llama.cpp's LLaMA-family tokenizer rules: tokenizer_config.json's add_prefix_space becomes
    add_space_prefix; a 49152-token vocabulary (Granite's small models) never adds BOS."""
    tok_cfg = os.path.join(hf_dir, "tokenizer_config.json")
    if os.path.isfile(tok_cfg):
        with open(tok_cfg, encoding="utf-8") as f:
            flag = json.load(f).get("add_prefix_space")
        if flag is not None:
            vocab.add_space_prefix = bool(flag)
    if cfg.get("vocab_size", 32000) == 49152:
        vocab.add_special["bos"] = False
    if cfg.get("vocab_size", 32000) == 32016:
        raise NotImplementedError("CodeLlama's infill tokens (vocab_size 32016) are not converted")


def llama3_rope_factors(cfg: dict) -> Dict[str, np.ndarray]:
    """Llama 3.1's frequency-dependent rope scaling as the factor llama.cpp divides each
    frequency by: 1 for short wavelengths, ``factor`` for long ones, a smooth blend between.
    Computed in float32 as the reference converter does; the same bits on the configurations
    tried (tests), though its pow may differ by 1 ulp on rare exponents."""
    rp = rope_parameters(cfg)
    rp = rp.get("full_attention", rp)
    if str(rp.get("rope_type", "")).lower() != "llama3":
        return {}
    f32 = np.float32
    dim = _head_dim(cfg)
    base = rp.get("rope_theta", 10000.0)
    # base ** (2i / dim) in double rounded to float32: torch's float32 pow in the reference
    # agrees with it to the bit where numpy's float32 powf is often 1 ulp off
    expo = np.arange(0, dim, 2, dtype=f32) / f32(dim)
    freqs = f32(1.0) / np.power(np.float64(base), expo.astype(np.float64)).astype(f32)
    factor = rp.get("factor", 8.0)
    lo, hi = rp.get("low_freq_factor", 1.0), rp.get("high_freq_factor", 4.0)
    old_ctx = rp.get("original_max_position_embeddings", 8192)
    lo_wavelen, hi_wavelen = old_ctx / lo, old_ctx / hi
    out = []
    for freq in freqs:
        wavelen = f32(2 * math.pi) / freq
        if wavelen < hi_wavelen:
            out.append(1.0)
        elif wavelen > lo_wavelen:
            out.append(factor)
        else:
            smooth = (f32(old_ctx) / wavelen - f32(lo)) / f32(hi - lo)
            out.append(f32(1) / ((f32(1) - smooth) / f32(factor) + smooth))
    return {"rope_freqs.weight": np.array(out, dtype=np.float32)}


FAMILY = DecoderFamily(
    arch="llama",
    required=("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate|ffn_gate_exps",
              "ffn_up|ffn_up_exps", "ffn_down|ffn_down_exps"),
    extra_kv=_extra_kv,
    tensor_hook=_hook,
    extra_tensors=llama3_rope_factors,
    adjust_vocab=_adjust_vocab,
)
