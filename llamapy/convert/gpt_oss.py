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
- the released checkpoints' MXFP4 experts (``*_blocks`` / ``*_scales``, quant_method "mxfp4")
  are written as they are, repacked into GGML's MXFP4 blocks (mxfp4_block_bytes), at every
  outtype, before the other tensors; general.file_type is then 38 (MXFP4 MoE) for float outtypes.
"""
from __future__ import annotations

import re

import numpy as np

from .decoder import DecoderFamily, need

MODEL_TYPES = ("gpt_oss",)

_FUSED = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)(_bias|_blocks|_scales)?")


def _split(hf_name: str, shape, cfg: dict):
    m = _FUSED.fullmatch(hf_name)
    if m is None:
        return None
    il, kind, suffix = m.group(1), m.group(2), m.group(3) or ""
    if suffix in ("_blocks", "_scales"):
        if not _is_mxfp4(cfg):
            raise ValueError(f"{hf_name}: MXFP4 expert blocks but config.json's quantization_config "
                             "does not say mxfp4")
        return []  # written as stored by _mxfp4_experts
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


def _is_mxfp4(cfg: dict) -> bool:
    return (cfg.get("quantization_config") or {}).get("quant_method") == "mxfp4"


def _swap_nibbles(x: np.ndarray) -> np.ndarray:
    return ((x & 0x0F) << 4) | ((x & 0xF0) >> 4)


def mxfp4_block_bytes(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Hugging Face MXFP4 (blocks (..., n_block, 16) uint8 of packed E2M1 codes, scales
    (..., n_block) uint8 E8M0) -> GGML's MXFP4 blocks: (..., n_block * 17) bytes, each the scale
    then 16 code bytes. Hugging Face packs code pairs (2i, 2i+1) into byte i; GGML packs codes
    (i, i+16) into byte i (low nibble first): the same bytes llama.cpp's converter writes."""
    t = _swap_nibbles(blocks)
    a, b = t[..., :8], t[..., 8:]
    # each byte of the first half -> two bytes with its nibbles high; of the second half -> low
    hi = np.stack([a & 0xF0, (a << 4).astype(np.uint8)], axis=-1).reshape(t.shape)
    lo = np.stack([b >> 4, b & 0x0F], axis=-1).reshape(t.shape)
    codes = _swap_nibbles(hi | lo)
    out = np.concatenate([scales[..., None], codes], axis=-1)
    return out.reshape(*out.shape[:-2], -1)


def _mxfp4_experts(ckpt, cfg: dict):
    """gpt-oss's MXFP4 expert tensors as stored, in the order llama.cpp's converter writes them:
    per layer (checkpoint order) down, then gate and up (the even / odd rows of gate_up)."""
    if not _is_mxfp4(cfg):
        return []
    out = []
    for name in ckpt.names():
        m = _FUSED.fullmatch(name)
        if m is None or m.group(3) != "_scales":
            continue
        il, kind = m.group(1), m.group(2)
        blocks_name = name[:-len("_scales")] + "_blocks"
        if blocks_name not in ckpt:
            raise ValueError(f"{name} has no {blocks_name}")
        shape = tuple(ckpt.shape(blocks_name))  # (n_expert, rows, n_block, 16)
        if len(shape) != 4 or shape[3] != 16 or tuple(ckpt.shape(name)) != shape[:3]:
            raise ValueError(f"{blocks_name} / {name} have shapes {shape} / {ckpt.shape(name)}, not MXFP4 blocks")
        parts = [("down", slice(None))] if kind == "down_proj" else [("gate", slice(0, None, 2)),
                                                                     ("up", slice(1, None, 2))]
        for part, rows in parts:
            n_rows = len(range(shape[1])[rows])
            out.append((f"blk.{il}.ffn_{part}_exps.weight",
                        lambda b=blocks_name, s=name, r=rows: mxfp4_block_bytes(
                            np.asarray(ckpt.get(b))[:, r], np.asarray(ckpt.get(s))[:, r]),
                        (shape[0], n_rows, shape[2] * 32), "MXFP4"))
    return out


def _file_type(cfg: dict, outtype: str):
    # llama.cpp labels a float conversion of an MXFP4 checkpoint "MXFP4 MoE" (38)
    return 38 if _is_mxfp4(cfg) and outtype in ("f32", "f16", "bf16") else None


def _extra_kv(w, cfg: dict, hf_dir: str) -> None:
    w.add_sliding_window(need(cfg, "sliding_window"))
    w.add_expert_feed_forward_length(need(cfg, "intermediate_size"))


FAMILY = DecoderFamily(
    arch="gpt-oss",
    required=("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_sinks", "post_attention_norm",
              "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"),
    extra_kv=_extra_kv,
    split_tensor=_split,
    raw_tensors=_mxfp4_experts,
    file_type=_file_type,
    tensor_names=(
        (r"model\.layers\.(\d+)\.self_attn\.sinks", "blk.{0}.attn_sinks.weight"),
        (r"model\.layers\.(\d+)\.mlp\.router\.(weight|bias)", "blk.{0}.ffn_gate_inp.{1}"),
        (r"model\.layers\.(\d+)\.post_attention_layernorm\.weight", "blk.{0}.post_attention_norm.weight"),
    ),
)
