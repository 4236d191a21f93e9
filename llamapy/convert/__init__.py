"""``python -m llamapy convert HF_DIR OUT.gguf``: Hugging Face checkpoints to
GGUF files that llamapy and llama.cpp both read. The BERT family (sentence
embedding models) is supported; see bert.py for what is written."""
from __future__ import annotations

import json
import os
from typing import Callable

from .bert import OUTTYPES, convert_bert

__all__ = ["convert", "OUTTYPES"]


def convert(hf_dir: str, out_path: str, outtype: str = "f16", log: Callable[[str], None] = lambda s: None) -> str:
    """Convert the model in ``hf_dir`` to ``out_path``; returns out_path."""
    hf_dir = os.fspath(hf_dir)
    cfg_path = os.path.join(hf_dir, "config.json")
    if not os.path.isfile(cfg_path):
        raise FileNotFoundError(f"{hf_dir} is not a Hugging Face model folder (no config.json)")
    with open(cfg_path, encoding="utf-8") as f:
        cfg = json.load(f)
    if cfg.get("model_type") == "bert":
        return convert_bert(hf_dir, os.fspath(out_path), outtype, log)
    raise NotImplementedError(f"converting model_type {cfg.get('model_type')!r} is not supported (bert)")
