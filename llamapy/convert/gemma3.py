"""Gemma 3 text checkpoints (``Gemma3ForCausalLM``, model_type ``gemma3_text``) -> GGUF
architecture ``gemma3``.

What differs from the shared decoder writer:
- four norms per layer: input (attn_norm), post-attention (post_attention_norm, not the
  ffn_norm it is in LLaMA-style models), pre-feed-forward (ffn_norm), post-feed-forward
  (post_ffw_norm), plus q/k norms; Gemma stores every RMSNorm weight as (w - 1) and multiplies
  by (1 + w), llama.cpp by w, so 1 is added to each norm here;
- the embedding is cut to the vocabulary where the checkpoint pads it;
- metadata: the sliding window (unless every layer is global), the final logit soft-cap when
  set; the full layers' rope base (scaling too) and the sliding layers' own base come through the
  shared writer from ``rope_parameters``; ``tokenizer.ggml.add_space_prefix`` = false with a
  SentencePiece vocabulary.
Not here: Gemma 3's vision tower (an mmproj) and EmbeddingGemma.
"""
from __future__ import annotations

import os

import numpy as np

from .decoder import DecoderFamily, need

MODEL_TYPES = ("gemma3_text", "gemma3")


def _norm_plus_one(name: str, x: np.ndarray, cfg: dict) -> np.ndarray:
    return x + np.float32(1.0) if name.endswith("norm.weight") else x


def _extra_kv(w, cfg: dict, hf_dir: str) -> None:
    from .decoder import rope_parameters

    full = rope_parameters(cfg)
    full = full.get("full_attention", full)
    if full.get("rope_theta") is None:
        w.add_rope_freq_base(1_000_000.0)  # Gemma 3's global-layer base when the config omits it
    if cfg.get("attn_logit_softcapping") is not None:
        raise NotImplementedError("attention logit soft-capping is not part of Gemma 3 (is this Gemma 2?)")
    if cfg.get("final_logit_softcapping"):
        w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
    if cfg.get("sliding_window_pattern") != 1:
        w.add_sliding_window(need(cfg, "sliding_window"))
    if os.path.isfile(os.path.join(hf_dir, "tokenizer.model")):
        w.add_add_space_prefix(False)


FAMILY = DecoderFamily(
    arch="gemma3",
    required=("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm",
              "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm"),
    extra_kv=_extra_kv,
    tensor_hook=_norm_plus_one,
    tensor_names=(
        (r"model\.layers\.(\d+)\.post_attention_layernorm\.weight", "blk.{0}.post_attention_norm.weight"),
        (r"model\.layers\.(\d+)\.pre_feedforward_layernorm\.weight", "blk.{0}.ffn_norm.weight"),
        (r"model\.layers\.(\d+)\.post_feedforward_layernorm\.weight", "blk.{0}.post_ffw_norm.weight"),
    ),
    trim_embedding=True,
    config_defaults=(("max_position_embeddings", 131072), ("num_attention_heads", 8), ("rms_norm_eps", 1e-6),
                     ("head_dim", 256), ("num_key_value_heads", 4)),
)
