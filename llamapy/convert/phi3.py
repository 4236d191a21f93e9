"""Phi-3 / Phi-3.5 / Phi-4(-mini) checkpoints (``Phi3ForCausalLM``) -> GGUF architecture ``phi3``.

What differs from the shared decoder writer:
- the fused projections stay fused: ``self_attn.qkv_proj`` -> ``attn_qkv`` (q, k, v rows one
  after the other) and ``mlp.gate_up_proj`` -> ``ffn_up`` (gate rows first); the engine's phi3
  graph splits them;
- its own hyperparameter set, as llama.cpp's converter writes it for Phi-3: no key/value
  lengths, the original context length always, the rotary size from partial_rotary_factor,
  and a sliding window of 0 when the config has none (how llama.cpp tells Phi-4 apart);
- LongRoPE checkpoints (Phi-3-128k: ``long_factor`` / ``short_factor``) get the two factor
  tensors ``rope_factors_long`` / ``rope_factors_short`` and ``rope.scaling.attn_factor``.
Not here: the SentencePiece (``tokenizer.model``) vocabulary of Phi-3 / Phi-3.5 — refused;
Phi-4-style folders (``tokenizer_class`` GPT2Tokenizer, byte-level BPE) are converted.
Phi-3.5-MoE (``PhiMoEForCausalLM``) and Phi-3-small are other architectures.
"""
from __future__ import annotations

import math
from typing import Dict

import numpy as np

from .decoder import DecoderFamily, need, rope_parameters

MODEL_TYPES = ("phi3",)


def _rope_dims(cfg: dict) -> int:
    rp = rope_parameters(cfg)
    pct = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    return int(pct * need(cfg, "hidden_size")) // need(cfg, "num_attention_heads")


def _hparams(w, cfg: dict, n_layer: int) -> None:
    rp = rope_parameters(cfg)
    w.add_context_length(need(cfg, "max_position_embeddings"))
    w.add_rope_scaling_orig_ctx_len(need(rp, "original_max_position_embeddings"))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(need(cfg, "intermediate_size"))
    w.add_block_count(n_layer)
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(need(cfg, "num_key_value_heads"))
    w.add_layer_norm_rms_eps(need(cfg, "rms_norm_eps"))
    w.add_rope_dimension_count(_rope_dims(cfg))
    w.add_rope_freq_base(need(rp.get("full_attention", rp), "rope_theta"))


def _extra_kv(w, cfg: dict, hf_dir: str) -> None:
    # general.file_type comes between the rope base and the window in the reference; the key
    # order does not matter to readers
    w.add_sliding_window(cfg.get("sliding_window") or 0)
    attn = _longrope_attn_factor(cfg)
    if attn is not None:
        w.add_rope_scaling_attn_factors(attn)


def _longrope_attn_factor(cfg: dict):
    """The attention scale LongRoPE / YaRN factors imply (None without long factors)."""
    rp = rope_parameters(cfg)
    if not rp.get("long_factor"):
        return None
    scale = cfg["max_position_embeddings"] / rp["original_max_position_embeddings"]
    kind = str(rp.get("rope_type") or "").lower()
    if kind in ("su", "longrope"):
        return math.sqrt(1 + math.log(scale) / math.log(rp["original_max_position_embeddings"])) if scale > 1 else 1.0
    if kind == "yarn":
        return 0.1 * math.log(scale) + 1.0 if scale > 1 else 1.0
    raise NotImplementedError(f"Phi-3 rope scaling {kind or '(none given)'!r} with long/short factors is not "
                              "converted (longrope, su, yarn)")


def _rope_factors(cfg: dict) -> Dict[str, np.ndarray]:
    rp = rope_parameters(cfg)
    long, short = rp.get("long_factor"), rp.get("short_factor")
    if not long:
        return {}
    half = _rope_dims(cfg) / 2
    if short is None or len(long) != len(short) or len(long) != half:
        raise ValueError(f"Phi-3 rope long_factor / short_factor must both have {half:g} entries")
    return {"rope_factors_long.weight": np.array(long, dtype=np.float32),
            "rope_factors_short.weight": np.array(short, dtype=np.float32)}


def _refuse_sentencepiece(vocab, cfg: dict, hf_dir: str) -> None:
    if vocab.model == "llama":
        raise NotImplementedError("Phi-3's SentencePiece vocabulary (tokenizer.model) is not converted yet; "
                                  "Phi-4-style folders (tokenizer_class GPT2Tokenizer, tokenizer.json only) are")


FAMILY = DecoderFamily(
    arch="phi3",
    required=("attn_norm", "attn_qkv", "attn_output", "ffn_norm", "ffn_up", "ffn_down"),
    write_hparams=_hparams,
    extra_kv=_extra_kv,
    extra_tensors=_rope_factors,
    tensor_names=(
        (r"model\.layers\.(\d+)\.self_attn\.qkv_proj\.weight", "blk.{0}.attn_qkv.weight"),
        (r"model\.layers\.(\d+)\.mlp\.gate_up_proj\.weight", "blk.{0}.ffn_up.weight"),
    ),
    adjust_vocab=_refuse_sentencepiece,
)
