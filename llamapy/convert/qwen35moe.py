"""Qwen3.5 MoE checkpoints (``Qwen3_5MoeForCausalLM``, text only) -> GGUF architecture ``qwen35moe``.

qwen35.py's writer unchanged: the routed experts (stacked by the shared writer), the shared
expert and its sigmoid gate are named there; only the architecture differs.
"""
from __future__ import annotations

import dataclasses

from . import qwen35

MODEL_TYPES = ("qwen3_5_moe_text",)

FAMILY = dataclasses.replace(qwen35.FAMILY, arch="qwen35moe")
