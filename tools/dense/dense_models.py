"""Tiny random-weight checkpoints of the small dense families (and Granite's MoE) in Hugging
Face format, for tests/data/dense.

What this is: one builder per fixture; each writes a seeded, randomly initialised
`transformers` model (safetensors + config.json) and the MoE fixtures' tiny BPE tokenizer
(tools/moe/tokenizer.py) into a folder llama.cpp's convert_hf_to_gguf.py accepts. The configs
keep each family's real structure (SmolLM3's layers without RoPE, OLMo 2's post-norms and
full-width q/k norms, OLMo 3's sliding-window layers and YaRN, Granite's four multipliers),
shrunk to hidden 64. Weights are drawn as the MoE fixtures draw them
(tools/moe/hf_models.py: randomize).
What it is not: a trained model; outputs are noise that two implementations must agree on.
"""
from __future__ import annotations

import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "moe"))

import hf_models as moe_models  # noqa: E402  (tools/moe/hf_models.py: randomize, _save)

HIDDEN = moe_models.HIDDEN  # 64
# Granite: multipliers unlike 1 and unlike each other, so a missing or swapped one shows. The
# attention multiplier is not 1/sqrt(head_dim) (0.25 here) and the logit divisor is not a
# power of two (its reciprocal is rounded).
GRANITE_MULT = dict(embedding_multiplier=12.0, attention_multiplier=0.09,
                    residual_multiplier=0.22, logits_scaling=2.5)


def _redraw_routers(model: torch.nn.Module, seed: int) -> None:
    """Granite MoE's router is `block_sparse_moe.router.weight`, a name the MoE fixtures'
    randomize does not know: drawn again here with their router spread, so that the top-2
    choice is usually well separated."""
    g = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("block_sparse_moe.router.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * moe_models.ROUTER_STD)


def _build(model_cls, cfg, family: str, out: pathlib.Path, base_tok: pathlib.Path,
           seed: int) -> dict:
    torch.manual_seed(seed)
    model = model_cls(cfg)
    moe_models.randomize(model, seed)
    _redraw_routers(model, seed)
    return moe_models._save(model, out, family, base_tok)


def build_smollm3(out: pathlib.Path, base_tok: pathlib.Path, seed: int = 601) -> dict:
    """SmolLM3 (SmolLM3ForCausalLM, arch smollm3): 4 layers, layer 3 without RoPE (HF's
    default no_rope_layer_interval 4, which is also what llama.cpp assumes: the GGUF has no
    key for it); GQA 4/2 heads of head_dim 16, FFN 128, rope theta 2e6, tied output (as
    SmolLM3-3B)."""
    from transformers import SmolLM3Config, SmolLM3ForCausalLM

    n_vocab = moe_models._vocab("smollm3", base_tok, out)
    cfg = SmolLM3Config(
        vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 2000000.0}, rms_norm_eps=1e-6,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=n_vocab - 1,
        pad_token_id=None)
    assert cfg.no_rope_layers == [1, 1, 1, 0], cfg.no_rope_layers
    return _build(SmolLM3ForCausalLM, cfg, "smollm3", out, base_tok, seed)


def build_olmo2(out: pathlib.Path, base_tok: pathlib.Path, seed: int = 602) -> dict:
    """OLMo 2 (Olmo2ForCausalLM, arch olmo2): 3 layers, no norms before attention or the FFN,
    RMS norms of their outputs before each residual add, RMS norms of the whole q and k rows
    (q over 4 heads x 16, k over 2 heads x 16: GQA, as OLMo 2 32B), NeoX RoPE theta 5e5,
    FFN 128, untied output."""
    from transformers import Olmo2Config, Olmo2ForCausalLM

    n_vocab = moe_models._vocab("olmo2", base_tok, out)
    cfg = Olmo2Config(
        vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, rms_norm_eps=1e-6,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=n_vocab - 4,
        pad_token_id=n_vocab - 3)
    return _build(Olmo2ForCausalLM, cfg, "olmo2", out, base_tok, seed)


