"""``convert --mmproj``: a vision-language checkpoint's image encoder and projector as a
``clip`` GGUF (general.type "mmproj"), the file llamapy's ``Llama(..., mmproj=...)`` and
llama.cpp's mtmd read beside the text model; matching llama.cpp 0.3.36's
``convert_hf_to_gguf.py --mmproj`` key for key and tensor for tensor.

Projector types converted (one ``_Projector`` entry each):
- ``gemma3`` (``Gemma3ForConditionalGeneration``): the SigLIP tower (``vision_tower.
  vision_model.*``, transformers 5's ``vision_tower.*`` too; its pooling head is unused and
  left out) and Gemma 3's projector (``mm_input_projection`` F16 at every outtype, the
  soft-embedding RMS norm stored as (w - 1): 1 added); embeddings F32; metadata: the GELU
  flag, the norm epsilon and, when not Gemma 3's 4, the pooling factor (patches per side /
  sqrt(image_seq_length));
- ``qwen2vl_merger`` / ``qwen2.5vl_merger`` (``Qwen2VLForConditionalGeneration`` /
  ``Qwen2_5_VLForConditionalGeneration``): the ViT (``visual.*``) with its fused ``qkv`` split
  into q / k / v, the Conv3D patch embedding split into its two temporal slices
  (``v.patch_embd.weight`` and ``.weight.1``: F16 in f16 files, F32 otherwise), the merger's
  norm and MLP (``mm.0`` / ``mm.2``); Qwen2-VL's ``embed_dim`` / ``hidden_size`` read as width /
  FFN size, image size 560 when unnamed; 2.5 adds SiLU and the window-attention period
  (``n_wa_pattern``, from fullatt_block_indexes).
Every projector: the vision sizes, the text width (projection_dim), image mean / std from
preprocessor_config.json (processor_config.json's image_processor over it).
- ``idefics3`` (``Idefics3ForConditionalGeneration`` / ``SmolVLMForConditionalGeneration``): the
  SigLIP tower under ``model.vision_model.`` and the pixel-shuffle connector's linear layer
  (``mm.model.fc``); embeddings F32; metadata: GELU, the norm epsilon, the shuffle factor and
  the longest edge images are resized to (preprocessor_config.json's size.longest_edge).
Not here: LLaVA's MLP projector (llama.cpp makes those files with a legacy script, not
convert_hf_to_gguf.py), Qwen2.5-Omni and audio encoders: refused with the list of what is
converted.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from .checkpoint import Checkpoint
from .decoder import OUTTYPES, _FILE_TYPE, _encode, _model_name, _nbytes, need, part_writer

# SigLIP's encoder names -> GGUF clip names ({0}: layer, {1}: weight / bias)
_SIGLIP = (
    (r"embeddings\.patch_embedding\.(weight|bias)", "v.patch_embd.{0}"),
    (r"embeddings\.position_embedding\.weight", "v.position_embd.weight"),
    (r"encoder\.layers\.(\d+)\.layer_norm1\.(weight|bias)", "v.blk.{0}.ln1.{1}"),
    (r"encoder\.layers\.(\d+)\.layer_norm2\.(weight|bias)", "v.blk.{0}.ln2.{1}"),
    (r"encoder\.layers\.(\d+)\.mlp\.fc1\.(weight|bias)", "v.blk.{0}.ffn_up.{1}"),
    (r"encoder\.layers\.(\d+)\.mlp\.fc2\.(weight|bias)", "v.blk.{0}.ffn_down.{1}"),
    (r"encoder\.layers\.(\d+)\.self_attn\.q_proj\.(weight|bias)", "v.blk.{0}.attn_q.{1}"),
    (r"encoder\.layers\.(\d+)\.self_attn\.k_proj\.(weight|bias)", "v.blk.{0}.attn_k.{1}"),
    (r"encoder\.layers\.(\d+)\.self_attn\.v_proj\.(weight|bias)", "v.blk.{0}.attn_v.{1}"),
    (r"encoder\.layers\.(\d+)\.self_attn\.out_proj\.(weight|bias)", "v.blk.{0}.attn_out.{1}"),
    (r"post_layernorm\.(weight|bias)", "v.post_ln.{0}"),
)


Split = Optional[List[Tuple[str, Tuple[int, ...], Callable[[np.ndarray], np.ndarray]]]]


@dataclass(frozen=True)
class _Projector:
    kind: str                                   # clip.projector_type
    prefixes: Tuple[str, ...]                   # checkpoint names of the tower and projector
    names: Tuple[Tuple[str, str], ...]          # full-name regex -> GGUF name
    skip: str                                   # regex of tower tensors the projector does not use
    write_kv: Callable[[object, dict, dict, dict], None]        # (writer, vision cfg, preprocessor, cfg)
    required: Tuple[str, ...]                   # GGUF tensors every checkpoint has (v.blk.{} per block)
    hook: Callable[[str, np.ndarray], np.ndarray] = lambda name, x: x   # (GGUF name, array)
    # (hf name, GGUF name, outtype) -> a forced GGML type name or None (the outtype's rules)
    force_type: Callable[[str, str, str], Optional[str]] = lambda hf, name, outtype: None
    # (hf name, shape) -> [(GGUF name, shape, fn(array))] for a tensor written as several, or None
    split: Callable[[str, Tuple[int, ...]], Split] = lambda hf, shape: None
    # (vision cfg, cfg) -> vision cfg with the common key names (Qwen2-VL's depth, num_heads, ...)
    vision_config: Callable[[dict, dict], dict] = lambda vcfg, cfg: vcfg


_BLOCK = ("ln1", "ln2", "attn_q", "attn_k", "attn_v", "attn_out", "ffn_up", "ffn_down")


def _gemma3_kv(w, vcfg: dict, pre: dict, cfg: dict) -> None:
    import gguf

    w.add_clip_projector_type(gguf.VisionProjectorType.GEMMA3)
    w.add_vision_attention_layernorm_eps(vcfg.get("layer_norm_eps", 1e-6))
    w.add_vision_use_gelu(True)
    per_side = int(pre.get("image_seq_length", 256) ** 0.5)
    factor = (need(vcfg, "image_size") // need(vcfg, "patch_size")) // per_side
    if factor > 0 and factor != 4:  # 4 is what the engine assumes when the key is absent
        w.add_vision_projector_scale_factor(factor)


def _gemma3_force(hf_name: str, name: str, outtype: str) -> Optional[str]:
    if "input_projection" in hf_name:
        return "F16"  # as llama.cpp (its issue 13025): F16 at every outtype
    if ".embeddings." in hf_name:
        return "F32"
    return None


_TOWER = r"vision_tower\.(?:vision_model\.)?"
_GEMMA3 = _Projector(
    kind="gemma3",
    prefixes=("multi_modal_projector.", "vision_tower."),
    names=tuple((_TOWER + p, out) for p, out in _SIGLIP) + (
        (r"multi_modal_projector\.mm_input_projection\.weight", "mm.input_projection.weight"),
        (r"multi_modal_projector\.mm_soft_emb_norm\.weight", "mm.soft_emb_norm.weight"),
    ),
    skip=_TOWER + r"head\..*",
    write_kv=_gemma3_kv,
    required=("v.patch_embd.weight", "v.position_embd.weight") + tuple(f"v.blk.{{}}.{t}.weight" for t in _BLOCK),
    hook=lambda name, x: x + np.float32(1.0) if name == "mm.soft_emb_norm.weight" else x,
    force_type=_gemma3_force,
)

def _qwen_vision(vcfg: dict, cfg: dict) -> dict:
    v = dict(vcfg)
    v["image_size"] = v.get("image_size", 560)
    v["num_attention_heads"] = v.get("num_heads")
    v["num_hidden_layers"] = v.get("depth")
    if "embed_dim" in v:  # Qwen2-VL: embed_dim is the width, hidden_size the FFN size
        v["intermediate_size"] = v.get("hidden_size")
        v["hidden_size"] = v.get("embed_dim")
    return v


def _qwen2vl_kv(w, vcfg: dict, pre: dict, cfg: dict) -> None:
    import gguf

    w.add_clip_projector_type(gguf.VisionProjectorType.QWEN2VL)
    w.add_vision_attention_layernorm_eps(cfg.get("rms_norm_eps", 1e-6))  # the top-level config's


def _qwen25vl_kv(w, vcfg: dict, pre: dict, cfg: dict) -> None:
    import gguf

    w.add_clip_projector_type(gguf.VisionProjectorType.QWEN25VL)
    w.add_vision_use_silu(True)
    full = need(vcfg, "fullatt_block_indexes")
    period = full[0] + 1  # window attention everywhere but every period-th block
    if any(b - a != period for a, b in zip(full, full[1:])):
        raise ValueError(f"fullatt_block_indexes {full} are not evenly spaced")
    w.add_vision_n_wa_pattern(period)
    w.add_vision_attention_layernorm_eps(cfg.get("rms_norm_eps", 1e-6))


def _qwen_split(hf_name: str, shape) -> Split:
    m = re.fullmatch(r"visual\.blocks\.(\d+)\.attn\.qkv\.(weight|bias)", hf_name)
    if m is not None:
        if shape[0] % 3:
            raise ValueError(f"{hf_name} has shape {shape}: not three equal parts")
        c = shape[0] // 3
        il, kind = m.group(1), m.group(2)
        return [(f"v.blk.{il}.attn_{part}.{kind}", (c,) + tuple(shape[1:]), lambda x, k=k: x[k * c:(k + 1) * c])
                for k, part in enumerate("qkv")]
    if hf_name == "visual.patch_embed.proj.weight":
        if len(shape) != 5 or shape[2] != 2:
            raise NotImplementedError(f"{hf_name} has shape {shape}: only a temporal patch size of 2 is converted")
        one = (shape[0], shape[1], shape[3], shape[4])
        return [("v.patch_embd.weight", one, lambda x: x[:, :, 0]), ("v.patch_embd.weight.1", one, lambda x: x[:, :, 1])]
    return None


def _qwen_force(hf_name: str, name: str, outtype: str) -> Optional[str]:
    if ".position_embd." in name:
        return "F32"
    if ".patch_embd.weight" in name:  # both temporal slices; F16 only in F16 files
        return "F16" if outtype == "f16" else "F32"
    return None


_QB = r"visual\.blocks\.(\d+)\."
_QWEN_NAMES = (
    (_QB + r"norm1\.(weight|bias)", "v.blk.{0}.ln1.{1}"),
    (_QB + r"norm2\.(weight|bias)", "v.blk.{0}.ln2.{1}"),
    (_QB + r"attn\.proj\.(weight|bias)", "v.blk.{0}.attn_out.{1}"),
    (_QB + r"mlp\.fc1\.(weight|bias)", "v.blk.{0}.ffn_up.{1}"),
    (_QB + r"mlp\.fc2\.(weight|bias)", "v.blk.{0}.ffn_down.{1}"),
    (_QB + r"mlp\.(gate|up|down)_proj\.(weight|bias)", "v.blk.{0}.ffn_{1}.{2}"),
    (r"visual\.merger\.ln_q\.(weight|bias)", "v.post_ln.{0}"),
    (r"visual\.merger\.mlp\.(0|2)\.(weight|bias)", "mm.{0}.{1}"),
)
_QWEN2VL = _Projector(
    kind="qwen2vl_merger",
    prefixes=("visual.",),
    names=_QWEN_NAMES,
    skip=r"$^",
    write_kv=_qwen2vl_kv,
    required=("v.patch_embd.weight", "v.patch_embd.weight.1", "mm.0.weight", "mm.2.weight")
    + tuple(f"v.blk.{{}}.{t}.weight" for t in _BLOCK),
    force_type=_qwen_force,
    split=_qwen_split,
    vision_config=_qwen_vision,
)
_QWEN25VL = dataclasses.replace(_QWEN2VL, kind="qwen2.5vl_merger", write_kv=_qwen25vl_kv)

def _idefics3_vision(vcfg: dict, cfg: dict) -> dict:
    v = dict(vcfg)
    if v.get("model_type") == "smolvlm_vision":  # SmolVLM2 leaves these out: transformers' defaults
        v.setdefault("hidden_size", 1152)
        v.setdefault("num_attention_heads", 16)
        v.setdefault("intermediate_size", 3072)
    return v


def _idefics3_kv(w, vcfg: dict, pre: dict, cfg: dict) -> None:
    import gguf

    w.add_clip_projector_type(gguf.VisionProjectorType.IDEFICS3)
    w.add_vision_attention_layernorm_eps(vcfg.get("layer_norm_eps", 1e-5))
    w.add_vision_projector_scale_factor(cfg.get("scale_factor", 2))  # the pixel-shuffle factor
    w.add_vision_use_gelu(True)
    # the longest edge images are resized to before being cut into tiles
    w.add_vision_preproc_image_size((pre.get("size") or {}).get("longest_edge", need(vcfg, "image_size")))


_IDEFICS3 = _Projector(
    kind="idefics3",
    prefixes=("model.vision_model.", "model.connector."),
    names=tuple((r"model\.vision_model\." + p, out) for p, out in _SIGLIP) + (
        (r"model\.connector\.modality_projection\.proj\.weight", "mm.model.fc.weight"),),
    skip=r"$^",
    write_kv=_idefics3_kv,
    required=("v.patch_embd.weight", "v.position_embd.weight", "mm.model.fc.weight")
    + tuple(f"v.blk.{{}}.{t}.weight" for t in _BLOCK),
    force_type=lambda hf, name, outtype: "F32" if ".embeddings." in hf else None,
    vision_config=_idefics3_vision,
)

# config.json model_type -> projector
PROJECTORS: Dict[str, _Projector] = {"gemma3": _GEMMA3, "qwen2_vl": _QWEN2VL, "qwen2_5_vl": _QWEN25VL,
                                     "idefics3": _IDEFICS3, "smolvlm": _IDEFICS3}


def _read_json(path: str) -> dict:
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _preprocessor(hf_dir: str) -> dict:
    """preprocessor_config.json, then processor_config.json's (image_processor lifted) over it."""
    pre = _read_json(os.path.join(hf_dir, "preprocessor_config.json"))
    pre = {**pre, **pre.get("media_proc_cfg", {})}
    proc = _read_json(os.path.join(hf_dir, "processor_config.json"))
    return {**pre, **proc, **proc.get("image_processor", {})}


