"""Tiny random-weight LFM2 checkpoints (Liquid AI's short-convolution + attention hybrid, and
LFM2-MoE: the same with experts) in Hugging Face format.

What this is: a seeded, randomly initialised `transformers` Lfm2ForCausalLM (safetensors +
config.json) with the shared tiny BPE tokenizer of the MoE fixtures (tools/moe/tokenizer.py),
in a folder llama.cpp's convert_hf_to_gguf.py accepts. The config keeps LFM2's structure:
gated short-convolution layers (in_proj to B | C | x, B * x through a depthwise causal
convolution of conv_L_cache taps, times C, out_proj) interleaved with GQA attention layers
with per-head q / k RMS norms, a SwiGLU FFN in every layer, the final norm stored as
`embedding_norm` and tied embeddings. Hidden size 64. LFM2-MoE: the same layers, the first two
with the dense FFN, the others with experts (sigmoid router with a selection bias, top-k, the
weights normalised).
What it is not: a trained model; outputs are noise, for comparing two implementations.
"""
from __future__ import annotations

import json
import pathlib

import torch

import hf_models as moe_models  # tools/moe/hf_models.py: randomize, _save, _vocab

HIDDEN = 64
LAYERS = ["conv", "conv", "full_attention", "conv", "full_attention", "conv"]


def build_lfm2(out: pathlib.Path, base_tok: pathlib.Path, seed: int = 701) -> dict:
    """LFM2 (Lfm2ForCausalLM, arch lfm2): 6 layers (4 short-convolution, 2 attention at
    layers 2 and 4), attention 4 / 2 heads of 16 with q / k norms and NeoX RoPE, convolution
    of 3 taps (conv_L_cache), FFN 128 (block_auto_adjust_ff_dim off), tied embeddings."""
    from transformers import Lfm2Config, Lfm2ForCausalLM

    n_vocab = moe_models._vocab("qwen3moe", base_tok, out)
    cfg = Lfm2Config(vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=128,
                     num_hidden_layers=len(LAYERS), num_attention_heads=4, num_key_value_heads=2,
                     layer_types=LAYERS, conv_L_cache=3, conv_bias=False,
                     block_auto_adjust_ff_dim=False, block_ffn_dim_multiplier=1.0,
                     max_position_embeddings=4096, norm_eps=1e-5, tie_word_embeddings=True,
                     rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                     bos_token_id=None, eos_token_id=n_vocab - 1, pad_token_id=None)
    cfg.architectures = ["Lfm2ForCausalLM"]
    torch.manual_seed(seed)
    model = Lfm2ForCausalLM(cfg)
    moe_models.randomize(model, seed)
    moe_models._save(model, out, "qwen3moe", base_tok)
    return json.loads((out / "config.json").read_text())


def build_lfm2moe(out: pathlib.Path, base_tok: pathlib.Path, seed: int = 711) -> dict:
    """LFM2-MoE (Lfm2MoeForCausalLM, arch lfm2moe): lfm2's 6 layers (4 short-convolution, 2
    attention at layers 2 and 4; the same heads, norms and convolution of 3 taps), the first 2
    (num_dense_layers) with a dense FFN of 128, the other 4 with 8 experts of 32, top-2, a
    sigmoid router with a (randomised) expert selection bias and normalised weights, tied
    embeddings."""
    from transformers import Lfm2MoeConfig, Lfm2MoeForCausalLM

    n_vocab = moe_models._vocab("qwen3moe", base_tok, out)
    cfg = Lfm2MoeConfig(vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=128, moe_intermediate_size=32,
                        num_hidden_layers=len(LAYERS), num_attention_heads=4, num_key_value_heads=2,
                        layer_types=LAYERS, conv_L_cache=3, conv_bias=False, num_dense_layers=2,
                        num_experts=8, num_experts_per_tok=2, use_expert_bias=True, routed_scaling_factor=1.0,
                        norm_topk_prob=True, max_position_embeddings=4096, norm_eps=1e-5, tie_word_embeddings=True,
                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                        bos_token_id=None, eos_token_id=n_vocab - 1, pad_token_id=None)
    cfg.architectures = ["Lfm2MoeForCausalLM"]
    torch.manual_seed(seed)
    model = Lfm2MoeForCausalLM(cfg)
    moe_models.randomize(model, seed)
    # the selection bias is a buffer (zeros at init), which randomize leaves alone
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, buf in sorted(model.named_buffers()):
            if name.endswith("expert_bias"):
                buf.copy_(torch.randn(buf.shape, generator=g) * moe_models.EXP_BIAS_STD)
    moe_models._save(model, out, "qwen3moe", base_tok)
    return json.loads((out / "config.json").read_text())


BUILDERS = {"lfm2": build_lfm2, "lfm2moe": build_lfm2moe}
DOCS = {"lfm2": build_lfm2.__doc__, "lfm2moe": build_lfm2moe.__doc__}