def build_olmo3(out: pathlib.Path, base_tok: pathlib.Path, seed: int = 603) -> dict:
    """OLMo 3 (Olmo3ForCausalLM, converted to arch olmo2 with a sliding window): OLMo 2's block;
    4 layers, layers 0-2 sliding-window attention (window 4, shorter than the longest
    prompt), layer 3 full; YaRN on the full layer only, as the released config (factor 8,
    original context 8192, attention factor 1.2079, beta_fast 32, beta_slow 1, theta 5e5),
    plain RoPE on the window layers; GQA 4/2 heads of head_dim 16, FFN 128, untied."""
    from transformers import Olmo3Config, Olmo3ForCausalLM

    n_vocab = moe_models._vocab("olmo3", base_tok, out)
    yarn = {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 8.0,
            "original_max_position_embeddings": 8192, "attention_factor": 1.2079441541679836,
            "beta_fast": 32.0, "beta_slow": 1.0}
    cfg = Olmo3Config(
        vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=65536,
        sliding_window=4, rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters={"full_attention": yarn,
                         "sliding_attention": {"rope_type": "default", "rope_theta": 500000.0}},
        bos_token_id=None, eos_token_id=n_vocab - 1, pad_token_id=n_vocab - 3)
    assert cfg.layer_types == ["sliding_attention"] * 3 + ["full_attention"], cfg.layer_types
    return _build(Olmo3ForCausalLM, cfg, "olmo3", out, base_tok, seed)


def build_granite(out: pathlib.Path, base_tok: pathlib.Path, seed: int = 604) -> dict:
    """Granite 3 (GraniteForCausalLM, arch granite): 3 layers; embedding multiplier 12,
    attention multiplier 0.09 (the q.k scale), residual multiplier 0.22 (both sub-blocks'
    outputs), logits divided by 2.5; q/k/v/o and MLP biases (attention_bias, mlp_bias: the
    optional tensors llama.cpp's granite loader reads); GQA 4/2 heads of head_dim 16, FFN 256
    (so ffn_down has 256 columns and Q4_K_M writes K-quant blocks for it), RoPE theta 1e4,
    tied output (as the Granite 3 models)."""
    from transformers import GraniteConfig, GraniteForCausalLM

    n_vocab = moe_models._vocab("granite", base_tok, out)
    cfg = GraniteConfig(
        vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=256, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, rms_norm_eps=1e-5,
        attention_bias=True, mlp_bias=True, tie_word_embeddings=True,
        bos_token_id=n_vocab - 4, eos_token_id=n_vocab - 4, pad_token_id=n_vocab - 4,
        **GRANITE_MULT)
    return _build(GraniteForCausalLM, cfg, "granite", out, base_tok, seed)


def build_granitemoe(out: pathlib.Path, base_tok: pathlib.Path, seed: int = 605) -> dict:
    """Granite 3 MoE (GraniteMoeForCausalLM, arch granitemoe): Granite's multipliers (as
    `granite`) and in every layer 8 experts of FFN 32, top-2, softmax over the two chosen
    logits; no shared expert (as granite-3.x-a400m/a800m); GQA 4/2 heads of head_dim 16,
    tied output."""
    from transformers import GraniteMoeConfig, GraniteMoeForCausalLM

    n_vocab = moe_models._vocab("granite", base_tok, out)
    cfg = GraniteMoeConfig(
        vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        num_local_experts=8, num_experts_per_tok=2, output_router_logits=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, rms_norm_eps=1e-6,
        tie_word_embeddings=True, bos_token_id=n_vocab - 4, eos_token_id=n_vocab - 4,
        pad_token_id=n_vocab - 4, **GRANITE_MULT)
    return _build(GraniteMoeForCausalLM, cfg, "granite", out, base_tok, seed)


BUILDERS = {
    "smollm3": build_smollm3,
    "olmo2": build_olmo2,
    "olmo3": build_olmo3,
    "granite": build_granite,
    "granitemoe": build_granitemoe,
}
DOCS = {name: fn.__doc__ for name, fn in BUILDERS.items()}
# tokenizer.ggml.pre the real families' GGUFs carry, written through tools/moe/tokpre_shim.py
# (SmolLM3: Llama 3's tokenizer; OLMo 2 / 3: cl100k, "dbrx"; Granite 3: StarCoder's, "refact")
TOKPRE = {"smollm3": "llama-bpe", "olmo2": "dbrx", "olmo3": "dbrx", "granite": "refact",
          "granitemoe": "refact"}
