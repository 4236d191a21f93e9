"""The float element types (vendor/engine/quants/float.cpp): F32, F16, BF16.

- widening to float32 is exact for every one of the 65536 F16 and BF16 bit
  patterns (NaN stays NaN; numpy / gguf-py are the yardstick);
- float32 -> F16 rounds like numpy's astype(float16) and float32 -> BF16 like
  gguf-py's quantizer, bit for bit, including inf, NaN, subnormals, overflow
  and rounding ties; the fast converters write the reference's bytes;
- the dot kernels of every ISA level agree with the reference, which agrees
  with float64; the matrix driver handles odd shapes.
"""
from __future__ import annotations

import gguf
import numpy as np
import pytest

from llamapy import _engine
from quant_checks import LEVELS, check_matmul, check_vec_dot, same_bits

ALL_HALF_BITS = np.arange(65536, dtype=np.uint32).astype(np.uint16)


def special_floats() -> np.ndarray:
    """float32 inputs at the edges of the F16 and BF16 ranges, plus ties."""
    f16_max = 65504.0
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, f16_max, -f16_max,
            65519.99, 65520.0, -65520.0, 1e30, -1e30, 3.4028235e38,
            6.1035156e-05,            # smallest normal half
            5.9604645e-08,            # smallest subnormal half
            2.9802322e-08,            # half of it: ties to even -> 0
            4.4703484e-08,            # 1.5 ulp of subnormal half -> rounds up
            1e-45, -1e-45, 1.1754944e-38, 1e-40,   # float32 subnormals
            1.0009765625 / 2 + 1.0 / 2,            # a tie between two halves
            2049.0, 2051.0, 4097.0]                # ties at larger exponents
    bits = [0x7f800001, 0xffc00001, 0x7fbfffff, 0x3f808000, 0x3f818000, 0x3f80ffff, 0xbf807fff]
    out = np.array(vals, dtype=np.float32)
    return np.concatenate([out, np.array(bits, dtype=np.uint32).view(np.float32)])


def test_f32_roundtrip_is_identity():
    x = np.concatenate([special_floats(), np.random.default_rng(0).standard_normal(1000).astype(np.float32)])
    raw = _engine.quantize(x, "F32")
    assert raw.dtype == np.uint8 and raw.shape == (x.size * 4,)
    assert np.array_equal(raw.view(np.uint32), x.view(np.uint32))
    assert same_bits(_engine.dequantize(raw, "F32", [x.size]), x)


def test_f16_to_float_all_bit_patterns():
    got = _engine.dequantize(ALL_HALF_BITS.view(np.uint8), "F16", [65536])
    want = gguf.quants.dequantize(ALL_HALF_BITS.view(np.uint8), gguf.GGMLQuantizationType.F16).reshape(-1)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert same_bits(got[~nan], want[~nan])  # subnormal halves and infinities exact


def test_bf16_to_float_all_bit_patterns():
    got = _engine.dequantize(ALL_HALF_BITS.view(np.uint8), "BF16", [65536])
    want = gguf.quants.dequantize(ALL_HALF_BITS.view(np.uint8), gguf.GGMLQuantizationType.BF16).reshape(-1)
    assert same_bits(got, want)  # a shift: even NaN payloads survive


def _f16_inputs(rng) -> np.ndarray:
    """Random bit patterns over the whole float32 range, values around the
    half range, and the exact midpoints between adjacent halves (ties)."""
    halves = rng.integers(0, 0x7bff, 4000).astype(np.uint16).view(np.float16)
    above = np.nextafter(halves, np.float16(np.inf))
    mids = ((halves.astype(np.float64) + above.astype(np.float64)) / 2).astype(np.float32)
    random_bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([special_floats(), random_bits, rng.standard_normal(4000).astype(np.float32) * 1000,
                           mids, -mids])


def test_f16_from_float_matches_numpy():
    x = _f16_inputs(np.random.default_rng(1))
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    for fn in (_engine.quantize, _engine.quantize_ref):
        got = fn(x, "F16").view(np.float16)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))
    # fast and reference converters agree on every byte, NaN included
    assert np.array_equal(_engine.quantize(x, "F16"), _engine.quantize_ref(x, "F16"))


def test_bf16_from_float_matches_gguf():
    x = _f16_inputs(np.random.default_rng(2))
    want = gguf.quants.quantize(x, gguf.GGMLQuantizationType.BF16)
    assert np.array_equal(_engine.quantize_ref(x, "BF16"), want)
    assert np.array_equal(_engine.quantize(x, "BF16"), want)


@pytest.mark.parametrize("qtype", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("n_cols", [1, 7, 16, 33, 64, 1000, 4099])
def test_vec_dot_levels(qtype, n_cols):
    rng = np.random.default_rng(n_cols)
    w = rng.standard_normal((5, n_cols)).astype(np.float32)
    a = rng.standard_normal(n_cols).astype(np.float32)
    w_raw = _engine.quantize(w, qtype)
    w64 = _engine.dequantize(w_raw, qtype, list(w.shape)).astype(np.float64)
    a_raw = _engine.quantize(a, qtype)  # the activation format is the type itself
    a64 = _engine.dequantize(a_raw, qtype, [n_cols]).astype(np.float64)
    check_vec_dot(w_raw, qtype, n_cols, a, w64 @ a64, np.abs(w64) @ np.abs(a64))


@pytest.mark.parametrize("qtype", ["F32", "F16", "BF16"])
def test_vec_dot_special_values(qtype):
    """inf and NaN propagate as IEEE says; subnormal products are kept."""
    n = 48
    a = np.ones(n, np.float32)
    w = np.zeros((4, n), np.float32)
    w[0, 3] = np.inf
    w[1, 40] = np.nan
    w[2, :] = 1e-7 if qtype == "F16" else 1e-39   # subnormal in the element type
    w[3, 0], w[3, 1] = np.inf, -np.inf
    raw = _engine.quantize(w, qtype)
    for level in ["ref"] + LEVELS:
        y = _engine.vec_dot_rows(raw, qtype, n, a, level)
        assert y[0] == np.inf, level
        assert np.isnan(y[1]), level
        w2 = _engine.dequantize(raw, qtype, list(w.shape))[2].astype(np.float64)
        assert y[2] > 0 and abs(y[2] - w2.sum()) <= 1e-6 * w2.sum(), level
        assert np.isnan(y[3]), level


@pytest.mark.parametrize("qtype", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("n_rows,n_cols,n_tok", [(1, 16, 1), (3, 40, 3), (17, 100, 17), (33, 257, 67), (5, 1024, 1)])
def test_matmul_odd_shapes(qtype, n_rows, n_cols, n_tok):
    rng = np.random.default_rng(n_rows * 1000 + n_cols)
    w = rng.standard_normal((n_rows, n_cols)).astype(np.float32)
    x = rng.standard_normal((n_tok, n_cols)).astype(np.float32)
    w_raw = _engine.quantize(w, qtype)
    w64 = _engine.dequantize(w_raw, qtype, list(w.shape)).astype(np.float64)
    check_matmul(w_raw, qtype, n_rows, n_cols, x, w64, qtype)
