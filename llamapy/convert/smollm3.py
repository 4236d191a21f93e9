"""SmolLM3 checkpoints (``SmolLM3ForCausalLM``) -> GGUF architecture ``smollm3``.

Written as llama (llama.py: q/k row permutation, vocab_size and rope dimension keys) under its
own architecture name. The layers without RoPE (every fourth) have no GGUF key: llama.cpp and
llamapy assume HF's default interval, so a config with another ``no_rope_layer_interval`` is
refused rather than converted into a file that would run wrong.
"""
from __future__ import annotations

import dataclasses

from . import llama
from .decoder import DecoderFamily

MODEL_TYPES = ("smollm3",)


def _extra_kv(w, cfg: dict, hf_dir: str) -> None:
    n_layer = int(cfg["num_hidden_layers"])
    default = [int((i + 1) % 4 != 0) for i in range(n_layer)]
    if cfg.get("no_rope_layers") is not None and list(cfg["no_rope_layers"]) != default:
        raise NotImplementedError("SmolLM3 with layers without RoPE other than every fourth is not converted "
                                  "(the GGUF has no key for it)")
    llama.FAMILY.extra_kv(w, cfg, hf_dir)


FAMILY: DecoderFamily = dataclasses.replace(llama.FAMILY, arch="smollm3", extra_kv=_extra_kv)
