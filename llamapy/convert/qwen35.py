"""Qwen3.5 checkpoints (``Qwen3_5ForCausalLM``, text only) -> GGUF architecture ``qwen35``; the MoE
variant (qwen35moe.py) is this family under another name.

A hybrid: gated delta-net (linear attention) layers with a full-attention layer every
``full_attention_interval``. What differs from the shared decoder writer:
- the delta-net tensors get GGUF's ssm names (``in_proj_qkv`` -> ``attn_qkv``, ``in_proj_z`` ->
  ``attn_gate``, ``in_proj_a`` / ``in_proj_b`` -> ``ssm_alpha`` / ``ssm_beta``, ``A_log`` ->
  ``ssm_a`` stored as -exp(A_log), ``dt_bias`` -> ``ssm_dt.bias``, ``conv1d`` -> ``ssm_conv1d``
  (channels, kernel; F32), ``norm`` -> ``ssm_norm``, ``out_proj`` -> ``ssm_out``);
- with more value heads than key heads, Hugging Face groups the value heads by key head
  (k0: v0 v1, k1: v0 v1, ...) where llama.cpp's graph broadcasts them tiled (v0 of every key
  head, then v1, ...): every value-head axis (the v rows of qkv and the conv, z's rows,
  alpha / beta / A / dt, out_proj's columns) is reordered so, as llama.cpp's converter does;
- every RMSNorm weight but the delta-net's gated norm is stored as (w - 1): 1 is added;
- the MTP block (``mtp.*``) becomes one more layer with GGUF's nextn names (``fc`` ->
  ``eh_proj``, the two pre-fc norms -> ``enorm`` / ``hnorm``, ``norm`` -> ``shared_head_norm``);
- metadata: the ssm sizes, which layers are recurrent, the full-attention interval, the
  rotary size (head_dim * partial_rotary_factor, 0.25 when absent), interleaved-MRoPE sections
  (the shared writer; [11, 11, 10, 0] when the config has none), nextn_predict_layers; the
  MoE adds expert and shared-expert FFN sizes (``shared_expert`` -> ``ffn_*_shexp``, its gate
  ``shared_expert_gate`` -> ``ffn_gate_inp_shexp``, F32).
Not here: the vision tower (``Qwen3_5ForConditionalGeneration``'s mmproj), Qwen3-Next's fused
``in_proj_qkvz``.
"""
from __future__ import annotations

import re

import numpy as np

from .decoder import DecoderFamily, need, rope_parameters

MODEL_TYPES = ("qwen3_5_text",)

_LINEAR = re.compile(r"model\.layers\.(\d+)\.linear_attn\.(A_log|dt_bias|conv1d\.weight|in_proj_a\.weight|"
                     r"in_proj_b\.weight|in_proj_qkv\.weight|in_proj_z\.weight|norm\.weight|out_proj\.weight)")
_LINEAR_NAMES = {"A_log": "ssm_a", "dt_bias": "ssm_dt.bias", "conv1d.weight": "ssm_conv1d.weight",
                 "in_proj_a.weight": "ssm_alpha.weight", "in_proj_b.weight": "ssm_beta.weight",
                 "in_proj_qkv.weight": "attn_qkv.weight", "in_proj_z.weight": "attn_gate.weight",
                 "norm.weight": "ssm_norm.weight", "out_proj.weight": "ssm_out.weight"}
_MTP_TOP = {"fc": "eh_proj", "pre_fc_norm_embedding": "enorm", "pre_fc_norm_hidden": "hnorm",
            "norm": "shared_head.norm"}


def _n_mtp(cfg: dict) -> int:
    return int(cfg.get("mtp_num_hidden_layers") or 0)


def _prepare(cfg: dict) -> dict:
    cfg["_n_main_layers"] = int(need(cfg, "num_hidden_layers"))
    cfg["num_hidden_layers"] = cfg["_n_main_layers"] + _n_mtp(cfg)
    return cfg


def tile_value_heads(x: np.ndarray, axis: int, n_k: int, n_v_per_k: int, head_dim: int) -> np.ndarray:
    """Value heads along ``axis`` from grouped-by-key-head order to tiled order."""
    x = np.moveaxis(x, axis, 0)
    shape = x.shape
    x = x.reshape(n_k, n_v_per_k, head_dim, *shape[1:]).swapaxes(0, 1).reshape(shape)
    return np.moveaxis(x, 0, axis)


def _linear_transform(kind: str, cfg: dict):
    """The array change llama.cpp's converter makes to one delta-net tensor."""
    n_k, n_v = int(need(cfg, "linear_num_key_heads")), int(need(cfg, "linear_num_value_heads"))
    dk, dv = int(need(cfg, "linear_key_head_dim")), int(need(cfg, "linear_value_head_dim"))
    if n_v % n_k:
        raise ValueError(f"linear_num_value_heads ({n_v}) is not a multiple of linear_num_key_heads ({n_k})")
    r = n_v // n_k

    def tile(x, axis, hd):
        return tile_value_heads(x, axis, n_k, r, hd) if r > 1 else x

    def v_rows_after(x, start):  # q and k rows stay, the v rows are tiled
        return np.concatenate([x[:start], tile(x[start:], 0, dv)], axis=0)

    def neg_exp(x):  # exp in double, rounded once: torch's float32 exp in the reference is
        return -np.exp(x.astype(np.float64)).astype(np.float32)  # correctly rounded where numpy's is not

    return {
        "A_log": lambda x: neg_exp(tile(x[:, None], 0, 1)[:, 0]),
        "dt_bias": lambda x: tile(x[:, None], 0, 1)[:, 0],
        "conv1d.weight": lambda x: v_rows_after(x.reshape(x.shape[0], -1), 2 * n_k * dk),
        "in_proj_a.weight": lambda x: tile(x, 0, 1),
        "in_proj_b.weight": lambda x: tile(x, 0, 1),
        "in_proj_qkv.weight": lambda x: v_rows_after(x, 2 * n_k * dk),
        "in_proj_z.weight": lambda x: tile(x, 0, dv),
        "norm.weight": lambda x: x,
        "out_proj.weight": lambda x: tile(x, 1, dv),
    }[kind]


