"""Granite 3 dense checkpoints (``GraniteForCausalLM``) -> GGUF architecture ``granite``.

Written as llama (llama.py: q/k row permutation, tokenizer rules) under its own name, with
Granite's four multipliers: ``attention.scale`` (attention_multiplier, the q.k scale),
``embedding_scale``, ``residual_scale``, ``logit_scale`` (logits_scaling, a divisor). As in
llama.cpp, a ``head_dim`` in the config is ignored (Granite's head size is hidden / heads).
Not here: Granite MoE, the hybrid Granite 4 and the SWA variants.
"""
from __future__ import annotations

import dataclasses
import logging

from . import llama
from .decoder import DecoderFamily

MODEL_TYPES = ("granite",)
log = logging.getLogger("llamapy.convert")


def _prepare(cfg: dict) -> dict:
    if cfg.pop("head_dim", None):
        log.info("granite: ignoring head_dim from config.json (hidden_size / heads is used)")
    return cfg


def _extra_kv(w, cfg: dict, hf_dir: str) -> None:
    llama.FAMILY.extra_kv(w, cfg, hf_dir)
    for key, add in (("attention_multiplier", w.add_attention_scale), ("embedding_multiplier", w.add_embedding_scale),
                     ("residual_multiplier", w.add_residual_scale), ("logits_scaling", w.add_logit_scale)):
        if cfg.get(key):
            add(cfg[key])


FAMILY: DecoderFamily = dataclasses.replace(llama.FAMILY, arch="granite", extra_kv=_extra_kv, prepare_config=_prepare)
