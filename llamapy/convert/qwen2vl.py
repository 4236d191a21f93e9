"""The text model of Qwen2-VL / Qwen2.5-VL checkpoints (``Qwen2VLForConditionalGeneration``,
``Qwen2_5_VLForConditionalGeneration``) -> GGUF architecture ``qwen2vl``.

qwen2's writer under another name: the multimodal rotary sections (``mrope_section``) come
through the shared writer as ``rope.dimension_sections``, the vision tower's tensors are left
out by it (``--mmproj`` writes them: mmproj.py).
"""
from __future__ import annotations

import dataclasses

from . import qwen2

MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl")

FAMILY = dataclasses.replace(qwen2.FAMILY, arch="qwen2vl")
