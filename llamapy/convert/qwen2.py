"""Qwen2 / Qwen2.5 checkpoints (``Qwen2ForCausalLM``) -> GGUF architecture ``qwen2``.

The shared decoder writer does everything: LLaMA-style tensor names with q/k/v biases, no
row permutation (llama.cpp's qwen2 graph uses the half-split "NEOX" rotary order, as Hugging
Face does), tied embeddings simply have no ``output.weight``.
"""
from __future__ import annotations

from .decoder import DecoderFamily

MODEL_TYPES = ("qwen2",)

FAMILY = DecoderFamily(
    arch="qwen2",
    required=("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
              "ffn_down"),
)
