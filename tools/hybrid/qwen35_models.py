"""Tiny random-weight Qwen3.5 checkpoints (dense and mixture of experts) in Hugging Face format.

What this is: one builder per family, each a seeded, randomly initialised `transformers`
Qwen3.5 text model (safetensors + config.json) with the shared tiny BPE tokenizer of the MoE
fixtures (tools/moe/tokenizer.py, Qwen's special tokens), in a folder llama.cpp's
convert_hf_to_gguf.py accepts. The configs keep Qwen3.5's structure: three gated delta-net
(linear attention) layers then one gated full-attention layer, more value heads than key heads
(so the converter's value-head reordering matters), a short convolution of 4, partial RoPE,
QK norms; the MoE variant adds a softmax router with top-k experts and a shared expert with its
sigmoid gate. Hidden size 64.
What it is not: a trained model; outputs are noise, for comparing two implementations.
"""
from __future__ import annotations

import json
import pathlib

import torch

import hf_models as moe_models  # tools/moe/hf_models.py: randomize, _save, _vocab

HIDDEN = 64
LAYERS = ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 2


def _common(n_vocab: int, n_layers: int) -> dict:
    return dict(
        vocab_size=n_vocab, hidden_size=HIDDEN, num_hidden_layers=n_layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, layer_types=LAYERS[:n_layers],
        max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                         "partial_rotary_factor": 0.5, "mrope_section": [2, 1, 1],
                         "mrope_interleaved": True},
        bos_token_id=None, eos_token_id=n_vocab - 1)


def _randomize(model: torch.nn.Module, seed: int) -> None:
    """The MoE fixtures' draws, then the delta-net's own parameters in their real ranges:
    A_log so that the decay exp(-exp(A_log) * softplus(.)) stays in (0, 1) near 0.9, dt_bias
    small. (N(1, 0.1) draws for them would forget the state within a token or two.)"""
    moe_models.randomize(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("A_log"):
                p.copy_((torch.rand(p.shape, generator=g) * 2.0 - 3.0).to(p.dtype))
            elif name.endswith("dt_bias"):
                p.copy_((torch.randn(p.shape, generator=g) * 0.5).to(p.dtype))


def build_qwen35(out: pathlib.Path, base_tok: pathlib.Path, seed: int = 601, n_layers: int = 4) -> dict:
    """Qwen3.5 dense (Qwen3_5ForCausalLM, arch qwen35): 4 layers (3 gated delta-net, 1 gated
    attention), attention 4/2 heads of 16 with partial RoPE (8 of 16 dims), delta-net 2 key
    heads / 4 value heads of 16, conv kernel 4, FFN 128, untied output, plus one MTP block (add_mtp_layer)."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    n_vocab = moe_models._vocab("qwen3moe", base_tok, out)
    cfg = Qwen3_5TextConfig(intermediate_size=128, **_common(n_vocab, n_layers))
    cfg.architectures = ["Qwen3_5ForCausalLM"]
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(cfg)
    _randomize(model, seed)
    moe_models._save(model, out, "qwen3moe", base_tok)
    add_mtp_layer(out, n_layers, seed)
    return json.loads((out / "config.json").read_text())


def build_qwen35moe(out: pathlib.Path, base_tok: pathlib.Path, seed: int = 602, n_layers: int = 4) -> dict:
    """Qwen3.5 MoE (Qwen3_5MoeForCausalLM, arch qwen35moe): the dense fixture's layers with
    8 experts of width 32, top-2 softmax routing (weights renormalised), a shared expert of
    width 48 with its sigmoid gate."""
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    n_vocab = moe_models._vocab("qwen3moe", base_tok, out)
    cfg = Qwen3_5MoeTextConfig(moe_intermediate_size=32, shared_expert_intermediate_size=48,
                               num_experts=8, num_experts_per_tok=2, **_common(n_vocab, n_layers))
    cfg.architectures = ["Qwen3_5MoeForCausalLM"]
    torch.manual_seed(seed)
    model = Qwen3_5MoeForCausalLM(cfg)
    _randomize(model, seed)
    moe_models._save(model, out, "qwen3moe", base_tok)
    add_mtp_layer(out, n_layers, seed)
    return json.loads((out / "config.json").read_text())


def add_mtp_layer(out: pathlib.Path, n_layers: int, seed: int) -> None:
    """Adds one multi-token-prediction block as Qwen3.5 checkpoints ship it (mtp.fc,
    mtp.pre_fc_norm_embedding / _hidden, mtp.norm, mtp.layers.0.* shaped as a full-attention
    layer; transformers' model does not hold these, so they are written into the safetensors
    directly, seeded). The converter turns them into an extra block and nextn_predict_layers 1;
    llama.cpp loads it and does not run it in the main pass, nor should we."""
    from safetensors.torch import load_file, save_file

    f = out / "model.safetensors"
    t = load_file(str(f))
    g = torch.Generator().manual_seed(seed + 2)
    src = f"model.layers.{n_layers - 1}."
    for k in sorted(t):
        if k.startswith(src):
            t["mtp.layers.0." + k[len(src):]] = (t[k] + 0.05 * torch.randn(t[k].shape, generator=g)).contiguous()
    t["mtp.fc.weight"] = torch.randn((HIDDEN, 2 * HIDDEN), generator=g) * 0.2
    for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        t[f"mtp.{n}.weight"] = torch.randn((HIDDEN,), generator=g) * 0.1
    save_file(t, str(f), metadata={"format": "pt"})
    cfg = json.loads((out / "config.json").read_text())
    cfg["mtp_num_hidden_layers"] = 1
    (out / "config.json").write_text(json.dumps(cfg, indent=1))


BUILDERS = {"qwen35": build_qwen35, "qwen35moe": build_qwen35moe}
DOCS = {"qwen35": build_qwen35.__doc__, "qwen35moe": build_qwen35moe.__doc__}
