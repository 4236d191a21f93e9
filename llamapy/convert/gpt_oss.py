"""gpt-oss checkpoints (``GptOssForCausalLM``) -> GGUF architecture ``gpt-oss``.

What differs from the shared decoder writer:
- experts are fused per layer in the checkpoint, stored input-major:
  ``mlp.experts.gate_up_proj`` (n_expert, n_embd, 2 * n_ff) with gate and up columns
  interleaved (gate, up, gate, up, ...), ``mlp.experts.down_proj`` (n_expert, n_ff, n_embd),
  plus per-expert biases. Each matrix is transposed to GGUF's (n_expert, rows, n_embd) and
  gate_up is split by taking the even / odd rows -> ``ffn_gate_exps`` / ``ffn_up_exps``
  (weights and biases alike);
- the per-head attention sinks ``self_attn.sinks`` -> ``attn_sinks.weight`` (F32), the router
  ``mlp.router`` (weight and bias) -> ``ffn_gate_inp``;
- metadata: the sliding window and the expert FFN size (= intermediate_size).
Not here: the MXFP4-quantized expert tensors of the released checkpoints (``*_blocks`` /
``*_scales``): refused; a BF16 / F32 copy of the weights converts.
"""
from __future__ import annotations

import re

from .decoder import DecoderFamily, need

MODEL_TYPES = ("gpt_oss",)

_FUSED = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)(_bias|_blocks|_scales)?")


def _split(hf_name: str, shape, cfg: dict):
    m = _FUSED.fullmatch(hf_name)
    if m is None:
        return None
    il, kind, suffix = m.group(1), m.group(2), m.group(3) or ""
    if suffix in ("_blocks", "_scales"):
        raise NotImplementedError(f"{hf_name}: gpt-oss's MXFP4-quantized experts are not converted; "
                                  "convert a BF16 / F32 copy of the checkpoint")
    n_expert = int(need(cfg, "num_local_experts"))
    if shape[0] != n_expert:
        raise ValueError(f"{hf_name} has shape {shape}, not {n_expert} experts")
    if kind == "down_proj":
        if suffix == "_bias":
            return [(f"blk.{il}.ffn_down_exps.bias", shape, lambda x: x)]
        if len(shape) != 3:
            raise ValueError(f"{hf_name} has shape {shape}, not (n_expert, n_ff, n_embd)")
        return [(f"blk.{il}.ffn_down_exps.weight", (shape[0], shape[2], shape[1]), lambda x: x.swapaxes(1, 2))]
    if shape[-1] % 2:
        raise ValueError(f"{hf_name} has shape {shape}: an odd gate+up width")
    if suffix == "_bias":
        half = (shape[0], shape[1] // 2)
        return [(f"blk.{il}.ffn_gate_exps.bias", half, lambda x: x[:, 0::2]),
                (f"blk.{il}.ffn_up_exps.bias", half, lambda x: x[:, 1::2])]
    if len(shape) != 3:
        raise ValueError(f"{hf_name} has shape {shape}, not (n_expert, n_embd, 2 * n_ff)")
    half = (shape[0], shape[2] // 2, shape[1])
    return [(f"blk.{il}.ffn_gate_exps.weight", half, lambda x: x.swapaxes(1, 2)[:, 0::2]),
            (f"blk.{il}.ffn_up_exps.weight", half, lambda x: x.swapaxes(1, 2)[:, 1::2])]


def _extra_kv(w, cfg: dict, hf_dir: str) -> None:
    w.add_sliding_window(need(cfg, "sliding_window"))
    w.add_expert_feed_forward_length(need(cfg, "intermediate_size"))


FAMILY = DecoderFamily(
    arch="gpt-oss",
    required=("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_sinks", "post_attention_norm",
              "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"),
    extra_kv=_extra_kv,
    split_tensor=_split,
    tensor_names=(
        (r"model\.layers\.(\d+)\.self_attn\.sinks", "blk.{0}.attn_sinks.weight"),
        (r"model\.layers\.(\d+)\.mlp\.router\.(weight|bias)", "blk.{0}.ffn_gate_inp.{1}"),
        (r"model\.layers\.(\d+)\.post_attention_layernorm\.weight", "blk.{0}.post_attention_norm.weight"),
    ),
)
