"""Tiny random-weight mixture-of-experts checkpoints in Hugging Face format.

What this is: one builder per family; each writes a seeded, randomly initialised
`transformers` model (safetensors + config.json) and the shared tiny BPE tokenizer
(tools/moe/tokenizer.py) into a folder that llama.cpp's convert_hf_to_gguf.py accepts.
The configs copy each family's real structure (routing, shared experts, dense lead layers,
attention variant, rope scaling), shrunk to hidden 64.
What it is not: a trained model. Outputs are noise; they exist so that two implementations
of the same maths can be compared token for token.
"""
from __future__ import annotations

import json
import pathlib
import shutil

import torch

import tokenizer as tok

HIDDEN = 64
W_STD = 0.2        # every weight matrix
NORM_STD = 0.1     # norm weights: 1 + N(0, NORM_STD^2)
BIAS_STD = 0.05    # biases
ROUTER_STD = 0.5   # router (gate) weights: wider than W_STD so top-k picks are well separated
SINK_STD = 0.5     # gpt-oss attention sinks
EXP_BIAS_STD = 0.1  # DeepSeek-V3 / GLM-4.5 e_score_correction_bias (selection-only bias)


def _is_router(name: str) -> bool:
    return name.endswith("mlp.gate.weight") or name.endswith("mlp.router.weight") or \
        name.endswith("block_sparse_moe.gate.weight")


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Re-draws every parameter (and the expert-bias buffers) from fixed seeded distributions."""
    g = torch.Generator().manual_seed(seed)
    tensors = dict(model.named_parameters())
    tensors.update({n: b for n, b in model.named_buffers() if "e_score_correction_bias" in n})
    with torch.no_grad():
        for name in sorted(tensors):
            p = tensors[name]
            shape = p.shape
            if "e_score_correction_bias" in name:
                v = torch.randn(shape, generator=g) * EXP_BIAS_STD
            elif "sinks" in name:
                v = torch.randn(shape, generator=g) * SINK_STD
            elif "norm" in name and p.dim() == 1:
                v = 1.0 + torch.randn(shape, generator=g) * NORM_STD
            elif "bias" in name or p.dim() == 1:
                v = torch.randn(shape, generator=g) * BIAS_STD
            elif _is_router(name):
                v = torch.randn(shape, generator=g) * ROUTER_STD
            else:
                v = torch.randn(shape, generator=g) * W_STD
            p.copy_(v.to(p.dtype))


def _save(model, out: pathlib.Path, family: str, base_tok: pathlib.Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.write(family, base_tok, out)
    cfg = json.loads((out / "config.json").read_text())
    return cfg


def _patch_config(out: pathlib.Path, **kw) -> dict:
    cfg = json.loads((out / "config.json").read_text())
    cfg.update(kw)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    return cfg


def _vocab(family: str, base_tok: pathlib.Path, tmp: pathlib.Path) -> int:
    tmp.mkdir(parents=True, exist_ok=True)
    return tok.write(family, base_tok, tmp)


def build_qwen3moe(out: pathlib.Path, base_tok: pathlib.Path, norm_topk_prob: bool = True,
                   seed: int = 101, n_layers: int = 3, n_experts: int = 8,
                   moe_ffn: int = 32) -> dict:
    """Qwen3-MoE (Qwen3MoeForCausalLM, arch qwen3moe): 3 layers, all MoE, 8 experts, top-2,
    softmax router, expert FFN 32, no shared expert, per-head q/k RMSNorm, GQA 4/2 heads of
    head_dim 16, untied output."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    n_vocab = _vocab("qwen3moe", base_tok, out)
    cfg = Qwen3MoeConfig(
        vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=128,
        moe_intermediate_size=moe_ffn, num_hidden_layers=n_layers, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_experts=n_experts, num_experts_per_tok=2,
        norm_topk_prob=norm_topk_prob,
        decoder_sparse_step=1, mlp_only_layers=[], max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, rms_norm_eps=1e-6,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=n_vocab - 1,
        output_router_logits=False, torch_dtype="float32")
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(cfg)
    randomize(model, seed)
    return _save(model, out, "qwen3moe", base_tok)