def _split(hf_name: str, shape, cfg: dict):
    m = _LINEAR.fullmatch(hf_name)
    if m is not None:
        il, kind = m.group(1), m.group(2)
        out_shape = (shape[0], int(np.prod(shape[1:]))) if kind == "conv1d.weight" else tuple(shape)
        return [(f"blk.{il}.{_LINEAR_NAMES[kind]}", out_shape, _linear_transform(kind, cfg))]
    if "in_proj_qkvz" in hf_name:
        raise NotImplementedError("Qwen3-Next's fused in_proj_qkvz is not converted")
    return None


def _rename_mtp(hf_name: str, cfg: dict) -> str:
    """``mtp.*`` as the layer after the main ones: mtp.layers.<i>.X -> model.layers.<n + i>.X,
    mtp.fc / pre_fc_norm_embedding / pre_fc_norm_hidden / norm -> that layer's eh_proj /
    enorm / hnorm / shared_head.norm."""
    if hf_name.startswith("model.mtp."):
        hf_name = hf_name[len("model."):]
    if not hf_name.startswith("mtp."):
        return hf_name
    if _n_mtp(cfg) == 0:
        raise ValueError(f"the checkpoint has MTP tensors ({hf_name}) but config.json no mtp_num_hidden_layers")
    base = cfg["_n_main_layers"]
    parts = hf_name.split(".", 3)
    if len(parts) == 4 and parts[1] == "layers" and parts[2].isdecimal():
        if int(parts[2]) >= _n_mtp(cfg):
            raise ValueError(f"{hf_name}: MTP layer {parts[2]} but config.json's mtp_num_hidden_layers "
                             f"is {_n_mtp(cfg)}")
        return f"model.layers.{base + int(parts[2])}.{parts[3]}"
    if len(parts) == 3 and parts[1] in _MTP_TOP:
        return f"model.layers.{base}.{_MTP_TOP[parts[1]]}.{parts[2]}"
    raise NotImplementedError(f"tensor {hf_name!r} has no GGUF name in this converter")


def _norm_plus_one(name: str, x: np.ndarray, cfg: dict) -> np.ndarray:
    return x + np.float32(1.0) if name.endswith("norm.weight") and not name.endswith("ssm_norm.weight") else x


def _extra_kv(w, cfg: dict, hf_dir: str) -> None:
    n_main = cfg["_n_main_layers"]
    if _n_mtp(cfg):
        w.add_nextn_predict_layers(_n_mtp(cfg))
    w.add_ssm_conv_kernel(need(cfg, "linear_conv_kernel_dim"))
    w.add_ssm_state_size(need(cfg, "linear_key_head_dim"))
    w.add_ssm_group_count(need(cfg, "linear_num_key_heads"))
    w.add_ssm_time_step_rank(need(cfg, "linear_num_value_heads"))
    w.add_ssm_inner_size(need(cfg, "linear_value_head_dim") * cfg["linear_num_value_heads"])
    layer_types = cfg.get("layer_types")
    if layer_types is not None:
        if len(layer_types) != n_main:
            raise ValueError(f"layer_types has {len(layer_types)} entries, expected num_hidden_layers ({n_main})")
        recurrent = [t == "linear_attention" for t in layer_types] + [False] * _n_mtp(cfg)
        w.add_array(f"{w.arch}.attention.recurrent_layers", recurrent)
    w.add_full_attention_interval(cfg.get("full_attention_interval", 4))
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    rp = rope_parameters(cfg)
    w.add_rope_dimension_count(int(head_dim * rp.get("partial_rotary_factor", 0.25)))
    if "mrope_section" not in rp:
        w.add_rope_dimension_sections([11, 11, 10, 0])  # Qwen3.5 always uses interleaved MRoPE
    if cfg.get("moe_intermediate_size") is not None:
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if cfg.get("shared_expert_intermediate_size") is not None:
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])


_L = r"model\.layers\.(\d+)\."
_TENSOR_NAMES = (
    (_L + r"post_attention_layernorm\.weight", "blk.{0}.post_attention_norm.weight"),
    (_L + r"mlp\.shared_expert\.(gate|up|down)_proj\.weight", "blk.{0}.ffn_{1}_shexp.weight"),
    (_L + r"mlp\.shared_expert_gate\.weight", "blk.{0}.ffn_gate_inp_shexp.weight"),
    (_L + r"eh_proj\.weight", "blk.{0}.nextn.eh_proj.weight"),
    (_L + r"enorm\.weight", "blk.{0}.nextn.enorm.weight"),
    (_L + r"hnorm\.weight", "blk.{0}.nextn.hnorm.weight"),
    (_L + r"shared_head\.norm\.weight", "blk.{0}.nextn.shared_head_norm.weight"),
)

FAMILY = DecoderFamily(
    arch="qwen35",
    required=("attn_norm", "post_attention_norm", "attn_qkv|attn_q", "ssm_out|attn_output",
              "ffn_gate|ffn_gate_exps", "ffn_up|ffn_up_exps", "ffn_down|ffn_down_exps"),
    prepare_config=_prepare,
    extra_kv=_extra_kv,
    split_tensor=_split,
    rename=_rename_mtp,
    tensor_hook=_norm_plus_one,
    tensor_names=_TENSOR_NAMES,
)
