"""Projector (mmproj) GGUF files: metadata -> a validated ``MmprojInfo``.

A projector file has ``general.architecture = "clip"`` and holds a vision encoder (CLIP ViT
or SigLIP) plus the projector that maps its features into the language model's embedding
space. ``read_mmproj(path)`` reads it with the project's strict GGUF reader
(``llamapy.gguf_file.GGUFFile``) and checks it the way llama.cpp's ``clip_model_loader``
(tools/mtmd/clip.cpp, ``load_hparams`` / ``load_tensors``, keys from clip-impl.h) does, but
with a ``ValueError`` naming the key where llama.cpp would abort:

- projector type: ``clip.projector_type``, else ``clip.vision.projector_type`` (files with
  mixed modalities); ``qwen2.5o`` means ``qwen2.5vl_merger`` for vision. A legacy LLaVA file
  without either key is ``mlp`` (what llama.cpp did before the key became required; the
  vendored version rejects such files as "unknown projector type"). An ``mlp`` file with
  ``mm.3.weight`` is Yi-style ``mlp_norm``, as llama.cpp renames it.
- required: ``clip.has_vision_encoder`` true, ``clip.vision.{embedding_length,
  feed_forward_length, block_count, projection_dim, attention.head_count,
  attention.layer_norm_epsilon, image_size, patch_size, image_mean, image_std}``.
- optional: ``attention.head_count_kv``, ``attention.head_dim``, ``feature_layer``,
  ``image_grid_pinpoints``, ``mm_patch_merge_type``, ``clip.use_gelu`` / ``clip.use_silu``,
  ``projector.scale_factor`` / ``spatial_merge_size`` (n_merge, with llama.cpp's per-type
  defaults), ``preproc_image_size``, ``n_wa_pattern`` (required for qwen2.5vl),
  ``window_size``, ``wa_layer_indexes``.
- ``feature_layer`` (i32, none above block_count; written by llama.cpp's legacy LLaVA
  converter) names the encoder hidden states an ``mlp`` projector takes, as llama.cpp's llava
  graph reads it: layer k is the input of block k (0: the embeddings after the pre-LayerNorm;
  block_count: the last block's output), the deepest one is the tower's output (the
  post-LayerNorm applies to it alone) and the selected layers are concatenated along the
  features in ascending order, whatever the listed order and repeats; negative values select
  nothing. Other types ignore it, as llama.cpp does. The engine stacks them
  (vendor/engine/vision/vit.cpp) and refuses an ``mm.0.weight`` of another input width.
- the projector output width comes from the tensor llama.cpp's ``clip_n_mmproj_embd`` reads
  (the last projection); ``check_compatible`` compares it with the language model's n_embd.

A projector type outside ``SUPPORTED_PROJECTOR_TYPES`` raises ``NotImplementedError``
naming it and the supported ones. Not here: loading weights or running the encoder.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from ..gguf_file import GGUFFile, TensorInfo

__all__ = ["KNOWN_PROJECTOR_TYPES", "SUPPORTED_PROJECTOR_TYPES", "MmprojInfo", "check_compatible", "read_mmproj"]

# The projector types llamapy's vision encoders cover (llama.cpp's PROJECTOR_TYPE_NAMES spelling).
SUPPORTED_PROJECTOR_TYPES = ("mlp", "gemma3", "idefics3", "qwen2vl_merger", "qwen2.5vl_merger")

# Other names llama.cpp knows (clip-impl.h PROJECTOR_TYPE_NAMES), for clearer errors.
KNOWN_PROJECTOR_TYPES = SUPPORTED_PROJECTOR_TYPES + (
    "mlp_norm", "ldp", "ldpv2", "resampler", "adapter", "qwen3vl_merger", "gemma3nv", "gemma4v", "phi4",
    "pixtral", "internvl", "llama4", "lfm2", "kimivl", "lightonocr", "cogvlm", "janus_pro", "glm4v",
    "minicpmv4_6", "youtuvl", "deepseekocr", "step3vl", "qwen2.5o", "ultravox", "voxtral", "qwen2a",
)

# Per projector type: (tensor holding the output width, index into ggml's ne), as clip_n_mmproj_embd.
_OUTPUT_WIDTH = {
    "mlp": ("mm.2.weight", 1),
    "mlp_norm": ("mm.3.bias", 0),
    "gemma3": ("mm.input_projection.weight", 0),
    "idefics3": ("mm.model.fc.weight", 1),
    "qwen2vl_merger": ("mm.2.bias", 0),
    "qwen2.5vl_merger": ("mm.2.bias", 0),
}

# n_merge (patch merges per side): the metadata key llama.cpp reads for the type, and its default.
_MERGE = {
    "mlp": (None, 1),
    "gemma3": ("clip.vision.projector.scale_factor", 4),
    "idefics3": ("clip.vision.projector.scale_factor", 1),
    "qwen2vl_merger": ("clip.vision.spatial_merge_size", 2),
    "qwen2.5vl_merger": ("clip.vision.spatial_merge_size", 2),
}

# Fixed-size encoders: the image is resized to image_size, so patches must tile it exactly.
_FIXED_SIZE_TYPES = ("mlp", "gemma3", "idefics3")
_QWEN_TYPES = ("qwen2vl_merger", "qwen2.5vl_merger")

_INT_TYPES = ("u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64")
_FLOAT_TYPES = ("f32", "f64")


@dataclass(frozen=True)
class MmprojInfo:
    """What a projector file says about its vision encoder and projector (llama.cpp's clip_hparams)."""

    path: str
    projector_type: str            # one of SUPPORTED_PROJECTOR_TYPES
    name: str
    n_embd: int                    # vision width (clip.vision.embedding_length)
    n_ff: int
    n_layer: int                   # encoder blocks
    n_head: int
    n_head_kv: int
    n_embd_head: int               # per-head width
    projection_dim: int
    eps: float                     # layer-norm epsilon
    image_size: int                # square input side for fixed-size types (px)
    patch_size: int                # px
    image_mean: Tuple[float, float, float]
    image_std: Tuple[float, float, float]
    ffn_op: str                    # "gelu_quick" (CLIP default), "gelu" or "silu"
    n_merge: int                   # patch merges per side (gemma3 pooling, idefics3 shuffle, qwen merge)
    feature_layers: Tuple[int, ...] = ()   # as the file lists them; see the module docstring
    image_grid_pinpoints: Tuple[Tuple[int, int], ...] = ()   # (width, height) candidates, llava 1.6
    mm_patch_merge_type: str = "flat"                        # or "spatial_unpad" (llava 1.6)
    image_min_pixels: int = -1     # dynamic-size types: pixel budget, as llama.cpp derives it
    image_max_pixels: int = -1
    preproc_image_size: int = 0    # idefics3: longest edge before tiling (0: not set)
    n_wa_pattern: int = 0          # qwen2.5vl: every n-th block has full attention
    window_size: int = 0
    wa_layer_indexes: Tuple[int, ...] = ()
    has_class_embd: bool = False
    has_image_newline: bool = False
    n_mmproj_embd: int = 0         # projector output width: must equal the language model's n_embd
    tensors: Tuple[TensorInfo, ...] = field(default=(), repr=False)

    def tensor(self, name: str) -> Optional[TensorInfo]:
        for t in self.tensors:
            if t.name == name:
                return t
        return None


class _Meta:
    """Typed access to a projector file's metadata, every error naming the key."""

    def __init__(self, gguf: GGUFFile) -> None:
        self.gguf = gguf
        self.md = gguf.metadata
        self.where = os.path.basename(gguf.path)

    def has(self, key: str) -> bool:
        return key in self.md

    def _fail(self, key: str, problem: str) -> ValueError:
        return ValueError(f"{self.where}: {key} {problem}")

    def _typed(self, key: str, kinds: Sequence[str], what: str) -> Any:
        """The value of ``key`` (``_MISSING`` if absent), checked to be one of the GGUF ``kinds``."""
        if key not in self.md:
            return _MISSING
        kind = self.gguf.metadata_type(key)
        if kind not in kinds:
            raise self._fail(key, f"must be {what}, got {kind}")
        return self.md[key]

    def _or_default(self, key: str, default: Any) -> Any:
        if default is _REQUIRED:
            raise self._fail(key, "is missing (required by llama.cpp's clip loader)")
        return default

    def int(self, key: str, default: Any = None, minimum: int = 0) -> Any:
        value = self._typed(key, _INT_TYPES, "an integer")
        if value is _MISSING:
            return self._or_default(key, default)
        if value < minimum or value > 2**31 - 1:
            raise self._fail(key, f"= {value} is out of range (must be {minimum}..{2**31 - 1})")
        return int(value)

    def float(self, key: str, default: Any = None) -> Any:
        value = self._typed(key, _FLOAT_TYPES, "a float")
        if value is _MISSING:
            return self._or_default(key, default)
        if not math.isfinite(value):
            raise self._fail(key, f"= {value} is not finite")
        return float(value)

    def bool(self, key: str, default: Any = None) -> Any:
        value = self._typed(key, ("bool",), "a bool")
        return self._or_default(key, default) if value is _MISSING else bool(value)

    def str(self, key: str, default: Any = None) -> Any:
        value = self._typed(key, ("string",), "a string")
        return self._or_default(key, default) if value is _MISSING else value

    def array(self, key: str, elem: Sequence[str], what: str, default: Any = ()) -> Any:
        value = self._typed(key, tuple(f"array[{e}]" for e in elem), f"an array of {what}")
        return self._or_default(key, default) if value is _MISSING else tuple(value)


_REQUIRED = object()
_MISSING = object()


def _projector_type(meta: _Meta) -> str:
    raw = meta.str("clip.projector_type") or meta.str("clip.vision.projector_type") or "mlp"
    ptype = "qwen2.5vl_merger" if raw == "qwen2.5o" else raw
    if ptype == "mlp" and "mm.3.weight" in {t.name for t in meta.gguf.tensors}:
        ptype = "mlp_norm"
    if ptype not in SUPPORTED_PROJECTOR_TYPES:
        known = "" if ptype in KNOWN_PROJECTOR_TYPES else " (llama.cpp does not know it either)"
        raise NotImplementedError(f"{meta.where}: projector type {ptype!r}{known} is not supported; "
                                  f"supported: {', '.join(SUPPORTED_PROJECTOR_TYPES)}")
    return ptype


def _ffn_op(meta: _Meta) -> str:
    gelu = meta.bool("clip.use_gelu", False)
    silu = meta.bool("clip.use_silu", False)
    if gelu and silu:
        raise ValueError(f"{meta.where}: clip.use_gelu and clip.use_silu are both true")
    return "gelu" if gelu else "silu" if silu else "gelu_quick"


def _mean_std(meta: _Meta, key: str) -> Tuple[float, float, float]:
    values = meta.array(key, ("f32",), "f32", _REQUIRED)
    if len(values) != 3:
        raise ValueError(f"{meta.where}: {key} must hold 3 values (R, G, B), got {len(values)}")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{meta.where}: {key} = {list(values)} is not finite")
    if key.endswith("image_std") and not all(v > 0 for v in values):
        raise ValueError(f"{meta.where}: {key} = {list(values)} must be positive")
    return tuple(float(v) for v in values)  # type: ignore[return-value]


def _pinpoints(meta: _Meta) -> Tuple[Tuple[int, int], ...]:
    key = "clip.vision.image_grid_pinpoints"
    values = meta.array(key, ("i32", "u32", "i64"), "integers")
    if len(values) % 2:
        raise ValueError(f"{meta.where}: {key} must hold (width, height) pairs, got {len(values)} values")
    if any(v <= 0 for v in values):
        raise ValueError(f"{meta.where}: {key} = {list(values)} must be positive")
    return tuple((int(values[i]), int(values[i + 1])) for i in range(0, len(values), 2))


def _output_width(meta: _Meta, ptype: str, tensors: Dict[str, TensorInfo]) -> int:
    name, axis = _OUTPUT_WIDTH[ptype]
    t = tensors.get(name)
    if t is None:
        raise ValueError(f"{meta.where}: projector {ptype!r} needs tensor {name!r}, which is missing")
    if len(t.ne) <= axis or t.ne[axis] <= 0:
        raise ValueError(f"{meta.where}: tensor {name!r} has shape ne={list(t.ne)}; no output width on axis {axis}")
    return int(t.ne[axis])


def _check_patch_embd(meta: _Meta, tensors: Dict[str, TensorInfo], patch_size: int, n_embd: int) -> None:
    t = tensors.get("v.patch_embd.weight")
    if t is None:
        raise ValueError(f"{meta.where}: tensor 'v.patch_embd.weight' is missing")
    ne = tuple(t.ne) + (1,) * (4 - len(t.ne))
    if ne[0] != patch_size or ne[1] != patch_size or ne[3] != n_embd:
        raise ValueError(f"{meta.where}: tensor 'v.patch_embd.weight' has ne={list(t.ne)}, expected "
                         f"[{patch_size}, {patch_size}, channels, {n_embd}] from clip.vision.patch_size "
                         f"and clip.vision.embedding_length")


def _parse(gguf: GGUFFile) -> MmprojInfo:
    meta = _Meta(gguf)
    arch = gguf.architecture
    if arch != "clip":
        raise ValueError(f"{meta.where}: general.architecture is {arch!r}, not 'clip': not a projector (mmproj) file")
    if not meta.bool("clip.has_vision_encoder", False):
        raise ValueError(f"{meta.where}: clip.has_vision_encoder is missing or false: no vision encoder to run")
    ptype = _projector_type(meta)
    v = "clip.vision."

    n_embd = meta.int(v + "embedding_length", _REQUIRED, minimum=1)
    n_head = meta.int(v + "attention.head_count", _REQUIRED, minimum=1)
    n_head_kv = meta.int(v + "attention.head_count_kv", n_head, minimum=1)
    n_embd_head = meta.int(v + "attention.head_dim", 0)
    if not n_embd_head:
        if n_embd % n_head:
            raise ValueError(f"{meta.where}: {v}embedding_length = {n_embd} is not divisible by "
                             f"{v}attention.head_count = {n_head}")
        n_embd_head = n_embd // n_head
    if n_head % n_head_kv:
        raise ValueError(f"{meta.where}: {v}attention.head_count = {n_head} is not a multiple of "
                         f"{v}attention.head_count_kv = {n_head_kv}")
    # Qwen files from the old surgery script have n_ff = 0 (llama.cpp infers it from the tensors).
    n_ff = meta.int(v + "feed_forward_length", _REQUIRED, minimum=0 if ptype in _QWEN_TYPES else 1)
    n_layer = meta.int(v + "block_count", _REQUIRED, minimum=1)
    projection_dim = meta.int(v + "projection_dim", _REQUIRED)
    eps = meta.float(v + "attention.layer_norm_epsilon", _REQUIRED)
    if not eps > 0:
        raise ValueError(f"{meta.where}: {v}attention.layer_norm_epsilon = {eps} must be positive")

    image_size = meta.int(v + "image_size", _REQUIRED)
    if image_size > 8192:
        raise ValueError(f"{meta.where}: {v}image_size = {image_size} is too large (llama.cpp's limit is 8192)")
    patch_size = meta.int(v + "patch_size", _REQUIRED, minimum=1)
    if patch_size >= 65536:
        raise ValueError(f"{meta.where}: {v}patch_size = {patch_size} must be less than 65536")

    merge_key, n_merge = _MERGE[ptype] if ptype in _MERGE else (None, 1)
    if merge_key is not None:
        n_merge = meta.int(merge_key, n_merge, minimum=1)
        if n_merge >= 65536:
            raise ValueError(f"{meta.where}: {merge_key} = {n_merge} must be less than 65536")

    if ptype in _FIXED_SIZE_TYPES or ptype == "mlp_norm":
        if image_size <= 0:
            raise ValueError(f"{meta.where}: {v}image_size = {image_size} must be positive for projector {ptype!r}")
        if image_size % patch_size:
            raise ValueError(f"{meta.where}: {v}patch_size = {patch_size} does not divide "
                             f"{v}image_size = {image_size}")
        if (image_size // patch_size) % n_merge:
            raise ValueError(f"{meta.where}: {image_size // patch_size} patches per side do not divide into "
                             f"groups of {merge_key} = {n_merge}")

    # llama.cpp's loader takes i32 only and values up to block_count (layer k is the input of
    # block k, so block_count is the last block's output); negative values are its "unset" marker.
    feature_layers = meta.array(v + "feature_layer", ("i32",), "i32")
    for layer in feature_layers:
        if layer > n_layer:
            raise ValueError(f"{meta.where}: {v}feature_layer holds {layer}, above {v}block_count = {n_layer}")

    merge_type = meta.str(v + "mm_patch_merge_type", "flat")
    if merge_type not in ("flat", "spatial_unpad"):
        raise ValueError(f"{meta.where}: {v}mm_patch_merge_type = {merge_type!r} must be 'flat' or 'spatial_unpad'")

    n_wa_pattern = meta.int(v + "n_wa_pattern", _REQUIRED if ptype == "qwen2.5vl_merger" else 0,
                            minimum=1 if ptype == "qwen2.5vl_merger" else 0)
    window_size = meta.int(v + "window_size", 0)
    wa_layers = meta.array(v + "wa_layer_indexes", ("i32", "u32"), "integers")
    for layer in wa_layers:
        if not 0 <= layer < n_layer:
            raise ValueError(f"{meta.where}: {v}wa_layer_indexes holds {layer}, outside 0..{n_layer - 1}")

    min_pixels = max_pixels = -1
    if ptype in _QWEN_TYPES:  # llama.cpp: set_limit_image_tokens(8, 4096)
        area = patch_size * patch_size * n_merge * n_merge
        min_pixels, max_pixels = 8 * area, 4096 * area

    tensors = {t.name: t for t in gguf.tensors}
    _check_patch_embd(meta, tensors, patch_size, n_embd)
    return MmprojInfo(
        path=gguf.path, projector_type=ptype, name=meta.str("general.name", "") or "",
        n_embd=n_embd, n_ff=n_ff, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, n_embd_head=n_embd_head,
        projection_dim=projection_dim, eps=eps, image_size=image_size, patch_size=patch_size,
        image_mean=_mean_std(meta, v + "image_mean"), image_std=_mean_std(meta, v + "image_std"),
        ffn_op=_ffn_op(meta), n_merge=n_merge, feature_layers=tuple(int(x) for x in feature_layers),
        image_grid_pinpoints=_pinpoints(meta), mm_patch_merge_type=merge_type,
        image_min_pixels=min_pixels, image_max_pixels=max_pixels,
        preproc_image_size=meta.int(v + "preproc_image_size", 0) if ptype == "idefics3" else 0,
        n_wa_pattern=n_wa_pattern, window_size=window_size, wa_layer_indexes=tuple(int(x) for x in wa_layers),
        has_class_embd="v.class_embd" in tensors, has_image_newline="v.image_newline" in tensors,
        n_mmproj_embd=_output_width(meta, ptype, tensors), tensors=tuple(gguf.tensors),
    )


def read_mmproj(source: Union[str, "os.PathLike[str]", GGUFFile]) -> MmprojInfo:
    """Read and validate a projector GGUF (a path or an open ``GGUFFile``).

    Raises ``GGUFError`` (a ``ValueError``) for a malformed file, ``ValueError`` naming the
    key for bad metadata, ``NotImplementedError`` for an unsupported projector type.
    """
    if isinstance(source, GGUFFile):
        return _parse(source)
    with GGUFFile(source) as gguf:
        return _parse(gguf)


def check_compatible(info: MmprojInfo, n_embd: int) -> None:
    """Raise ``ValueError`` naming both widths unless the projector feeds an ``n_embd``-wide model."""
    if info.n_mmproj_embd != n_embd:
        raise ValueError(f"projector {os.path.basename(info.path)} outputs embeddings of width "
                         f"{info.n_mmproj_embd}, but the language model's n_embd is {n_embd}")
