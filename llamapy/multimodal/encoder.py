"""Vision encoders: preprocessed image chunks -> the language model's image embeddings.

``VisionEncoder(mmproj_path)`` validates the projector file (``read_mmproj``) and loads its
vision tower and projector into the native engine (``_engine.VisionModel``,
vendor/engine/vision/). ``encode(pixels)`` runs one image chunk — the float32 (3, H, W)
array ``preprocess`` makes, or llama.cpp's (1, 3, H, W) batch layout — and returns
(n_tokens, n_embd) float32 embeddings, as llama.cpp's ``mtmd_encode_chunk`` +
``mtmd_get_output_embd`` do. ``encode_image(pre)`` encodes every chunk of a
``Preprocessed`` image in mtmd's chunk order (tiles, then the overview).

Projector types with an encoder here: ``ENCODER_PROJECTOR_TYPES`` (every type ``read_mmproj``
accepts; other types raise ``NotImplementedError`` there or, if one is added to
``SUPPORTED_PROJECTOR_TYPES`` without an encoder, here at construction). The fixed-size
types take image_size x image_size chunks; the Qwen2-VL / 2.5-VL mergers any size in
multiples of two patches (n_tokens = patches / 4).
``flash_attn`` (True / False / "auto", as ``Llama`` takes it) picks the tower's self-attention
path: the explicit softmax or the fused flash kernels (both non-causal; Qwen2.5-VL's windowed
layers use a block-diagonal mask on either). "auto" takes flash for chunks of many patches.
``gpu`` (a Vulkan device number, in a build with the Vulkan backend) runs the tower and the
projector on that device; None (the default) runs them on the CPU. The chat handlers pass the
device of the language model's GPU layers (``use_gpu=True``, as mtmd does).
Not here: preprocessing (``preprocess.py``), placing embeddings in a prompt (chat handlers).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, List, Optional, Union

import numpy as np

from .. import _engine
from .mmproj import SUPPORTED_PROJECTOR_TYPES, MmprojInfo, read_mmproj

if TYPE_CHECKING:
    from .preprocess import Preprocessed

__all__ = ["ENCODER_PROJECTOR_TYPES", "VisionEncoder"]

# Projector types whose vision encoder the engine runs (vendor/engine/vision/projector_<type>.cpp).
ENCODER_PROJECTOR_TYPES = ("mlp", "gemma3", "idefics3", "qwen2vl_merger", "qwen2.5vl_merger")


class VisionEncoder:
    """The vision encoder and projector of an mmproj GGUF file."""

    def __init__(self, mmproj_path: Union[str, "os.PathLike[str]"], n_threads: Optional[int] = None,
                 verbose: bool = False, flash_attn: Union[bool, str, int, None] = "auto",
                 gpu: Optional[int] = None) -> None:
        path = os.fspath(mmproj_path)
        self.info: MmprojInfo = read_mmproj(path)
        self.projector_type: str = self.info.projector_type
        if self.projector_type not in ENCODER_PROJECTOR_TYPES:
            raise NotImplementedError(
                f"{os.path.basename(path)}: no vision encoder for projector type {self.projector_type!r} yet "
                f"(encoders: {', '.join(ENCODER_PROJECTOR_TYPES)}; metadata readable for: "
                f"{', '.join(SUPPORTED_PROJECTOR_TYPES)})")
        if n_threads is not None and (not isinstance(n_threads, int) or isinstance(n_threads, bool)
                                      or n_threads < 1):
            raise ValueError(f"n_threads must be a positive integer or None, got {n_threads!r}")
        # -1 auto, 0 off, 1 on: parsed as the context option of the same name
        self.flash_attn: int = _engine.ContextParams(flash_attn=flash_attn).flash_attn
        if gpu is not None and (not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0):
            raise ValueError(f"gpu must be a Vulkan device number (>= 0) or None (the CPU), got {gpu!r}")
        self._model = _engine.VisionModel(path, n_threads or 0, self.flash_attn, -1 if gpu is None else gpu)
        self.gpu: Optional[int] = None if self._model.gpu < 0 else int(self._model.gpu)
        self.n_embd: int = int(self._model.n_embd)
        self.n_tokens: int = int(self._model.n_tokens)   # embeddings per image chunk; 0: size-dependent
        self.dynamic_size: bool = bool(self._model.dynamic_size)
        self.n_threads: int = int(self._model.n_threads)
        if verbose:
            import sys
            print(f"vision encoder: {os.path.basename(path)}: {self.projector_type}, "
                  f"{self.info.image_size}px, patch {self.info.patch_size}, {self._model.n_layer_run}/"
                  f"{self.info.n_layer} blocks run, "
                  + (f"feature layers {list(self._model.feature_layers)} stacked, " if self._model.feature_layers else "")
                  + f"{self.n_tokens} tokens x {self.n_embd} per chunk, "
                  + (f"on Vulkan device {self.gpu}" if self.gpu is not None else
                     f"{self.n_threads} threads, attention {self._describe_path()}"), file=sys.stderr)

    def attention_path(self, height: Optional[int] = None, width: Optional[int] = None) -> str:
        """The self-attention path ("flash" or "explicit") a chunk of height x width pixels runs
        (default: image_size x image_size)."""
        size = self.info.image_size
        return str(self._model.attention_path(size if height is None else height, size if width is None else width))

    def _describe_path(self) -> str:
        if self.dynamic_size:
            return {-1: "auto", 0: "explicit", 1: "flash"}[self.flash_attn]
        return self.attention_path()

    def encode(self, pixels: np.ndarray) -> np.ndarray:
        """One image chunk's pixels, float32 (3, H, W) or (1, 3, H, W) -> (n_tokens, n_embd) float32."""
        if not isinstance(pixels, np.ndarray):
            raise ValueError(f"pixels must be a numpy float32 array, got {type(pixels).__name__}")
        if pixels.dtype != np.float32:
            raise ValueError(f"pixels must be float32, got {pixels.dtype}")
        size, step = self.info.image_size, 2 * self.info.patch_size
        want = (f"(3, H, W) or (1, 3, H, W) with H and W multiples of {step}" if self.dynamic_size
                else f"(3, {size}, {size}) or (1, 3, {size}, {size})")
        if pixels.ndim == 4:
            if pixels.shape[0] != 1:
                raise ValueError(f"pixels: {pixels.shape[0]} images in one chunk; expected {want}")
            pixels = pixels[0]
        if self.dynamic_size:
            ok = (pixels.ndim == 3 and pixels.shape[0] == 3 and pixels.shape[1] > 0 and pixels.shape[2] > 0
                  and pixels.shape[1] % step == 0 and pixels.shape[2] % step == 0)
        else:
            ok = pixels.shape == (3, size, size)
        if not ok:
            raise ValueError(f"pixels have shape {pixels.shape}, but projector {self.projector_type!r} takes {want}")
        return self._model.encode(np.ascontiguousarray(pixels))

    def encode_image(self, pre: "Preprocessed") -> List[np.ndarray]:
        """Every image chunk of a preprocessed image, in mtmd's chunk order, encoded."""
        chunks = pre.in_chunk_order()
        if not chunks:
            raise ValueError("the preprocessed image has no tiles")
        return [self.encode(c) for c in chunks]

    def __repr__(self) -> str:
        return (f"VisionEncoder({os.path.basename(self.info.path)!r}, projector_type={self.projector_type!r}, "
                f"n_embd={self.n_embd}, n_tokens={self.n_tokens})")
