"""Qwen3 dense checkpoints (``Qwen3ForCausalLM``) -> GGUF architecture ``qwen3``.

As qwen2 (shared writer, half-split rotary order kept) plus the per-head q/k RMS norms
(``attn_q_norm`` / ``attn_k_norm``) and an explicit ``head_dim`` (written as the key/value
lengths by the shared writer). Not here: Qwen3 rerankers (their rank-pooling metadata).
"""
from __future__ import annotations

from .decoder import DecoderFamily

MODEL_TYPES = ("qwen3",)

FAMILY = DecoderFamily(
    arch="qwen3",
    required=("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm",
              "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"),
)
