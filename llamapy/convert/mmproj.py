"""``convert --mmproj``: a vision-language checkpoint's image encoder and projector as a
``clip`` GGUF (general.type "mmproj"), the file llamapy's ``Llama(..., mmproj=...)`` and
llama.cpp's mtmd read beside the text model; matching llama.cpp 0.3.36's
``convert_hf_to_gguf.py --mmproj`` key for key and tensor for tensor.

Projector types converted (one ``_Projector`` entry each):
- ``gemma3`` (``Gemma3ForConditionalGeneration``): the SigLIP tower (``vision_tower.
  vision_model.*``, transformers 5's ``vision_tower.*`` too; its pooling head is unused and
  left out) and Gemma 3's projector (``mm_input_projection`` F16 at every outtype, the
  soft-embedding RMS norm stored as (w - 1): 1 added); embeddings F32; metadata: the vision
  sizes, image mean / std from preprocessor_config.json, the GELU flag, the norm epsilon and,
  when not Gemma 3's 4, the pooling factor (patches per side / sqrt(image_seq_length)).
Not here: the other projectors the engine runs (Qwen2-VL / 2.5-VL, SmolVLM's idefics3, LLaVA's
MLP) and audio encoders: refused with the list of what is converted.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from .checkpoint import Checkpoint
from .decoder import OUTTYPES, _FILE_TYPE, _encode, _model_name, _nbytes, need

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


@dataclass(frozen=True)
class _Projector:
    kind: str                                   # clip.projector_type
    prefixes: Tuple[str, ...]                   # checkpoint names of the tower and projector
    names: Tuple[Tuple[str, str], ...]          # full-name regex -> GGUF name
    skip: str                                   # regex of tower tensors the projector does not use
    write_kv: Callable[[object, dict, dict], None]              # (writer, vision cfg, preprocessor)
    hook: Callable[[str, np.ndarray], np.ndarray] = lambda name, x: x   # (GGUF name, array)
    # (hf name, GGUF name) -> a forced GGML type name or None (the outtype's rules)
    force_type: Callable[[str, str], Optional[str]] = lambda hf, name: None


def _gemma3_kv(w, vcfg: dict, pre: dict) -> None:
    import gguf

    w.add_clip_projector_type(gguf.VisionProjectorType.GEMMA3)
    w.add_vision_attention_layernorm_eps(vcfg.get("layer_norm_eps", 1e-6))
    w.add_vision_use_gelu(True)
    per_side = int(pre.get("image_seq_length", 256) ** 0.5)
    factor = (need(vcfg, "image_size") // need(vcfg, "patch_size")) // per_side
    if factor > 0 and factor != 4:  # 4 is what the engine assumes when the key is absent
        w.add_vision_projector_scale_factor(factor)


def _gemma3_force(hf_name: str, name: str) -> Optional[str]:
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
    hook=lambda name, x: x + np.float32(1.0) if name == "mm.soft_emb_norm.weight" else x,
    force_type=_gemma3_force,
)

# config.json model_type -> projector
PROJECTORS: Dict[str, _Projector] = {"gemma3": _GEMMA3}


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
    plan: List[Tuple[str, str, Tuple[int, ...]]] = []  # (gguf name, hf name, shape)
    for hf_name in ckpt.names():
        if "language_model." in hf_name or not hf_name.startswith(proj.prefixes) or skip.fullmatch(hf_name):
            continue
        key = hf_name.replace("_weight", ".weight")
        for rx, out in rules:
            m = rx.fullmatch(key)
            if m:
                plan.append((out.format(*m.groups()), hf_name, tuple(ckpt.shape(hf_name))))
                break
        else:
            raise NotImplementedError(f"tensor {hf_name!r} has no GGUF name in the {proj.kind} projector")
    n_block = int(need(vcfg, "num_hidden_layers"))
    have = {p[0] for p in plan}
    needed = ["v.patch_embd.weight", "v.position_embd.weight"] + [
        f"v.blk.{i}.{t}.weight" for i in range(n_block) for t in ("ln1", "ln2", "attn_q", "attn_k", "attn_v",
                                                                  "attn_out", "ffn_up", "ffn_down")]
    missing = [n for n in needed if n not in have]
    if missing:
        raise ValueError(f"{hf_dir}: the checkpoint lacks tensor {missing[0]}"
                         + (f" ({len(missing)} missing in all)" if len(missing) > 1 else ""))

    n_params = sum(int(np.prod(s, dtype=np.int64)) for _, _, s in plan)
    part = os.path.abspath(out_path) + ".part"
    w = gguf.GGUFWriter(part, "clip")
    try:
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
        proj.write_kv(w, vcfg, pre)
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        types = []
        for name, hf_name, shape in plan:
            qtype = _target_type(name, shape, outtype, proj.force_type(hf_name, name))
            types.append(qtype)
            w.add_tensor_info(name, shape, np.dtype(np.float32), _nbytes(shape, qtype), raw_dtype=qtype)
        w.write_header_to_file(path=part)
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for (name, hf_name, shape), qtype in zip(plan, types):
            x = proj.hook(name, np.asarray(ckpt.get(hf_name), dtype=np.float32))
            w.write_tensor_data(_encode(x, qtype))
            log_fn(f"{name:32s} {str(shape):16s} -> {qtype.name}")
    except BaseException:
        w.close()
        if os.path.exists(part):
            os.remove(part)
        raise
    w.close()
    os.replace(part, out_path)
    return out_path
