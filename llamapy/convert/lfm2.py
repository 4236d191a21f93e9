"""LFM2 / LFM2.5 checkpoints (``Lfm2ForCausalLM``) -> GGUF architecture ``lfm2``.

A hybrid of gated short-convolution layers and grouped-query attention layers
(``layer_types``: "conv" / "full_attention"). What differs from the shared decoder writer:
- names: ``operator_norm`` -> ``attn_norm`` (before either operator), ``feed_forward.w1/w2/w3``
  -> ``ffn_gate/down/up``, ``self_attn.q_layernorm/k_layernorm`` -> ``attn_q_norm/attn_k_norm``,
  ``self_attn.out_proj`` -> ``attn_output``, ``conv.in_proj/out_proj`` -> ``shortconv.*``, and
  ``model.embedding_norm`` -> ``token_embd_norm`` (LFM2 has no other final norm);
- ``conv.conv`` (channels, 1, L) -> ``shortconv.conv`` (channels, L), F32 at every outtype;
- metadata: head_count_kv per layer (0 on conv layers), the conv cache length, the vocabulary
  size, and the feed-forward size after LFM2's own rule (2/3 of it, times the multiplier,
  rounded up to ``block_multiple_of``) when ``block_auto_adjust_ff_dim`` is set.
Not here: LFM2-MoE, LFM2-VL's vision tower, LFM2-Audio.
"""
from __future__ import annotations

import re

from .decoder import DecoderFamily, need

MODEL_TYPES = ("lfm2",)


def _prepare(cfg: dict) -> dict:
    kinds = need(cfg, "layer_types")
    n_kv = need(cfg, "num_key_value_heads")
    cfg["num_key_value_heads"] = [n_kv if kind != "conv" else 0 for kind in kinds]
    cfg["intermediate_size"] = _ffn_length(cfg)  # what the shared writer's feed_forward_length says
    return cfg


def _ffn_length(cfg: dict) -> int:
    n_ff = int(cfg.get("block_ff_dim") or need(cfg, "intermediate_size"))
    if cfg.get("block_auto_adjust_ff_dim"):
        n_ff = int(2 * n_ff / 3)
        if cfg.get("block_ffn_dim_multiplier") is not None:
            n_ff = int(cfg["block_ffn_dim_multiplier"] * n_ff)
        step = int(need(cfg, "block_multiple_of"))
        n_ff = step * ((n_ff + step - 1) // step)
    return n_ff


def _extra_kv(w, cfg: dict, hf_dir: str) -> None:
    w.add_vocab_size(cfg["vocab_size"])
    w.add_shortconv_l_cache(need(cfg, "conv_L_cache"))
    # the norm epsilon (norm_eps) comes through the shared writer


def _split_conv(hf_name: str, shape, cfg: dict):
    m = re.fullmatch(r"model\.layers\.(\d+)\.conv\.conv\.weight", hf_name)
    if m is None:
        return None
    if len(shape) != 3 or shape[1] != 1:
        raise ValueError(f"{hf_name} has shape {shape}, not (channels, 1, L)")
    return [(f"blk.{m.group(1)}.shortconv.conv.weight", (shape[0], shape[2]), lambda x: x[:, 0])]


_L = r"model\.layers\.(\d+)\."
FAMILY = DecoderFamily(
    arch="lfm2",
    required=("attn_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "shortconv.in_proj|attn_q",
              "shortconv.out_proj|attn_output"),
    required_global=("token_embd", "token_embd_norm"),
    prepare_config=_prepare,
    extra_kv=_extra_kv,
    split_tensor=_split_conv,
    tensor_names=(
        (r"model\.embedding_norm\.weight", "token_embd_norm.weight"),
        (_L + r"operator_norm\.weight", "blk.{0}.attn_norm.weight"),
        (_L + r"ffn_norm\.weight", "blk.{0}.ffn_norm.weight"),
        (_L + r"feed_forward\.w1\.weight", "blk.{0}.ffn_gate.weight"),
        (_L + r"feed_forward\.w2\.weight", "blk.{0}.ffn_down.weight"),
        (_L + r"feed_forward\.w3\.weight", "blk.{0}.ffn_up.weight"),
        (_L + r"self_attn\.q_layernorm\.weight", "blk.{0}.attn_q_norm.weight"),
        (_L + r"self_attn\.k_layernorm\.weight", "blk.{0}.attn_k_norm.weight"),
        (_L + r"self_attn\.out_proj\.weight", "blk.{0}.attn_output.weight"),
        (_L + r"conv\.(in_proj|out_proj)\.weight", "blk.{0}.shortconv.{1}.weight"),
    ),
)
