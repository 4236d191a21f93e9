"""llama.cpp's row quantizers, reached through ctypes in llama-cpp-python's libggml-base, for the
fixture recorders (tools/record_iq_lattice_write_fixtures.py, tools/record_iq3_quantize_fixtures.py,
tools/make_ternary_fixtures.py). Needs llama-cpp-python (0.3.36 made the committed fixtures) and
numpy; neither this module nor llama-cpp-python is part of llamapy.

    from ggml_quantize_chunk import quantize_rows
    blocks = quantize_rows(GGML_TYPE_ID, x, importance)   # bytes, as ggml_quantize_chunk wrote them

Importing this module needs numpy only: llama_cpp and the library are loaded on the first call.
"""
from __future__ import annotations

import ctypes
import functools
import pathlib

import numpy as np


@functools.cache
def _libggml_base() -> ctypes.CDLL:
    import llama_cpp

    lib = ctypes.CDLL(str(pathlib.Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
    # ctypes assumes int arguments and results: the sizes and row counts are 64-bit
    lib.ggml_quantize_init.argtypes = [ctypes.c_int]
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    return lib


def quantize_rows(type_id: int, x: np.ndarray, importance: np.ndarray | None = None) -> bytes:
    """The rows of x ((rows, n) float32, n a multiple of the type's block) quantized to ggml type
    `type_id`, weighted per column by `importance` ((n,) float32) or, with None, by llama.cpp's
    own default for the type (some types abort without one)."""
    # refuse rather than convert: the recorders hash their inputs, which must be what ran here
    if x.dtype != np.float32 or x.ndim != 2:
        raise TypeError(f"x must be a 2-D float32 array, not {x.ndim}-D {x.dtype}")
    if importance is not None and (importance.dtype != np.float32 or importance.shape != (x.shape[1],)):
        raise TypeError(f"importance must be float32 of shape ({x.shape[1]},), not {importance.dtype} "
                        f"{importance.shape}")
    lib = _libggml_base()
    x = np.ascontiguousarray(x)
    w = None if importance is None else np.ascontiguousarray(importance)
    rows, n = x.shape
    dst = np.zeros(rows * lib.ggml_row_size(type_id, n), np.uint8)
    lib.ggml_quantize_init(type_id)  # builds the grid types' tables; a no-op once done
    written = lib.ggml_quantize_chunk(type_id, x.ctypes.data, dst.ctypes.data, 0, rows, n,
                                      None if w is None else w.ctypes.data)
    # ggml reports what it wrote: a shortfall means the row size and the quantizer disagree
    if written != dst.size:
        raise RuntimeError(f"ggml_quantize_chunk(type {type_id}) wrote {written} bytes, expected {dst.size}")
    return dst.tobytes()
