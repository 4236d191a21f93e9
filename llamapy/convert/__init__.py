"""``python -m llamapy convert HF_DIR OUT.gguf``: Hugging Face checkpoints to GGUF files that
llamapy and llama.cpp both read, matching llama.cpp 0.3.36's convert_hf_to_gguf.py.

Supported model_type values: ``SUPPORTED`` (decoders through decoder.py, one file per family;
BERT through bert.py); with ``mmproj=True`` (``--mmproj``) ``SUPPORTED_MMPROJ``'s image encoder
and projector (mmproj.py). Anything else is a NotImplementedError naming what is supported.
"""
from __future__ import annotations

import json
import os
from typing import Callable, Optional

from . import (deepseek2, gemma2, gemma3, gemma4, glm4moe, gpt_oss, granite, granitehybrid, granitemoe, lfm2,
               llama, olmo2, phi3, qwen2, qwen2vl, qwen3, qwen3moe, qwen35, qwen35moe, smollm3)
from .bert import convert_bert
from .decoder import OUTTYPES, convert_decoder
from .mmproj import PROJECTORS, convert_mmproj

__all__ = ["convert", "OUTTYPES", "SUPPORTED", "SUPPORTED_MMPROJ"]

# model_type -> decoder family (one table line per family)
_FAMILIES = (llama, smollm3, granite, granitemoe, granitehybrid, olmo2, phi3, qwen2, qwen2vl, qwen3, qwen3moe,
             qwen35, qwen35moe, gemma2, gemma3, gemma4, gpt_oss, deepseek2, glm4moe, lfm2)
_DECODERS = {t: fam.FAMILY for fam in _FAMILIES for t in fam.MODEL_TYPES}
SUPPORTED = tuple(sorted(_DECODERS)) + ("bert",)
SUPPORTED_MMPROJ = tuple(sorted(PROJECTORS))  # model_types whose projector --mmproj writes


def convert(hf_dir: str, out_path: str, outtype: str = "f16", log: Callable[[str], None] = lambda s: None,
            tokenizer_pre: Optional[str] = None, mmproj: bool = False) -> str:
    """Convert the model in ``hf_dir`` to ``out_path``; returns out_path. ``tokenizer_pre`` names
    a BPE tokenizer's pre-tokenizer when llama.cpp's hash table does not know it; ``mmproj``
    writes a vision-language model's image encoder and projector instead of its text model
    (mmproj.py)."""
    hf_dir = os.fspath(hf_dir)
    cfg_path = os.path.join(hf_dir, "config.json")
    if not os.path.isfile(cfg_path):
        raise FileNotFoundError(f"{hf_dir} is not a Hugging Face model folder (no config.json)")
    with open(cfg_path, encoding="utf-8") as f:
        cfg = json.load(f)
    model_type = cfg.get("model_type")
    if mmproj:
        return convert_mmproj(hf_dir, cfg, os.fspath(out_path), outtype, log)
    if model_type == "bert":
        if outtype == "bf16":
            raise ValueError("the bert converter writes f32, f16 or q8_0")
        return convert_bert(hf_dir, os.fspath(out_path), outtype, log)
    if model_type in _DECODERS:
        return convert_decoder(_DECODERS[model_type], hf_dir, cfg, os.fspath(out_path), outtype,
                               tokenizer_pre, log)
    raise NotImplementedError(f"converting model_type {model_type!r} is not supported "
                              f"(supported: {', '.join(SUPPORTED)})")
