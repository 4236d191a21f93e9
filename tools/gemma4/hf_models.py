"""Tiny random-weight Gemma 4 text checkpoints (Gemma4ForCausalLM) in Hugging Face format.

What this is: one builder per variant; each writes a seeded, randomly initialised
`transformers` Gemma 4 text model (safetensors + config.json) and a Gemma-style tokenizer.json
(tools/gemma4/g4_tokenizer.py) into a folder that llama.cpp's convert_hf_to_gguf.py accepts. The
configs copy the released models' structure (sliding-window and global layers with their own
head sizes, KV head counts and RoPE, proportional RoPE on the global layers, per-layer
embeddings and shared KV layers of E2B/E4B, keys-as-values global attention of 31B / 26B-A4B,
the 26B-A4B mixture of experts beside the dense FFN), shrunk to hidden 64.
What it is not: a trained model. Outputs are noise; they exist so that two implementations of
the same maths can be compared token for token.
"""
from __future__ import annotations

import json
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "moe"))
sys.path.insert(0, str(HERE))


def _load_moe_models():
    """tools/moe/hf_models.py (its seeded re-draw of every weight), loaded by path: this module
    has the same name."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("moe_hf_models", HERE.parent / "moe" / "hf_models.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


moe_models = _load_moe_models()

import g4_tokenizer as g4tok  # noqa: E402

HIDDEN = 64


# Matrices are drawn at half the MoE fixtures' spread: with E2B's per-layer embeddings and
# output scalars, W_STD 0.2 made a model so sensitive that llama.cpp's own rounding (F16 vs
# float32 reference) moved some logits by 0.13; the comparisons want rounding to stay rounding.
MATRIX_SCALE = 0.5


def _randomize(model: torch.nn.Module, seed: int) -> None:
    """The MoE fixtures' distributions (matrices times MATRIX_SCALE), plus Gemma 4's own scales:
    the router's input scale and per-expert scales near 1, each layer's output scalar near 1
    (all drawn, so a file that dropped one would show)."""
    moe_models.randomize(model, seed)
    g = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() >= 2:
                p.mul_(MATRIX_SCALE)
            if name.endswith("router.scale") or name.endswith("per_expert_scale"):
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.2)
            elif name.endswith("router.proj.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * moe_models.ROUTER_STD)
        for name, b in sorted(model.named_buffers()):
            if name.endswith("layer_scalar"):
                b.copy_(1.0 + torch.randn(b.shape, generator=g) * 0.2)


def _build(out: pathlib.Path, spm_model: pathlib.Path, seed: int, **kw) -> dict:
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    out.mkdir(parents=True, exist_ok=True)
    n_vocab, bos, eos, pad = g4tok.write(spm_model, out)
    base = dict(
        vocab_size=n_vocab, vocab_size_per_layer_input=n_vocab, hidden_size=HIDDEN,
        intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=4096, rms_norm_eps=1e-6, sliding_window=8,
        final_logit_softcapping=30.0, hidden_activation="gelu_pytorch_tanh",
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                               "rope_theta": 1000000.0}},
        tie_word_embeddings=True, bos_token_id=bos, eos_token_id=eos, pad_token_id=pad)
    base.update(kw)
    cfg = Gemma4TextConfig(**base)
    torch.manual_seed(seed)
    model = Gemma4ForCausalLM(cfg)
    _randomize(model, seed)
    model.save_pretrained(out)
    return json.loads((out / "config.json").read_text())


def build_e2b(out: pathlib.Path, spm_model: pathlib.Path, seed: int = 601) -> dict:
    """E2B / E4B layout: 6 layers (sliding, sliding, sliding, global, sliding, global; window 8),
    the last 2 layers reuse the KV cache of the last sliding (2) and global (3) layer before them
    (num_kv_shared_layers 2) and have double-wide FFNs (256); per-layer embeddings of 8 per
    layer; sliding layers 4 heads / 2 KV heads of head_dim 16, RoPE theta 1e4 over all dims;
    global layers head_dim 32, 2 KV heads, proportional RoPE (theta 1e6, a quarter of the dims
    rotated); final logit soft-cap 30; tied output."""
    return _build(out, spm_model, seed, num_hidden_layers=6, global_head_dim=32,
                  layer_types=["sliding_attention"] * 3 + ["full_attention", "sliding_attention",
                                                            "full_attention"],
                  num_kv_shared_layers=2, use_double_wide_mlp=True,
                  hidden_size_per_layer_input=8, attention_k_eq_v=False)


def build_dense(out: pathlib.Path, spm_model: pathlib.Path, seed: int = 602) -> dict:
    """31B layout: 5 layers (sliding, sliding, global, sliding, global; window 8), no per-layer
    embeddings, no shared KV; sliding layers 4 heads / 2 KV heads of head_dim 16; global layers
    head_dim 32 with 1 KV head whose keys are also its values (attention_k_eq_v: no v_proj);
    proportional RoPE on the global layers; final logit soft-cap 30; tied output."""
    return _build(out, spm_model, seed, num_hidden_layers=5, global_head_dim=32,
                  num_global_key_value_heads=1,
                  layer_types=["sliding_attention", "sliding_attention", "full_attention",
                               "sliding_attention", "full_attention"],
                  num_kv_shared_layers=0, hidden_size_per_layer_input=0, attention_k_eq_v=True)


def build_moe(out: pathlib.Path, spm_model: pathlib.Path, seed: int = 603) -> dict:
    """26B-A4B layout: 4 layers (sliding, sliding, sliding, global; window 8), each with the
    dense FFN (128) beside a mixture of 8 experts (FFN 32, top-2, softmax router on the
    RMS-normed residual times its scale / sqrt(hidden), normalised top-2 weights times
    per-expert scales), each branch with its own norms; global layers head_dim 32, 1 KV head,
    keys as values; no per-layer embeddings; final logit soft-cap 30; tied output."""
    return _build(out, spm_model, seed, num_hidden_layers=4, global_head_dim=32,
                  num_global_key_value_heads=1,
                  layer_types=["sliding_attention"] * 3 + ["full_attention"],
                  num_kv_shared_layers=0, hidden_size_per_layer_input=0, attention_k_eq_v=True,
                  enable_moe_block=True, num_experts=8, top_k_experts=2, moe_intermediate_size=32)


BUILDERS = {"e2b": build_e2b, "dense": build_dense, "moe": build_moe}
DOCS = {k: v.__doc__ for k, v in BUILDERS.items()}
