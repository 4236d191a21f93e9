"""Quantization helpers: convert between float arrays and GGUF block formats.

These expose the engine's own kernels, bit-compatible with the block layouts
of GGUF files written by llama.cpp.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np

from . import _engine

TypeLike = Union[int, str]


def dequantize(raw: np.ndarray, ggml_type: TypeLike, shape: Sequence[int]) -> np.ndarray:
    """Dequantize raw blocks of ``ggml_type`` (an id, a name such as ``"Q4_K"``
    or a ``gguf.GGMLQuantizationType``) into a float32 array of ``shape``.

    ``raw`` may be any contiguous array (usually uint8); its byte size must be
    exactly what ``shape`` needs. Raises ``ValueError`` otherwise.
    """
    return _engine.dequantize(np.asarray(raw), ggml_type, [int(d) for d in shape])


def quantize(x: np.ndarray, ggml_type: TypeLike, imatrix: Optional[np.ndarray] = None) -> np.ndarray:
    """Quantize a float array to ``ggml_type``.

    Returns uint8 blocks shaped ``(*x.shape[:-1], row_bytes)``, the layout
    ``gguf.quants.quantize`` returns. The last dimension of ``x`` must be a
    multiple of the type's block size. For F16 and BF16 the raw bits are
    returned as bytes too.

    ``imatrix``: importance values, one per column (``x.shape[-1]``), as an
    importance matrix file holds them for a weight: the types llama.cpp
    quantizes differently with one (``type_info``'s ``can_quantize_weighted``:
    Q4_0 ... Q6_K, IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S,
    IQ1_S, IQ1_M) then give the blocks its quantizer writes with that imatrix;
    the others ignore it, as there. IQ2_XXS, IQ2_XS and IQ1_S need one
    (ValueError without).
    """
    x = np.asarray(x, dtype=np.float32)
    if imatrix is None:
        return _engine.quantize(x, ggml_type)
    w = np.asarray(imatrix, dtype=np.float32)
    if x.ndim < 1 or w.shape != (x.shape[-1],):
        raise ValueError(f"quantize: imatrix must hold one value per column ({x.shape[-1] if x.ndim else 0}), "
                         f"got shape {w.shape}")
    if not _engine.type_info(ggml_type)["can_quantize_weighted"]:
        return _engine.quantize(x, ggml_type)  # a type llama.cpp quantizes the same without
    rows = _engine.quantize_weighted(np.ascontiguousarray(x.reshape(-1, x.shape[-1])), ggml_type, w)
    return rows.reshape(*x.shape[:-1], rows.shape[-1])