def build_mixtral(out: pathlib.Path, spm_model: pathlib.Path, seed: int = 202) -> dict:
    """Mixtral (MixtralForCausalLM, arch llama with experts): 2 layers, 4 experts, top-2, softmax
    over the chosen experts' logits, expert FFN 64, GQA 4/2 heads of head_dim 16, SentencePiece
    vocab (400 pieces, trained by the VLM fixtures' tools/vlm/hf_models.train_tokenizer), untied
    output, no sliding window."""
    from transformers import MixtralConfig, MixtralForCausalLM

    import sentencepiece as spm

    out.mkdir(parents=True, exist_ok=True)
    n_vocab = spm.SentencePieceProcessor(model_file=str(spm_model)).vocab_size()
    cfg = MixtralConfig(
        vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
        num_experts_per_tok=2, max_position_embeddings=4096, sliding_window=None,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, rms_norm_eps=1e-5,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, output_router_logits=False)
    torch.manual_seed(seed)
    model = MixtralForCausalLM(cfg)
    randomize(model, seed)
    model.save_pretrained(out)
    shutil.copy(spm_model, out / "tokenizer.model")
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
         "add_eos_token": False}, indent=1))
    return json.loads((out / "config.json").read_text())


def build_gptoss(out: pathlib.Path, base_tok: pathlib.Path, seed: int = 303) -> dict:
    """gpt-oss (GptOssForCausalLM, arch gpt-oss): 4 layers alternating sliding (window 8, layers
    0 and 2) and full attention, learned attention sinks, q/k/v/o biases, 8 experts top-2 with
    router bias and expert biases, clamped SwiGLU (alpha 1.702, limit 7), YaRN rope as the real
    config (factor 32, original context 4096, beta_fast 32, beta_slow 1, theta 150000), GQA 4/2
    heads of head_dim 16, expert FFN 64 (so MXFP4 blocks of 32 fit), untied output."""
    from transformers import GptOssConfig, GptOssForCausalLM

    n_vocab = _vocab("gptoss", base_tok, out)
    n_layers = 4
    cfg = GptOssConfig(
        vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=n_layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=8,
        num_experts_per_tok=2, sliding_window=8,
        layer_types=["sliding_attention" if i % 2 == 0 else "full_attention"
                     for i in range(n_layers)],
        max_position_embeddings=131072, rms_norm_eps=1e-5, attention_bias=True,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                         "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": 4096},
        swiglu_limit=7.0, tie_word_embeddings=False, output_router_logits=False,
        bos_token_id=n_vocab - 9, eos_token_id=n_vocab - 7, pad_token_id=n_vocab - 8)
    torch.manual_seed(seed)
    model = GptOssForCausalLM(cfg)
    randomize(model, seed)
    return _save(model, out, "gptoss", base_tok)