def _target_type(name: str, shape: Tuple[int, ...], outtype: str, forced: Optional[str]):
    import gguf

    T = gguf.GGMLQuantizationType
    if len(shape) <= 1 or name.endswith("_norm.weight"):
        return T.F32
    if forced is not None:
        return T[forced]
    if not name.endswith(".weight"):
        return T.F32
    if outtype == "q8_0":
        return T.Q8_0 if shape[-1] % 32 == 0 else T.F16
    return {"f32": T.F32, "f16": T.F16, "bf16": T.BF16}[outtype]


def convert_mmproj(hf_dir: str, cfg: dict, out_path: str, outtype: str = "f16",
                   log_fn: Callable[[str], None] = lambda s: None) -> str:
    import gguf

    if outtype not in OUTTYPES:
        raise ValueError(f"outtype must be one of {', '.join(OUTTYPES)}, got {outtype!r}")
    proj = PROJECTORS.get(cfg.get("model_type"))
    if proj is None:
        raise NotImplementedError(f"--mmproj for model_type {cfg.get('model_type')!r} is not converted "
                                  f"(converted: {', '.join(sorted(PROJECTORS))})")
    vcfg = cfg.get("vision_config")
    if not isinstance(vcfg, dict):
        raise ValueError(f"{hf_dir}: config.json has no vision_config")
    vcfg = proj.vision_config(vcfg, cfg)
    text = {**cfg, **(cfg.get("text_config") or {})}
    n_embd_text = text.get("hidden_size", text.get("n_embd", 0))
    if not n_embd_text:
        raise ValueError("config.json names no text hidden_size (the projection width)")
    pre = _preprocessor(hf_dir)
    for key in ("image_mean", "image_std"):
        if key not in pre:
            raise ValueError(f"{hf_dir}: preprocessor_config.json lacks {key!r}")

    ckpt = Checkpoint(hf_dir)
    rules = [(re.compile(p), out) for p, out in proj.names]
    skip = re.compile(proj.skip)
    # (gguf name, hf name, shape, fn(array) -> array) in the checkpoint's order
    plan: List[Tuple[str, str, Tuple[int, ...], Callable[[np.ndarray], np.ndarray]]] = []
    for hf_name in ckpt.names():
        if "language_model." in hf_name or not hf_name.startswith(proj.prefixes) or skip.fullmatch(hf_name):
            continue
        parts = proj.split(hf_name, tuple(ckpt.shape(hf_name)))
        if parts is not None:
            plan.extend((name, hf_name, shape, fn) for name, shape, fn in parts)
            continue
        key = hf_name.replace("_weight", ".weight")
        for rx, out in rules:
            m = rx.fullmatch(key)
            if m:
                plan.append((out.format(*m.groups()), hf_name, tuple(ckpt.shape(hf_name)), lambda x: x))
                break
        else:
            raise NotImplementedError(f"tensor {hf_name!r} has no GGUF name in the {proj.kind} projector")
    n_block = int(need(vcfg, "num_hidden_layers"))
    have = {p[0] for p in plan}
    needed = [n for n in proj.required if "{}" not in n] + [
        n.format(i) for i in range(n_block) for n in proj.required if "{}" in n]
    missing = [n for n in needed if n not in have]
    if missing:
        raise ValueError(f"{hf_dir}: the checkpoint lacks tensor {missing[0]}"
                         + (f" ({len(missing)} missing in all)" if len(missing) > 1 else ""))

    n_params = sum(int(np.prod(s, dtype=np.int64)) for _, _, s, _ in plan)
    with part_writer(out_path, "clip") as w:
        w.add_type(gguf.GGUFType.MMPROJ)
        w.add_name(_model_name(hf_dir, cfg))
        w.add_size_label(gguf.size_label(n_params, 0, 0, 0))
        w.add_file_type(_FILE_TYPE[outtype])
        w.add_clip_has_vision_encoder(True)
        w.add_vision_projection_dim(n_embd_text)
        w.add_vision_image_size(need(vcfg, "image_size"))
        w.add_vision_patch_size(need(vcfg, "patch_size"))
        w.add_vision_embedding_length(need(vcfg, "hidden_size"))
        w.add_vision_feed_forward_length(need(vcfg, "intermediate_size"))
        w.add_vision_block_count(n_block)
        w.add_vision_head_count(need(vcfg, "num_attention_heads"))
        w.add_vision_image_mean(pre["image_mean"])
        w.add_vision_image_std(pre["image_std"])
        proj.write_kv(w, vcfg, pre, cfg)
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        types = []
        for name, hf_name, shape, _ in plan:
            qtype = _target_type(name, shape, outtype, proj.force_type(hf_name, name, outtype))
            types.append(qtype)
            w.add_tensor_info(name, shape, np.dtype(np.float32), _nbytes(shape, qtype), raw_dtype=qtype)
        w.write_header_to_file(path=w.path)
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for (name, hf_name, shape, fn), qtype in zip(plan, types):
            x = proj.hook(name, fn(np.asarray(ckpt.get(hf_name), dtype=np.float32)))
            w.write_tensor_data(_encode(x, qtype))
            log_fn(f"{name:32s} {str(shape):16s} -> {qtype.name}")
    return out_path
