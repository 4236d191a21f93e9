"""Tiny random-weight Granite 4.0-H checkpoint (IBM's Mamba-2 + attention hybrid with experts) in
Hugging Face format.

What this is: a seeded, randomly initialised `transformers` GraniteMoeHybridForCausalLM
(safetensors + config.json) with the shared tiny BPE tokenizer of the MoE fixtures
(tools/moe/tokenizer.py, Granite's special tokens), in a folder llama.cpp's
convert_hf_to_gguf.py accepts (arch granitehybrid). The config keeps Granite 4.0-H-Tiny's
structure: Mamba-2 layers (in_proj to z | x B C | dt, a causal convolution of 4 with bias and
SiLU, the selective scan with a scalar decay per head, D skip, SiLU(z) gate, grouped RMS norm)
with attention layers between them and no positions (NoPE), a mixture of experts with a
shared expert in every layer, and Granite's four multipliers. Hidden size 64.
What it is not: a trained model; outputs are noise, for comparing two implementations.
"""
from __future__ import annotations

import json
import pathlib

import torch

import hf_models as moe_models  # tools/moe/hf_models.py: randomize, _save, _vocab

HIDDEN = 64
LAYERS = ["linear_attention", "linear_attention", "attention", "linear_attention", "attention"]


def _randomize(model: torch.nn.Module, seed: int) -> None:
    """The MoE fixtures' draws, then the Mamba-2 mixer's own parameters in their real ranges:
    A_log so that the per-step decay exp(-exp(A_log) * softplus(dt)) stays near 0.9, dt_bias
    small, D near 1 (as trained checkpoints have them)."""
    moe_models.randomize(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("A_log"):
                p.copy_((torch.rand(p.shape, generator=g) * 2.0 - 3.0).to(p.dtype))
            elif name.endswith("dt_bias"):
                p.copy_((torch.randn(p.shape, generator=g) * 0.5).to(p.dtype))
            elif name.endswith(".D"):
                p.copy_((1.0 + torch.randn(p.shape, generator=g) * 0.2).to(p.dtype))


def build_granitehybrid(out: pathlib.Path, base_tok: pathlib.Path, seed: int = 801) -> dict:
    """Granite 4.0-H-Tiny / Small layout (GraniteMoeHybridForCausalLM, arch granitehybrid): 5
    layers (Mamba-2 at 0, 1, 3; attention at 2, 4 with 4 / 2 heads of 16, no RoPE), Mamba-2
    with d_inner 128 in 8 heads of 16, 2 groups, state 16, convolution of 4 with bias; in every
    layer 4 experts of width 32 (top 2, softmax, renormalised) plus a shared expert of 48;
    multipliers: embedding 2, attention 0.25, residual 0.5, logits divided by 2; untied output."""
    return _build(out, base_tok, seed, num_local_experts=4, num_experts_per_tok=2)


def build_granitehybrid_dense(out: pathlib.Path, base_tok: pathlib.Path, seed: int = 802) -> dict:
    """Granite 4.0-H-1B / 350M / Micro layout: the same layers without experts, the FFN one
    dense SwiGLU of 48 (the checkpoint's shared_mlp, which the converter writes as ffn_gate /
    ffn_up / ffn_down), 1 Mamba-2 group."""
    # (llama.cpp reads the dense FFN's width from intermediate_size: the released dense
    # checkpoints have it equal to shared_intermediate_size)
    return _build(out, base_tok, seed, num_local_experts=0, num_experts_per_tok=0, mamba_n_groups=1,
                  intermediate_size=48)


def _build(out: pathlib.Path, base_tok: pathlib.Path, seed: int, **kw) -> dict:
    from transformers import GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM

    n_vocab = moe_models._vocab("granite", base_tok, out)
    # The converter pads the token list to a multiple of 8 (Mamba-2's pad_vocab_size_multiple,
    # which released Granite vocabularies already are); the embeddings must have those rows.
    n_rows = (n_vocab + 7) // 8 * 8
    base = dict(
        vocab_size=n_rows, hidden_size=HIDDEN, intermediate_size=32, shared_intermediate_size=48,
        num_hidden_layers=len(LAYERS), layer_types=LAYERS, num_attention_heads=4, num_key_value_heads=2,
        mamba_n_heads=8, mamba_n_groups=2, mamba_d_state=16,
        mamba_d_head=16, mamba_d_conv=4, mamba_expand=2, mamba_conv_bias=True, mamba_proj_bias=False,
        embedding_multiplier=2.0, attention_multiplier=0.25, residual_multiplier=0.5, logits_scaling=2.0,
        position_embedding_type=None, max_position_embeddings=4096, rms_norm_eps=1e-5,
        tie_word_embeddings=False, bos_token_id=n_vocab - 4, eos_token_id=n_vocab - 4, pad_token_id=None)
    base.update(kw)
    cfg = GraniteMoeHybridConfig(**base)
    cfg.architectures = ["GraniteMoeHybridForCausalLM"]
    torch.manual_seed(seed)
    model = GraniteMoeHybridForCausalLM(cfg)
    _randomize(model, seed)
    moe_models._save(model, out, "granite", base_tok)
    # transformers writes attention layers as "full_attention"; llama.cpp's converter takes only
    # "attention" (the released checkpoints' word) and would make every layer Mamba-2.
    # transformers reads any type but "linear_attention" as attention, so both agree on this.
    return moe_models._patch_config(out, layer_types=["attention" if t == "attention" else "linear_attention"
                                                      for t in LAYERS])


BUILDERS = {"granitehybrid": build_granitehybrid, "granitehybrid_dense": build_granitehybrid_dense}
DOCS = {k: v.__doc__ for k, v in BUILDERS.items()}
