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


def quantize(x: np.ndarray, ggml_type: TypeLike, importance: Optional[np.ndarray] = None) -> np.ndarray:
    """Quantize a float array to ``ggml_type``.

    Returns uint8 blocks shaped ``(*x.shape[:-1], row_bytes)``, the layout
    ``gguf.quants.quantize`` returns. The last dimension of ``x`` must be a
    multiple of the type's block size. For F16 and BF16 the raw bits are
    returned as bytes too.

    ``importance``: one non-negative value per column (an importance matrix's
    row for this weight, e.g. mean squared activations): the blocks are then
    the ones llama.cpp's quantizer writes with that imatrix. Raises
    ``ValueError`` for a type without an importance-weighted quantizer.
    """
    x = np.asarray(x, dtype=np.float32)
    if importance is None:
        return _engine.quantize(x, ggml_type)
    if x.ndim < 1:
        raise ValueError("quantize: input must have at least one dimension")
    rows = x.reshape(int(np.prod(x.shape[:-1], dtype=np.int64)), x.shape[-1])
    q = _engine.quantize_weighted(rows, ggml_type, np.asarray(importance, dtype=np.float32))
    return q.reshape(*x.shape[:-1], q.shape[-1])
