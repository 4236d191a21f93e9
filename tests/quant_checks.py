"""Shared checks for the quantization-family tests (test_quants_float.py,
test_quants_legacy.py, test_iquants.py): random well-formed blocks, the
activation round trip, and the dot-product / matmul comparisons every type
goes through; for the writers' tests (test_iq_lattice_write.py,
test_iq3_quantize.py), the comparison with the bytes llama.cpp wrote, as the
tools/ recorders keep them.

Error budgets. A dot product over n terms accumulated in float32 is within
about n * 2^-24 * sum|w_i a_i| of the exact value; the kernels accumulate
exact int32 block sums and round only when scaling and summing blocks, so
the bounds below (relative to sum|w_i a_i|) leave a wide margin:
  - reference vs float64 of the same operands: 2e-6
  - any SIMD level vs the reference:           4e-6
  - the matmul driver vs float64:              8e-6 (adds the activation
    quantization only through the operands it shares with the reference)
"""
from __future__ import annotations

import hashlib
import importlib.util
import pathlib

import numpy as np

from llamapy import _engine

LEVELS = list(_engine.system_info()["cpu_isas"])  # "scalar", then what this CPU and build support
# the level the "best" tables use: LEVELS[-1], or lower under LLAMAPY_ISA
ACTIVE = _engine.system_info()["active_isa"]
# the k-quants with register-blocked tiles at the AVX2 level (kquants_tiles_avx2.cpp)
AVX2_TILED_K = {"Q4_K", "Q5_K", "Q6_K"}


def has_k_tile(qtype: str) -> bool:
    """Whether the active level gives this k-quant a gemm_tile."""
    # (the NEON levels tile every k-quant: kquants_neon.cpp)
    return ACTIVE in ("neon", "neon_dot", "avx512") or (ACTIVE == "avx2" and qtype in AVX2_TILED_K)

REF_TOL = 2e-6
SIMD_TOL = 4e-6
MATMUL_TOL = 8e-6


def random_blocks(rng, block_bytes: int, n_blocks: int, half_offsets, scale: float = 0.05) -> np.ndarray:
    """Random block bytes with finite fp16 values in the fields at
    `half_offsets` (random bytes would put NaN and inf there)."""
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in half_offsets:
        h = (rng.standard_normal(n_blocks) * scale).astype(np.float16)
        raw[:, off:off + 2] = h.view(np.uint8).reshape(-1, 2)
    return raw


# The grid-based i-quants (quants/iq_lattice.h), which llamapy reads but does not write:
# their tests draw random blocks (random_iq_blocks), every one a legal block.
IQ_LATTICE_TYPES = ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]
IQ_BLOCK_BYTES = {"IQ2_XXS": 66, "IQ2_XS": 74, "IQ2_S": 82, "IQ3_XXS": 98, "IQ3_S": 110, "IQ1_S": 50, "IQ1_M": 56}


def random_iq_blocks(rng, qtype: str, n_blocks: int, scale: float = 0.05) -> np.ndarray:
    """Random block bytes with a finite fp16 super-block scale: at byte 0, or for IQ1_M in
    the top nibbles of the four scale words at bytes 48..55."""
    raw = rng.integers(0, 256, size=(n_blocks, IQ_BLOCK_BYTES[qtype]), dtype=np.uint8)
    d = (rng.standard_normal(n_blocks) * scale).astype(np.float16).view(np.uint16)
    if qtype == "IQ1_M":
        words = raw[:, 48:56].copy().view(np.uint16)  # (n_blocks, 4)
        for k in range(4):
            words[:, k] = (words[:, k] & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12)
        raw[:, 48:56] = words.view(np.uint8)
    else:
        raw[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
    return raw


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def activation_roundtrip(x: np.ndarray, act_type: str) -> np.ndarray:
    """x (rows of floats) quantized to an activation format with the reference
    quantizer and dequantized again: the operand the kernels really see."""
    if act_type == "F32":
        return np.asarray(x, np.float32)
    q = _engine.quantize_ref(np.asarray(x, np.float32), act_type)
    return _engine.dequantize(q, act_type, list(np.shape(x)))


def check_vec_dot(w_raw: np.ndarray, qtype: str, n_cols: int, a: np.ndarray, exact64: np.ndarray,
                  scale64: np.ndarray) -> None:
    """Every ISA level's vec_dot against the reference, and the reference
    against `exact64` (the float64 dot of the operands the kernels see).
    `scale64` is sum|w_i a_i| per row, the yardstick of the error budgets."""
    ref = _engine.vec_dot_rows(w_raw, qtype, n_cols, a, "ref")
    bound = scale64 + 1e-30
    err_ref = np.abs(ref.astype(np.float64) - exact64) / bound
    assert err_ref.max() <= REF_TOL, f"{qtype} reference vs float64: {err_ref.max():.3g}"
    for level in LEVELS:
        got = _engine.vec_dot_rows(w_raw, qtype, n_cols, a, level)
        err = np.abs(got.astype(np.float64) - ref) / bound
        assert err.max() <= SIMD_TOL, f"{qtype} {level} vs reference: {err.max():.3g} (n_cols {n_cols})"


def check_matmul(w_raw: np.ndarray, qtype: str, n_rows: int, n_cols: int, x: np.ndarray, w64: np.ndarray,
                 act_type: str) -> None:
    """The matrix driver (mat-vec and tiled mat-mat, 1 and 2 threads, and the
    reference path) against float64 products of the dequantized weights `w64`
    and the activations as quantized to `act_type`."""
    a64 = activation_roundtrip(x, act_type).astype(np.float64)
    exact = a64 @ w64.T
    bound = np.abs(a64) @ np.abs(w64).T + 1e-30
    for threads, level in [(1, "best"), (2, "best"), (1, "ref"), (2, LEVELS[-1])]:
        y = _engine.matmul(w_raw, qtype, n_rows, n_cols, x, threads, level)
        assert y.shape == (x.shape[0], n_rows)
        err = np.abs(y - exact) / bound
        assert err.max() <= MATMUL_TOL, (
            f"{qtype} matmul {x.shape[0]}x{n_cols} @ {n_rows} threads={threads} {level}: {err.max():.3g}")


def load_tool(name: str):
    """tools/<name>.py as a module. The tests reuse what a generator computes (its seeded inputs,
    its tables) rather than copying it; tools/ holds scripts, not a package, hence by path."""
    path = pathlib.Path(__file__).resolve().parent.parent / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def assert_recorded_bytes(got: np.ndarray, sha256: str, hex_bytes: str | None, block_bytes: int,
                          what: str) -> None:
    """The bytes of `got` are the ones a recorder hashed (`sha256`). Where it kept the bytes
    too (`hex_bytes`, the small outputs), a mismatch names the blocks that differ, which points
    at the input the writer gets wrong."""
    got = np.ascontiguousarray(got).reshape(-1).view(np.uint8)
    if hashlib.sha256(got.tobytes()).hexdigest() == sha256:
        return
    detail = ""
    if hex_bytes is not None:
        want = np.frombuffer(bytes.fromhex(hex_bytes), np.uint8)
        if want.size == got.size:
            bad = np.flatnonzero((got != want).reshape(-1, block_bytes).any(axis=1)).tolist()
            detail = f": blocks {bad} differ"
        else:
            detail = f": {got.size} bytes, llama.cpp wrote {want.size}"
    raise AssertionError(f"{what}: bytes differ from llama.cpp's{detail}")