def build_deepseek(out: pathlib.Path, base_tok: pathlib.Path, seed: int = 404) -> dict:
    """DeepSeek-V3 layout (DeepseekV3ForCausalLM, arch deepseek2): 3 layers, layer 0 dense
    (first_k_dense_replace 1, FFN 128), layers 1-2 MoE: 8 routed experts (FFN 32) in 4 groups,
    top-2 groups then top-2 experts (noaux_tc), sigmoid scores + e_score_correction_bias for
    selection only, normalised top-k weights x routed_scaling_factor 2.5, 1 shared expert.
    Multi-head latent attention: 4 heads, q_lora_rank 32, kv_lora_rank 32, qk_nope 16,
    qk_rope 8, v_head 16; YaRN rope as V3 (factor 40, original 4096, mscale 1, mscale_all_dim 1,
    beta_fast 32, beta_slow 1). Untied output."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    n_vocab = _vocab("deepseek", base_tok, out)
    cfg = DeepseekV3Config(
        vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=128, moe_intermediate_size=32,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1,
        n_routed_experts=8, routed_scaling_factor=2.5, kv_lora_rank=32, q_lora_rank=32,
        qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16, n_group=4, topk_group=2,
        num_experts_per_tok=2, first_k_dense_replace=1, norm_topk_prob=True,
        max_position_embeddings=163840, rms_norm_eps=1e-6, attention_bias=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                         "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                         "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
        rope_interleave=True, tie_word_embeddings=False, bos_token_id=n_vocab - 4,
        eos_token_id=n_vocab - 3)
    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(cfg)
    randomize(model, seed)
    _save(model, out, "deepseek", base_tok)
    # the released V3 config.json carries these (transformers' config class does not keep them)
    return _patch_config(out, scoring_func="sigmoid", topk_method="noaux_tc",
                         num_nextn_predict_layers=0)


def build_glm4moe(out: pathlib.Path, base_tok: pathlib.Path, seed: int = 505) -> dict:
    """GLM-4.5 layout (Glm4MoeForCausalLM, arch glm4moe): 3 layers + 1 next-token-prediction
    (MTP) layer; layer 0 dense (first_k_dense_replace 1, FFN 128), others MoE: 8 routed
    experts (FFN 32) top-2, sigmoid scores + e_score_correction_bias, n_group 1 / topk_group 1
    (as GLM-4.5-Air), normalised top-k weights x routed_scaling_factor 1.0, 1 shared expert;
    q/k/v biases, partial rotary (factor 0.5, NeoX), GQA 4/2 heads of head_dim 16, no q/k
    norm (as Air). The MTP layer 3 (a full MoE decoder layer + eh_proj, enorm, hnorm,
    shared_head.norm) is in the safetensors as the released checkpoints have it; llama.cpp
    loads it and does not run it."""
    from safetensors.torch import load_file, save_file
    from transformers import Glm4MoeConfig, Glm4MoeForCausalLM

    n_vocab = _vocab("glm4moe", base_tok, out)
    n_layers = 3
    kw = dict(
        vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=128, moe_intermediate_size=32,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, partial_rotary_factor=0.5,
        n_shared_experts=1, n_routed_experts=8, num_experts_per_tok=2, routed_scaling_factor=1.0,
        n_group=1, topk_group=1, first_k_dense_replace=1, norm_topk_prob=True,
        max_position_embeddings=131072, rms_norm_eps=1e-5, attention_bias=True,
        use_qk_norm=False, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        tie_word_embeddings=False, eos_token_id=n_vocab - 10, pad_token_id=n_vocab - 10)
    # Build with the MTP layer as an ordinary layer, then declare one layer fewer.
    cfg = Glm4MoeConfig(num_hidden_layers=n_layers + 1, **kw)
    torch.manual_seed(seed)
    model = Glm4MoeForCausalLM(cfg)
    randomize(model, seed)
    _save(model, out, "glm4moe", base_tok)
    files = sorted(out.glob("*.safetensors"))
    assert len(files) == 1, files
    sd = load_file(str(files[0]))
    g = torch.Generator().manual_seed(seed + 1)
    p = f"model.layers.{n_layers}."
    sd[p + "eh_proj.weight"] = torch.randn(HIDDEN, 2 * HIDDEN, generator=g) * W_STD
    for n in ("enorm", "hnorm", "shared_head.norm"):
        sd[p + n + ".weight"] = 1.0 + torch.randn(HIDDEN, generator=g) * NORM_STD
    save_file(sd, str(files[0]), metadata={"format": "pt"})
    return _patch_config(out, num_hidden_layers=n_layers, num_nextn_predict_layers=1)


BUILDERS = {
    "qwen3moe": lambda out, bt, spm: build_qwen3moe(out, bt, True, 101),
    "qwen3moe_nonorm": lambda out, bt, spm: build_qwen3moe(out, bt, False, 102),
    "qwen3moe_kquant": lambda out, bt, spm: build_qwen3moe(out, bt, True, 103, 2, 4, 256),
    "mixtral": lambda out, bt, spm: build_mixtral(out, spm, 202),
    "gptoss": lambda out, bt, spm: build_gptoss(out, bt, 303),
    "deepseek2": lambda out, bt, spm: build_deepseek(out, bt, 404),
    "glm4moe": lambda out, bt, spm: build_glm4moe(out, bt, 505),
}
DOCS = {
    "qwen3moe": build_qwen3moe.__doc__ + " norm_topk_prob true.",
    "qwen3moe_nonorm": build_qwen3moe.__doc__ + " norm_topk_prob false (a second seed).",
    "qwen3moe_kquant": "Qwen3-MoE as above but 2 layers, 4 experts, expert FFN 256 (so the "
                       "experts' down projection has 256 columns and Q4_K_M really writes "
                       "K-quant expert blocks), norm_topk_prob true, seed 103. Only the "
                       "Q4_K_M file is kept (its F16 source is 800 KB).",
    "mixtral": build_mixtral.__doc__,
    "gptoss": build_gptoss.__doc__,
    "deepseek2": build_deepseek.__doc__,
    "glm4moe": build_glm4moe.__doc__,
}
# tokenizer.ggml.pre written through tools/moe/tokpre_shim.py (None: converter's own vocab path)
TOKPRE = {"qwen3moe": "qwen2", "qwen3moe_nonorm": "qwen2", "qwen3moe_kquant": "qwen2",
          "mixtral": None,
          "gptoss": "gpt-4o", "deepseek2": "deepseek-v3", "glm4moe": "glm4"}
