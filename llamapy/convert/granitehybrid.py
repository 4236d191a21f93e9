"""Granite 4 hybrid checkpoints (``GraniteMoeHybridForCausalLM``: granite-4.0-h-*) -> GGUF
architecture ``granitehybrid``.

Mamba-2 layers and attention layers (``layer_types``: "mamba" / "attention"), each followed by
Granite MoE's feed-forward (granitemoe.py: JetMoE-style fused experts) plus a shared expert,
or by a dense FFN alone. What differs from granitemoe's writer:
- Mamba-2 tensors: ``mamba.in_proj`` / ``out_proj`` -> ``ssm_in`` / ``ssm_out``, ``conv1d``
  (channels, 1, kernel) -> ``ssm_conv1d`` (channels, kernel; F32) and its bias, ``A_log`` ->
  ``ssm_a`` = -exp(A_log) as (n_head, 1), ``D`` -> ``ssm_d`` (n_head, 1), ``dt_bias`` ->
  ``ssm_dt.bias``, the gated norm -> ``ssm_norm`` as (n_group, d_inner / n_group);
- ``shared_mlp.input_linear`` (gate rows, then up rows) is split into ``ffn_gate_shexp`` /
  ``ffn_up_shexp`` and ``output_linear`` is ``ffn_down_shexp`` (``ffn_gate/up/down`` in dense
  models without experts);
- metadata: head_count_kv per layer (0 on Mamba layers), the ssm sizes (``mamba_*`` keys),
  ``rope.scaling.finetuned`` false and a context length of 2^20 (Granite 4 attention uses no
  position encoding), the vocabulary padded to a multiple of 8 as for Mamba-2;
- attention layers as granite: llama's q/k row order, the four multipliers.
Not here: Bamba (``BambaForCausalLM``, with rope) and configs whose every layer is attention
(llama.cpp writes those as granite / granitemoe): refused.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np

from . import granitemoe, llama
from .decoder import DecoderFamily, need

MODEL_TYPES = ("granitemoehybrid",)

_MAMBA = re.compile(r"model\.layers\.(\d+)\.mamba\.(A_log|D|conv1d\.weight|conv1d\.bias|dt_bias|in_proj\.weight|"
                    r"out_proj\.weight|norm\.weight)")


def _find(cfg: dict, keys):
    """The first of ``keys``, then of their ``mamba_``-prefixed forms, that config.json has."""
    for k in list(keys) + ["mamba_" + k for k in keys]:
        if cfg.get(k) is not None:
            return cfg[k]
    raise ValueError(f"config.json lacks {keys[0]!r} (or mamba_{keys[0]})")


def _attn_layers(cfg: dict):
    kinds = need(cfg, "layer_types")
    return [i for i, kind in enumerate(kinds) if kind == "attention"]


def _prepare(cfg: dict) -> dict:
    if "BambaForCausalLM" in (cfg.get("architectures") or []):
        raise NotImplementedError("Bamba (BambaForCausalLM) is not converted; Granite 4 hybrids are")
    cfg = granitemoe.FAMILY.prepare_config(cfg)
    n_layer = int(need(cfg, "num_hidden_layers"))
    attn = _attn_layers(cfg)
    if len(attn) == n_layer:
        raise NotImplementedError("a Granite 4 config without Mamba layers (llama.cpp writes it as granite / "
                                  "granitemoe) is not converted")
    if cfg.get("hidden_act") not in (None, "silu"):
        raise NotImplementedError(f"Granite 4 activation {cfg['hidden_act']!r} is not converted (silu only)")
    d_inner = _find(cfg, ("expand", "num_heads")) * cfg["hidden_size"]
    if d_inner % (_find(cfg, ("d_head",)) if _has(cfg, "d_head") else 64):
        raise ValueError(f"the ssm inner size {d_inner} is not a multiple of the Mamba head size")
    cfg["_d_inner"] = d_inner
    cfg["_n_head_kv"] = int(need(cfg, "num_key_value_heads"))
    cfg["num_key_value_heads"] = [cfg["_n_head_kv"] if i in attn else 0 for i in range(n_layer)]
    cfg["vocab_size"] = -(-int(need(cfg, "vocab_size")) // 8) * 8  # Mamba-2's padded vocabulary
    cfg["max_position_embeddings"] = 2 ** 20  # no rope: the context is not bounded by it
    return cfg


def _has(cfg: dict, key: str) -> bool:
    return cfg.get(key) is not None or cfg.get("mamba_" + key) is not None


def _extra_kv(w, cfg: dict, hf_dir: str) -> None:
    granitemoe.FAMILY.extra_kv(w, cfg, hf_dir)
    if cfg.get("shared_intermediate_size"):
        w.add_expert_shared_feed_forward_length(cfg["shared_intermediate_size"])
    w.add_ssm_conv_kernel(_find(cfg, ("conv_kernel", "d_conv")))
    w.add_ssm_state_size(_find(cfg, ("state_size", "d_state", "state_dim", "ssm_state_size")))
    w.add_ssm_group_count(_find(cfg, ("n_groups", "num_groups")))
    w.add_ssm_inner_size(cfg["_d_inner"])
    w.add_ssm_time_step_rank(_find(cfg, ("n_heads", "num_heads")))
    if cfg.get("attn_rotary_emb"):
        w.add_rope_dimension_count(cfg["attn_rotary_emb"])
    w.add_rope_scaling_finetuned(False)


def _split(hf_name: str, shape, cfg: dict):
    m = _MAMBA.fullmatch(hf_name)
    if m is not None:
        il, kind = m.group(1), m.group(2)
        if kind in ("A_log", "D"):
            out = "ssm_a" if kind == "A_log" else "ssm_d"
            # exp in double, rounded once, as torch's correctly rounded float32 exp
            fn = (lambda x: -np.exp(x.astype(np.float64)).astype(np.float32)[:, None]) if kind == "A_log" \
                else (lambda x: x[:, None])
            return [(f"blk.{il}.{out}", (shape[0], 1), fn)]
        if kind == "conv1d.weight":
            if len(shape) != 3 or shape[1] != 1:
                raise ValueError(f"{hf_name} has shape {shape}, not (channels, 1, kernel)")
            return [(f"blk.{il}.ssm_conv1d.weight", (shape[0], shape[2]), lambda x: x[:, 0])]
        if kind == "norm.weight":
            n_group = int(_find(cfg, ("n_groups", "num_groups")))
            if shape[0] % n_group:
                raise ValueError(f"{hf_name} has {shape[0]} entries, not a multiple of {n_group} groups")
            return [(f"blk.{il}.ssm_norm.weight", (n_group, shape[0] // n_group), lambda x: x.reshape(n_group, -1))]
        name = {"conv1d.bias": "ssm_conv1d.bias", "dt_bias": "ssm_dt.bias", "in_proj.weight": "ssm_in.weight",
                "out_proj.weight": "ssm_out.weight"}[kind]
        return [(f"blk.{il}.{name}", tuple(shape), lambda x: x)]
    m = re.fullmatch(r"model\.layers\.(\d+)\.shared_mlp\.(input|output)_linear\.weight", hf_name)
    if m is not None:
        il, part = m.group(1), m.group(2)
        sfx = "_shexp" if cfg.get("num_local_experts") else ""
        if part == "output":
            return [(f"blk.{il}.ffn_down{sfx}.weight", tuple(shape), lambda x: x)]
        n_ff = int(need(cfg, "shared_intermediate_size"))
        if len(shape) != 2 or shape[0] != 2 * n_ff:
            raise ValueError(f"{hf_name} has shape {shape}, not (2 * {n_ff}, n_embd)")
        half = (n_ff, shape[1])
        return [(f"blk.{il}.ffn_gate{sfx}.weight", half, lambda x: x[:n_ff]),
                (f"blk.{il}.ffn_up{sfx}.weight", half, lambda x: x[n_ff:])]
    return granitemoe.FAMILY.split_tensor(hf_name, shape, cfg)


def _hook(name: str, x: np.ndarray, cfg: dict) -> np.ndarray:
    # llama's q/k row order on the attention layers, with the scalar kv head count
    return llama.FAMILY.tensor_hook(name, x, {**cfg, "num_key_value_heads": cfg["_n_head_kv"]})


FAMILY: DecoderFamily = dataclasses.replace(
    granitemoe.FAMILY,
    arch="granitehybrid",
    required=("attn_norm", "ffn_norm", "ssm_in|attn_q", "ssm_out|attn_output", "ffn_gate|ffn_gate_exps",
              "ffn_up|ffn_up_exps", "ffn_down|ffn_down_exps"),
    prepare_config=_prepare,
    extra_kv=_extra_kv,
    split_tensor=_split,
    tensor_hook=_hook,
)
